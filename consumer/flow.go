package consumer

import (
	"time"
)

// maxPendingRows bounds the window rows the loop holds while a commit is in
// flight: past it, reading waits for the commit (writing is the bottleneck).
const maxPendingRows = 150_000

// maxSpread is how far in event time a partition may run ahead of the
// slowest one still delivering before flowControl pauses it.
const maxSpread = 30 * time.Minute

// holding reports whether the loop is not reading because writing is behind.
func (l *loop) holding() bool {
	return l.inflight != nil && l.win.OpenRows() > maxPendingRows
}

// closedWaiting reports whether the watermark finalized windows that no
// commit took yet.
func (l *loop) closedWaiting() bool {
	first := l.win.FirstEnd()
	return !first.IsZero() && !first.After(l.wm.Current())
}

// flowControl pauses the partitions whose event time is more than maxSpread
// ahead of the slowest partition still delivering, and resumes them once
// within half of it: a backfill reads the partitions in step by event time,
// so its open windows, and its memory, are bounded by the spread, not by the
// backlog. Live, every partition is near the wall clock and none is paused.
func (l *loop) flowControl(now time.Time) {
	base, ok := l.wm.Slowest(now)
	var pause, resume map[string][]int32
	for tp, p := range l.parts {
		t, has := l.wm.MaxEvent(tp)
		switch ahead := has && ok && t.Sub(base) > maxSpread; {
		case ahead && !p.paused:
			p.paused = true
			if pause == nil {
				pause = map[string][]int32{}
			}
			pause[tp.Topic] = append(pause[tp.Topic], tp.Partition)
		case p.paused && (!ok || !has || t.Sub(base) <= maxSpread/2):
			p.paused = false
			if resume == nil {
				resume = map[string][]int32{}
			}
			resume[tp.Topic] = append(resume[tp.Topic], tp.Partition)
		}
	}
	if pause != nil {
		l.src.consumer.Pause(pause)
	}
	if resume != nil {
		l.src.consumer.Resume(resume)
	}
}
