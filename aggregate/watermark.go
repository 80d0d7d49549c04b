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
// than the event times it lets through can do it: Propose notes, at wall
// time At, each partition's max event time and whether it is quiet; Confirm
// computes the watermark from that note, leaving out the quiet partitions
// that a reading sent at or after At found caught up (SetCaughtUp) and that
// delivered nothing since. A record
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
	entries := make([]entry, 0, len(w.parts))
	for _, s := range w.parts {
		entries = append(entries, entry{maxEvent: s.maxEvent, hasMax: s.hasMax})
	}
	if mark, ok := w.mark(entries, now); ok {
		w.Raise(mark)
	}
	return w.current
}

// CouldRaise reports whether leaving out the partitions quiet at wall time
// now, were a reading to find them caught up, would raise the watermark: a
// reason to read the high water marks now rather than at the next poll.
func (w *Watermark) CouldRaise(now time.Time) bool {
	entries := make([]entry, 0, len(w.parts))
	quiet := false
	for _, s := range w.parts {
		q := w.quiet(s, now)
		quiet = quiet || q
		entries = append(entries, entry{maxEvent: s.maxEvent, hasMax: s.hasMax, out: q})
	}
	if !quiet {
		return false
	}
	mark, ok := w.mark(entries, now)
	return ok && mark.After(w.current)
}

// Proposal is what the partitions held at wall time At: per partition its
// max event time and whether it was quiet (no delivery for the idle timeout,
// or none since start). Confirm computes from it the watermark that leaving
// out the quiet partitions found caught up by a reading sent at or after At
// gives.
type Proposal struct {
	At    time.Time
	parts map[PartitionID]proposed
}

type proposed struct {
	maxEvent time.Time // valid when hasMax
	hasMax   bool
	quiet    bool
}

// Propose returns the partitions' state at wall time now. Read the high
// water marks after calling it, record what the reading found
// (SetCaughtUp, with the reading's send time), then Confirm.
func (w *Watermark) Propose(now time.Time) Proposal {
	p := Proposal{At: now, parts: make(map[PartitionID]proposed, len(w.parts))}
	for id, s := range w.parts {
		p.parts[id] = proposed{maxEvent: s.maxEvent, hasMax: s.hasMax, quiet: w.quiet(s, now)}
	}
	return p
}

// Confirm raises the watermark to what p's state gives with the partitions
// left out that were quiet at p.At, were found caught up by a reading sent
// at or after p.At (SetCaughtUp), and delivered nothing since; it reports
// whether it raised it. A proposal made before a partition was assigned
// confirms nothing: the next one is made from newer state.
func (w *Watermark) Confirm(p Proposal) bool {
	if len(p.parts) == 0 || len(p.parts) != len(w.parts) {
		return false
	}
	entries := make([]entry, 0, len(p.parts))
	for id, pp := range p.parts {
		s := w.parts[id]
		if s == nil {
			return false
		}
		out := pp.quiet && s.caughtUp && !s.caughtUpAsOf.Before(p.At) && !(s.delivered && s.lastDelivery.After(p.At))
		entries = append(entries, entry{maxEvent: pp.maxEvent, hasMax: pp.hasMax, out: out})
	}
	mark, ok := w.mark(entries, p.At)
	if !ok || !mark.After(w.current) {
		return false
	}
	w.Raise(mark)
	return true
}

// entry is one partition in the computation of a watermark.
type entry struct {
	maxEvent time.Time // valid when hasMax
	hasMax   bool
	out      bool // left out: idle
}

// mark is the watermark the entries give at wall time now, those marked out
// left out: false when an entry kept has no event time yet, or there is
// nothing to compute from.
func (w *Watermark) mark(entries []entry, now time.Time) (time.Time, bool) {
	var (
		minActive time.Time // min of max event time over the entries kept
		haveMin   bool
		allOut    = true
		maxAll    time.Time // max of max event time over all entries
		haveMax   bool
	)
	for _, e := range entries {
		if e.hasMax && (!haveMax || e.maxEvent.After(maxAll)) {
			maxAll, haveMax = e.maxEvent, true
		}
		if e.out {
			continue
		}
		allOut = false
		if !e.hasMax {
			return time.Time{}, false // it holds the watermark
		}
		if !haveMin || e.maxEvent.Before(minActive) {
			minActive, haveMin = e.maxEvent, true
		}
	}
	switch {
	case allOut && w.idleFinal && len(entries) > 0:
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
