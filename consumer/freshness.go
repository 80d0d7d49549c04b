package consumer

import (
	"time"

	"github.com/ovstream/ovstream/aggregate"
)

// closable tracks, for freshness, when each open window became
// closable: when every partition holding the watermark had delivered a
// record with event time at or past window end + allowed lateness, that is
// the latest over the partitions of the Kafka timestamp (the producer's
// CreateTime, or the broker's LogAppendTime) of each one's first such
// record. So a backlog read late, or replayed after a restart, counts from
// when its records were produced. A record without a timestamp, or one later
// than the wall clock, counts from when it was read; a window that no
// partition's records closed (a partition turned idle, --idle-finalize, a
// drain's end) from when the watermark passed it.
//
// The oldest window closable but not yet committed is published as
// ovstream_closable_window_age_seconds and in the instance's
// pipeline_instances row (closable_since, read by `ovstream status` and the
// dashboard's health page).
type closable struct {
	noted time.Time                            // the watermark up to which windows were noted
	at    map[time.Time]time.Time              // window end -> when it became closable
	parts map[aggregate.PartitionID]*crossings // per partition: when its event time passed each window boundary
	// lastTP, lastX: the partition of the previous observeCrossing (a batch
	// is one partition's), so that most records skip the map.
	lastTP aggregate.PartitionID
	lastX  *crossings
}

// crossings is when one partition's max event time passed window
// boundaries (window end + allowed lateness): steps in increasing order,
// each the max event time a record raised it to and that record's time;
// only raises that passed a boundary are kept, and only those the noted
// watermark has not passed.
type crossings struct {
	max   time.Time // the max event time seen
	next  time.Time // the lowest boundary above max
	steps []crossing
}

type crossing struct{ reached, at time.Time }

// observeCrossing records that tp delivered an event with event time et,
// Kafka timestamp ts (Unix ns, 0: none), read at wall time now. One
// comparison unless it passes a window boundary.
func (l *loop) observeCrossing(tp aggregate.PartitionID, et time.Time, ts int64, now time.Time) {
	c := &l.closable
	x := c.lastX
	if x == nil || c.lastTP != tp {
		x = c.parts[tp]
		c.lastTP, c.lastX = tp, x
	}
	if x == nil {
		if c.parts == nil {
			c.parts = map[aggregate.PartitionID]*crossings{}
		}
		x = &crossings{}
		c.parts[tp] = x
		c.lastX = x
	}
	if !x.max.IsZero() && et.Before(x.next) {
		if et.After(x.max) {
			x.max = et
		}
		return
	}
	if !et.After(x.max) {
		return
	}
	at := now
	if t := time.Unix(0, ts); ts != 0 && t.Before(now) {
		at = t
	}
	x.max = et
	lateness := l.cfg.Lateness()
	x.next = aggregate.WindowStart(et.Add(-lateness), l.cfg.Window).Add(l.cfg.Window + lateness)
	x.steps = append(x.steps, crossing{reached: et, at: at})
}

// noteClosable records the windows the watermark finalized since the last
// call, at wall time now, then publishes the oldest.
func (l *loop) noteClosable(now time.Time) {
	c := &l.closable
	wm := l.wm.Current()
	if !wm.After(c.noted) {
		return
	}
	ends := l.win.EndsIn(c.noted, wm)
	c.noted = wm
	if c.at == nil {
		c.at = map[time.Time]time.Time{}
	}
	for _, end := range ends {
		if _, ok := c.at[end]; !ok {
			c.at[end] = c.closedAt(end.Add(l.cfg.Lateness()), now)
			l.cfg.Logger.Debug("window closable", "window_end", end.Format(time.RFC3339), "closable_at", c.at[end].Format(time.RFC3339Nano),
				"commit_in_flight", l.inflight != nil)
		}
	}
	// Steps below the watermark (+ lateness) decide no window any more.
	keep := wm.Add(l.cfg.Lateness())
	for _, x := range c.parts {
		i := 0
		for i < len(x.steps)-1 && x.steps[i+1].reached.Before(keep) {
			i++
		}
		x.steps = x.steps[i:]
	}
	if len(ends) > 0 {
		l.publishClosable()
	}
}

// closedAt returns when threshold (a window end + allowed lateness) was
// reached on every partition that reached it: the latest, over them, of the
// time of the first record at or past it; now when none did.
func (c *closable) closedAt(threshold, now time.Time) time.Time {
	var last time.Time
	for _, x := range c.parts {
		for _, s := range x.steps {
			if !s.reached.Before(threshold) {
				if s.at.After(last) {
					last = s.at
				}
				break
			}
		}
	}
	if last.IsZero() {
		return now
	}
	return last
}

// writtenClosable forgets the windows a successful commit at watermark wm
// wrote, then publishes the oldest left.
func (l *loop) writtenClosable(wm time.Time) {
	for end := range l.closable.at {
		if !end.After(wm) {
			delete(l.closable.at, end)
		}
	}
	l.publishClosable()
}

// resetClosable forgets every window (a resync starts from the stored
// positions: their records come again, with their own timestamps).
func (l *loop) resetClosable() {
	l.closable = closable{}
	l.publishClosable()
}

// publishClosable sets the metric and the instance's row to the oldest
// closable time of the windows not yet written (zero: none).
func (l *loop) publishClosable() {
	var oldest time.Time
	for _, t := range l.closable.at {
		if oldest.IsZero() || t.Before(oldest) {
			oldest = t
		}
	}
	l.cfg.Metrics.closable(oldest)
	if l.in != nil {
		l.in.setClosable(oldest)
	}
}

// closableAge is the value of ovstream_closable_window_age_seconds at wall
// time now: now minus the unix ns since (0 when none), never negative.
func closableAge(since int64, now time.Time) float64 {
	if since == 0 {
		return 0
	}
	return max(0, now.Sub(time.Unix(0, since)).Seconds())
}
