package aggregate

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// The cursor yields the rows of Rows, in the same order, field for field:
// windows of one and of many rows, distributions held inline and in a value
// table, an empty set, and a set walked twice (a commit's second COPY).
func TestRowCursorEqualsRows(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	w := NewWindower(5 * time.Minute)
	if cur, row := w.ClosedSet(t0).Cursor(), (Row{}); cur.Next(&row) {
		t.Fatalf("an empty set yielded %+v", row)
	}
	for i := range 20000 {
		at := t0.Add(time.Duration(r.Int64N(int64(30 * time.Minute))))
		stop := fmt.Sprint("S", r.IntN(3000))
		if i%7 == 0 {
			stop = "busy" // many distinct values: a value table
		}
		w.Add(pred(fmt.Sprint("L", r.IntN(40)), stop, fmt.Sprint("OP", r.IntN(2)), float64(r.IntN(900)-100)/[]float64{1, 4}[r.IntN(2)], at))
	}
	set := w.ClosedSet(t0.Add(25 * time.Minute))
	want := set.Rows()
	if len(want) != set.Len() || len(want) < 5000 {
		t.Fatalf("Rows gave %d rows, Len %d", len(want), set.Len())
	}
	for pass := range 2 {
		cur := set.Cursor()
		var got []Row
		var row Row
		for cur.Next(&row) {
			row.Values, row.Counts = slices.Clone(row.Values), slices.Clone(row.Counts) // the cursor's own
			got = append(got, row)
		}
		if !sameRows(got, want) {
			t.Fatalf("pass %d: the cursor's %d rows differ from Rows' %d", pass, len(got), len(want))
		}
		if cur.Next(&row) {
			t.Fatal("Next after the last row yielded one")
		}
	}
	starts := set.Starts()
	if len(starts) != 5 || !slices.IsSortedFunc(starts, time.Time.Compare) || !starts[0].Equal(t0) {
		t.Fatalf("Starts %v", starts)
	}
}

// One window of a burst of keys does not size the maps of the windows after
// it: a new window makes room for the fewer of the last two windows'
// rows (it failed when each window was sized like the last one dropped).
func TestWindowerHintIgnoresOneBurst(t *testing.T) {
	w := NewWindower(time.Minute)
	fill := func(start time.Time, stations int) {
		for i := range stations {
			w.Add(pred("L", fmt.Sprint("S", i), "OP", 1, start))
		}
		w.Drop(start.Add(time.Minute))
	}
	fill(t0, 100)
	fill(t0.Add(time.Minute), 100)
	if w.hint[dimStation] != 100 {
		t.Fatalf("hint %d after two windows of 100 stations", w.hint[dimStation])
	}
	fill(t0.Add(2*time.Minute), 50000)
	if w.hint[dimStation] != 100 {
		t.Fatalf("hint %d after a burst of 50000 stations, want 100", w.hint[dimStation])
	}
	fill(t0.Add(3*time.Minute), 120)
	fill(t0.Add(4*time.Minute), 130)
	if w.hint[dimStation] != 120 {
		t.Fatalf("hint %d after windows of 120 and 130 stations, want 120", w.hint[dimStation])
	}
}
