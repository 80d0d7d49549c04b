package consumer

import (
	"context"
	"log/slog"
	"sort"
	"time"

	"github.com/ovstream/ovstream/aggregate"
)

// highWaters is the answer of a high water mark poll: per partition its
// high water mark, or the error that kept it from being read; when the
// requests were sent, and the watermark proposed just before (Watermark
// .Propose), which the answer may confirm.
type highWaters struct {
	hw       map[aggregate.PartitionID]int64
	errs     map[aggregate.PartitionID]error
	sent     time.Time
	proposal aggregate.Proposal
}

// hwStale is the age past which the last reading of a partition's high water
// mark no longer tells whether it is caught up: polls go out every
// pollInterval and each ends within endOffsetsTimeout, so an older one means
// the polls fail or hang.
const hwStale = endOffsetsTimeout + 2*pollInterval

// pollHighWater starts a reading of every partition's high water mark on a
// goroutine of its own (source.highWaters: one ListOffsets request per
// leader), unless one is in flight; the run loop applies the answer
// (applyHighWaters) when it comes. Just before, it takes the watermark's
// proposal of the moment (Watermark.Propose): the answer, read after it,
// can confirm that the idle partitions it leaves out hold nothing unread.
func (l *loop) pollHighWater() {
	if l.hwPending != nil {
		return
	}
	parts := SortedPartitions(l.parts)
	ch := make(chan highWaters, 1) // buffered: the goroutine never waits for a loop that ended
	l.hwPending = ch
	src, now := l.src, l.cfg.Now()
	proposal := l.wm.Propose(now)
	go func() {
		r := src.highWaters(parts)
		r.sent, r.proposal = now, proposal
		ch <- r
	}()
}

// applyHighWaters records a poll's answer: a partition it has no high water
// mark for is unknown (never caught up, never idle, lag unknown) until a
// later poll reads one; then the proposal the poll carried is confirmed when
// every partition it leaves out was found caught up.
func (l *loop) applyHighWaters(r highWaters) {
	l.hwPending = nil
	for _, tp := range SortedPartitions(r.errs) {
		p, assigned := l.parts[tp]
		if !assigned {
			continue
		}
		if !p.hwAt.IsZero() {
			l.cfg.Logger.Warn("high water mark unknown: the partition holds the watermark until it is read",
				"partition", tp.String(), "err", r.errs[tp])
		} else {
			l.cfg.Logger.Debug("high water mark still unknown", "partition", tp.String(), "err", r.errs[tp])
		}
		p.hwAt = time.Time{}
		delete(l.sum.HighWater, tp)
	}
	for tp, hw := range r.hw {
		if p, assigned := l.parts[tp]; assigned {
			p.highWater, p.hwAt, l.sum.HighWater[tp] = hw, r.sent, hw
		}
	}
	now := l.cfg.Now()
	l.updateCaughtUp(now)
	l.wm.Confirm(r.proposal)
	unknown := 0
	for tp := range l.parts {
		hw, known := l.knownHighWater(tp, now)
		consumed, committable := l.led.ConsumedOffset(tp), l.parts[tp].seek
		if pos, ok := l.stored[tp]; ok {
			committable = pos.NextOffset
		}
		l.cfg.Metrics.partition(tp, max(0, hw-consumed), consumed-committable, known, l.wm.Idle(tp, now))
		if !known {
			unknown++
		}
	}
	l.cfg.Health.highWatersUnknown(unknown, now)
}

// knownHighWater returns tp's high water mark, false when it is unknown: the
// last reading failed, or it is older than hwStale.
func (l *loop) knownHighWater(tp aggregate.PartitionID, now time.Time) (int64, bool) {
	p := l.parts[tp]
	if p.hwAt.IsZero() || now.Sub(p.hwAt) > hwStale {
		return 0, false
	}
	return p.highWater, true
}

// sought starts tp's marker-probe state at its seek: quiet counts from now,
// so no probe goes out before the first fetch could answer, and nothing was
// probed yet, also at offset 0 (a log that starts with an aborted
// transaction delivers nothing and must be probed).
func (l *loop) sought(tp aggregate.PartitionID) {
	p := l.parts[tp]
	p.lastSeen, p.probed, p.probeRetry = l.cfg.Now(), -1, probeRetry{}
}

// updateCaughtUp tells the watermark which partitions the last reading of
// their high water marks found caught up, and when that reading was sent: a
// partition whose high water mark is unknown is not caught up. A partition
// whose position stays below it with nothing arriving for probeAfter since
// its last record or its seek is probed for trailing transaction markers
// (see visibleEnd). The probe is a synchronous fetch: probing at a restart,
// before the first fetch could answer, stalled the loop on a slow link at
// every restart (docs/benchmarks-history.md "Progress under repeated crashes"). A probe
// that fails is sent again after a backoff (probeBackoff), so that a log
// ending in markers does not stay below its high water mark for ever. A
// partition is probed again at the same position once its high water mark
// moved (at most every probeAfter): a probe that met a transaction still open (read_committed fetches
// end at the last stable offset) cannot see the abort that comes later,
// and an aborted transaction delivers nothing that would move the position.
func (l *loop) updateCaughtUp(now time.Time) {
	for tp, p := range l.parts {
		hw, pos := p.highWater, l.led.ConsumedOffset(tp)
		if pos < hw && now.Sub(p.lastSeen) >= probeAfter && (p.probed != pos || p.probedHW != hw) && !p.paused && !l.holding() &&
			!now.Before(p.probeRetry.at) {
			if end, err := l.src.visibleEnd(tp, pos); err != nil {
				l.probeFailed(tp, pos, now, err)
			} else {
				p.probeRetry, p.probed, p.probedHW, p.lastSeen = probeRetry{}, pos, hw, now
				if end > pos {
					l.led.Consumed(tp, min(end, hw)-1) // only markers or aborted records in [pos, end)
					pos = l.led.ConsumedOffset(tp)
				}
			}
		}
		_, known := l.knownHighWater(tp, now)
		l.wm.SetCaughtUp(tp, known && pos >= hw, p.hwAt)
	}
}

// probeRetry is the backoff of a partition whose marker probes fail.
type probeRetry struct {
	fails int       // probes failed in a row
	at    time.Time // the next probe, not before
}

// probeFailed schedules tp's next marker probe after a failed one: probeAfter
// doubling up to probeBackoff, so that a broker that keeps failing (or that
// does not answer and holds the run loop for its timeout) is not asked every
// second. The first failure in a row is a warning, the rest debug lines.
func (l *loop) probeFailed(tp aggregate.PartitionID, pos int64, now time.Time, err error) {
	r := &l.parts[tp].probeRetry
	r.fails++
	wait := min(probeAfter<<min(r.fails, 16), probeBackoff)
	r.at = now.Add(wait)
	level := slog.LevelDebug
	if r.fails == 1 {
		level = slog.LevelWarn
	}
	l.cfg.Logger.Log(context.Background(), level, "transaction marker probe failed; retrying", "partition", tp.String(),
		"offset", pos, "failures", r.fails, "retry_in", wait, "err", err)
}

// SortedPartitions returns m's keys in (topic, partition) order.
func SortedPartitions[V any](m map[aggregate.PartitionID]V) []aggregate.PartitionID {
	ps := make([]aggregate.PartitionID, 0, len(m))
	for p := range m {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool {
		if ps[i].Topic != ps[j].Topic {
			return ps[i].Topic < ps[j].Topic
		}
		return ps[i].Partition < ps[j].Partition
	})
	return ps
}
