package aggregate

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
	"unicode/utf8"
)

// PartialWindow is the partial aggregate of ONE window over the events of ONE
// source partition of the predictions topic (docs/design.md "Pipelines, instances
// and partitions", Split windows): every row of that window and partition,
// each with its operator and exact distribution, encoded in Data. An
// instance of a split pipeline writes one per (window, partition) its
// watermark finalized, as one delay_partial_windows row; the commit that
// finds every partition past the window merges them (MergePartialWindows)
// into the rows one instance would have written, bit for bit.
//
// Data is a sequence of rows, sorted by (dimension, dimension id) bytewise,
// no key twice, in one of two formats. Format 2, which PartialWindows
// writes, starts with the byte 0x82; then per row:
//
//	1 byte      dimension: 0 line, 1 network, 2 operator, 3 station
//	uvarint n   the dimension id's length, then its UTF-8 bytes
//	uvarint n   0: several operators (NULL); else the one operator's length
//	            plus 1, then its bytes
//	uvarint     the number of distinct delays, >= 1
//	1 byte      how the delays are written: 0 whole seconds, 1 float8
//	per delay   the delay in seconds (finite, ascending, no -0), then its
//	            count as a uvarint >= 1. Whole seconds (every delay of the
//	            row a whole number within +-2^53): the first as a zigzag
//	            varint, each next one as a uvarint, its difference from the
//	            one before; float8: 8 bytes big-endian.
//
// Varints are encoding/binary's (protocol buffers' base-128 varints). Format
// 1 (schema 8's migration builds it in SQL, and earlier releases wrote it)
// starts with a row's dimension byte; every integer big-endian, as
// PostgreSQL's send functions write them; per row:
//
//	1 byte      dimension
//	int4, n     the dimension id's length, then its UTF-8 bytes
//	int4, n     the one operator's length, then its bytes; -1: several (NULL)
//	int4        the number of distinct delays, >= 1
//	per delay   float8 delay in seconds, int8 count >= 1
//
// Format 2 takes about a third of format 1's bytes for whole-second delays
// (BENCHMARKS.md): the partials are written, read back and deleted once each.
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
		pw := PartialWindow{WindowStart: win.start, WindowEnd: win.start.Add(c.size), Partition: win.key.part,
			Data: []byte{partialFormat2}}
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

// partialFormat2 is the first byte of Data in format 2 (PartialWindow); a
// row of format 1 starts with its dimension, below len(dims).
const partialFormat2 = 0x82

// maxWholeDelay bounds the delays format 2 writes as whole seconds: every
// integer up to it is a float64 exactly.
const maxWholeDelay = 1 << 53

// appendPartialRow appends one row in format 2 (PartialWindow).
func appendPartialRow(b []byte, dim byte, id, operator string, vcs []valueCount) []byte {
	b = append(b, dim)
	b = binary.AppendUvarint(b, uint64(len(id)))
	b = append(b, id...)
	if operator == "" {
		b = append(b, 0) // several
	} else {
		b = binary.AppendUvarint(b, uint64(len(operator))+1)
		b = append(b, operator...)
	}
	b = binary.AppendUvarint(b, uint64(len(vcs)))
	if !wholeDelays(vcs) {
		b = append(b, 1)
		for _, vc := range vcs {
			b = binary.BigEndian.AppendUint64(b, math.Float64bits(vc.v))
			b = binary.AppendUvarint(b, uint64(vc.n))
		}
		return b
	}
	b = append(b, 0)
	prev := int64(0)
	for i, vc := range vcs {
		v := int64(vc.v)
		if i == 0 {
			b = binary.AppendVarint(b, v)
		} else {
			b = binary.AppendUvarint(b, uint64(v-prev))
		}
		b = binary.AppendUvarint(b, uint64(vc.n))
		prev = v
	}
	return b
}

// wholeDelays tells whether every delay of vcs is a whole number within
// +-maxWholeDelay.
func wholeDelays(vcs []valueCount) bool {
	for _, vc := range vcs {
		if vc.v != math.Trunc(vc.v) || math.Abs(vc.v) > maxWholeDelay {
			return false
		}
	}
	return true
}

// partialReader reads the rows of one PartialWindow's Data in order.
type partialReader struct {
	part int32 // the source partition, for errors
	data []byte
	rows int // rows read

	format byte // 1 or 2 (PartialWindow); 0: not read yet

	// the current row, valid after next returned true
	dim      byte
	id       []byte
	operator []byte       // nil: several operators
	vcs      []valueCount // the distribution, ascending; reused by the next row
}

var errPartialData = fmt.Errorf("aggregate: corrupt partial window")

// minPartialRowBytes is the size of the shortest row of a PartialWindow's
// Data in either format: in format 2, dimension, empty id, several
// operators, one delay, whole seconds, the delay and its count.
const minPartialRowBytes = 1 + 1 + 1 + 1 + 1 + 1 + 1

// next reads the next row; false at the end. A row that breaks the format
// (see PartialWindow) is an error wrapping errPartialData.
func (r *partialReader) next() (bool, error) {
	if r.format == 0 {
		r.format = 1
		if len(r.data) > 0 && r.data[0] == partialFormat2 {
			r.format, r.data = 2, r.data[1:]
		}
	}
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
	if r.id, ok = r.field(false); !ok || r.id == nil {
		return fail("dimension id")
	}
	if r.operator, ok = r.field(true); !ok || r.operator != nil && len(r.operator) == 0 {
		return fail("operator")
	}
	if !text(r.id) || !text(r.operator) {
		return fail("dimension id or operator not UTF-8 text without NUL")
	}
	var err error
	if r.format == 1 {
		err = r.delays1()
	} else {
		err = r.delays2()
	}
	if err != nil {
		return fail(err.Error())
	}
	prev := math.Inf(-1)
	for _, vc := range r.vcs {
		if !(vc.v > prev) || math.IsInf(vc.v, 0) || math.Signbit(vc.v) && vc.v == 0 || vc.n < 1 {
			return fail("delays not finite and ascending, or a count below 1")
		}
		prev = vc.v
	}
	if !first && (r.dim < prevDim || r.dim == prevDim && bytes.Compare(r.id, prevID) <= 0) {
		return fail("rows not sorted by (dimension, id)")
	}
	r.rows++
	return true, nil
}

// delays1 reads a row's delays in format 1 into r.vcs.
func (r *partialReader) delays1() error {
	if len(r.data) < 4 {
		return errors.New("truncated")
	}
	n := uint64(binary.BigEndian.Uint32(r.data))
	r.data = r.data[4:]
	if n == 0 || n*16 > uint64(len(r.data)) {
		return errors.New("number of delays")
	}
	r.vcs = r.vcs[:0]
	for range n {
		r.vcs = append(r.vcs, valueCount{math.Float64frombits(binary.BigEndian.Uint64(r.data)),
			int64(binary.BigEndian.Uint64(r.data[8:]))})
		r.data = r.data[16:]
	}
	return nil
}

// delays2 reads a row's delays in format 2 into r.vcs.
func (r *partialReader) delays2() error {
	n, ok := r.uvarint()
	// every delay takes 2 bytes at least, and the kind byte comes first
	if !ok || n == 0 || len(r.data) == 0 || n > uint64(len(r.data)-1)/2 {
		return errors.New("number of delays")
	}
	kind := r.data[0]
	r.data = r.data[1:]
	if kind > 1 {
		return errors.New("kind of delays")
	}
	r.vcs = r.vcs[:0]
	var prev int64
	for i := range n {
		var v float64
		switch {
		case kind == 1:
			if len(r.data) < 8 {
				return errors.New("truncated")
			}
			v, r.data = math.Float64frombits(binary.BigEndian.Uint64(r.data)), r.data[8:]
		case i == 0:
			first, k := binary.Varint(r.data)
			if k <= 0 || k != len(binary.AppendVarint(nil, first)) || first < -maxWholeDelay || first > maxWholeDelay {
				return errors.New("first delay")
			}
			r.data, prev, v = r.data[k:], first, float64(first)
		default:
			d, ok := r.uvarint()
			if !ok || d == 0 || d > uint64(maxWholeDelay-prev) {
				return errors.New("delays not ascending within 2^53")
			}
			prev += int64(d)
			v = float64(prev)
		}
		c, ok := r.uvarint()
		if !ok || c < 1 || c > math.MaxInt64 {
			return errors.New("count")
		}
		r.vcs = append(r.vcs, valueCount{v, int64(c)})
	}
	if kind == 1 && wholeDelays(r.vcs) {
		return errors.New("whole-second delays written as float8") // one encoding per row
	}
	return nil
}

// uvarint reads a uvarint; false when Data ends, it overflows 64 bits or
// it is longer than it needs to be (one encoding per row).
func (r *partialReader) uvarint() (uint64, bool) {
	x, k := binary.Uvarint(r.data)
	if k <= 0 || k != len(binary.AppendUvarint(nil, x)) {
		return 0, false
	}
	r.data = r.data[k:]
	return x, true
}

// field reads a length and that many bytes: in format 1 an int4 length, -1
// for nil; in format 2 a uvarint length, or for the operator (op) the length
// plus 1, 0 for nil.
func (r *partialReader) field(op bool) ([]byte, bool) {
	var n uint64
	if r.format == 1 {
		if len(r.data) < 4 {
			return nil, false
		}
		n4 := binary.BigEndian.Uint32(r.data)
		r.data = r.data[4:]
		if n4 == math.MaxUint32 {
			return nil, true
		}
		n = uint64(n4)
	} else {
		var ok bool
		if n, ok = r.uvarint(); !ok {
			return nil, false
		}
		if op {
			if n == 0 {
				return nil, true
			}
			n--
		}
	}
	if n > uint64(len(r.data)) {
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
// a window whose partials disagree on its end, Data that breaks the format
// of PartialWindow, or the partials of one row whose counts add up past
// 2^63-1 (the last two wrap errPartialData). It holds every row: a commit
// streams them with a MergeCursor instead.
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
		c.vcs = append(c.vcs, r.vcs...)
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
	// Every count is >= 1, so once the total fits in int64 so does each
	// value's sum in mergeValues; partials whose counts add up past it are
	// no instance's (it counts in an int64) and would wrap around.
	for _, vc := range c.vcs {
		if vc.n > math.MaxInt64-row.Count {
			return fmt.Errorf("%w: %s %q: counts add up past 2^63-1", errPartialData, dims[key.dim], key.id)
		}
		row.Count += vc.n
	}
	vcs := mergeValues(c.vcs)
	c.vcs = vcs
	row.Min, row.Max = vcs[0].v, vcs[len(vcs)-1].v
	row.Mean = exactSum(vcs, row.Count) / float64(row.Count)
	row.P90 = sortedQuantile(vcs, row.Count, 0.9)
	return nil
}
