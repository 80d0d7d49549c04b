package consumer

import (
	"context"
	"sync/atomic"
	"time"
)

// clockSkewWarn is how far this host's clock may be from PostgreSQL's,
// beyond the uncertainty of a measurement (half its round trip), before a
// warning is logged. NTP keeps hosts within milliseconds of each other.
const clockSkewWarn = time.Second

// dbClock is this process's view of PostgreSQL's clock: the skew of the
// local clock (Config.Now) from the database's clock_timestamp(), measured
// at start-up and with every heartbeat, each time against the midpoint of
// the statement's round trip. Rules that compare event times or expose wall
// times use it, so that a host clock that is off does not make events
// vanish as `future` or hide a stalled pipeline from the no-commit alert.
// Safe for concurrent use: the heartbeat goroutine measures, the run loop
// reads.
type dbClock struct {
	cfg    Config
	skew   atomic.Int64 // local minus database, ns; 0 until measured
	warned atomic.Bool  // the last measurement was past the bound, and said so
}

// measure reads the database's clock with read (a statement on a
// connection the caller holds) between two readings of the local clock,
// and records the skew: the local midpoint minus the database's time.
func (c *dbClock) measure(ctx context.Context, read func(context.Context) (time.Time, error)) error {
	before := c.cfg.Now()
	db, err := read(ctx)
	if err != nil {
		return err
	}
	c.observe(before, c.cfg.Now(), db)
	return nil
}

// observe records the skew of one measurement: the database read db while
// the local clock went from before to after. Past clockSkewWarn plus half
// the round trip, a warning naming the clock and the skew is logged once,
// and an info line when it is back within the bound.
func (c *dbClock) observe(before, after, db time.Time) {
	rtt := after.Sub(before)
	local := before.Add(rtt / 2)
	skew := local.Sub(db)
	c.skew.Store(int64(skew))
	c.cfg.Metrics.ClockSkew.Set(skew.Seconds())
	off := skew.Abs() > clockSkewWarn+rtt/2
	switch {
	case off && !c.warned.Swap(true):
		way := "ahead of"
		if skew < 0 {
			way = "behind"
		}
		c.cfg.Logger.Warn("this host's clock is "+way+" PostgreSQL's clock: event times are judged (future) and commit times exposed "+
			"by the database's clock; fix the host's time synchronization (NTP)",
			"clock", "host", "skew", skew.Round(time.Millisecond), "host_time", local.UTC().Format(time.RFC3339Nano),
			"database_time", db.UTC().Format(time.RFC3339Nano), "round_trip", rtt.Round(time.Microsecond), "bound", clockSkewWarn)
	case !off && c.warned.Swap(false):
		c.cfg.Logger.Info("this host's clock is within the bound of PostgreSQL's clock again",
			"clock", "host", "skew", skew.Round(time.Millisecond), "bound", clockSkewWarn)
	}
}

// now returns the database's time at local time t: t minus the skew.
func (c *dbClock) now(t time.Time) time.Time {
	return t.Add(-time.Duration(c.skew.Load()))
}

// futureNow is the clock the `future` rule compares event times with: the
// later of the local clock and the database's. A host clock behind would
// dead-letter live events as future; one ahead only lets events further
// ahead in, which it did before. Taking the later never makes the rule
// stricter than either clock.
func (c *dbClock) futureNow(t time.Time) time.Time {
	if db := c.now(t); db.After(t) {
		return db
	}
	return t
}
