package aggregate

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Windower holds the open tumbling windows of one size: window start ->
// (dimension, dimension_id) -> *Stats. Each prediction counts in four rows
// (DimLine, DimStation, DimOperator, DimNetwork).
//
// Closing is two-step so that a failed commit loses nothing: Closed returns the
// rows of the windows a watermark finalizes without removing them, and Drop
// removes them once the commit that wrote them succeeded. It is not safe for
// concurrent use: one goroutine owns it.
type Windower struct {
	size    time.Duration
	windows map[windowKey]*window
}

// windowKey identifies a window by its UTC start, without a time.Location.
type windowKey struct {
	sec  int64
	nsec int32
}

type rowKey struct {
	dim, id string
}

type window struct {
	start time.Time
	rows  map[rowKey]*Stats
}

// NewWindower returns an empty Windower of windows of the given size (e.g.
// 5*time.Minute). It panics if size <= 0, a programming error.
func NewWindower(size time.Duration) *Windower {
	if size <= 0 {
		panic(fmt.Sprintf("aggregate: NewWindower: window size %v is not positive", size))
	}
	return &Windower{size: size, windows: make(map[windowKey]*window)}
}

// Size returns the window size.
func (w *Windower) Size() time.Duration { return w.size }

// Add counts p in the four rows of its window and returns the window's start
// (UTC). The caller has already decided that p is not late
// (WindowStart(p.EventTime)+Size() > watermark).
func (w *Windower) Add(p Prediction) (windowStart time.Time) {
	start := WindowStart(p.EventTime, w.size)
	k := windowKey{start.Unix(), int32(start.Nanosecond())}
	win := w.windows[k]
	if win == nil {
		win = &window{start: start, rows: make(map[rowKey]*Stats, 4)}
		w.windows[k] = win
	}
	for _, rk := range [4]rowKey{
		{DimLine, p.Line},
		{DimStation, p.StopID},
		{DimOperator, p.Operator},
		{DimNetwork, NetworkID},
	} {
		st := win.rows[rk]
		if st == nil {
			st = new(Stats)
			win.rows[rk] = st
		}
		st.Add(p.DelayS, p.Operator)
	}
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
// seconds, times in UTC.
func (w *Windower) Closed(watermark time.Time) []Row {
	var rows []Row
	for _, win := range w.windows {
		if !w.closed(win.start, watermark) {
			continue
		}
		end := win.start.Add(w.size)
		for rk, st := range win.rows {
			rows = append(rows, Row{
				WindowStart: win.start,
				WindowEnd:   end,
				Dimension:   rk.dim,
				DimensionID: rk.id,
				Operator:    st.Operator(),
				Count:       st.Count(),
				Mean:        st.Mean(),
				P90:         st.P90(),
				Min:         st.Min(),
				Max:         st.Max(),
			})
		}
	}
	slices.SortFunc(rows, func(a, b Row) int {
		if c := a.WindowStart.Compare(b.WindowStart); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Dimension, b.Dimension); c != 0 {
			return c
		}
		return cmp.Compare(a.DimensionID, b.DimensionID)
	})
	return rows
}

// Drop removes every window whose end is <= watermark, after a successful
// commit of Closed(watermark), and returns how many windows it removed.
func (w *Windower) Drop(watermark time.Time) int {
	n := 0
	for k, win := range w.windows {
		if w.closed(win.start, watermark) {
			delete(w.windows, k)
			n++
		}
	}
	return n
}

// OpenWindows returns the number of open windows.
func (w *Windower) OpenWindows() int { return len(w.windows) }

// OpenRows returns the number of rows over all open windows.
func (w *Windower) OpenRows() int {
	n := 0
	for _, win := range w.windows {
		n += len(win.rows)
	}
	return n
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
