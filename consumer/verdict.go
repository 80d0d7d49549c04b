package consumer

import "time"

// verdict is what happens to a decoded prediction.
type verdict int

const (
	aggregateIt verdict = iota // its window is open: count it
	replayed                   // its window was written and it was consumed before a restart: skip it
	late                       // its window was written before it first arrived: dead letter "late"
)

// classify applies docs/design.md "Watermark and lateness" and "Replay after a
// restart" to an event of a partition whose stored consumed_offset (one past
// the last offset consumed before the restart) is consumedOffset and whose
// stored watermark is stored (zero: none). An event whose window ends at or
// before the watermark or the stored watermark is late, unless its offset is
// below consumedOffset and its window ends at or before the stored
// watermark: then it was counted in a written window (or recorded as late)
// before, and is skipped without a trace. Judging by the partition's stored
// watermark, not the instance's, keeps that true when the partition's owner
// changed (a split pipeline's instances reach different watermarks).
func classify(offset int64, windowEnd, watermark time.Time, consumedOffset int64, stored time.Time) verdict {
	switch {
	case windowEnd.After(watermark) && windowEnd.After(stored):
		return aggregateIt
	case offset < consumedOffset && !windowEnd.After(stored):
		return replayed
	}
	return late
}
