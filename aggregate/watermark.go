package aggregate

import "time"

// Watermark tracks event-time progress over the assigned partitions of both
// topics (docs/design.md "Watermark and lateness"; docs/windows.md "Idle
// partitions"):
//
//	watermark = min over non-idle partitions of their max event time - allowed lateness
//
// A partition is idle, and may be left out of the min, only when it is quiet
// (it delivered nothing since start, or nothing for the idle timeout) AND a
// reading of its high water mark found its position at or past it. A
// partition still catching up, or whose high water mark could not be read,
// is never idle, however slow. A non-idle partition that has not delivered an
// event time yet holds the watermark where it is. When every partition is
// idle, the candidate is the max over all partitions of their max event time,
// minus allowed lateness, so a quiet, caught-up stream still closes its
// windows.
//
// Leaving a partition out is decided in two steps, so that no reading older
// than the event times it lets through can do it: Propose, at wall time At,
// computes the watermark that leaving out the quiet partitions would give;
// Confirm applies it only when each of them was found caught up by a reading
// sent at or after At (SetCaughtUp) and delivered nothing since. A record
// that was in a quiet partition's log before At is seen by that reading, so
// the partition holds the watermark until the record is read: it can be late
// only if it is more than the allowed lateness behind the event times the
// other partitions delivered by At, as on any partition. Advance itself never
// leaves a partition out.
//
// With IdleFinalize on (meant for live feeds whose event times follow the
// wall clock), when every partition is idle the candidate is also wall clock
// - allowed lateness: a processing-time watermark, so the last window of a
// quiet feed is finalized instead of waiting for newer events. The
// trade-off: an event that arrives after that with an event time more than
// the allowed lateness behind the wall clock finds its window finalized and
// is late.
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
	caughtUp     bool      // the last reading of the high water mark found the position at or past it
	caughtUpAsOf time.Time // when that reading was sent
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
// on or off (off by default): when every assigned partition is idle, a
// confirmed Proposal raises the watermark to its wall time - allowed
// lateness.
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

// SetCaughtUp records what a reading of p's high water mark, sent at wall
// time asOf, found: p's consumer position at or past it (caughtUp), or not
// (also when the reading failed: unknown is not caught up). An unassigned
// partition is assigned first.
func (w *Watermark) SetCaughtUp(p PartitionID, caughtUp bool, asOf time.Time) {
	s := w.state(p)
	s.caughtUp, s.caughtUpAsOf = caughtUp, asOf
}

// Idle reports whether p is idle at wall time now: quiet (it delivered
// nothing since start, or nothing for the idle timeout) and found caught up
// by the last reading of its high water mark. False for an unassigned
// partition.
func (w *Watermark) Idle(p PartitionID, now time.Time) bool {
	s := w.parts[p]
	return s != nil && s.caughtUp && w.quiet(s, now)
}

func (w *Watermark) quiet(s *partitionState, now time.Time) bool {
	return !s.delivered || now.Sub(s.lastDelivery) >= w.idleTimeout
}

// Advance recomputes the watermark at wall time now from every partition
// (none left out: see Propose) and returns it (UTC). It never returns less
// than before.
func (w *Watermark) Advance(now time.Time) time.Time {
	if mark, ok := w.candidate(func(*partitionState) bool { return false }, now); ok {
		w.Raise(mark)
	}
	return w.current
}

// Proposal is the watermark that leaving out the idle partitions would give
// at wall time At: Mark, applied by Confirm once each partition of Idle was
// found caught up by a reading of the high water marks sent at or after At.
// A zero Mark proposes nothing.
type Proposal struct {
	At    time.Time
	Mark  time.Time
	Idle  []PartitionID
	parts int // partitions assigned at At
}

// Propose returns, at wall time now, the watermark that leaving out the
// partitions idle at now (Idle) would give, when it is above the current
// one. Read the high water marks after calling it, then Confirm.
func (w *Watermark) Propose(now time.Time) Proposal {
	p := Proposal{At: now, parts: len(w.parts)}
	idle := func(s *partitionState) bool { return s.caughtUp && w.quiet(s, now) }
	for id, s := range w.parts {
		if idle(s) {
			p.Idle = append(p.Idle, id)
		}
	}
	if len(p.Idle) == 0 {
		return Proposal{}
	}
	if mark, ok := w.candidate(idle, now); ok && mark.After(w.current) {
		p.Mark = mark
	}
	if p.Mark.IsZero() {
		return Proposal{}
	}
	return p
}

// Confirm raises the watermark to p.Mark when every partition p left out is
// caught up by a reading sent at or after p.At (SetCaughtUp) and delivered
// nothing since p.At, and no partition was assigned since; it reports whether
// it did. A proposal that fails this is dropped: the next one is made from
// newer state.
func (w *Watermark) Confirm(p Proposal) bool {
	if p.Mark.IsZero() || p.parts != len(w.parts) {
		return false
	}
	for _, id := range p.Idle {
		s := w.parts[id]
		if !s.caughtUp || s.caughtUpAsOf.Before(p.At) || (s.delivered && s.lastDelivery.After(p.At)) {
			return false
		}
	}
	w.Raise(p.Mark)
	return true
}

// candidate is the watermark the partitions give with those for which out
// is true left out: false when a partition kept has no event time yet, or
// there is nothing to compute from.
func (w *Watermark) candidate(out func(*partitionState) bool, now time.Time) (time.Time, bool) {
	var (
		minActive time.Time // min of max event time over the partitions kept
		haveMin   bool
		allOut    = true
		maxAll    time.Time // max of max event time over all partitions
		haveMax   bool
	)
	for _, s := range w.parts {
		if s.hasMax && (!haveMax || s.maxEvent.After(maxAll)) {
			maxAll, haveMax = s.maxEvent, true
		}
		if out(s) {
			continue
		}
		allOut = false
		if !s.hasMax {
			return time.Time{}, false // it holds the watermark
		}
		if !haveMin || s.maxEvent.Before(minActive) {
			minActive, haveMin = s.maxEvent, true
		}
	}
	switch {
	case allOut && w.idleFinal && len(w.parts) > 0:
		mark := now.Add(-w.lateness)
		if haveMax && maxAll.Add(-w.lateness).After(mark) {
			mark = maxAll.Add(-w.lateness)
		}
		return mark.UTC(), true
	case allOut && haveMax:
		return maxAll.Add(-w.lateness), true
	case !allOut && haveMin:
		return minActive.Add(-w.lateness), true
	}
	return time.Time{}, false
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
		if s.caughtUp || !s.hasMax {
			continue
		}
		if !ok || s.maxEvent.Before(slowest) {
			slowest, ok = s.maxEvent, true
		}
	}
	return slowest, ok
}
