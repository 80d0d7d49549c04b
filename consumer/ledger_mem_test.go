package consumer

import (
	"runtime"
	"testing"
	"time"

	"github.com/ovstream/ovstream/aggregate"
)

// heapAfter feeds n messages to a fresh ledger over 6 + 3 partitions, the way
// a run does: predictions in 5-minute windows (event time advancing one
// second per 100 messages, so a window holds 30,000 of them), positions
// consumed outside any window, and a commit every 10,000 messages that
// releases the windows 10 minutes behind. It returns the live heap held by
// the ledger at the end, in bytes, and its open entries.
func heapAfter(t *testing.T, n int) (bytes int64, entries int) {
	t.Helper()
	var preds, poss []aggregate.PartitionID
	for p := range int32(6) {
		preds = append(preds, aggregate.PartitionID{Topic: "arrival_predictions", Partition: p})
	}
	for p := range int32(3) {
		poss = append(poss, aggregate.PartitionID{Topic: "vehicle_positions", Partition: p})
	}
	base := time.Date(2016, 5, 18, 12, 0, 0, 0, time.UTC)
	window := 5 * time.Minute

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	l := NewLedger()
	for _, p := range append(preds, poss...) {
		l.Assign(p, 0)
	}
	offsets := make(map[aggregate.PartitionID]int64)
	for i := range n {
		at := base.Add(time.Duration(i/100) * time.Second)
		if i%4 == 3 {
			p := poss[i%3]
			l.Consumed(p, offsets[p])
			offsets[p]++
		} else {
			p := preds[i%6]
			l.InWindow(p, offsets[p], aggregate.WindowStart(at, window).Add(window))
			offsets[p]++
		}
		if i%10_000 == 9_999 {
			wm := at.Add(-10 * time.Minute)
			for _, p := range preds {
				l.Committable(p, wm)
			}
			l.Release(wm)
		}
	}
	entries = l.OpenEntries()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(l)
	return int64(after.HeapAlloc) - int64(before.HeapAlloc), entries
}

// TestLedgerMemoryFlat: the ledger's live memory after 3,000,000 messages is
// that after 300,000 (both end with the same open windows), within 64 KiB,
// where even 8 bytes per message would be 21 MiB: it holds one entry per
// partition and open window, never one per message.
func TestLedgerMemoryFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("feeds 3M messages")
	}
	heapAfter(t, 1_000) // warm-up: the first GC cycles of the process release memory of their own
	small, smallEntries := heapAfter(t, 300_000)
	large, largeEntries := heapAfter(t, 3_000_000)
	t.Logf("300,000 messages: %d B, %d entries; 3,000,000 messages: %d B, %d entries",
		small, smallEntries, large, largeEntries)
	if largeEntries != smallEntries || largeEntries > 6*4 {
		t.Errorf("open entries: %d after 300,000 messages, %d after 3,000,000: want the same, at most 6 partitions x 4 windows",
			smallEntries, largeEntries)
	}
	if large-small > 64<<10 {
		t.Errorf("ledger grew by %d bytes from 300,000 to 3,000,000 messages, want < 64 KiB", large-small)
	}
}
