package aggregate

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// event is one delay of an operator, read by a source partition.
type event struct {
	part  int32
	delay float64
	op    string
}

// modelRow is the plain model of a row over evs: sort the delays, count,
// exact rational sum rounded once divided by the count, percentile_cont(0.9)
// by sort and interpolate, min, max, the one operator or "".
func modelRow(evs []event) Row {
	vs := make([]float64, len(evs))
	sum := new(big.Rat)
	op := evs[0].op
	for i, e := range evs {
		vs[i] = e.delay
		if vs[i] == 0 {
			vs[i] = 0
		}
		sum.Add(sum, new(big.Rat).SetFloat64(vs[i]))
		if e.op != op {
			op = ""
		}
	}
	slices.Sort(vs)
	s, _ := sum.Float64()
	values, counts := naiveDistribution(vs)
	return Row{Operator: op, Count: int64(len(vs)), Mean: s / float64(len(vs)), P90: naiveQuantile(vs, 0.9),
		Min: vs[0], Max: vs[len(vs)-1], Values: values, Counts: counts}
}

// appendPartialRowV1 appends one row in format 1 (PartialWindow), as
// schema 8's migration and earlier releases wrote it.
func appendPartialRowV1(b []byte, dim byte, id, operator string, vcs []valueCount) []byte {
	b = append(b, dim)
	b = binary.BigEndian.AppendUint32(b, uint32(len(id)))
	b = append(b, id...)
	if operator == "" {
		b = binary.BigEndian.AppendUint32(b, math.MaxUint32) // -1
	} else {
		b = binary.BigEndian.AppendUint32(b, uint32(len(operator)))
		b = append(b, operator...)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(vcs)))
	for _, vc := range vcs {
		b = binary.BigEndian.AppendUint64(b, math.Float64bits(vc.v))
		b = binary.BigEndian.AppendUint64(b, uint64(vc.n))
	}
	return b
}

// encodePartial returns the Data of a partial window of one row in format
// 1 or 2.
func encodePartial(format int, dim byte, id, operator string, vcs []valueCount) []byte {
	if format == 1 {
		return appendPartialRowV1(nil, dim, id, operator, vcs)
	}
	return appendPartialRow([]byte{partialFormat2}, dim, id, operator, vcs)
}

// splitMerge returns the merge (MergePartialWindows) of the partials of evs, one Stats per partition,
// each in format 1 or 2 at random (a window's partials may mix them after an upgrade),
// and the Row of one Stats fed every event.
func splitMerge(evs []event) (merged, whole Row) {
	per := map[int32]*Stats{}
	var all Stats
	for _, e := range evs {
		if per[e.part] == nil {
			per[e.part] = &Stats{}
		}
		per[e.part].Add(e.delay, e.op)
		all.Add(e.delay, e.op)
	}
	var parts []PartialWindow
	for p, st := range per {
		parts = append(parts, PartialWindow{WindowStart: t0, WindowEnd: t0.Add(5 * time.Minute), Partition: p, Rows: 1,
			Data: encodePartial(rand.IntN(2)+1, dimLine, "L", st.Operator(), st.sortedValues(nil))})
	}
	// The merge must not depend on the order of the partials.
	rand.Shuffle(len(parts), func(i, j int) { parts[i], parts[j] = parts[j], parts[i] })
	rows, err := MergePartialWindows(parts)
	if err != nil || len(rows) != 1 {
		panic(fmt.Sprintf("MergePartialWindows: %d rows, %v", len(rows), err))
	}
	merged = rows[0]
	whole = Row{Operator: all.Operator(), Count: all.Count(), Mean: all.Mean(), P90: all.P90(), Min: all.Min(), Max: all.Max()}
	whole.Values, whole.Counts = all.Distribution()
	if mean, p90 := all.MeanP90(); math.Float64bits(mean) != math.Float64bits(whole.Mean) ||
		math.Float64bits(p90) != math.Float64bits(whole.P90) {
		whole.Operator = "MeanP90 differs from Mean and P90" // fails the comparison
	}
	merged.WindowStart, merged.WindowEnd, merged.Dimension, merged.DimensionID = time.Time{}, time.Time{}, "", ""
	return merged, whole
}

// sameBits compares the statistics and distributions of two rows bit for bit.
func sameBits(a, b Row) bool {
	eq := func(x, y float64) bool { return math.Float64bits(x) == math.Float64bits(y) }
	return a.Operator == b.Operator && a.Count == b.Count && eq(a.Mean, b.Mean) && eq(a.P90, b.P90) &&
		eq(a.Min, b.Min) && eq(a.Max, b.Max) && slices.EqualFunc(a.Values, b.Values, eq) &&
		slices.Equal(a.Counts, b.Counts)
}

func checkMerge(t *testing.T, evs []event) {
	t.Helper()
	merged, whole := splitMerge(evs)
	model := modelRow(evs)
	checkSummarize(t, evs, model)
	if !sameBits(merged, whole) {
		t.Fatalf("Merge of the partials %+v differs from one Stats %+v; events %v", merged, whole, evs)
	}
	if !sameBits(whole, model) {
		t.Fatalf("Stats %+v differs from the sort-and-interpolate model %+v; events %v", whole, model, evs)
	}
}

// summaryQuantiles are the quantiles checkSummarize asks for.
var summaryQuantiles = []float64{0, 0.25, 0.5, 0.9, 0.99, 1, 0.123456789, 2, -0.5}

// checkSummarize: Summarize of the per-partition distributions of evs, in
// any order and with values repeated across partitions, equals the model
// (sort and interpolate, exact sum) bit for bit.
func checkSummarize(t *testing.T, evs []event, model Row) {
	t.Helper()
	per := map[int32]*Stats{}
	for _, e := range evs {
		if per[e.part] == nil {
			per[e.part] = &Stats{}
		}
		per[e.part].Add(e.delay, e.op)
	}
	var values []float64
	var counts []int64
	for _, st := range per {
		vs, cs := st.Distribution()
		values, counts = append(values, vs...), append(counts, cs...)
	}
	values, counts = append(values, 12345), append(counts, 0) // a count of 0 counts nothing
	rand.Shuffle(len(values), func(i, j int) {
		values[i], values[j] = values[j], values[i]
		counts[i], counts[j] = counts[j], counts[i]
	})
	got := Summarize(values, counts, summaryQuantiles)
	eq := func(x, y float64) bool { return math.Float64bits(x) == math.Float64bits(y) }
	if got.Count != model.Count || !eq(got.Mean, model.Mean) || !eq(got.Min, model.Min) || !eq(got.Max, model.Max) {
		t.Fatalf("Summarize %+v, model %+v; events %v", got, model, evs)
	}
	ds := make([]float64, len(evs))
	for i, e := range evs {
		ds[i] = e.delay
	}
	for i, p := range summaryQuantiles {
		want := math.NaN()
		if p >= 0 && p <= 1 {
			want = naiveQuantile(ds, p)
			if want == 0 {
				want = 0 // -0 is held as 0
			}
		}
		if !eq(got.Quantiles[i], want) {
			t.Fatalf("Summarize quantile %v = %v, model %v; events %v", p, got.Quantiles[i], want, evs)
		}
	}
}

func TestSummarizeEmpty(t *testing.T) {
	s := Summarize([]float64{1}, []int64{0}, []float64{0.5})
	if s.Count != 0 || !math.IsNaN(s.Mean) || !math.IsNaN(s.Min) || !math.IsNaN(s.Max) || !math.IsNaN(s.Quantiles[0]) {
		t.Fatalf("Summarize of no events: %+v", s)
	}
}

func TestMergeHandPicked(t *testing.T) {
	for _, evs := range [][]event{
		{{0, 5, "A"}},
		{{0, 5, "A"}, {1, 7, "A"}, {2, 5, "A"}, {0, 5, "A"}, {1, 5, "A"}},                                        // ties across partitions
		{{0, 0.1, "A"}, {1, 0.1, "A"}, {2, 0.1, "A"}},                                                            // a running sum would give 0.30000000000000004
		{{0, math.Copysign(0, -1), "A"}, {1, 0, "B"}},                                                            // -0 and 0, two operators
		{{0, 1e308, "A"}, {1, 1e308, "A"}, {2, -1e308, "A"}},                                                     // a running sum overflows in one order
		{{0, 1, "A"}, {1, 1e-300, "A"}, {2, -1, "A"}},                                                            // cancellation: exact sum 1e-300
		{{0, 86400, "A"}, {0, -86400, "B"}, {3, 0.5, "A"}, {7, -0.25, "A"}},                                      // the contract's bounds
		{{0, 3, "A"}, {0, 1, "A"}, {0, 4, "A"}, {0, 1, "A"}, {0, 5, "A"}, {0, 9, "A"}, {1, 2, "A"}, {1, 6, "A"}}, // value table
	} {
		checkMerge(t, evs)
	}
	if rows, err := MergePartialWindows(nil); rows == nil || len(rows) != 0 || err != nil {
		t.Fatalf("MergePartialWindows(nil) = %v, %v", rows, err)
	}
}

// The sum behind the mean is exact and rounded once, so the order of the
// delays does not matter: 1e16, 1, 1 sums to 1e16+2 (a running sum in that
// order gives 1e16, in the order 1, 1, 1e16 it gives 1e16+2).
func TestMeanExactSum(t *testing.T) {
	for _, s := range []*Stats{statsOf("A", 1e16, 1, 1), statsOf("A", 1, 1, 1e16)} {
		if s.Sum() != 1e16+2 || s.Mean() != (1e16+2)/3 {
			t.Fatalf("sum %v mean %v, want %v and %v", s.Sum(), s.Mean(), 1e16+2, (1e16+2)/3)
		}
	}
	// 3 * 0.1 lies exactly half-way between two float64s: ties to even.
	if s := statsOf("A", 0.1, 0.1, 0.1); s.Sum() != 0.30000000000000004 {
		t.Fatalf("sum of three 0.1: %v", s.Sum())
	}
	if s := statsOf("A", 1e308, 1e308, -1e308); s.Sum() != 1e308 {
		t.Fatalf("sum %v, want 1e308 (no overflow on the way)", s.Sum())
	}
}

// A partitioned Windower keeps each partition's rows apart; the partials of
// its closed windows merge into the rows of a plain Windower fed the same
// events, bit for bit.
func TestPartitionedWindowerMergesIntoRows(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	plain, split := NewWindower(5*time.Minute), NewPartitionedWindower(5*time.Minute)
	for range 5000 {
		p := pred([]string{"L1", "L2", "L3"}[r.IntN(3)], []string{"S1", "S2"}[r.IntN(2)], []string{"A", "B"}[r.IntN(2)],
			float64(r.IntN(600)-100)+[]float64{0, 0.5, 0.1}[r.IntN(3)], t0.Add(time.Duration(r.IntN(3600))*time.Second))
		part := int32(r.IntN(6))
		plain.Add(p)
		split.AddFrom(part, p)
	}
	wm := t0.Add(40 * time.Minute)
	if open := split.OpenPartitions(wm); len(open) != 6 {
		t.Fatalf("open partitions after %v: %v", wm, open)
	}
	want := plain.Closed(wm)
	partials := split.ClosedSet(wm).PartialWindows()
	got, err := MergePartialWindows(partials)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) || len(want) == 0 {
		t.Fatalf("%d merged rows, want %d", len(got), len(want))
	}
	for i := range want {
		if !sameBits(got[i], want[i]) || !got[i].WindowStart.Equal(want[i].WindowStart) ||
			!got[i].WindowEnd.Equal(want[i].WindowEnd) || got[i].Dimension != want[i].Dimension ||
			got[i].DimensionID != want[i].DimensionID {
			t.Fatalf("row %d: merged %+v, want %+v", i, got[i], want[i])
		}
	}
	if split.Drop(wm) == 0 || len(split.OpenPartitions(wm)) != 6 {
		t.Fatal("drop")
	}
}

// FuzzMerge: any finite delays, any operators, any split into partitions:
// Merge of the per-partition partials equals one Stats over every event, bit
// for bit, and both equal the sort-and-interpolate model with an exact sum.
func FuzzMerge(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, uint8(3), false)
	f.Add([]byte{0xc0, 0x15, 0, 0, 0, 0, 0, 0, 1, 0x40, 0x15, 0, 0, 0, 0, 0, 0, 2}, uint8(2), true)
	f.Fuzz(func(t *testing.T, data []byte, parts uint8, raw bool) {
		parts = 1 + parts%8
		var evs []event
		for len(data) >= 9 {
			var d float64
			if raw { // any float64 bits: any finite value
				d = math.Float64frombits(binary.LittleEndian.Uint64(data))
				if math.IsNaN(d) || math.IsInf(d, 0) {
					data = data[9:]
					continue
				}
			} else { // few distinct values, heavy ties, halves and tenths
				d = float64(int8(data[0])%16) + []float64{0, 0.5, 0.1, -0.25}[data[1]%4]
			}
			evs = append(evs, event{part: int32(data[8] % parts), delay: d, op: []string{"A", "B"}[data[8]>>7]})
			data = data[9:]
		}
		if len(evs) == 0 {
			return
		}
		checkMerge(t, evs)
	})
}

// FuzzPartialWindowData: any bytes as one partition's Data either fail with
// an error (never a panic) or are a well-formed encoding in format 1 or 2:
// the merged rows, encoded again in the same format, give the same bytes
// (each format has one encoding per row).
func FuzzPartialWindowData(f *testing.F) {
	f.Add(appendPartialRowV1(appendPartialRowV1(nil, dimLine, "10", "AT", []valueCount{{-3, 2}, {0.5, 1}}),
		dimStation, "S", "", []valueCount{{7, 1}}))
	f.Add([]byte{3, 0, 0, 0, 1, 'S', 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0})
	f.Add(appendPartialRow(appendPartialRow([]byte{partialFormat2}, dimLine, "10", "AT", []valueCount{{-3, 2}, {0.5, 1}}),
		dimStation, "S", "", []valueCount{{-86400, 1}, {7, 300}, {86400, 1}}))
	f.Add([]byte{partialFormat2, 3, 1, 'S', 0, 2, 0, 0x80, 0x00, 1, 1, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		w := PartialWindow{WindowStart: t0, WindowEnd: t0.Add(5 * time.Minute), Data: data}
		var rows []Row
		accepted := false
		for w.Rows = 1; w.Rows <= 4 && !accepted; w.Rows++ {
			var err error
			rows, err = MergePartialWindows([]PartialWindow{w})
			accepted = err == nil // on an error, rows are those before it
		}
		if !accepted {
			return
		}
		encode, again := appendPartialRowV1, []byte(nil)
		if data[0] == partialFormat2 {
			encode, again = appendPartialRow, []byte{partialFormat2}
		}
		for _, r := range rows {
			d := byte(slices.Index(dims[:], r.Dimension))
			vcs := make([]valueCount, len(r.Values))
			for i := range vcs {
				vcs[i] = valueCount{r.Values[i], r.Counts[i]}
			}
			again = encode(again, d, r.DimensionID, r.Operator, vcs)
		}
		if string(again) != string(data) {
			t.Fatalf("accepted %x, which encodes as %x", data, again)
		}
	})
}

// A partial window whose row_count was edited by hand (or corrupted) to far
// more rows than its Data can hold is an error naming the partition, never
// an allocation of that many rows: before, MergePartialWindows sized its
// output from the announced counts, and a row_count of 2^31-1 made the
// process die with "fatal error: runtime: out of memory".
func TestMergePartialWindowsRowCountBeyondData(t *testing.T) {
	for i, rows := range []int{math.MaxInt32, 2, math.MaxInt32, 2} {
		data := encodePartial(1+i/2, dimLine, "L1", "AT", []valueCount{{12, 3}})
		ws := []PartialWindow{
			{WindowStart: t0, WindowEnd: t0.Add(5 * time.Minute), Partition: 0, Rows: rows, Data: data},
			{WindowStart: t0, WindowEnd: t0.Add(5 * time.Minute), Partition: 1, Rows: rows, Data: data},
		}
		if _, err := MergePartialWindows(ws); err == nil || !errors.Is(err, errPartialData) {
			t.Fatalf("row_count %d over 1 row of data: %v, want a corrupt partial window error", rows, err)
		}
	}
}

// Format 2 has one encoding per row: a reader takes the bytes appendPartialRow
// writes, whole-second delays and others, and refuses every other spelling
// of them, and what the format cannot hold, with the corrupt-partial error.
func TestPartialFormat2(t *testing.T) {
	whole := []valueCount{{-86400, 1}, {-1, 2}, {0, 7}, {1, 1}, {86400, 1 << 40}}
	frac := []valueCount{{-0.5, 1}, {2, 3}}
	for _, vcs := range [][]valueCount{whole, frac, {{maxWholeDelay, 1}}, {{-maxWholeDelay - 2, 1}}} {
		data := appendPartialRow([]byte{partialFormat2}, dimStation, "Stationsplein é", "AT", vcs)
		rows, err := MergePartialWindows([]PartialWindow{{WindowStart: t0, WindowEnd: t0.Add(5 * time.Minute), Rows: 1, Data: data}})
		if err != nil || len(rows) != 1 {
			t.Fatalf("%v: %d rows, %v", vcs, len(rows), err)
		}
		r := rows[0]
		if r.Dimension != "station" || r.DimensionID != "Stationsplein é" || r.Operator != "AT" || len(r.Values) != len(vcs) {
			t.Fatalf("%v: row %+v", vcs, r)
		}
		for i, vc := range vcs {
			if math.Float64bits(r.Values[i]) != math.Float64bits(vc.v) || r.Counts[i] != vc.n {
				t.Fatalf("%v: delay %d read as %v x%d", vcs, i, r.Values[i], r.Counts[i])
			}
		}
	}
	head := []byte{partialFormat2, dimStation, 1, 'S', 0} // station "S", several operators
	for name, data := range map[string][]byte{
		"a zero count":                        append(slices.Clone(head), 1, 0, 2, 0),
		"a uvarint longer than it need be":    append(slices.Clone(head), 1, 0, 2, 0x81, 0x00),
		"a varint longer than it need be":     append(slices.Clone(head), 1, 0, 0x82, 0x00, 1),
		"delays not ascending":                append(slices.Clone(head), 2, 0, 2, 1, 0, 1),
		"whole delays written as float8":      binary.BigEndian.AppendUint64(append(slices.Clone(head), 1, 1), math.Float64bits(3)),
		"a kind of delays that is not 0 or 1": append(slices.Clone(head), 1, 2, 2, 1),
		"a first delay beyond 2^53":           append(binary.AppendVarint(append(slices.Clone(head), 1, 0), maxWholeDelay+1), 1),
		"truncated":                           append(slices.Clone(head), 2, 0, 2, 1),
	} {
		_, err := MergePartialWindows([]PartialWindow{{WindowStart: t0, WindowEnd: t0.Add(5 * time.Minute), Rows: 1, Data: data}})
		if !errors.Is(err, errPartialData) {
			t.Errorf("%s (%x): %v, want the corrupt-partial error", name, data, err)
		}
	}
}

// A MergeCursor streams the rows of a backlog one at a time: the rows it
// yields, each copied before the next call, equal those of one Windower fed
// every event, bit for bit; a corrupt partial of a later window ends the
// stream there with the corrupt-partial error, after the rows of the windows
// before it, and the count of rows yielded says where.
func TestMergeCursorStreamsThenStopsAtACorruptWindow(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	plain, split := NewWindower(5*time.Minute), NewPartitionedWindower(5*time.Minute)
	for range 3000 {
		p := pred([]string{"L1", "L2"}[r.IntN(2)], []string{"S1", "S2", "S3"}[r.IntN(3)], []string{"A", "B"}[r.IntN(2)],
			float64(r.IntN(300)-50), t0.Add(time.Duration(r.IntN(1800))*time.Second))
		plain.Add(p)
		split.AddFrom(int32(r.IntN(3)), p)
	}
	wm := t0.Add(30 * time.Minute)
	want := plain.Closed(wm)
	partials := split.ClosedSet(wm).PartialWindows()
	last := partials[len(partials)-1].WindowStart
	before := 0 // rows of the windows before the last
	for _, w := range want {
		if w.WindowStart.Before(last) {
			before++
		}
	}
	if before == 0 || before == len(want) {
		t.Fatalf("%d of %d rows before the last window: the test needs both", before, len(want))
	}
	for _, corrupt := range []bool{false, true} {
		ws := slices.Clone(partials)
		if corrupt {
			w := &ws[len(ws)-1]
			w.Data = slices.Clone(w.Data)
			w.Data[0] = 9 // dimension out of range
		}
		c, err := NewMergeCursor(ws)
		if err != nil {
			t.Fatal(err)
		}
		var got []Row
		var row Row
		for c.Next(&row) {
			row.Values, row.Counts = slices.Clone(row.Values), slices.Clone(row.Counts)
			got = append(got, row)
		}
		n := len(want)
		if corrupt {
			n = before
			if !errors.Is(c.Err(), errPartialData) {
				t.Fatalf("corrupt last window: err %v, want the corrupt-partial error", c.Err())
			}
		} else if c.Err() != nil {
			t.Fatal(c.Err())
		}
		if len(got) != n || c.Rows() != n {
			t.Fatalf("corrupt %v: %d rows yielded (Rows %d), want %d", corrupt, len(got), c.Rows(), n)
		}
		for i := range got {
			if !sameBits(got[i], want[i]) || !got[i].WindowStart.Equal(want[i].WindowStart) ||
				got[i].Dimension != want[i].Dimension || got[i].DimensionID != want[i].DimensionID {
				t.Fatalf("corrupt %v: row %d: %+v, want %+v", corrupt, i, got[i], want[i])
			}
		}
		if c.Next(&row) {
			t.Fatal("Next after the end yielded a row")
		}
	}
}

// A MergeCursor counts the windows of partials given in any order (as
// DELETE ... RETURNING gives them) once each.
func TestMergeCursorCountsWindows(t *testing.T) {
	split := NewPartitionedWindower(5 * time.Minute)
	for part := range int32(2) {
		for k := range 4 {
			split.AddFrom(part, pred("L1", "S1", "A", float64(k), t0.Add(time.Duration(k)*4*time.Minute)))
		}
	}
	ws := split.ClosedSet(t0.Add(15 * time.Minute)).PartialWindows()
	slices.SortStableFunc(ws, func(a, b PartialWindow) int { return int(a.Partition) - int(b.Partition) })
	if len(ws) != 6 || ws[1].WindowStart.Equal(ws[0].WindowStart) {
		t.Fatalf("%d partials, want 3 windows x 2 partitions, by partition", len(ws))
	}
	c, err := NewMergeCursor(ws)
	if err != nil {
		t.Fatal(err)
	}
	var row Row
	for c.Next(&row) {
	}
	if c.Err() != nil || c.Windows() != 3 {
		t.Fatalf("windows %d, err %v; want 3", c.Windows(), c.Err())
	}
}
