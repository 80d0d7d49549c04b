package consumer

import (
	"time"

	"github.com/ovstream/ovstream/store"
)

// Flow control across the instances of a split pipeline. Within one
// instance, flowControl keeps the partitions in step by event time. Across
// instances nothing did: the instance whose commits advance the merge
// frontier (the lowest stored watermark) also does the merging, falls
// behind, and the other runs ahead by days of event time in a backfill; the
// partials pile up and the drain's last commit merges half of everything
// alone, while every other process waits (BENCHMARKS.md, 2026-12-01).
//
// So an instance whose stored watermark is more than aheadOfMerge past the
// pipeline's merge frontier (store.Merged.Frontier, read by every split
// commit) stops reading until the frontier comes within half of that. It
// commits every mergePoll meanwhile, to learn the frontier. The instance
// holding the frontier is never held back (its watermark is the frontier),
// so one always reads. An owner that stopped holds the frontier back: when
// the frontier has not moved for frontierStall, the rule is off and the
// instance reads on, storing partials (exact but late, as before), so a
// dead peer never stops the living ones and their lag never grows past the
// broker's retention because of it.

const (
	// mergePoll is how often an instance held back commits to learn the
	// frontier.
	mergePoll = 200 * time.Millisecond
	// frontierStall turns the rule off while the frontier does not move.
	frontierStall = 30 * time.Second
)

// aheadOfMerge is how far in event time an instance's stored watermark may
// run ahead of the pipeline's merge frontier: 12 hours, or more with long
// windows or lateness, so that live traffic (every instance within a flush
// interval of the others) never meets it. A backfill reads 10-15 hours of
// this feed's event time per second; with one hour the instance ahead was
// held back after nearly every commit and the two read in turn (make bench,
// 1M predictions: the split phase 11.0 s with 1 h, 9.5 s with 12 h).
func aheadOfMerge(cfg Config) time.Duration {
	return max(12*time.Hour, 4*(cfg.Window+cfg.AllowedLateness))
}

// splitFlow is splitState's part in flow control across instances.
type splitFlow struct {
	stored   time.Time // the watermark this instance's last commit stored
	frontier time.Time // the merge frontier that commit read; zero: unknown
	moved    time.Time // wall time the frontier was last seen to move
	held     bool      // not reading: too far ahead of the frontier
	at       time.Time // wall time of the last commit
}

// committed takes what a successful split commit stored and read.
func (f *splitFlow) committed(wm time.Time, m store.Merged, now time.Time) {
	f.stored, f.at = wm, now
	if m.Frontier.After(f.frontier) || f.moved.IsZero() {
		f.moved = now
	}
	f.frontier = m.Frontier
}

// update decides whether the instance is held back at wall time now, and
// reports a change.
func (f *splitFlow) update(cfg Config, now time.Time) (changed bool) {
	was := f.held
	on := !f.frontier.IsZero() && now.Sub(f.moved) < frontierStall
	gap := f.stored.Sub(f.frontier)
	switch limit := aheadOfMerge(cfg); {
	case !on:
		f.held = false
	case gap > limit:
		f.held = true
	case gap <= limit/2:
		f.held = false
	}
	return f.held != was
}

// splitFlowTick applies the rule at each tick of the loop: while held back,
// a commit every mergePoll learns the frontier.
func (l *loop) splitFlowTick(now time.Time) {
	f := &l.sp.flow
	if !l.sp.on {
		return
	}
	if f.update(l.cfg, now) {
		l.cfg.Logger.Debug("split pipeline: reading held back while ahead of the merge", "held", f.held,
			"stored_watermark", f.stored.Format(time.RFC3339), "merge_frontier", f.frontier.Format(time.RFC3339))
	}
	if next := f.at.Add(mergePoll); f.held && l.backoff == 0 && next.Before(l.nextCommit) {
		l.nextCommit = next
	}
}
