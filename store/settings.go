package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Settings are what every instance of a pipeline must share (pipelines
// .window_size, .topics): instances with another window size or other topics
// finalize and merge windows that disagree. Allowed lateness may
// differ per instance: it decides when a window is final, not what it holds.
type Settings struct {
	Window time.Duration // tumbling window size; 0 when none is recorded
	Topics []string      // predictions, then positions topic (empty ones left out); nil when none is recorded
	// MaxDelay bounds the plausible |delay_s| (pipelines.max_delay): a
	// prediction beyond it is a dead letter ReasonImplausible. 0 when none
	// is recorded.
	MaxDelay time.Duration
}

// SettingsError says that a claim named settings other than the pipeline's
// recorded ones: nothing was written.
type SettingsError struct {
	Pipeline string
	Diffs    []SettingDiff
}

// SettingDiff is one setting of a SettingsError.
type SettingDiff struct {
	Name           string // the run flag: "window", "topics" or "max-delay"
	Stored, Wanted string // as the flag would be given
}

func (e *SettingsError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "pipeline %q was set up with other settings than this instance's: ", e.Pipeline)
	for i, d := range e.Diffs {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "--%s %s (pipeline) vs %s (this instance)", d.Name, d.Stored, d.Wanted)
	}
	b.WriteString(": every instance of a pipeline needs the same; run with the pipeline's, " +
		"or change the pipeline's with `ovstream pipeline set` while no instance runs")
	return b.String()
}

// topicsFlag words topics as run --topics takes them.
func topicsFlag(topics []string) string { return strings.Join(topics, ",") }

// checkSettings, in a claim's transaction, compares opts' settings with the
// pipeline's recorded ones (*SettingsError when they differ; nothing is
// written then) and records those not recorded yet.
func checkSettings(ctx context.Context, tx pgx.Tx, pipeline string, opts ClaimOptions) error {
	var window, maxDelay *time.Duration
	var topics []string
	if err := tx.QueryRow(ctx, `SELECT window_size, topics, max_delay FROM pipelines WHERE name = $1`, pipeline).Scan(&window, &topics, &maxDelay); err != nil {
		return fmt.Errorf("read the pipeline's settings: %w", err)
	}
	if (opts.Window != 0 && window == nil) || (opts.Topics != nil && topics == nil) || (opts.MaxDelay != 0 && maxDelay == nil) {
		// None recorded yet: read again under the row's lock, so that of two
		// first claims the second sees what the first recorded.
		if err := tx.QueryRow(ctx, `SELECT window_size, topics, max_delay FROM pipelines WHERE name = $1 FOR UPDATE`, pipeline).
			Scan(&window, &topics, &maxDelay); err != nil {
			return fmt.Errorf("read the pipeline's settings: %w", err)
		}
	}
	e := &SettingsError{Pipeline: pipeline}
	if opts.Window != 0 && window != nil && *window != opts.Window {
		e.Diffs = append(e.Diffs, SettingDiff{Name: "window", Stored: window.String(), Wanted: opts.Window.String()})
	}
	if opts.Topics != nil && topics != nil && !slices.Equal(topics, opts.Topics) {
		e.Diffs = append(e.Diffs, SettingDiff{Name: "topics", Stored: topicsFlag(topics), Wanted: topicsFlag(opts.Topics)})
	}
	if opts.MaxDelay != 0 && maxDelay != nil && *maxDelay != opts.MaxDelay {
		e.Diffs = append(e.Diffs, SettingDiff{Name: "max-delay", Stored: maxDelay.String(), Wanted: opts.MaxDelay.String()})
	}
	if len(e.Diffs) > 0 {
		return e
	}
	setWindow := opts.Window != 0 && window == nil
	setTopics := opts.Topics != nil && topics == nil
	setMaxDelay := opts.MaxDelay != 0 && maxDelay == nil
	if !setWindow && !setTopics && !setMaxDelay {
		return nil // only a change locks the row (a split commit holds it for its merge decision)
	}
	var w any
	if setWindow {
		w = opts.Window
	}
	var ts any
	if setTopics {
		ts = opts.Topics
	}
	var md any
	if setMaxDelay {
		md = opts.MaxDelay
	}
	_, err := tx.Exec(ctx, `UPDATE pipelines SET window_size = coalesce(window_size, $2), topics = coalesce(topics, $3),
		max_delay = coalesce(max_delay, $4) WHERE name = $1`, pipeline, w, ts, md)
	return err
}

// LiveError says that SetSettings refused: instances of the pipeline are
// live (a heartbeat younger than the lease).
type LiveError struct {
	Pipeline string
	Owners   []string
}

func (e *LiveError) Error() string {
	return fmt.Sprintf("pipeline %q has live instances (%s): stop every instance first; nothing changed",
		e.Pipeline, strings.Join(e.Owners, ", "))
}

// SetSettings changes the recorded settings of pipeline (Settings: a zero
// Window, nil Topics or zero MaxDelay keeps the recorded one) and returns those it had
// before. It refuses with *LiveError while an instance of the pipeline has a
// heartbeat younger than lease (pipeline_instances, or a partition's owner),
// and with an error when the pipeline was never claimed. Windows already
// written keep the size they were written with.
func (s *Store) SetSettings(ctx context.Context, pipeline string, set Settings, lease time.Duration) (before Settings, err error) {
	err = s.do(ctx, func(conn *pgx.Conn) error {
		return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			var window, maxDelay *time.Duration
			var topics []string
			err := tx.QueryRow(ctx, `SELECT window_size, topics, max_delay FROM pipelines WHERE name = $1 FOR UPDATE`, pipeline).
				Scan(&window, &topics, &maxDelay)
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("pipeline %q does not exist (no instance ever claimed it): nothing to change", pipeline)
			}
			if err != nil {
				return err
			}
			before = Settings{Topics: topics}
			if window != nil {
				before.Window = *window
			}
			if maxDelay != nil {
				before.MaxDelay = *maxDelay
			}
			rows, err := tx.Query(ctx, `
SELECT owner FROM pipeline_instances WHERE pipeline = $1 AND heartbeat_at > now() - $2 * interval '1 microsecond'
UNION
SELECT owner FROM stream_positions WHERE pipeline = $1 AND owner IS NOT NULL AND heartbeat_at > now() - $2 * interval '1 microsecond'
ORDER BY 1`, pipeline, micros(lease))
			if err != nil {
				return err
			}
			live, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return err
			}
			if len(live) > 0 {
				return &LiveError{Pipeline: pipeline, Owners: live}
			}
			var pending int64
			if set.Window != 0 && (window == nil || *window != set.Window) {
				if err := tx.QueryRow(ctx, `SELECT count(*) FROM delay_partial_windows WHERE pipeline = $1`, pipeline).Scan(&pending); err != nil {
					return err
				}
			}
			if pending > 0 {
				return fmt.Errorf("%d partial windows of the old window size wait for the merge: drain the pipeline "+
					"(a split --drain on every instance, or one run --drain over every partition) before changing --window; nothing changed", pending)
			}
			var w, ts, md any
			if set.Window != 0 {
				w = set.Window
			}
			if set.Topics != nil {
				ts = set.Topics
			}
			if set.MaxDelay != 0 {
				md = set.MaxDelay
			}
			_, err = tx.Exec(ctx, `UPDATE pipelines SET window_size = coalesce($2, window_size), topics = coalesce($3, topics),
				max_delay = coalesce($4, max_delay) WHERE name = $1`, pipeline, w, ts, md)
			return err
		})
	})
	if err != nil {
		return before, fmt.Errorf("store: set the settings of pipeline %q: %w", pipeline, err)
	}
	return before, nil
}
