package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// PipelineRow sums up a pipeline's partitions (stream_positions): fencing,
// ownership and the watermark are per partition.
type PipelineRow struct {
	Name        string
	Epoch       int64     // the greatest fencing epoch of its partitions: one more at each claim
	Owner       string    // the owners (host:pid-nonce) of its partitions, comma-separated; "" = none holds one
	HeartbeatAt time.Time // UTC; the newest claim or commit of any owner; zero if none
	Watermark   time.Time // UTC; the lowest watermark committed for its partitions; zero if none
}

// ReasonCount counts the dead letters of one reason.
type ReasonCount struct {
	Total    int64 `json:"total"`
	Replayed int64 `json:"replayed"` // re-produced by `ovstream dlq replay`
}

// Status is what `ovstream status` shows from the database.
type Status struct {
	Pipeline        *PipelineRow     // nil when the pipeline was never claimed
	Topics          []string         // pipelines.topics, recorded at claim; nil when none was recorded
	Positions       []StoredPosition // the pipeline's stream_positions, by topic and partition
	NewestWindowEnd time.Time        // max(window_end) of the pipeline's delay_aggregates, UTC; zero if none
	DeadLetters     map[string]ReasonCount
	// RefusedWindows counts the pipeline's rows in refused_windows: merged
	// rows of a split pipeline PostgreSQL refused, waiting to be re-applied
	// (docs/runbook.md).
	RefusedWindows int64
}

// Status reads pipeline's partitions and positions, its newest finalized
// window and its dead letters per reason (ReadStatus on the Store's
// connection).
func (s *Store) Status(ctx context.Context, pipeline string) (*Status, error) {
	var st *Status
	err := s.do(ctx, func(c *pgx.Conn) (err error) {
		st, err = ReadStatus(ctx, c, pipeline)
		return err
	})
	return st, err
}

// ReadStatus reads, with db, pipeline's partitions and positions, its newest
// finalized window and its dead letters per reason. Errors name the
// pipeline.
func ReadStatus(ctx context.Context, db Querier, pipeline string) (*Status, error) {
	st := &Status{}
	if err := readStatus(ctx, db, pipeline, st); err != nil {
		return nil, fmt.Errorf("store: status of pipeline %q: %w", pipeline, err)
	}
	return st, nil
}

func readStatus(ctx context.Context, c Querier, pipeline string, st *Status) error {
	*st = Status{DeadLetters: map[string]ReasonCount{}}
	var exists bool
	if err := c.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pipelines WHERE name = $1),
		(SELECT topics FROM pipelines WHERE name = $1)`, pipeline).Scan(&exists, &st.Topics); err != nil {
		return err
	}
	if exists {
		p := PipelineRow{Name: pipeline}
		var owner *string
		var hb, wm *time.Time
		err := c.QueryRow(ctx, `SELECT coalesce(max(epoch), 0), string_agg(DISTINCT owner, ', '), max(heartbeat_at),
			min(watermark) FROM stream_positions WHERE pipeline = $1`, pipeline).Scan(&p.Epoch, &owner, &hb, &wm)
		if err != nil {
			return err
		}
		if owner != nil {
			p.Owner = *owner
		}
		if hb != nil {
			p.HeartbeatAt = hb.UTC()
		}
		if wm != nil {
			p.Watermark = wm.UTC()
		}
		st.Pipeline = &p
	}
	rows, err := c.Query(ctx, `SELECT topic, partition, next_offset, consumed_offset, updated_at
		FROM stream_positions WHERE pipeline = $1 AND next_offset IS NOT NULL ORDER BY topic, partition`, pipeline)
	if err != nil {
		return err
	}
	var sp StoredPosition
	if _, err := pgx.ForEachRow(rows, []any{&sp.Topic, &sp.Partition, &sp.NextOffset, &sp.ConsumedOffset, &sp.UpdatedAt}, func() error {
		sp.UpdatedAt = sp.UpdatedAt.UTC()
		st.Positions = append(st.Positions, sp)
		return nil
	}); err != nil {
		return err
	}
	var newest *time.Time
	if err := c.QueryRow(ctx, `SELECT max(window_end) FROM delay_aggregates WHERE pipeline = $1`, pipeline).Scan(&newest); err != nil {
		return err
	}
	if newest != nil {
		st.NewestWindowEnd = newest.UTC()
	}
	if err := c.QueryRow(ctx, `SELECT count(*) FROM refused_windows WHERE pipeline = $1`, pipeline).Scan(&st.RefusedWindows); err != nil {
		return err
	}
	rows, err = c.Query(ctx, `SELECT reason, count(*), count(replayed_at) FROM dead_letters WHERE pipeline = $1 GROUP BY reason`, pipeline)
	if err != nil {
		return err
	}
	var reason string
	var rc ReasonCount
	_, err = pgx.ForEachRow(rows, []any{&reason, &rc.Total, &rc.Replayed}, func() error {
		st.DeadLetters[reason] = rc
		return nil
	})
	return err
}
