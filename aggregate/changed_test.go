package aggregate

import (
	"reflect"
	"testing"
	"time"
)

// Changed returns the rows of the open windows that gained events since
// its last call, equal to the rows Closed would build of them at that
// moment, and copies: later events do not change them.
func TestChangedTakesOnlyWindowsWithNewEvents(t *testing.T) {
	w := NewWindower(5 * time.Minute)
	t0 := time.Date(2016, 5, 18, 20, 0, 0, 0, time.UTC)
	w.Add(pred("L1", "S1", "AT", 10, t0))
	w.Add(pred("L1", "S2", "AT", 30, t0.Add(time.Minute)))
	w.Add(pred("L2", "S1", "AT", -5, t0.Add(6*time.Minute)))
	w.Add(pred("L3", "S3", "AT", 7, t0.Add(11*time.Minute)))

	// The watermark finalized the first window: only the two open ones.
	wm := t0.Add(5 * time.Minute)
	rows, starts := w.Changed(wm)
	want := w.Closed(t0.Add(15 * time.Minute))[len(w.Closed(wm)):]
	if !reflect.DeepEqual(rows, want) || len(starts) != 2 || !starts[0].Equal(t0.Add(5*time.Minute)) || !starts[1].Equal(t0.Add(10*time.Minute)) {
		t.Fatalf("Changed(%v) = %v, %v; want %v and the starts 20:05, 20:10", wm, rows, starts, want)
	}
	if rows, starts := w.Changed(wm); rows != nil || len(starts) != 0 {
		t.Fatalf("Changed again without events = %v, %v; want none", rows, starts)
	}

	// One more event in the second window: only it, and the rows taken
	// before are unchanged.
	before := rows[0]
	beforeValues := append([]float64(nil), before.Values...)
	w.Add(pred("L2", "S1", "AT", 100, t0.Add(7*time.Minute)))
	rows, starts = w.Changed(wm)
	if len(starts) != 1 || !starts[0].Equal(t0.Add(5*time.Minute)) || len(rows) != 4 || rows[0].Count != 2 {
		t.Fatalf("after one event in [20:05, 20:10): Changed = %v, %v", rows, starts)
	}
	if before.Count != 1 || !reflect.DeepEqual(before.Values, beforeValues) {
		t.Fatalf("a row Changed returned before changed with a later event: %+v", before)
	}

	// A partitioned Windower has no provisional rows: its partials.
	pw := NewPartitionedWindower(5 * time.Minute)
	pw.AddFrom(1, pred("L1", "S1", "AT", 10, t0))
	if rows, starts := pw.Changed(time.Time{}); rows != nil || starts != nil {
		t.Fatalf("partitioned Changed = %v, %v; want nil", rows, starts)
	}
	if ps := w.ChangedPartials(wm); ps != nil {
		t.Fatalf("unpartitioned ChangedPartials = %v; want nil", ps)
	}
}

// ChangedPartials returns the partial aggregates of the open windows and
// partitions that gained events since its last call, equal to those
// PartialWindows builds of the same windows once closed, and only those.
func TestChangedPartialsTakesOnlyWindowsWithNewEvents(t *testing.T) {
	w := NewPartitionedWindower(5 * time.Minute)
	t0 := time.Date(2016, 5, 18, 20, 0, 0, 0, time.UTC)
	w.AddFrom(0, pred("L1", "S1", "AT", 10, t0))
	w.AddFrom(1, pred("L1", "S2", "AT", 30, t0.Add(6*time.Minute)))
	w.AddFrom(0, pred("L2", "S1", "AT", -5, t0.Add(7*time.Minute)))
	w.AddFrom(1, pred("L3", "S3", "AT", 7.5, t0.Add(11*time.Minute)))

	wm := t0.Add(5 * time.Minute) // finalizes [20:00, 20:05) of partition 0
	got := w.ChangedPartials(wm)
	all := w.ClosedSet(t0.Add(15 * time.Minute)).PartialWindows()
	if want := all[1:]; !reflect.DeepEqual(got, want) {
		t.Fatalf("ChangedPartials(%v) = %v; want %v", wm, got, want)
	}
	if got := w.ChangedPartials(wm); len(got) != 0 {
		t.Fatalf("ChangedPartials again without events = %v; want none", got)
	}
	w.AddFrom(1, pred("L2", "S1", "AT", 100, t0.Add(8*time.Minute)))
	got = w.ChangedPartials(wm)
	if len(got) != 1 || got[0].Partition != 1 || !got[0].WindowStart.Equal(t0.Add(5*time.Minute)) {
		t.Fatalf("after one event of partition 1 in [20:05, 20:10): ChangedPartials = %v", got)
	}
	if want := w.ClosedSet(t0.Add(10 * time.Minute)).PartialWindows(); !reflect.DeepEqual(got[0], want[2]) {
		t.Fatalf("ChangedPartials = %v; want %v", got[0], want[2])
	}
}
