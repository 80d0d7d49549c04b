package aggregate

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2026, 5, 4, 12, 0, 0, 0, time.UTC)

func pred(line, stop, op string, delay float64, at time.Time) Prediction {
	return Prediction{TripID: "t", Line: line, StopID: stop, Operator: op, DelayS: delay, EventTime: at}
}

func TestWindowerRows(t *testing.T) {
	w := NewWindower(5 * time.Minute)
	if w.Size() != 5*time.Minute || w.OpenWindows() != 0 || !w.LastEnd().IsZero() {
		t.Fatal("new windower not empty")
	}
	got := w.Add(pred("L1", "S1", "GVB", 60, t0.Add(5*time.Minute))) // exactly 12:05 -> [12:05,12:10)
	if !got.Equal(t0.Add(5 * time.Minute)) {
		t.Fatalf("window start %v", got)
	}
	w.Add(pred("L1", "S2", "GVB", 120, t0.Add(9*time.Minute)))
	w.Add(pred("L2", "S1", "RET", -30, t0.Add(7*time.Minute)))
	w.Add(pred("L1", "S1", "GVB", 10, t0.Add(time.Minute))) // [12:00,12:05)

	if w.OpenWindows() != 2 {
		t.Fatalf("open windows %d", w.OpenWindows())
	}
	// [12:00): 4 rows; [12:05): line L1,L2, station S1,S2, operator GVB,RET, network: 7 rows.
	if w.OpenRows() != 11 {
		t.Fatalf("open rows %d", w.OpenRows())
	}
	if !w.LastEnd().Equal(t0.Add(10 * time.Minute)) {
		t.Fatalf("last end %v", w.LastEnd())
	}

	if rows := w.Closed(t0.Add(5*time.Minute - time.Nanosecond)); len(rows) != 0 {
		t.Fatalf("closed before window end: %v", rows)
	}
	w1 := t0.Add(5 * time.Minute)
	w2 := t0.Add(10 * time.Minute)
	want := []Row{
		{t0, w1, DimLine, "L1", "GVB", 1, 10, 10, 10, 10, []float64{10}, []int64{1}},
		{t0, w1, DimNetwork, NetworkID, "GVB", 1, 10, 10, 10, 10, []float64{10}, []int64{1}},
		{t0, w1, DimOperator, "GVB", "GVB", 1, 10, 10, 10, 10, []float64{10}, []int64{1}},
		{t0, w1, DimStation, "S1", "GVB", 1, 10, 10, 10, 10, []float64{10}, []int64{1}},
		{w1, w2, DimLine, "L1", "GVB", 2, 90, 114, 60, 120, []float64{60, 120}, []int64{1, 1}},
		{w1, w2, DimLine, "L2", "RET", 1, -30, -30, -30, -30, []float64{-30}, []int64{1}},
		// sorted -30,60,120: pos 1.8 -> 60 + 0.8*60 = 108.
		{w1, w2, DimNetwork, NetworkID, "", 3, 50, 108, -30, 120, []float64{-30, 60, 120}, []int64{1, 1, 1}},
		{w1, w2, DimOperator, "GVB", "GVB", 2, 90, 114, 60, 120, []float64{60, 120}, []int64{1, 1}},
		{w1, w2, DimOperator, "RET", "RET", 1, -30, -30, -30, -30, []float64{-30}, []int64{1}},
		{w1, w2, DimStation, "S1", "", 2, 15, 51, -30, 60, []float64{-30, 60}, []int64{1, 1}},
		{w1, w2, DimStation, "S2", "GVB", 1, 120, 120, 120, 120, []float64{120}, []int64{1}},
	}
	rows := w.Closed(w1)
	if !sameRows(rows, want[:4]) {
		t.Fatalf("Closed(12:05) =\n%v\nwant\n%v", rows, want[:4])
	}
	// Closed does not remove: a failed commit retries with the same rows.
	if again := w.Closed(w1); !sameRows(again, rows) || w.OpenWindows() != 2 {
		t.Fatal("Closed removed rows")
	}
	rows = w.Closed(w2)
	if !sameRows(rows, want) {
		t.Fatalf("Closed(12:10) =\n%v\nwant\n%v", rows, want)
	}
	if n := w.Drop(w1); n != 1 || w.OpenWindows() != 1 || w.OpenRows() != 7 {
		t.Fatalf("Drop(12:05) = %d, open %d/%d", n, w.OpenWindows(), w.OpenRows())
	}
	if n := w.Drop(w1); n != 0 {
		t.Fatalf("second Drop = %d", n)
	}
	if rows := w.Closed(w.LastEnd()); !sameRows(rows, want[4:]) {
		t.Fatalf("drain rows %v", rows)
	}
	if n := w.Drop(w2); n != 1 || w.OpenWindows() != 0 || w.OpenRows() != 0 || !w.LastEnd().IsZero() {
		t.Fatalf("Drop(12:10) = %d", n)
	}
}

// sameRows compares rows field by field, distributions included.
func sameRows(a, b []Row) bool { return reflect.DeepEqual(a, b) }

// naiveDistribution sorts ds and counts each distinct value.
func naiveDistribution(ds []float64) (values []float64, counts []int64) {
	ds = slices.Clone(ds)
	slices.Sort(ds)
	for i, d := range ds {
		if i > 0 && d == ds[i-1] {
			counts[len(counts)-1]++
			continue
		}
		values, counts = append(values, d), append(counts, 1)
	}
	return values, counts
}

func TestNewWindowerPanicsOnBadSize(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	NewWindower(0)
}

type naiveKey struct {
	start   int64
	dim, id string
}

// TestWindowerProperty compares the windower, closing and dropping at random
// watermarks, with a naive recomputation over all events.
func TestWindowerProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	for round := range 50 {
		size := []time.Duration{time.Minute, 5 * time.Minute, 7 * time.Second}[round%3]
		w := NewWindower(size)
		naive := map[naiveKey][]Prediction{}
		var emitted []Row
		watermark := t0.Add(-time.Hour)
		for range 2000 {
			// Events up to 20 minutes after the watermark, never late.
			at := watermark.Add(time.Duration(r.Int64N(int64(20 * time.Minute))))
			if !WindowStart(at, size).Add(size).After(watermark) {
				continue
			}
			p := pred(fmt.Sprint("L", r.IntN(3)), fmt.Sprint("S", r.IntN(5)), fmt.Sprint("OP", r.IntN(2)),
				float64(r.IntN(200)-50), at)
			w.Add(p)
			st := WindowStart(at, size).UnixNano()
			for _, k := range []naiveKey{{st, DimLine, p.Line}, {st, DimStation, p.StopID}, {st, DimOperator, p.Operator}, {st, DimNetwork, NetworkID}} {
				naive[k] = append(naive[k], p)
			}
			if r.IntN(50) == 0 {
				watermark = watermark.Add(time.Duration(r.Int64N(int64(5 * time.Minute))))
				rows := w.Closed(watermark)
				if r.IntN(3) == 0 { // a failed commit: nothing dropped
					continue
				}
				emitted = append(emitted, rows...)
				w.Drop(watermark)
			}
		}
		emitted = append(emitted, w.Closed(w.LastEnd())...)
		w.Drop(w.LastEnd())
		if w.OpenWindows() != 0 {
			t.Fatal("windows left after drain")
		}
		if len(emitted) != len(naive) {
			t.Fatalf("round %d: %d rows, naive %d", round, len(emitted), len(naive))
		}
		seen := map[naiveKey]bool{}
		for _, row := range emitted {
			k := naiveKey{row.WindowStart.UnixNano(), row.Dimension, row.DimensionID}
			if seen[k] {
				t.Fatalf("row %v emitted twice", k)
			}
			seen[k] = true
			ps := naive[k]
			var s Stats
			ops := map[string]bool{}
			for _, p := range ps {
				s.Add(p.DelayS, p.Operator)
				ops[p.Operator] = true
			}
			wantOp := ""
			if len(ops) == 1 {
				wantOp = ps[0].Operator
			}
			var ds []float64
			for _, p := range ps {
				ds = append(ds, p.DelayS)
			}
			if row.Count != int64(len(ps)) || row.Mean != s.Mean() || row.P90 != naiveQuantile(ds, 0.9) ||
				row.Min != slices.Min(ds) || row.Max != slices.Max(ds) || row.Operator != wantOp ||
				!row.WindowEnd.Equal(row.WindowStart.Add(size)) {
				t.Fatalf("row %+v, naive %d events %v", row, len(ps), ds)
			}
			if vs, cs := naiveDistribution(ds); !slices.Equal(row.Values, vs) || !slices.Equal(row.Counts, cs) {
				t.Fatalf("row %+v: distribution %v %v, naive %v %v", row, row.Values, row.Counts, vs, cs)
			}
		}
	}
}

// Windows closed and dropped one by one as a watermark passes: every row of
// every window must equal the naive statistics of its own events, so that
// nothing of an earlier window (rows, counts, distinct values, the
// operator, the rows of the previous event) leaks into a later one. Windows
// alternate between many and few rows, operators between one and several,
// and delays between few and many distinct values. (A version that reused
// dropped windows failed it when the reuse kept rows, Stats or the previous
// event's rows; BENCHMARKS.md has why reuse was dropped.)
func TestWindowerDropsLeaveNothing(t *testing.T) {
	type key struct {
		start   time.Time
		dim, id string
	}
	type events struct {
		delays []float64
		ops    map[string]bool
	}
	rng := rand.New(rand.NewPCG(7, 1))
	const size = 5 * time.Minute
	w := NewWindower(size)
	for win := range 40 {
		start := t0.Add(time.Duration(win) * size)
		want := map[key]*events{}
		stations, ops, spread := 3, 1, 3
		if win%3 == 0 {
			stations, ops, spread = 200, 3, 400
		}
		for range 50 + rng.IntN(400) {
			p := pred(fmt.Sprintf("L%d", rng.IntN(5)), fmt.Sprintf("S%d", rng.IntN(stations)),
				fmt.Sprintf("OP%d", rng.IntN(ops)), float64(rng.IntN(spread)-spread/2),
				start.Add(time.Duration(rng.Int64N(int64(size)))))
			w.Add(p)
			for _, k := range []key{{start, DimLine, p.Line}, {start, DimStation, p.StopID},
				{start, DimOperator, p.Operator}, {start, DimNetwork, NetworkID}} {
				e := want[k]
				if e == nil {
					e = &events{ops: map[string]bool{}}
					want[k] = e
				}
				e.delays = append(e.delays, p.DelayS)
				e.ops[p.Operator] = true
			}
		}
		wm := start.Add(size)
		rows := w.Closed(wm)
		if w.Drop(wm) != 1 || len(rows) != len(want) {
			t.Fatalf("window %d: %d rows, want %d", win, len(rows), len(want))
		}
		for _, r := range rows {
			e := want[key{r.WindowStart, r.Dimension, r.DimensionID}]
			if e == nil {
				t.Fatalf("window %d: row %s/%s has no events", win, r.Dimension, r.DimensionID)
			}
			sum, lo, hi := 0.0, e.delays[0], e.delays[0]
			for _, d := range e.delays {
				sum, lo, hi = sum+d, min(lo, d), max(hi, d)
			}
			op := ""
			if len(e.ops) == 1 {
				for o := range e.ops {
					op = o
				}
			}
			n := int64(len(e.delays))
			if r.Count != n || r.Mean != sum/float64(n) || r.Min != lo || r.Max != hi ||
				r.P90 != naiveQuantile(e.delays, 0.9) || r.Operator != op || r.WindowEnd != wm {
				t.Fatalf("window %d: row %+v, want count %d mean %v min %v max %v p90 %v operator %q",
					win, r, n, sum/float64(n), lo, hi, naiveQuantile(e.delays, 0.9), op)
			}
			var total int64
			for i, c := range r.Counts {
				if i > 0 && r.Values[i] <= r.Values[i-1] {
					t.Fatalf("window %d: values not ascending: %v", win, r.Values)
				}
				total += c
			}
			if total != n {
				t.Fatalf("window %d: counts sum to %d, want %d", win, total, n)
			}
		}
	}
}
