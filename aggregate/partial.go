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
// per window, the partials of every source partition merged (bit for bit
// the rows one Windower fed every event gives), sorted by (WindowStart,
// Dimension, DimensionID). ws may come in any order; two partials of one
// window and partition are an error (their events would count twice), as is
// a window whose partials disagree on its end, or Data that breaks the
// format of PartialWindow. It holds every row: a commit streams them with a
// MergeCursor instead.
func MergePartialWindows(ws []PartialWindow) ([]Row, error) {
	c, err := NewMergeCursor(ws)
	if err != nil {
		return nil, err
	}
	n := 0
	for _, w := range c.ws {
		// Sized from the rows Data can hold: an announced count (row_count,
		// a column anyone can edit) never sizes an allocation.
		n += max(0, min(w.Rows, len(w.Data)/minPartialRowBytes))
	}
	rows := make([]Row, 0, n)
	slab := distSlab{chunk: min(max(2*n, 256), 1<<16)}
	var row Row
	for c.Next(&row) {
		row.Values, row.Counts = slab.take(c.vcs)
		rows = append(rows, row)
	}
	return rows, c.Err()
}

// MergeCursor yields the rows MergePartialWindows returns, in its order,
// merging each one when it is asked for: a commit streams the merge of a
// backlog of windows into its COPY while PostgreSQL writes the rows before
// (a merged row is never held twice, and merging overlaps writing). It is
// not safe for concurrent use.
type MergeCursor struct {
	ws      []PartialWindow // sorted by (WindowStart, Partition)
	next    int             // the first partial of the next window
	win     []PartialWindow // the window being merged, one partial per partition
	readers []partialReader // of win
	live    []*partialReader
	vcs     []valueCount
	values  []float64
	counts  []int64
	rows    int // rows yielded
	windows int // windows started
	err     error
}

// NewMergeCursor returns a cursor at the first merged row of ws (see
// MergePartialWindows); ws are not modified and must not be until the cursor
// is done. Two partials of one window and partition, or partials of one
// window with different ends, are an error here; Data that breaks the
// format is one at the row that reads it (Err).
func NewMergeCursor(ws []PartialWindow) (*MergeCursor, error) {
	ws = slices.Clone(ws)
	slices.SortFunc(ws, func(a, b PartialWindow) int {
		if c := a.WindowStart.Compare(b.WindowStart); c != 0 {
			return c
		}
		return int(a.Partition) - int(b.Partition)
	})
	for j := 1; j < len(ws); j++ {
		if ws[j].WindowStart.Equal(ws[j-1].WindowStart) &&
			(ws[j].Partition == ws[j-1].Partition || !ws[j].WindowEnd.Equal(ws[j-1].WindowEnd)) {
			return nil, fmt.Errorf("aggregate: partials of the window starting %s: partition %d twice or ends differ",
				ws[j].WindowStart.UTC().Format(time.RFC3339), ws[j].Partition)
		}
	}
	return &MergeCursor{ws: ws}, nil
}

// Rows returns the number of rows yielded so far.
func (c *MergeCursor) Rows() int { return c.rows }

// Windows returns the number of windows whose rows Next began to yield:
// at a clean end, the windows of ws.
func (c *MergeCursor) Windows() int { return c.windows }

// Err returns the error that ended Next early, nil at a clean end.
func (c *MergeCursor) Err() error { return c.err }

// Next fills *row with the next merged row and reports whether there was
// one; false at the end or at an error (Err). The row's Values and Counts
// are the cursor's own and change at the next call: copy them to keep them.
func (c *MergeCursor) Next(row *Row) bool {
	if c.err != nil {
		return false
	}
	for len(c.live) == 0 {
		if err := c.endWindow(); err != nil {
			c.err = err
			return false
		}
		if c.next == len(c.ws) {
			return false
		}
		if err := c.startWindow(); err != nil {
			c.err = err
			return false
		}
	}
	if err := c.merge(row); err != nil {
		c.err = fmt.Errorf("window starting %s: %w", c.win[0].WindowStart.UTC().Format(time.RFC3339), err)
		return false
	}
	c.rows++
	c.values, c.counts = c.values[:0], c.counts[:0]
	for _, vc := range c.vcs {
		c.values = append(c.values, vc.v)
		c.counts = append(c.counts, vc.n)
	}
	row.Values, row.Counts = c.values, c.counts
	return true
}

// startWindow opens the readers of the next window's partials.
func (c *MergeCursor) startWindow() error {
	i, j := c.next, c.next+1
	for j < len(c.ws) && c.ws[j].WindowStart.Equal(c.ws[i].WindowStart) {
		j++
	}
	c.win, c.next = c.ws[i:j], j
	c.windows++
	c.readers, c.live = c.readers[:0], c.live[:0]
	for _, w := range c.win {
		c.readers = append(c.readers, partialReader{part: w.Partition, data: w.Data})
	}
	for i := range c.readers {
		r := &c.readers[i]
		ok, err := r.next()
		if err != nil {
			return c.windowError(fmt.Errorf("partition %d: %w", r.part, err))
		}
		if !ok {
			return c.windowError(fmt.Errorf("partition %d: %w: no rows", r.part, errPartialData))
		}
		c.live = append(c.live, r)
	}
	return nil
}

// endWindow checks that every partial of the window just merged held the
// rows it announced.
func (c *MergeCursor) endWindow() error {
	for i := range c.readers {
		if r := &c.readers[i]; r.rows != c.win[i].Rows {
			return c.windowError(fmt.Errorf("partition %d: %w: %d rows, %d announced", r.part, errPartialData,
				r.rows, c.win[i].Rows))
		}
	}
	c.readers = c.readers[:0]
	return nil
}

func (c *MergeCursor) windowError(err error) error {
	return fmt.Errorf("window starting %s: %w", c.win[0].WindowStart.UTC().Format(time.RFC3339), err)
}

// merge fills *row, but for Values and Counts (c.vcs), with the merge of
// the least key of the live readers, a k-way merge of their rows sorted by
// key, and moves those readers on.
func (c *MergeCursor) merge(row *Row) error {
	least := c.live[0]
	for _, r := range c.live[1:] {
		if r.cmpKey(least) < 0 {
			least = r
		}
	}
	key := partialReader{dim: least.dim, id: least.id} // least moves on below
	*row = Row{WindowStart: c.win[0].WindowStart.UTC(), WindowEnd: c.win[0].WindowEnd.UTC(),
		Dimension: dims[key.dim], DimensionID: string(key.id)}
	c.vcs = c.vcs[:0]
	var op []byte
	several := false
	k := 0
	for _, r := range c.live {
		if r.cmpKey(&key) != 0 {
			c.live[k] = r
			k++
			continue
		}
		switch {
		case len(c.vcs) == 0:
			op, several = r.operator, r.operator == nil
		case r.operator == nil || !bytes.Equal(op, r.operator):
			several = true
		}
		for i := 0; i < len(r.values); i += 16 {
			c.vcs = append(c.vcs, valueCount{math.Float64frombits(binary.BigEndian.Uint64(r.values[i:])),
				int64(binary.BigEndian.Uint64(r.values[i+8:]))})
		}
		ok, err := r.next()
		if err != nil {
			return fmt.Errorf("partition %d: %w", r.part, err)
		}
		if ok {
			c.live[k] = r
			k++
		}
	}
	c.live = c.live[:k]
	if !several {
		row.Operator = string(op)
	}
	vcs := mergeValues(c.vcs)
	c.vcs = vcs
	for _, vc := range vcs {
		row.Count += vc.n
	}
	row.Min, row.Max = vcs[0].v, vcs[len(vcs)-1].v
	row.Mean = exactSum(vcs, row.Count) / float64(row.Count)
	row.P90 = sortedQuantile(vcs, row.Count, 0.9)
	return nil
}
