package consumer

import (
	"testing"
	"time"

	"github.com/ovstream/ovstream/aggregate"
)

func at(hm string) time.Time {
	t, err := time.Parse("2006-01-02 15:04", "2026-05-04 "+hm)
	if err != nil {
		panic(err)
	}
	return t
}

// The seed walk-through of the issue: offsets 100-103 alternate a prediction
// in [12:00,12:05), a position, a prediction in [12:05,12:10), a position.
func TestLedgerSeedWalkThrough(t *testing.T) {
	p := aggregate.PartitionID{Topic: "arrival_predictions", Partition: 0}
	l := NewLedger()
	l.Assign(p, 100)
	l.InWindow(p, 100, at("12:05"))
	l.Consumed(p, 101)
	l.InWindow(p, 102, at("12:10"))
	l.Consumed(p, 103)

	if got := l.Committable(p, at("12:04")); got != 100 {
		t.Fatalf("watermark 12:04: committable %d, want 100 (nothing committable)", got)
	}
	if got := l.Committable(p, at("12:05")); got != 102 {
		t.Fatalf("watermark 12:05: committable %d, want 102", got)
	}
	l.Release(at("12:05"))
	if got := l.OpenEntries(); got != 1 {
		t.Fatalf("after release at 12:05: %d open entries, want 1 (102, 103 pending)", got)
	}
	if got := l.Committable(p, at("12:05")); got != 102 {
		t.Fatalf("102 and 103 must stay pending: committable %d, want 102", got)
	}
	if got := l.Committable(p, at("12:10")); got != 104 {
		t.Fatalf("watermark 12:10: committable %d, want 104", got)
	}
	if got := l.ConsumedOffset(p); got != 104 {
		t.Fatalf("consumed offset %d, want 104", got)
	}
}

// A partition that carries only positions is committable at the next commit,
// whatever the watermark.
func TestLedgerPositionOnlyPartition(t *testing.T) {
	p := aggregate.PartitionID{Topic: "vehicle_positions", Partition: 2}
	l := NewLedger()
	l.Assign(p, 0)
	for off := int64(0); off < 50; off += 2 { // gaps, as after compaction
		l.Consumed(p, off)
	}
	if got := l.Committable(p, time.Time{}); got != 49 {
		t.Fatalf("committable %d, want 49", got)
	}
}

// The ledger's memory grows with open windows, not with messages.
func TestLedgerMemoryPerWindow(t *testing.T) {
	p := aggregate.PartitionID{Topic: "arrival_predictions", Partition: 1}
	l := NewLedger()
	l.Assign(p, 0)
	for off := int64(0); off < 1_000_000; off++ {
		l.InWindow(p, off, at("12:05").Add(time.Duration(off%3)*5*time.Minute))
	}
	if got := l.OpenEntries(); got != 3 {
		t.Fatalf("%d entries for 1,000,000 messages in 3 windows, want 3", got)
	}
	if got := l.Committable(p, at("12:05")); got != 1 {
		t.Fatalf("committable %d, want 1", got)
	}
}

// On replay after a restart (stored consumed_offset 110, stored watermark
// 12:10), an event below consumed_offset in a written window is skipped, one
// at or past it is late, and one in an open window is counted whatever its
// offset.
func TestClassifyReplay(t *testing.T) {
	wm := at("12:10") // windows ending at or before 12:10 are written
	for _, c := range []struct {
		offset int64
		end    time.Time
		want   verdict
	}{
		{105, at("12:10"), replayed},
		{109, at("12:05"), replayed},
		{110, at("12:10"), late},
		{111, at("12:05"), late},
		{105, at("12:15"), aggregateIt},
		{120, at("12:15"), aggregateIt},
	} {
		if got := classify(c.offset, c.end, wm, 110, wm); got != c.want {
			t.Errorf("offset %d, window end %s: verdict %d, want %d", c.offset, c.end.Format("15:04"), got, c.want)
		}
	}
}

// The partition's stored watermark, not the instance's, decides: a new owner
// whose own watermark is lower (12:00) than the partition's (12:10) skips the
// replayed events of the partition's written windows and finds later events
// of those windows late (their partial may be written already); an event
// below consumed_offset whose window was still open for the partition's last
// owner (12:15, above 12:10) was never counted: it is counted now, or late
// when the new owner's watermark passed its window.
func TestClassifyStoredWatermark(t *testing.T) {
	stored := at("12:10")
	for _, c := range []struct {
		offset int64
		end    time.Time
		wm     time.Time
		want   verdict
	}{
		{105, at("12:10"), at("12:00"), replayed},
		{110, at("12:10"), at("12:00"), late},
		{105, at("12:15"), at("12:00"), aggregateIt},
		{105, at("12:15"), at("12:20"), late},
		{120, at("12:15"), at("12:00"), aggregateIt},
	} {
		if got := classify(c.offset, c.end, c.wm, 110, stored); got != c.want {
			t.Errorf("offset %d, window end %s, watermark %s: verdict %d, want %d", c.offset,
				c.end.Format("15:04"), c.wm.Format("15:04"), got, c.want)
		}
	}
}
