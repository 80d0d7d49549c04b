package aggregate

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"
	"unicode/utf8"
)

// PartialWindow is the partial aggregate of ONE window over the events of ONE
// source partition of the predictions topic (DESIGN.md "Pipelines, instances
// and partitions", Split windows): every row of that window and partition,
// each with its operator and exact distribution, encoded in Data. An
// instance of a split pipeline writes one per (window, partition) its
// watermark finalized, as one delay_partial_windows row; the commit that
// finds every partition past the window merges them (MergePartialWindows)
// into the rows one instance would have written, bit for bit.
//
// Data is a sequence of rows, sorted by (dimension, dimension id) bytewise,
// no key twice; every integer big-endian, as PostgreSQL's send functions
// write them (so a migration can build it in SQL):
//
//	1 byte      dimension: 0 line, 1 network, 2 operator, 3 station
//	int4, n     the dimension id's length, then its UTF-8 bytes
//	int4, n     the one operator's length, then its bytes; -1: several (NULL)
//	int4        the number of distinct delays, >= 1
//	per delay   float8 delay in seconds (finite, ascending, no -0), int8 count >= 1
type PartialWindow struct {
	WindowStart time.Time // UTC
	WindowEnd   time.Time // UTC, WindowStart + window size
	Partition   int32     // the source partition of its events
	Rows        int       // rows encoded in Data, >= 1
	Data        []byte
}

// PartialWindows returns the partial aggregates of c, one per window and
// source partition, sorted by (WindowStart, Partition); nil when c is empty.
// Like Rows it may run on any goroutine until the Windower drops c's
// windows.
func (c ClosedSet) PartialWindows() []PartialWindow {
	if c.rows == 0 {
		return nil
	}
	out := make([]PartialWindow, 0, len(c.wins))
	var ids []string
	var keys []uint64 // sortedValues' scratch
	for _, win := range c.wins {
		pw := PartialWindow{WindowStart: win.start, WindowEnd: win.start.Add(c.size), Partition: win.key.part}
		for d, m := range win.rows {
			ids = ids[:0]
			for id := range m {
				ids = append(ids, id)
			}
			slices.Sort(ids)
			for _, id := range ids {
				st := m[id]
				pw.Data = appendPartialRow(pw.Data, byte(d), id, st.Operator(), st.sortedValues(&keys))
				pw.Rows++
			}
		}
		if pw.Rows > 0 {
			out = append(out, pw)
		}
	}
	slices.SortFunc(out, func(a, b PartialWindow) int {
		if c := a.WindowStart.Compare(b.WindowStart); c != 0 {
			return c
		}
		return int(a.Partition) - int(b.Partition)
	})
	return out
}

func appendPartialRow(b []byte, dim byte, id, operator string, vcs []valueCount) []byte {
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

// partialReader reads the rows of one PartialWindow's Data in order.
type partialReader struct {
	part int32 // the source partition, for errors
	data []byte
	rows int // rows read

	// the current row, valid after next returned true
	dim      byte
	id       []byte
	operator []byte // nil: several operators
	values   []byte // n x 16 bytes
}

var errPartialData = fmt.Errorf("aggregate: corrupt partial window")

// minPartialRowBytes is the size of the shortest row of a PartialWindow's
// Data: dimension, empty id, several operators, one delay and its count.
const minPartialRowBytes = 1 + 4 + 4 + 4 + 16

// next reads the next row; false at the end. A row that breaks the format
// (see PartialWindow) is an error wrapping errPartialData.
func (r *partialReader) next() (bool, error) {
	if len(r.data) == 0 {
		return false, nil
	}
	prevDim, prevID, first := r.dim, r.id, r.rows == 0
	fail := func(what string) (bool, error) {
		return false, fmt.Errorf("%w: row %d: %s", errPartialData, r.rows+1, what)
	}
	if r.dim = r.data[0]; r.dim >= byte(len(dims)) {
		return fail("dimension out of range")
	}
	r.data = r.data[1:]
	var ok bool
	if r.id, ok = r.field(); !ok || r.id == nil {
		return fail("dimension id")
	}
	if r.operator, ok = r.field(); !ok || r.operator != nil && len(r.operator) == 0 {
		return fail("operator")
	}
	if !text(r.id) || !text(r.operator) {
		return fail("dimension id or operator not UTF-8 text without NUL")
	}
	if len(r.data) < 4 {
		return fail("truncated")
	}
	n := uint64(binary.BigEndian.Uint32(r.data))
	r.data = r.data[4:]
	if n == 0 || n*16 > uint64(len(r.data)) {
		return fail("number of delays")
	}
	r.values, r.data = r.data[:n*16], r.data[n*16:]
	prev := math.Inf(-1)
	for i := 0; i < len(r.values); i += 16 {
		v := math.Float64frombits(binary.BigEndian.Uint64(r.values[i:]))
		c := int64(binary.BigEndian.Uint64(r.values[i+8:]))
		if !(v > prev) || math.IsInf(v, 0) || math.Signbit(v) && v == 0 || c < 1 {
			return fail("delays not finite and ascending, or a count below 1")
		}
		prev = v
	}
	if !first && (r.dim < prevDim || r.dim == prevDim && bytes.Compare(r.id, prevID) <= 0) {
		return fail("rows not sorted by (dimension, id)")
	}
	r.rows++
	return true, nil
}

// field reads an int4 length and that many bytes; nil for length -1.
func (r *partialReader) field() ([]byte, bool) {
	if len(r.data) < 4 {
		return nil, false
	}
	n := binary.BigEndian.Uint32(r.data)
	r.data = r.data[4:]
	if n == math.MaxUint32 {
		return nil, true
	}
	if uint64(n) > uint64(len(r.data)) {
		return nil, false
	}
	f := r.data[:n:n]
	r.data = r.data[n:]
	return f, true
}

// text tells whether b is what PostgreSQL text holds: UTF-8 without NUL
// (decoding admits no other id or operator).
func text(b []byte) bool { return utf8.Valid(b) && bytes.IndexByte(b, 0) < 0 }

// cmpKey orders rows by (dimension, id).
func (r *partialReader) cmpKey(o *partialReader) int {
	if r.dim != o.dim {
		return int(r.dim) - int(o.dim)
	}
	return bytes.Compare(r.id, o.id)
}

// MergePartialWindows returns the rows of the windows ws hold partials of:
// per window, the partials of every source partition merged as Merge merges
// them (bit for bit the rows one Windower fed every event gives), sorted by
// (WindowStart, Dimension, DimensionID). ws may come in any order; two
// partials of one window and partition are an error (their events would
// count twice), as is a window whose partials disagree on its end, or Data
// that breaks the format of PartialWindow.
func MergePartialWindows(ws []PartialWindow) ([]Row, error) {
	ws = slices.Clone(ws)
	slices.SortFunc(ws, func(a, b PartialWindow) int {
		if c := a.WindowStart.Compare(b.WindowStart); c != 0 {
			return c
		}
		return int(a.Partition) - int(b.Partition)
	})
	n := 0
	for _, w := range ws {
		// Sized from the rows Data can hold: an announced count (row_count,
		// a column anyone can edit) never sizes an allocation.
		n += max(0, min(w.Rows, len(w.Data)/minPartialRowBytes))
	}
	m := merger{rows: make([]Row, 0, n), slab: distSlab{chunk: min(max(2*n, 256), 1<<16)}}
	for i := 0; i < len(ws); {
		j := i + 1
		for j < len(ws) && ws[j].WindowStart.Equal(ws[i].WindowStart) {
			if ws[j].Partition == ws[j-1].Partition || !ws[j].WindowEnd.Equal(ws[i].WindowEnd) {
				return nil, fmt.Errorf("aggregate: partials of the window starting %s: partition %d twice or ends differ",
					ws[i].WindowStart.UTC().Format(time.RFC3339), ws[j].Partition)
			}
			j++
		}
		if err := m.window(ws[i:j]); err != nil {
			return nil, fmt.Errorf("window starting %s: %w", ws[i].WindowStart.UTC().Format(time.RFC3339), err)
		}
		i = j
	}
	return m.rows, nil
}

// merger merges the partials of one window at a time into rows.
type merger struct {
	rows    []Row
	slab    distSlab
	readers []partialReader
	vcs     []valueCount
}

// window merges ws, the partials of one window (one per partition), by a
// k-way merge of their rows sorted by key.
func (m *merger) window(ws []PartialWindow) error {
	m.readers = m.readers[:0]
	live := make([]*partialReader, 0, len(ws))
	for _, w := range ws {
		m.readers = append(m.readers, partialReader{part: w.Partition, data: w.Data})
	}
	for i := range m.readers {
		r := &m.readers[i]
		ok, err := r.next()
		if err != nil {
			return fmt.Errorf("partition %d: %w", ws[i].Partition, err)
		}
		if !ok {
			return fmt.Errorf("partition %d: %w: no rows", ws[i].Partition, errPartialData)
		}
		live = append(live, r)
	}
	start, end := ws[0].WindowStart.UTC(), ws[0].WindowEnd.UTC()
	for len(live) > 0 {
		least := live[0]
		for _, r := range live[1:] {
			if r.cmpKey(least) < 0 {
				least = r
			}
		}
		key := partialReader{dim: least.dim, id: least.id} // least moves on below
		row := Row{WindowStart: start, WindowEnd: end, Dimension: dims[key.dim], DimensionID: string(key.id)}
		m.vcs = m.vcs[:0]
		var op []byte
		several := false
		k := 0
		for _, r := range live {
			if r.cmpKey(&key) != 0 {
				live[k] = r
				k++
				continue
			}
			switch {
			case len(m.vcs) == 0:
				op, several = r.operator, r.operator == nil
			case r.operator == nil || !bytes.Equal(op, r.operator):
				several = true
			}
			for i := 0; i < len(r.values); i += 16 {
				m.vcs = append(m.vcs, valueCount{math.Float64frombits(binary.BigEndian.Uint64(r.values[i:])),
					int64(binary.BigEndian.Uint64(r.values[i+8:]))})
			}
			ok, err := r.next()
			if err != nil {
				return fmt.Errorf("partition %d: %w", r.part, err)
			}
			if ok {
				live[k] = r
				k++
			}
		}
		live = live[:k]
		if !several {
			row.Operator = string(op)
		}
		vcs := mergeValues(m.vcs)
		for _, vc := range vcs {
			row.Count += vc.n
		}
		row.Min, row.Max = vcs[0].v, vcs[len(vcs)-1].v
		row.Mean = exactSum(vcs, row.Count) / float64(row.Count)
		row.P90 = sortedQuantile(vcs, row.Count, 0.9)
		row.Values, row.Counts = m.slab.take(vcs)
		m.rows = append(m.rows, row)
	}
	for i := range m.readers {
		if m.readers[i].rows != ws[i].Rows {
			return fmt.Errorf("partition %d: %w: %d rows, %d announced", ws[i].Partition, errPartialData,
				m.readers[i].rows, ws[i].Rows)
		}
	}
	return nil
}
