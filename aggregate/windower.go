package aggregate

import (
	"fmt"
	"slices"
	"time"
)

// Windower holds the open tumbling windows of one size: window start ->
// dimension -> dimension_id -> Stats. Each prediction counts in four rows
// (DimLine, DimStation, DimOperator, DimNetwork). A partitioned Windower
// (NewPartitionedWindower) keeps the rows of each source partition apart, for
// the partial aggregates of a split pipeline (PartialWindow).
//
// Closing is two-step so that a failed commit loses nothing: Closed returns the
// rows of the windows a watermark finalizes without removing them, and Drop
// removes them once the commit that wrote them succeeded. It is not safe for
// concurrent use: one goroutine owns it.
type Windower struct {
	size    time.Duration
	byPart  bool // rows per source partition
	windows map[windowKey]*window
	last    *window // the window of the previous Add: consecutive events mostly share it
	// hint is, per dimension, the rows a new window's map makes room for:
	// the fewer of the last two windows dropped had (dropped), so that one
	// window of a burst of keys does not size the maps of the next ones.
	hint    [len(dims)]int
	dropped [len(dims)]int // rows per dimension of the last window dropped
}

// windowKey identifies a window by its UTC start, without a time.Location,
// and, in a partitioned Windower, its source partition (else 0).
type windowKey struct {
	sec  int64
	nsec int32
	part int32
}

// dims lists the dimensions in the order of Closed's rows (by name).
var dims = [...]string{DimLine, DimNetwork, DimOperator, DimStation}

const (
	dimLine = iota
	dimNetwork
	dimOperator
	dimStation
)

type window struct {
	start time.Time
	key   windowKey
	rows  [len(dims)]map[string]*Stats // per dimension: dimension_id -> Stats
	slab  []Stats                      // Stats are allocated from here, a chunk at a time
	// changed: an event was added since the window was last taken by
	// Changed (or since it was created).
	changed bool
	// last is, per dimension, the row of the previous event: consecutive
	// events mostly share their line (a trip's predictions come together),
	// their operator and always the network row, so these skip the map.
	last [len(dims)]struct {
		id string
		st *Stats
	}
}

// stats returns the Stats of (dim, id), creating it.
func (win *window) stats(dim int, id string) *Stats {
	m := win.rows[dim]
	if st := m[id]; st != nil {
		return st
	}
	if len(win.slab) == 0 {
		win.slab = make([]Stats, 32)
	}
	st := &win.slab[0]
	win.slab = win.slab[1:]
	m[id] = st
	return st
}

// cachedStats is stats for the dimensions whose consecutive events mostly
// share a row: the previous event's row when id is the same.
func (win *window) cachedStats(dim int, id string) *Stats {
	c := &win.last[dim]
	if c.st == nil || c.id != id {
		c.id, c.st = id, win.stats(dim, id)
	}
	return c.st
}

func (win *window) rowCount() int {
	n := 0
	for _, m := range win.rows {
		n += len(m)
	}
	return n
}

// NewWindower returns an empty Windower of windows of the given size (e.g.
// 5*time.Minute). It panics if size <= 0, a programming error.
func NewWindower(size time.Duration) *Windower {
	if size <= 0 {
		panic(fmt.Sprintf("aggregate: NewWindower: window size %v is not positive", size))
	}
	return &Windower{size: size, windows: make(map[windowKey]*window)}
}

// NewPartitionedWindower returns an empty Windower that keeps the rows of
// each source partition apart (AddFrom): its closed windows are taken as
// partial aggregates (ClosedSet.PartialWindows), one per window and partition. It
// panics if size <= 0.
func NewPartitionedWindower(size time.Duration) *Windower {
	w := NewWindower(size)
	w.byPart = true
	return w
}

// Partitioned tells whether w keeps the rows of each source partition apart.
func (w *Windower) Partitioned() bool { return w.byPart }

// Size returns the window size.
func (w *Windower) Size() time.Duration { return w.size }

// Add counts p in the four rows of its window and returns the window's start
// (UTC). The caller has already decided that p is not late
// (WindowStart(p.EventTime)+Size() > watermark).
func (w *Windower) Add(p Prediction) (windowStart time.Time) {
	return w.AddFrom(0, p)
}

// AddFrom is Add for an event of source partition part: a partitioned
// Windower counts it in that partition's rows; any other ignores part.
func (w *Windower) AddFrom(part int32, p Prediction) (windowStart time.Time) {
	start := WindowStart(p.EventTime, w.size)
	if !w.byPart {
		part = 0
	}
	k := windowKey{start.Unix(), int32(start.Nanosecond()), part}
	win := w.last
	if win == nil || win.key != k {
		win = w.windows[k]
		if win == nil {
			win = &window{start: start, key: k}
			for i := range win.rows {
				// Sized like the last windows that closed: no rehashing as it fills.
				win.rows[i] = make(map[string]*Stats, w.hint[i])
			}
			w.windows[k] = win
		}
		w.last = win
	}
	win.changed = true
	win.cachedStats(dimLine, p.Line).Add(p.DelayS, p.Operator)
	win.stats(dimStation, p.StopID).Add(p.DelayS, p.Operator)
	win.cachedStats(dimOperator, p.Operator).Add(p.DelayS, p.Operator)
	win.cachedStats(dimNetwork, NetworkID).Add(p.DelayS, p.Operator)
	return start
}

// closed reports whether a window starting at start is finalized by
// watermark: window_end <= watermark.
func (w *Windower) closed(start, watermark time.Time) bool {
	return !start.Add(w.size).After(watermark)
}

// Closed returns the rows of every open window whose end is <= watermark,
// sorted by (WindowStart, Dimension, DimensionID). It does not remove them:
// call Drop with the same watermark once they are durably written, so that a
// commit that fails can be retried with the same rows. Statistics are in
// seconds, times in UTC. Closed(wm) is ClosedSet(wm).Rows().
func (w *Windower) Closed(watermark time.Time) []Row {
	return w.ClosedSet(watermark).Rows()
}

// ClosedSet is the windows one watermark finalized, taken from a Windower
// without building their rows yet.
//
// A finalized window never changes again (an event for it is late), so the
// rows of a ClosedSet may be built on another goroutine while the Windower's
// owner goes on adding events to later windows, until it calls Drop with that
// watermark: a commit can build its rows off the consuming goroutine.
type ClosedSet struct {
	wins []*window
	size time.Duration
	rows int
}

// ClosedSet returns the open windows whose end is <= watermark, without
// removing them (see Closed). Call it on the Windower's goroutine.
func (w *Windower) ClosedSet(watermark time.Time) ClosedSet {
	c := ClosedSet{size: w.size}
	for _, win := range w.windows {
		if w.closed(win.start, watermark) {
			c.wins = append(c.wins, win)
			c.rows += win.rowCount()
		}
	}
	slices.SortFunc(c.wins, func(a, b *window) int { return a.start.Compare(b.start) })
	return c
}

// Len returns the number of rows of c.
func (c ClosedSet) Len() int { return c.rows }

// Rows returns the rows of c, sorted by (WindowStart, Dimension,
// DimensionID); nil when it is empty. It may run on any goroutine until the
// Windower drops c's windows. For a partitioned Windower it returns one row
// per partition of a key: take PartialWindows instead. Cursor builds the same
// rows one at a time, without holding them all.
func (c ClosedSet) Rows() []Row {
	if c.rows == 0 {
		return nil
	}
	rows := make([]Row, 0, c.rows)
	slab := distSlab{chunk: min(max(2*c.rows, 256), 1<<16)}
	cur := c.Cursor()
	var r Row
	for {
		vcs, ok := cur.next(&r)
		if !ok {
			return rows
		}
		r.Values, r.Counts = slab.take(vcs)
		rows = append(rows, r)
	}
}

// distSlab hands out the Values and Counts of many rows from a few large
// allocations.
type distSlab struct {
	chunk  int // values per allocation, at least
	values []float64
	counts []int64
}

// take returns a copy of vcs as values and counts, capped at their length
// (an append to one never writes into the next).
func (d *distSlab) take(vcs []valueCount) ([]float64, []int64) {
	n := len(vcs)
	if cap(d.values)-len(d.values) < n {
		size := max(d.chunk, n)
		d.values, d.counts = make([]float64, 0, size), make([]int64, 0, size)
	}
	start := len(d.values)
	for _, vc := range vcs {
		d.values = append(d.values, vc.v)
		d.counts = append(d.counts, vc.n)
	}
	end := len(d.values)
	return d.values[start:end:end], d.counts[start:end:end]
}

// OpenPartitions returns the source partitions that have events in a window
// whose end is after watermark: the windows Closed(watermark) leaves open.
// Every partition is 0 in a Windower that is not partitioned.
func (w *Windower) OpenPartitions(watermark time.Time) map[int32]bool {
	open := map[int32]bool{}
	for _, win := range w.windows {
		if !w.closed(win.start, watermark) {
			open[win.key.part] = true
		}
	}
	return open
}

// Drop removes every window whose end is <= watermark, after a successful
// commit of Closed(watermark), and returns how many windows it removed.
func (w *Windower) Drop(watermark time.Time) int {
	n := 0
	for k, win := range w.windows {
		if w.closed(win.start, watermark) {
			delete(w.windows, k)
			for i, m := range win.rows {
				w.hint[i] = min(len(m), w.dropped[i])
				w.dropped[i] = len(m)
			}
			if w.last == win {
				w.last = nil
			}
			n++
		}
	}
	return n
}

// OpenWindows returns the number of open windows (in a partitioned Windower,
// of open (window, partition) pairs).
func (w *Windower) OpenWindows() int { return len(w.windows) }

// OpenRows returns the number of rows over all open windows.
func (w *Windower) OpenRows() int {
	n := 0
	for _, win := range w.windows {
		n += win.rowCount()
	}
	return n
}

// FirstEnd returns the end (UTC) of the earliest open window, or the zero
// time when no window is open: Closed(wm) has rows exactly when FirstEnd is
// not zero and not after wm.
func (w *Windower) FirstEnd() time.Time {
	var first time.Time
	for _, win := range w.windows {
		if end := win.start.Add(w.size); first.IsZero() || end.Before(first) {
			first = end
		}
	}
	return first
}

// LastEnd returns the end (UTC) of the latest open window, or the zero time
// when no window is open. A drain finalizes everything with
// Closed(LastEnd()).
func (w *Windower) LastEnd() time.Time {
	var last time.Time
	for _, win := range w.windows {
		if end := win.start.Add(w.size); end.After(last) {
			last = end
		}
	}
	return last
}

// EndsIn returns the distinct ends (UTC) of the open windows in (after,
// upTo], in increasing order: the windows a watermark moving from after to
// upTo finalizes.
func (w *Windower) EndsIn(after, upTo time.Time) []time.Time {
	var ends []time.Time
	for _, win := range w.windows {
		end := win.start.Add(w.size)
		if end.After(after) && !end.After(upTo) && !slices.ContainsFunc(ends, end.Equal) {
			ends = append(ends, end)
		}
	}
	slices.SortFunc(ends, time.Time.Compare)
	return ends
}
