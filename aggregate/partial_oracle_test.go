package aggregate

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// The tests of this file check the partial windows (PartialWindow, formats 1
// and 2) against an oracle written from the doc comment alone: refDecode, a
// second decoder of Data that shares no code with partialReader (its own
// varint reading), and refMerge, which merges the decoded distributions with
// exact (big) integers and rationals.

// refRow is one decoded row of a partial window.
type refRow struct {
	dim      byte
	id       string
	operator *string // nil: several
	values   []float64
	counts   []uint64
}

// refVarint reads a base-128 unsigned varint (least significant group first)
// in its one shortest spelling; ok false when b ends, it exceeds 64 bits or
// it is longer than needed.
func refVarint(b []byte) (x uint64, n int, ok bool) {
	var shift uint
	for i := 0; i < len(b) && i < 10; i++ {
		c := b[i]
		if i == 9 && c > 1 {
			return 0, 0, false // beyond 64 bits
		}
		x |= uint64(c&0x7f) << shift
		shift += 7
		if c < 0x80 {
			if i > 0 && c == 0 {
				return 0, 0, false // a final group of zeros: not the shortest
			}
			return x, i + 1, true
		}
	}
	return 0, 0, false
}

// refDecode decodes Data per the PartialWindow doc comment; an error for
// anything the comment does not allow.
func refDecode(data []byte) ([]refRow, error) {
	var rows []refRow
	if len(data) == 0 {
		return nil, errors.New("empty")
	}
	format2 := data[0] == 0x82
	if format2 {
		data = data[1:]
	}
	take := func(n uint64) ([]byte, error) {
		if n > uint64(len(data)) {
			return nil, errors.New("truncated")
		}
		b := data[:n]
		data = data[n:]
		return b, nil
	}
	u := func() (uint64, error) {
		x, n, ok := refVarint(data)
		if !ok {
			return 0, errors.New("varint")
		}
		data = data[n:]
		return x, nil
	}
	be := func(n int) (uint64, error) {
		b, err := take(uint64(n))
		if err != nil {
			return 0, err
		}
		var x uint64
		for _, c := range b {
			x = x<<8 | uint64(c)
		}
		return x, nil
	}
	textOK := func(b []byte) bool { return utf8.Valid(b) && !bytes.Contains(b, []byte{0}) }
	for len(data) > 0 {
		var r refRow
		r.dim = data[0]
		data = data[1:]
		if r.dim > 3 {
			return nil, errors.New("dimension")
		}
		var idLen, opLen uint64
		var opNull bool
		var err error
		if format2 {
			if idLen, err = u(); err != nil {
				return nil, err
			}
		} else {
			x, err := be(4)
			if err != nil {
				return nil, err
			}
			if int32(x) < 0 {
				return nil, errors.New("id NULL or negative")
			}
			idLen = x
		}
		id, err := take(idLen)
		if err != nil {
			return nil, err
		}
		if format2 {
			x, err := u()
			if err != nil {
				return nil, err
			}
			opNull, opLen = x == 0, x-1
		} else {
			x, err := be(4)
			if err != nil {
				return nil, err
			}
			switch {
			case int32(x) == -1:
				opNull = true
			case int32(x) < 0:
				return nil, errors.New("operator length")
			default:
				opLen = x
			}
		}
		if !opNull {
			op, err := take(opLen)
			if err != nil {
				return nil, err
			}
			if len(op) == 0 || !textOK(op) {
				return nil, errors.New("operator")
			}
			s := string(op)
			r.operator = &s
		}
		if !textOK(id) {
			return nil, errors.New("id")
		}
		r.id = string(id)
		var n uint64
		if format2 {
			n, err = u()
		} else {
			n, err = be(4)
		}
		if err != nil || n == 0 || n > uint64(len(data)) {
			return nil, errors.New("number of delays")
		}
		var kind byte
		if format2 {
			b, err := take(1)
			if err != nil {
				return nil, err
			}
			if kind = b[0]; kind > 1 {
				return nil, errors.New("kind")
			}
		}
		var prev int64
		for i := uint64(0); i < n; i++ {
			var v float64
			var c uint64
			switch {
			case !format2 || kind == 1:
				bits, err := be(8)
				if err != nil {
					return nil, err
				}
				v = math.Float64frombits(bits)
			default:
				x, err := u()
				if err != nil {
					return nil, err
				}
				if i == 0 {
					z := int64(x>>1) ^ -int64(x&1) // zigzag
					if z < -(1<<53) || z > 1<<53 {
						return nil, errors.New("first whole delay beyond 2^53")
					}
					prev = z
				} else {
					if x == 0 || big.NewInt(0).Add(big.NewInt(prev), new(big.Int).SetUint64(x)).Cmp(big.NewInt(1<<53)) > 0 {
						return nil, errors.New("difference")
					}
					prev += int64(x)
				}
				v = float64(prev)
			}
			if format2 {
				if c, err = u(); err != nil {
					return nil, err
				}
			} else if c, err = be(8); err != nil {
				return nil, err
			}
			if c == 0 || c > math.MaxInt64 {
				return nil, errors.New("count")
			}
			if math.IsNaN(v) || math.IsInf(v, 0) || (v == 0 && math.Signbit(v)) {
				return nil, errors.New("delay not finite or -0")
			}
			if len(r.values) > 0 && !(v > r.values[len(r.values)-1]) {
				return nil, errors.New("not ascending")
			}
			r.values, r.counts = append(r.values, v), append(r.counts, c)
		}
		if format2 && kind == 1 {
			allWhole := true
			for _, v := range r.values {
				if v != math.Trunc(v) || math.Abs(v) > 1<<53 {
					allWhole = false
				}
			}
			if allWhole {
				return nil, errors.New("whole delays as float8")
			}
		}
		if k := len(rows); k > 0 {
			p := rows[k-1]
			if r.dim < p.dim || r.dim == p.dim && r.id <= p.id { // Go compares strings bytewise
				return nil, errors.New("not sorted")
			}
		}
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		return nil, errors.New("no rows")
	}
	return rows, nil
}

// refMerge merges ws with the oracle: per window, per (dimension, id), the
// union of the partials' distributions, counts added as big integers (a
// total beyond int64 is an error: no single instance can count it), the
// statistics from the exact sum and percentile_cont's steps.
func refMerge(ws []PartialWindow) ([]Row, error) {
	type key struct {
		start int64
		dim   byte
		id    string
	}
	type acc struct {
		end  time.Time
		ops  []*string
		dist map[float64]*big.Int
	}
	byKey := map[key]*acc{}
	seen := map[[2]int64]bool{}
	ends := map[int64]time.Time{}
	for _, w := range ws {
		k2 := [2]int64{w.WindowStart.UnixNano(), int64(w.Partition)}
		if seen[k2] {
			return nil, errors.New("partition twice")
		}
		seen[k2] = true
		if e, ok := ends[w.WindowStart.UnixNano()]; ok && !e.Equal(w.WindowEnd) {
			return nil, errors.New("ends differ")
		}
		ends[w.WindowStart.UnixNano()] = w.WindowEnd
		rows, err := refDecode(w.Data)
		if err != nil {
			return nil, err
		}
		if len(rows) != w.Rows {
			return nil, errors.New("row count")
		}
		for _, r := range rows {
			k := key{w.WindowStart.UnixNano(), r.dim, r.id}
			a := byKey[k]
			if a == nil {
				a = &acc{end: w.WindowEnd, dist: map[float64]*big.Int{}}
				byKey[k] = a
			}
			a.ops = append(a.ops, r.operator)
			for i, v := range r.values {
				if a.dist[v] == nil {
					a.dist[v] = new(big.Int)
				}
				a.dist[v].Add(a.dist[v], new(big.Int).SetUint64(r.counts[i]))
			}
		}
	}
	keys := make([]key, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b key) int {
		if a.start != b.start {
			return cmp.Compare(a.start, b.start)
		}
		if a.dim != b.dim {
			return int(a.dim) - int(b.dim)
		}
		return strings.Compare(a.id, b.id)
	})
	var out []Row
	for _, k := range keys {
		a := byKey[k]
		r := Row{WindowStart: time.Unix(0, k.start).UTC(), WindowEnd: a.end.UTC(), Dimension: dims[k.dim], DimensionID: k.id}
		if a.ops[0] != nil {
			r.Operator = *a.ops[0]
			for _, op := range a.ops {
				if op == nil || *op != r.Operator {
					r.Operator = ""
				}
			}
		}
		for v := range a.dist {
			r.Values = append(r.Values, v)
		}
		slices.Sort(r.Values)
		total := new(big.Int)
		sum := new(big.Rat)
		for _, v := range r.Values {
			c := a.dist[v]
			if !c.IsInt64() {
				return nil, errors.New("count beyond int64")
			}
			r.Counts = append(r.Counts, c.Int64())
			total.Add(total, c)
			sum.Add(sum, new(big.Rat).Mul(new(big.Rat).SetFloat64(v), new(big.Rat).SetInt(c)))
		}
		if !total.IsInt64() {
			return nil, errors.New("count beyond int64")
		}
		r.Count = total.Int64()
		s, _ := sum.Float64()
		r.Mean = s / float64(r.Count)
		r.Min, r.Max = r.Values[0], r.Values[len(r.Values)-1]
		// percentile_cont(0.9): pos = 0.9*(n-1), the values at ranks floor and ceil
		pos := float64(0.9 * float64(r.Count-1))
		lo, hi := int64(math.Floor(pos)), int64(math.Ceil(pos))
		at := func(rank int64) float64 {
			var cum int64
			for i, c := range r.Counts {
				cum += c
				if rank < cum {
					return r.Values[i]
				}
			}
			panic("rank")
		}
		if lo == hi {
			r.P90 = at(lo)
		} else {
			r.P90 = at(lo) + float64((at(hi)-at(lo))*(pos-math.Floor(pos)))
		}
		out = append(out, r)
	}
	return out, nil
}

// sameRow compares everything of two rows, statistics bit for bit.
func sameRow(a, b Row) bool {
	return sameBits(a, b) && a.WindowStart.Equal(b.WindowStart) && a.WindowEnd.Equal(b.WindowEnd) &&
		a.Dimension == b.Dimension && a.DimensionID == b.DimensionID
}

// checkAgainstOracle: MergePartialWindows and a MergeCursor over ws agree
// with refMerge: both fail (the cursor's error a corrupt-partial error when
// the oracle failed on the bytes), or both give the same rows.
func checkAgainstOracle(t *testing.T, what string, ws []PartialWindow) (accepted bool) {
	t.Helper()
	want, wantErr := refMerge(ws)
	got, err := mergeNoPanic(ws)
	if (err == nil) != (wantErr == nil) {
		t.Fatalf("%s: MergePartialWindows: %d rows, err %v; the oracle: %d rows, err %v\npartials: %s",
			what, len(got), err, len(want), wantErr, describe(ws))
	}
	if err != nil {
		return false
	}
	if len(got) != len(want) {
		t.Fatalf("%s: %d rows, oracle %d", what, len(got), len(want))
	}
	for i := range want {
		if !sameRow(got[i], want[i]) {
			t.Fatalf("%s: row %d: %+v, oracle %+v\npartials: %s", what, i, got[i], want[i], describe(ws))
		}
	}
	// The cursor, rows copied one at a time.
	c, cerr := NewMergeCursor(ws)
	if cerr != nil {
		t.Fatalf("%s: NewMergeCursor: %v", what, cerr)
	}
	var row Row
	i := 0
	for c.Next(&row) {
		if i >= len(want) || !sameRow(row, want[i]) {
			t.Fatalf("%s: cursor row %d: %+v", what, i, row)
		}
		i++
	}
	if c.Err() != nil || i != len(want) {
		t.Fatalf("%s: cursor: %d rows, err %v", what, i, c.Err())
	}
	return true
}

func mergeNoPanic(ws []PartialWindow) (rows []Row, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("PANIC: %v", p)
			rows = nil
		}
	}()
	rows, err = MergePartialWindows(ws)
	if err != nil && !strings.Contains(err.Error(), "twice or ends differ") && !errors.Is(err, errPartialData) {
		return nil, fmt.Errorf("not a corrupt-partial error: %w", err)
	}
	return rows, err
}

func describe(ws []PartialWindow) string {
	var b strings.Builder
	for _, w := range ws {
		fmt.Fprintf(&b, "\n  %s p%d rows %d: %x", w.WindowStart.Format(time.TimeOnly), w.Partition, w.Rows, w.Data)
	}
	return b.String()
}

// edgeDelays are delays at the edges of format 2's whole-second range and
// beyond it.
var edgeDelays = []float64{
	0, 1, -1, 2, 86400, -86400, 1 << 53, -(1 << 53), 1<<53 - 1, -(1<<53 - 1), 1<<53 + 2, -(1<<53 + 2),
	1 << 62, -(1 << 62), 1e308, -1e308, math.MaxFloat64, -math.MaxFloat64, 0.5, -0.25, 1e-300,
	math.SmallestNonzeroFloat64, -math.SmallestNonzeroFloat64, 4503599627370495.5, 1<<52 + 0.5, math.Nextafter(1<<53, 0),
}

var edgeIDs = []string{"", "a", "L1", "é", "e\u0301", "Zürich – Centraal", "日本語", "\U0001F68C", "\uFFFD", "a\x7f", "~", "\u00ff"}

var edgeOps = []string{"", "AT", "ÅT", "日本", "x"}

// randomPartials builds the partial windows of random events over nw
// windows and np partitions, each partial in format 1 or 2 at random.
func randomPartials(r *rand.Rand, nw, np int, delays []float64, bigCounts bool) []PartialWindow {
	var ws []PartialWindow
	for w := range nw {
		start := t0.Add(time.Duration(w) * 5 * time.Minute)
		for p := range np {
			if r.IntN(4) == 0 {
				continue // a partition without events in this window
			}
			type k struct {
				dim byte
				id  string
			}
			stats := map[k]*Stats{}
			for range 1 + r.IntN(30) {
				key := k{byte(r.IntN(4)), edgeIDs[r.IntN(len(edgeIDs))]}
				if stats[key] == nil {
					stats[key] = &Stats{}
				}
				stats[key].Add(delays[r.IntN(len(delays))], edgeOps[r.IntN(len(edgeOps))])
			}
			keys := make([]k, 0, len(stats))
			for key := range stats {
				keys = append(keys, key)
			}
			slices.SortFunc(keys, func(a, b k) int {
				if a.dim != b.dim {
					return int(a.dim) - int(b.dim)
				}
				return strings.Compare(a.id, b.id)
			})
			format := 1 + r.IntN(2)
			var data []byte
			if format == 2 {
				data = []byte{partialFormat2}
			}
			for _, key := range keys {
				vcs := slices.Clone(stats[key].sortedValues(nil))
				if bigCounts {
					for i := range vcs {
						vcs[i].n = []int64{1, 1 << 31, 1<<32 - 1, 1 << 32, 1 << 40, 1<<53 + 1, math.MaxInt64 / 64}[r.IntN(7)]
					}
				}
				if format == 1 {
					data = appendPartialRowV1(data, key.dim, key.id, stats[key].Operator(), vcs)
				} else {
					data = appendPartialRow(data, key.dim, key.id, stats[key].Operator(), vcs)
				}
			}
			ws = append(ws, PartialWindow{WindowStart: start, WindowEnd: start.Add(5 * time.Minute), Partition: int32(p),
				Rows: len(keys), Data: data})
		}
	}
	r.Shuffle(len(ws), func(i, j int) { ws[i], ws[j] = ws[j], ws[i] })
	return ws
}

// Random partial windows in mixed formats, with ids of multibyte UTF-8 and
// empty ones, operators "" and others, delays at and beyond +-2^53 and
// counts up to 2^60: the merge equals the oracle's.
func TestPartialMergeMatchesOracle(t *testing.T) {
	r := rand.New(rand.NewPCG(2026, 12))
	for i := range 400 {
		ws := randomPartials(r, 1+r.IntN(3), 1+r.IntN(5), edgeDelays, i%2 == 1)
		if !checkAgainstOracle(t, fmt.Sprintf("case %d", i), ws) {
			t.Fatalf("case %d: well-formed partials refused", i)
		}
	}
}

// A corrupted partial (a byte changed, inserted or removed, the data cut
// short) is refused with the corrupt-partial error or, when the bytes still
// spell partial windows, merges to what they spell: never a panic, never
// rows the oracle does not read in them.
func TestCorruptedPartialMergesAsOracleReadsOrRefused(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 8))
	accepted, refused := 0, 0
	for i := range 3000 {
		ws := randomPartials(r, 1+r.IntN(2), 1+r.IntN(3), edgeDelays, i%3 == 0)
		if len(ws) == 0 {
			continue
		}
		w := &ws[r.IntN(len(ws))]
		d := slices.Clone(w.Data)
		switch pos := r.IntN(len(d)); r.IntN(5) {
		case 0, 1:
			d[pos] ^= byte(1 + r.IntN(255))
		case 2:
			d = slices.Insert(d, pos, byte(r.IntN(256)))
		case 3:
			d = slices.Delete(d, pos, pos+1)
		case 4:
			d = d[:pos]
		}
		w.Data = d
		if checkAgainstOracle(t, fmt.Sprintf("case %d", i), ws) {
			accepted++
		} else {
			refused++
		}
	}
	t.Logf("corrupted partials: %d refused, %d still well-formed (merged as the oracle reads them)", refused, accepted)
}

// Every single-byte change of one format-2 partial (every position, every
// value) and every cut: the same agreement with the oracle.
func TestEveryByteOfAPartialAgreesWithOracle(t *testing.T) {
	data := appendPartialRow([]byte{partialFormat2}, dimLine, "", "", []valueCount{{-(1 << 53), 3}, {0, 1}, {1 << 53, 1 << 40}})
	data = appendPartialRow(data, dimLine, "é", "AT", []valueCount{{-0.5, 1}, {1<<53 + 2, 2}})
	data = appendPartialRow(data, dimStation, "日本", "x", []valueCount{{86400, math.MaxInt64}})
	v1 := appendPartialRowV1(nil, dimLine, "", "AT", []valueCount{{7, 2}})
	v1 = appendPartialRowV1(v1, dimStation, "日本", "x", []valueCount{{-3, 1}, {0.5, 1}})
	for _, base := range [][]byte{data, v1} {
		for pos := range base {
			for b := range 256 {
				d := slices.Clone(base)
				d[pos] = byte(b)
				ws := []PartialWindow{{WindowStart: t0, WindowEnd: t0.Add(5 * time.Minute), Partition: 0, Rows: 3, Data: d}}
				if bytes.Equal(base, v1) {
					ws[0].Rows = 2
				}
				checkAgainstOracle(t, fmt.Sprintf("byte %d = %#x", pos, b), ws)
			}
			ws := []PartialWindow{{WindowStart: t0, WindowEnd: t0.Add(5 * time.Minute), Rows: 3, Data: base[:pos]}}
			checkAgainstOracle(t, fmt.Sprintf("cut at %d", pos), ws)
		}
	}
}

// Counts near 2^63: the partials of one row whose counts add up past
// int64 (each partition's count valid on its own) cannot be one instance's
// row: the merge must refuse them, not wrap the count around.
func TestPartialMergeRefusesCountPastInt64(t *testing.T) {
	for name, parts := range map[string][][]valueCount{
		"two partitions, one delay":     {{{5, math.MaxInt64}}, {{5, 1}}},
		"two partitions, two delays":    {{{5, 1 << 62}}, {{6, 1 << 62}}},
		"one partition, two delays":     {{{5, 1 << 62}, {6, 1 << 62}}},
		"three partitions wrap to 5":    {{{5, math.MaxInt64}}, {{5, math.MaxInt64}}, {{5, 7}}},
		"three partitions, sum 2^64+5 ": {{{4, math.MaxInt64}}, {{5, math.MaxInt64}}, {{6, 7}}},
	} {
		for format := 1; format <= 2; format++ {
			var ws []PartialWindow
			for p, vcs := range parts {
				ws = append(ws, PartialWindow{WindowStart: t0, WindowEnd: t0.Add(5 * time.Minute), Partition: int32(p), Rows: 1,
					Data: encodePartial(format, dimLine, "L1", "AT", vcs)})
			}
			rows, err := MergePartialWindows(ws)
			if !errors.Is(err, errPartialData) {
				r := Row{}
				if len(rows) > 0 {
					r = rows[0]
				}
				t.Errorf("%s, format %d: counts past int64 merged: err %v, row count %d, counts %v",
					name, format, err, r.Count, r.Counts)
			}
		}
	}
}

// A window whose partials mix the formats: format-1 and format-2 rows of
// the same keys interleave in the k-way merge by bytes of the id.
func TestPartialFormatsMixedInOneWindowMatchOracle(t *testing.T) {
	ids := []string{"", "A", "Z", "a", "é", "e\u0301", "\u00ff", "\U0001F68C"} // bytewise: "" < A < Z < a < e.. < é(c3) .. < ÿ(c3 bf) < 🚌(f0)
	slices.Sort(ids)
	var ws []PartialWindow
	for p := range int32(4) {
		format := 1 + int(p%2)
		var data []byte
		if format == 2 {
			data = []byte{partialFormat2}
		}
		n := 0
		for d := range byte(4) {
			for i, id := range ids {
				if (i+int(p)+int(d))%3 == 0 {
					continue
				}
				vcs := []valueCount{{float64(i) - 3, int64(p) + 1}, {float64(p) + 0.5*float64(d%2) + 10, 2}}
				if format == 1 {
					data = appendPartialRowV1(data, d, id, edgeOps[(i+int(p))%len(edgeOps)], vcs)
				} else {
					data = appendPartialRow(data, d, id, edgeOps[(i+int(p))%len(edgeOps)], vcs)
				}
				n++
			}
		}
		ws = append(ws, PartialWindow{WindowStart: t0, WindowEnd: t0.Add(5 * time.Minute), Partition: p, Rows: n, Data: data})
	}
	if !checkAgainstOracle(t, "mixed formats", ws) {
		t.Fatal("well-formed partials refused")
	}
}

// A partial announcing more or fewer rows than Data holds, a second partial
// of one partition, partials of one window with different ends: errors.
func TestPartialWrongRowsDuplicatePartitionOrEndsRefused(t *testing.T) {
	d2 := encodePartial(2, dimLine, "L", "A", []valueCount{{1, 1}})
	d1 := encodePartial(1, dimLine, "L", "A", []valueCount{{1, 1}})
	for name, ws := range map[string][]PartialWindow{
		"rows 0":     {{WindowStart: t0, WindowEnd: t0.Add(time.Minute), Rows: 0, Data: d2}},
		"rows 2":     {{WindowStart: t0, WindowEnd: t0.Add(time.Minute), Rows: 2, Data: d1}},
		"rows -1":    {{WindowStart: t0, WindowEnd: t0.Add(time.Minute), Rows: -1, Data: d2}},
		"empty data": {{WindowStart: t0, WindowEnd: t0.Add(time.Minute), Rows: 1, Data: nil}},
		"only 0x82":  {{WindowStart: t0, WindowEnd: t0.Add(time.Minute), Rows: 1, Data: []byte{0x82}}},
		"partition twice (formats differ)": {
			{WindowStart: t0, WindowEnd: t0.Add(time.Minute), Partition: 3, Rows: 1, Data: d1},
			{WindowStart: t0, WindowEnd: t0.Add(time.Minute), Partition: 3, Rows: 1, Data: d2}},
		"ends differ": {
			{WindowStart: t0, WindowEnd: t0.Add(time.Minute), Partition: 1, Rows: 1, Data: d1},
			{WindowStart: t0, WindowEnd: t0.Add(2 * time.Minute), Partition: 2, Rows: 1, Data: d2}},
	} {
		if _, err := mergeNoPanic(ws); err == nil {
			t.Errorf("%s: merged", name)
		} else if strings.Contains(err.Error(), "PANIC") || strings.HasPrefix(err.Error(), "not a corrupt") {
			t.Errorf("%s: %v", name, err)
		}
		if _, err := refMerge(ws); err == nil {
			t.Errorf("%s: the oracle merged", name)
		}
	}
}

// PartialWindows of a Windower fed delays at the edges: the oracle reads
// its bytes as the distributions of the rows a plain Windower gives.
func TestPartialWriterAtTheEdgesReadsAsPlainWindower(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	plain, split := NewWindower(5*time.Minute), NewPartitionedWindower(5*time.Minute)
	for range 3000 {
		p := pred(edgeIDs[r.IntN(len(edgeIDs))], edgeIDs[r.IntN(len(edgeIDs))], edgeOps[r.IntN(len(edgeOps))],
			edgeDelays[r.IntN(len(edgeDelays))], t0.Add(time.Duration(r.IntN(1200))*time.Second))
		if p.Line == "" || p.StopID == "" {
			continue
		}
		plain.Add(p)
		split.AddFrom(int32(r.IntN(4)), p)
	}
	wm := t0.Add(time.Hour)
	want := plain.Closed(wm)
	partials := split.ClosedSet(wm).PartialWindows()
	got, err := refMerge(partials)
	if err != nil {
		t.Fatalf("the oracle refuses the writer's bytes: %v", err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d rows, want %d", len(got), len(want))
	}
	for i := range want {
		if !sameRow(got[i], want[i]) {
			t.Fatalf("row %d: oracle over the written partials %+v, plain Windower %+v", i, got[i], want[i])
		}
	}
	checkAgainstOracle(t, "writer", partials)
}

// binary.AppendVarint and refVarint agree (the oracle's own varint reader).
func TestOracleVarintAgreesWithBinaryUvarint(t *testing.T) {
	for _, x := range []uint64{0, 1, 127, 128, 1<<63 - 1, 1 << 63, math.MaxUint64} {
		b := binary.AppendUvarint(nil, x)
		if y, n, ok := refVarint(b); !ok || n != len(b) || y != x {
			t.Fatalf("%d: %x read as %d, %d, %v", x, b, y, n, ok)
		}
	}
	for _, b := range [][]byte{{0x80, 0}, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2}, {0x80}} {
		if _, _, ok := refVarint(b); ok {
			t.Fatalf("%x read", b)
		}
	}
}
