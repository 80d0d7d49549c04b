package consumer

import "time"

// DefaultProgressInterval is Config.ProgressInterval when it is zero.
const DefaultProgressInterval = 10 * time.Second

// progress is what the progress line of a run remembers between lines. It
// lives in the Summary, so a resync (a new loop) keeps it.
type progress struct {
	began    time.Time // one tick before the first: the rate of a drain's estimate counts from here
	last     time.Time // when the previous line was logged
	consumed int64     // records consumed then
}

// logProgress logs one info line "progress" every cfg.ProgressInterval:
// records per second since the previous line, records consumed in all,
// the lag (records between each partition's position and its high water
// mark, summed; "unknown" while a partition's high water mark cannot be
// read), the watermark, the open windows, the commits and failed
// commits, the records waiting for a commit; a split pipeline adds the
// windows waiting for the merge and the end of the last merged window, and
// a drain the records left to its end and an estimated time to it (records
// left / records per second since the run loop began; "unknown" before
// anything was read). It runs on the loop's tick.
func (l *loop) logProgress(now time.Time) {
	every, p := l.cfg.ProgressInterval, &l.sum.progress
	consumed := l.sum.total()
	if p.began.IsZero() {
		// The run loop began one tick ago: what it read since counts in
		// the drain's rate (a drain paused at --max-uncommitted-messages
		// before its first tick had no rate, so no estimate, until the
		// next commit).
		p.began, p.last, p.consumed = now.Add(-tickInterval), now, consumed
		return
	}
	if every <= 0 || now.Sub(p.last) < every {
		return
	}
	elapsed := now.Sub(p.last).Seconds()
	rate := float64(consumed-p.consumed) / elapsed
	p.last, p.consumed = now, consumed
	var lag any
	var sum int64
	for tp := range l.parts {
		hw, known := l.knownHighWater(tp, now)
		if !known {
			lag = "unknown" // a partition's high water mark could not be read
			break
		}
		sum += max(0, hw-l.led.ConsumedOffset(tp))
	}
	if lag == nil {
		lag = sum
	}
	attrs := []any{"records_per_s", int64(rate + 0.5), "consumed", consumed, "lag", lag,
		"watermark", formatTime(l.wm.Current()), "open_windows", l.win.OpenWindows(),
		"commits", l.sum.Commits, "commit_failures", l.sum.CommitFailures, "uncommitted", l.consumed - l.committed}
	if l.sp.on {
		attrs = append(attrs, "merge_pending_windows", l.sp.merged.Pending, "merged_until", formatTime(l.sp.merged.Until))
	}
	if l.cfg.Drain {
		var left int64
		for tp, p := range l.parts {
			left += max(0, p.drainTarget-l.led.ConsumedOffset(tp))
		}
		eta := "unknown"
		if avg := float64(consumed) / now.Sub(p.began).Seconds(); avg > 0 {
			eta = (time.Duration(float64(left)/avg*float64(time.Second)) + time.Second/2).Truncate(time.Second).String()
		}
		attrs = append(attrs, "drain_left", left, "drain_eta", eta)
	}
	l.cfg.Logger.Info("progress", attrs...)
}

// total returns the records consumed in all topics.
func (s *Summary) total() int64 {
	var n int64
	for _, c := range s.Consumed {
		n += c
	}
	return n
}
