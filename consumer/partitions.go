package consumer

import (
	"sort"
	"time"

	"github.com/ovstream/ovstream/aggregate"
)

// pollHighWater refreshes every partition's high water mark.
func (l *loop) pollHighWater() {
	for tp := range l.highWater {
		hw, err := l.src.client.GetOffset(tp.Topic, tp.Partition, -1)
		if err != nil {
			l.cfg.Logger.Warn("high water mark", "partition", tp.String(), "err", err)
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
}

// updateCaughtUp tells the watermark which partitions have reached the high
// water mark. A partition whose position stays below it with nothing
// arriving for probeAfter since its last record or its seek is probed for
// trailing transaction markers (see visibleEnd). The probe is a synchronous
// fetch: probing at a restart, before the first fetch could answer, stalled
// the loop on a slow link at every restart (BENCHMARKS.md "Progress under
// repeated crashes").
func (l *loop) updateCaughtUp(now time.Time) {
	for tp, hw := range l.highWater {
		pos := l.led.ConsumedOffset(tp)
		if pos < hw && now.Sub(l.lastSeen[tp]) >= probeAfter && l.probed[tp] != pos && !l.paused[tp] && !l.holding() {
			l.probed[tp] = pos
			if end, err := l.src.visibleEnd(tp, pos); err == nil && end > pos {
				l.led.Consumed(tp, min(end, hw)-1) // only markers or aborted records in [pos, end)
				pos = l.led.ConsumedOffset(tp)
			}
		}
		l.wm.SetCaughtUp(tp, pos >= hw)
	}
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
