package consumer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ovstream/ovstream/store"
)

// DefaultRetentionInterval is Config.RetentionInterval when it is zero.
const DefaultRetentionInterval = time.Hour

// MinRetention is the shortest --retention: a day, the span of a
// delay_aggregates partition.
const MinRetention = 24 * time.Hour

// retentionRetry is the wait before the next round after a round failed
// (e.g. its DROP did not get its lock within 2 s: commits were in flight).
const retentionRetry = time.Minute

// ParseAge reads a retention age given to flag (e.g. "--retention"): a
// number of days with the suffix d ("90d", "1.5d") or a Go duration
// ("36h", "90m"). It must be positive; the error names the flag.
func ParseAge(flag, s string) (time.Duration, error) {
	bad := func() (time.Duration, error) {
		return 0, fmt.Errorf("%s %q: want a positive age such as 90d (days) or 36h (a Go duration)", flag, s)
	}
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseFloat(days, 64)
		if err != nil || n <= 0 || n*24 > float64(1<<63-1)/float64(time.Hour) {
			return bad()
		}
		d = time.Duration(n * float64(24*time.Hour))
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return bad()
		}
	}
	if d <= 0 {
		return bad()
	}
	return d, nil
}

// validateRetention checks the retention settings and fills in the
// interval: a retention shorter than the window could drop the partition of
// a window still open (store/retention.go says why).
func (c *Config) validateRetention() error {
	switch {
	case c.Retention < 0:
		return fmt.Errorf("consumer: --retention %v is negative", c.Retention)
	case c.Retention > 0 && c.Retention < MinRetention:
		// Partitions are whole UTC days; a shorter age is more likely a
		// setting meant for something else (produce's --key-retention
		// was once --retention) than a wish to keep under a day.
		return fmt.Errorf("--retention %v: want at least a day (1d): delay_aggregates is kept and dropped in whole UTC days", c.Retention)
	case c.Retention > 0 && c.Retention < c.Window:
		return fmt.Errorf("--retention %v is shorter than the window (%v)", c.Retention, c.Window)
	case c.DeadLetterRetention < 0:
		return fmt.Errorf("consumer: --dead-letter-retention %v is negative", c.DeadLetterRetention)
	case c.RetentionInterval < 0:
		return fmt.Errorf("consumer: retention interval %v is negative", c.RetentionInterval)
	}
	return nil
}

// retention runs the retention of a run (Config.Retention,
// Config.DeadLetterRetention) on a goroutine and a connection of its own,
// never in the commit transaction: once the instance first claims (a
// standby leaves it to the active instance), then every
// Config.RetentionInterval (a minute after a failed round) until stop. Its
// connection is closed after each round: between rounds it holds none.
type retention struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// startRetention starts the retention of cfg, or returns nil when both
// retentions are off; its first round waits until active is closed. It ends
// when ctx ends or at stop.
func startRetention(ctx context.Context, cfg Config, st *store.Store, active <-chan struct{}) *retention {
	if cfg.Retention == 0 && cfg.DeadLetterRetention == 0 {
		return nil
	}
	rs := st.Clone("ovstream-retention")
	rctx, cancel := context.WithCancel(ctx)
	r := &retention{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		select {
		case <-rctx.Done():
			return
		case <-active:
		}
		for {
			next := cfg.RetentionInterval
			err := retentionRound(rctx, cfg, rs)
			_ = rs.Close(context.Background())
			if err != nil && rctx.Err() == nil {
				next = min(next, retentionRetry)
				cfg.Logger.Warn("retention round failed; trying again", "err", err, "retry_in", next)
			}
			select {
			case <-rctx.Done():
				return
			case <-time.After(next):
			}
		}
	}()
	return r
}

// stop ends the retention and waits for it; nil is a no-op.
func (r *retention) stop() {
	if r == nil {
		return
	}
	r.cancel()
	<-r.done
}

// retentionRound drops the old partitions of delay_aggregates and deletes the
// pipeline's old dead letters, logging and counting what it removed.
func retentionRound(ctx context.Context, cfg Config, rs *store.Store) error {
	var errs []error
	if cfg.Retention > 0 {
		dropped, floor, err := rs.DropOldPartitions(ctx, cfg.Retention)
		for _, p := range dropped {
			cfg.Logger.Info("retention: dropped a delay_aggregates partition", "partition", p.Name,
				"from", p.Start.Format(time.RFC3339), "to", p.End.Format(time.RFC3339),
				"watermark_floor", floor.Format(time.RFC3339), "retention", cfg.Retention)
		}
		cfg.Metrics.RetentionDropped.Add(float64(len(dropped)))
		if err == nil && floor.IsZero() {
			// Said at info, every round: retention that never runs must
			// not be silent (a pipeline whose partitions never committed
			// holds it back; docs/operations.md "Retention").
			cfg.Logger.Info("retention: no partition dropped: a partition of some pipeline of the database has no stored watermark yet (never committed)")
		}
		errs = append(errs, err)
		errs = append(errs, deleteOldVisits(ctx, cfg, rs))
	}
	if cfg.DeadLetterRetention > 0 {
		n, err := rs.DeleteOldDeadLetters(ctx, cfg.Pipeline, cfg.DeadLetterRetention)
		if n > 0 {
			cfg.Logger.Info("retention: deleted old dead letters", "pipeline", cfg.Pipeline, "deleted", n,
				"older_than", cfg.DeadLetterRetention)
		}
		cfg.Metrics.RetentionDeleted.Add(float64(n))
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
