package consumer

import (
	"context"
	"log/slog"
	"sort"
	"time"

	"github.com/ovstream/ovstream/aggregate"
)

// highWaters is the answer of a high water mark poll: per partition its
// high water mark, or the error that kept it from being read.
type highWaters struct {
	hw   map[aggregate.PartitionID]int64
	errs map[aggregate.PartitionID]error
}

// pollHighWater starts a refresh of every partition's high water mark on a
// goroutine of its own, unless one is in flight; the run loop applies the
// answer (applyHighWaters) when it comes. It asks each leader once for all
// of its partitions (source.highWaters). It used to ask sarama's GetOffset
// for one partition after the other on the run loop: each a round trip to
// the broker, and after a connection reset more than one (sarama's
// client.getOffset closes the leader's Broker on any error, so the next
// call connects again, ApiVersions first). On a link adding 300 ms each way
// a poll of six partitions held the loop for seconds of every second, and
// after a few resets the instance read 78 records/s where a fresh one read
// thousands (TestFlakyKafkaRecovers).
func (l *loop) pollHighWater() {
	if l.hwPending != nil {
		return
	}
	parts := SortedPartitions(l.highWater)
	ch := make(chan highWaters, 1) // buffered: the goroutine never waits for a loop that ended
	l.hwPending = ch
	src := l.src
	go func() { ch <- src.highWaters(parts) }()
}

// applyHighWaters records a poll's answer.
func (l *loop) applyHighWaters(r highWaters) {
	l.hwPending = nil
	for _, tp := range SortedPartitions(r.errs) {
		l.cfg.Logger.Warn("high water mark", "partition", tp.String(), "err", r.errs[tp])
	}
	for tp, hw := range r.hw {
		if _, assigned := l.highWater[tp]; !assigned {
			continue
		}
		l.highWater[tp] = hw
		l.sum.HighWater[tp] = hw
		l.cfg.Metrics.partition(tp, hw-l.stored[tp].NextOffset, l.wm.Idle(tp, l.cfg.Now()))
	}
}

// sought starts tp's marker-probe state at its seek: quiet counts from now,
// so no probe goes out before the first fetch could answer, and nothing was
// probed yet, also at offset 0 (a log that starts with an aborted
// transaction delivers nothing and must be probed).
func (l *loop) sought(tp aggregate.PartitionID) {
	l.lastSeen[tp] = l.cfg.Now()
	l.probed[tp] = -1
	delete(l.probeRetry, tp)
}

// updateCaughtUp tells the watermark which partitions have reached the high
// water mark. A partition whose position stays below it with nothing
// arriving for probeAfter since its last record or its seek is probed for
// trailing transaction markers (see visibleEnd). The probe is a synchronous
// fetch: probing at a restart, before the first fetch could answer, stalled
// the loop on a slow link at every restart (docs/benchmarks-history.md
// "Progress under repeated crashes"). A probe that fails is sent again after a backoff
// (probeBackoff); a failed probe once marked its offset probed, and a log
// ending in markers stayed below its high water mark for ever (a drain that
// never ended).
func (l *loop) updateCaughtUp(now time.Time) {
	for tp, hw := range l.highWater {
		pos := l.led.ConsumedOffset(tp)
		if pos < hw && now.Sub(l.lastSeen[tp]) >= probeAfter && l.probed[tp] != pos && !l.paused[tp] && !l.holding() &&
			!now.Before(l.probeRetry[tp].at) {
			if end, err := l.src.visibleEnd(tp, pos); err != nil {
				l.probeFailed(tp, pos, now, err)
			} else {
				delete(l.probeRetry, tp)
				l.probed[tp] = pos
				if end > pos {
					l.led.Consumed(tp, min(end, hw)-1) // only markers or aborted records in [pos, end)
					pos = l.led.ConsumedOffset(tp)
				}
			}
		}
		l.wm.SetCaughtUp(tp, pos >= hw)
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
	r := l.probeRetry[tp]
	r.fails++
	wait := min(probeAfter<<min(r.fails, 16), probeBackoff)
	r.at = now.Add(wait)
	l.probeRetry[tp] = r
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
