package aggregate

import (
	"slices"
	"time"
)

// RowCursor yields the rows of a ClosedSet in the order of Rows, building
// each one when it is asked for: a commit can stream the rows of a window
// with hundreds of thousands of keys into its COPY without holding them all
// (a Row with its distribution is about 200 bytes; the cursor holds the
// sorted ids of one dimension of one window, 16 bytes each). Like Rows it
// may run on any goroutine until the Windower drops the set's windows; it
// is not safe for concurrent use.
type RowCursor struct {
	c      ClosedSet
	win    int      // the window of ids
	dim    int      // the dimension of ids; -1 before the first
	ids    []string // the sorted ids of (win, dim)
	nextID int      // the next id
	keys   []uint64 // sortedValues' scratch
	values []float64
	counts []int64
}

// Cursor returns a cursor at the first row of c.
func (c ClosedSet) Cursor() *RowCursor { return &RowCursor{c: c, dim: -1} }

// Next fills *row with the next row and reports whether there was one. The
// row's Values and Counts are the cursor's own and change at the next call:
// copy them to keep them.
func (r *RowCursor) Next(row *Row) bool {
	vcs, ok := r.next(row)
	if !ok {
		return false
	}
	r.values, r.counts = r.values[:0], r.counts[:0]
	for _, vc := range vcs {
		r.values = append(r.values, vc.v)
		r.counts = append(r.counts, vc.n)
	}
	row.Values, row.Counts = r.values, r.counts
	return true
}

// next fills *row but for Values and Counts and returns its distribution,
// sorted by value, valid until the next call.
func (r *RowCursor) next(row *Row) ([]valueCount, bool) {
	for r.nextID == len(r.ids) {
		if r.dim++; r.dim == len(dims) {
			r.dim = 0
			r.win++
		}
		if r.win >= len(r.c.wins) {
			r.ids = r.ids[:0]
			r.nextID = 0
			return nil, false
		}
		m := r.c.wins[r.win].rows[r.dim]
		if cap(r.ids) < len(m) {
			r.ids = make([]string, 0, len(m))
		}
		r.ids, r.nextID = r.ids[:0], 0
		for id := range m {
			r.ids = append(r.ids, id)
		}
		slices.Sort(r.ids)
	}
	win := r.c.wins[r.win]
	id := r.ids[r.nextID]
	r.nextID++
	st := win.rows[r.dim][id]
	vcs := st.sortedValues(&r.keys)
	n := st.Count()
	*row = Row{
		WindowStart: win.start,
		WindowEnd:   win.start.Add(r.c.size),
		Dimension:   dims[r.dim],
		DimensionID: id,
		Operator:    st.Operator(),
		Count:       n,
		Mean:        exactSum(vcs, n) / float64(n),
		P90:         sortedQuantile(vcs, n, 0.9),
		Min:         st.Min(),
		Max:         st.Max(),
	}
	return vcs, true
}

// Starts returns the window starts (UTC) of c, ascending.
func (c ClosedSet) Starts() []time.Time {
	starts := make([]time.Time, len(c.wins))
	for i, win := range c.wins {
		starts[i] = win.start
	}
	return starts
}
