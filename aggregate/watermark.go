package aggregate

import "time"

// Watermark tracks event-time progress over the assigned partitions of both
// topics (docs/design.md "Watermark and lateness"):
//
//	watermark = min over non-idle partitions of their max event time - allowed lateness
//
// A partition is idle, and left out of the min, only when it is caught up (its
// position has reached the broker's high water mark) AND it has delivered
// nothing since start or nothing for the idle timeout. A partition still
// catching up is never idle, however slow. A non-idle partition that has not
// delivered an event time yet holds the watermark where it is. When every
// partition is idle, the candidate is the max over all partitions of their max
// event time, minus allowed lateness, so a quiet, caught-up stream still
// closes its windows.
//
// With IdleFinalize on (meant for live feeds whose event times follow the
// wall clock), when every partition is idle the candidate is also wall clock
// - allowed lateness: a processing-time watermark, so the last window of a
// quiet feed is finalized instead of waiting for newer events (docs/design.md
// "Watermark and lateness", last bullet). The trade-off: an event that
// arrives after that with an event time more than the allowed lateness
// behind the wall clock finds its window finalized and is late.
//
// The watermark starts at the seed and never decreases. Times are UTC; wall
// times are passed in, never read from a clock. It is not safe for concurrent
// use: one goroutine owns it.
type Watermark struct {
	lateness    time.Duration
	idleTimeout time.Duration
	idleFinal   bool // IdleFinalize
	current     time.Time
	parts       map[PartitionID]*partitionState
}

type partitionState struct {
	maxEvent     time.Time // valid when hasMax
	hasMax       bool
	delivered    bool      // anything delivered since start
	lastDelivery time.Time // wall time of the last delivery
	caughtUp     bool
}

// NewWatermark returns a Watermark with the given allowed lateness (default
// 2m) and idle timeout (default 30s), both >= 0, starting at seed: the
// watermark stored by the previous run, or the zero time for none.
func NewWatermark(allowedLateness, idleTimeout time.Duration, seed time.Time) *Watermark {
	return &Watermark{
		lateness:    allowedLateness,
		idleTimeout: idleTimeout,
		current:     seed.UTC(),
		parts:       make(map[PartitionID]*partitionState),
	}
}

// IdleFinalize turns the processing-time watermark of an all-idle assignment
// on or off (off by default): when every assigned partition is idle at wall
// time now, Advance raises the watermark to now - allowed lateness.
func (w *Watermark) IdleFinalize(on bool) { w.idleFinal = on }

// Assign registers an assigned partition: no event time seen, nothing
// delivered, not caught up. Assigning a partition again is a no-op.
func (w *Watermark) Assign(p PartitionID) {
	w.state(p)
}

func (w *Watermark) state(p PartitionID) *partitionState {
	s := w.parts[p]
	if s == nil {
		s = &partitionState{}
		w.parts[p] = s
	}
	return s
}

// Observe records that partition p delivered an event with the given event
// time at wall time now: it raises p's max event time and makes p active. A
// zero eventTime records the delivery only (a message without a usable event
// time). An unassigned partition is assigned first. Events rejected as too far
// in the future must not be observed: they do not move the watermark.
func (w *Watermark) Observe(p PartitionID, eventTime, now time.Time) {
	s := w.state(p)
	if !eventTime.IsZero() && (!s.hasMax || eventTime.After(s.maxEvent)) {
		s.maxEvent, s.hasMax = eventTime.UTC(), true
	}
	s.delivered = true
	s.lastDelivery = now
}

// SetCaughtUp records whether p's consumer position has reached the broker's
// high water mark. An unassigned partition is assigned first.
func (w *Watermark) SetCaughtUp(p PartitionID, caughtUp bool) {
	w.state(p).caughtUp = caughtUp
}

// Idle reports whether p is left out of the watermark at wall time now: it is
// caught up and delivered nothing since start, or nothing for the idle
// timeout. False for an unassigned partition.
func (w *Watermark) Idle(p PartitionID, now time.Time) bool {
	s := w.parts[p]
	return s != nil && w.idle(s, now)
}

func (w *Watermark) idle(s *partitionState, now time.Time) bool {
	return s.caughtUp && (!s.delivered || now.Sub(s.lastDelivery) >= w.idleTimeout)
}

// Advance recomputes the watermark at wall time now and returns it (UTC). It
// never returns less than before.
func (w *Watermark) Advance(now time.Time) time.Time {
	var (
		minActive time.Time // min of max event time over active partitions
		haveMin   bool
		hold      bool // an active partition has no event time yet
		allIdle   = true
		maxAll    time.Time // max of max event time over all partitions
		haveMax   bool
	)
	for _, s := range w.parts {
		if s.hasMax && (!haveMax || s.maxEvent.After(maxAll)) {
			maxAll, haveMax = s.maxEvent, true
		}
		if w.idle(s, now) {
			continue
		}
		allIdle = false
		if !s.hasMax {
			hold = true
			continue
		}
		if !haveMin || s.maxEvent.Before(minActive) {
			minActive, haveMin = s.maxEvent, true
		}
	}
	switch {
	case allIdle:
		if haveMax {
			w.Raise(maxAll.Add(-w.lateness))
		}
		if w.idleFinal && len(w.parts) > 0 {
			w.Raise(now.Add(-w.lateness))
		}
	case !hold && haveMin:
		w.Raise(minActive.Add(-w.lateness))
	}
	return w.current
}

// Current returns the watermark (UTC) as last computed, raised or seeded; the
// zero time when there is none yet.
func (w *Watermark) Current() time.Time { return w.current }

// Raise sets the watermark to at least t (a drain raises it to the end of the
// last window it writes). It never lowers it.
func (w *Watermark) Raise(t time.Time) {
	if t.After(w.current) {
		w.current = t.UTC()
	}
}

// MaxEvent returns the max event time partition p delivered, false when none.
func (w *Watermark) MaxEvent(p PartitionID) (time.Time, bool) {
	s := w.parts[p]
	if s == nil || !s.hasMax {
		return time.Time{}, false
	}
	return s.maxEvent, true
}

// Slowest returns, at wall time now, the min of the max event times of the
// partitions that still have records to deliver (not caught up, not idle,
// with an event time seen), false when there is none. A backfill can pause
// the partitions far ahead of it, so that it reads the partitions in step by
// event time and its open windows stay few whatever the backlog
// (docs/benchmarks-history.md "5. The run loop", flow control by event
// time).
func (w *Watermark) Slowest(now time.Time) (time.Time, bool) {
	var slowest time.Time
	ok := false
	for _, s := range w.parts {
		if s.caughtUp || w.idle(s, now) || !s.hasMax {
			continue
		}
		if !ok || s.maxEvent.Before(slowest) {
			slowest, ok = s.maxEvent, true
		}
	}
	return slowest, ok
}
