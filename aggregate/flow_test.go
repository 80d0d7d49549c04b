package aggregate

import (
	"reflect"
	"slices"
	"testing"
	"time"
)

func TestWatermarkSlowestAndMaxEvent(t *testing.T) {
	now := time.Date(2026, 5, 4, 12, 0, 0, 0, time.UTC)
	a := PartitionID{Topic: "arrival_predictions", Partition: 0}
	b := PartitionID{Topic: "arrival_predictions", Partition: 1}
	c := PartitionID{Topic: "vehicle_positions", Partition: 0}
	w := NewWatermark(2*time.Minute, 30*time.Second, time.Time{})
	for _, p := range []PartitionID{a, b, c} {
		w.Assign(p)
	}
	if _, ok := w.Slowest(now); ok {
		t.Fatal("Slowest before any event")
	}
	if _, ok := w.MaxEvent(a); ok {
		t.Fatal("MaxEvent before any event")
	}
	w.Observe(a, t0.Add(10*time.Minute), now)
	w.Observe(b, t0.Add(3*time.Minute), now)
	w.Observe(c, t0.Add(90*time.Minute), now)
	if got, ok := w.MaxEvent(c); !ok || !got.Equal(t0.Add(90*time.Minute)) {
		t.Fatalf("MaxEvent(c) = %v, %v", got, ok)
	}
	if got, ok := w.Slowest(now); !ok || !got.Equal(t0.Add(3*time.Minute)) {
		t.Fatalf("Slowest = %v, %v; want b's 12:03", got, ok)
	}
	// A partition that reached its end does not hold the others back.
	w.SetCaughtUp(b, true, wall)
	if got, ok := w.Slowest(now); !ok || !got.Equal(t0.Add(10*time.Minute)) {
		t.Fatalf("Slowest with b caught up = %v, %v; want a's 12:10", got, ok)
	}
	w.SetCaughtUp(a, true, wall)
	w.SetCaughtUp(c, true, wall)
	if _, ok := w.Slowest(now); ok {
		t.Fatal("Slowest when every partition is caught up")
	}
}

func TestWindowerFirstEnd(t *testing.T) {
	w := NewWindower(5 * time.Minute)
	if !w.FirstEnd().IsZero() {
		t.Fatal("FirstEnd of an empty windower")
	}
	w.Add(pred("L1", "S1", "OP", 1, t0.Add(12*time.Minute)))
	w.Add(pred("L1", "S1", "OP", 1, t0.Add(2*time.Minute)))
	w.Add(pred("L1", "S1", "OP", 1, t0.Add(7*time.Minute)))
	if got := w.FirstEnd(); !got.Equal(t0.Add(5 * time.Minute)) {
		t.Fatalf("FirstEnd = %v, want 12:05", got)
	}
	w.Drop(t0.Add(5 * time.Minute))
	if got := w.FirstEnd(); !got.Equal(t0.Add(10 * time.Minute)) {
		t.Fatalf("FirstEnd after Drop = %v, want 12:10", got)
	}
}

// EndsIn lists each window end once, in order, also in a partitioned
// windower whose partitions hold the same window.
func TestWindowerEndsIn(t *testing.T) {
	w := NewPartitionedWindower(5 * time.Minute)
	for _, at := range []time.Duration{12 * time.Minute, 2 * time.Minute, 7 * time.Minute, 3 * time.Minute} {
		w.AddFrom(int32(at/time.Minute), pred("L1", "S1", "OP", 1, t0.Add(at)))
	}
	got := w.EndsIn(t0.Add(5*time.Minute), t0.Add(15*time.Minute))
	want := []time.Time{t0.Add(10 * time.Minute), t0.Add(15 * time.Minute)}
	if !slices.EqualFunc(got, want, time.Time.Equal) {
		t.Fatalf("EndsIn(12:05, 12:15] = %v, want %v", got, want)
	}
	if got := w.EndsIn(time.Time{}, t0.Add(9*time.Minute)); len(got) != 1 || !got[0].Equal(t0.Add(5*time.Minute)) {
		t.Fatalf("EndsIn(0, 12:09] = %v, want [12:05] once (two partitions hold it)", got)
	}
}

// The rows of a ClosedSet are built on another goroutine while events go on
// into later windows (run with -race).
func TestClosedSetConcurrentWithAdd(t *testing.T) {
	w := NewWindower(5 * time.Minute)
	for i := range 3000 {
		w.Add(pred(string(rune('A'+i%7)), string(rune('a'+i%13)), "OP", float64(i%50), t0.Add(time.Duration(i)*time.Second/10)))
	}
	wm := t0.Add(5 * time.Minute)
	want := w.Closed(wm)
	set := w.ClosedSet(wm)
	if set.Len() != len(want) {
		t.Fatalf("Len %d, want %d", set.Len(), len(want))
	}
	done := make(chan []Row)
	go func() { done <- set.Rows() }()
	for i := range 3000 { // later windows only: none of these is late at wm
		w.Add(pred("Z", "z", "OP", float64(i), wm.Add(time.Duration(i)*time.Second)))
	}
	got := <-done
	if len(got) != len(want) {
		t.Fatalf("%d rows, want %d", len(got), len(want))
	}
	for i := range got {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Fatalf("row %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if w.Drop(wm) != 1 {
		t.Fatal("Drop")
	}
}
