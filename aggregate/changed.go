package aggregate

import (
	"slices"
	"time"
)

// Changed returns the rows of the open windows (end after watermark) that
// gained events since the last call of Changed, or since they were created,
// sorted like Closed's, and the starts (UTC, ascending) of those windows;
// it marks them unchanged. The rows are copies (distributions included):
// the windows may go on changing on the Windower's goroutine, where Changed
// must be called. A partitioned Windower returns nil: its rows are per
// source partition (ChangedPartials).
func (w *Windower) Changed(watermark time.Time) (rows []Row, starts []time.Time) {
	if w.byPart {
		return nil, nil
	}
	c := w.takeChanged(watermark)
	return c.Rows(), c.Starts()
}

// ChangedPartials is Changed for a partitioned Windower: the partial
// aggregates (one per window and source partition, sorted by window start
// and partition) of the open windows that gained events since the last
// call, built now, so the windows may go on changing. An unpartitioned
// Windower returns nil.
func (w *Windower) ChangedPartials(watermark time.Time) []PartialWindow {
	if !w.byPart {
		return nil
	}
	return w.takeChanged(watermark).PartialWindows()
}

// takeChanged marks the open windows that changed unchanged and returns
// them, sorted by start.
func (w *Windower) takeChanged(watermark time.Time) ClosedSet {
	c := ClosedSet{size: w.size}
	for _, win := range w.windows {
		if win.changed && !w.closed(win.start, watermark) {
			win.changed = false
			c.wins = append(c.wins, win)
			c.rows += win.rowCount()
		}
	}
	slices.SortFunc(c.wins, func(a, b *window) int { return a.start.Compare(b.start) })
	return c
}
