package consumer

import (
	"time"

	"github.com/ovstream/ovstream/store"
)

// provisionalState is what the loop remembers of its provisional writes
// (Config.ProvisionalInterval).
type provisionalState struct {
	next  time.Time // no provisional write before this
	wrote bool      // a batch of this loop carries provisional rows already
	// took is how long the last successful commit with provisional rows
	// took.
	took time.Duration
	// wm and at are the watermark and the time of the batch before: how
	// fast the watermark moves.
	wm, at time.Time
}

// provisional adds to b, taken at now, the provisional rows of the open
// windows that changed since the loop's last provisional write, when
// Config.ProvisionalInterval has passed since it. They count exactly the
// records below b's consumed offsets (the Windower holds every record of an
// open window read since the loop's seek to the stored next offset). The
// loop's first write replaces every provisional row of the pipeline: rows a
// loop before wrote may count records this one has not read again yet.
// A split instance writes its share per source partition instead: the
// partials of its open windows that changed (store.Provisional.Partials;
// the commit adds those it finalized); its first write replaces those of
// its partitions. Without provisional rows
// (--provisional-interval 0, a drain) the loop's first batch removes those
// an earlier run wrote (of its partitions, when split).
//
// Final rows are not kept waiting for provisional ones: a batch that
// finalizes windows carries none, nor does one taken when the earliest open
// window would close, at the pace the watermark moved since the batch
// before, within twice the last provisional commit's duration, since the
// commit that writes it would wait for this one. The next commit carries
// them instead.
func (l *loop) provisional(b *store.Batch, now time.Time) {
	cfg := l.cfg
	prevWM, prevAt := l.prov.wm, l.prov.at
	l.prov.wm, l.prov.at = b.Watermark, now
	if cfg.ProvisionalInterval <= 0 || cfg.Drain {
		if !l.prov.wrote { // remove what an earlier run wrote: it would read as current
			b.Provisional = &store.Provisional{All: true, Off: true}
			l.prov.wrote = true
		}
		return
	}
	if now.Before(l.prov.next) {
		return
	}
	if closesWithin(l.win.FirstEnd(), b.Watermark, prevWM, now.Sub(prevAt), 2*l.prov.took) {
		return
	}
	if b.Split != nil {
		b.Provisional = &store.Provisional{Partials: l.win.ChangedPartials(b.Watermark), All: !l.prov.wrote}
	} else {
		rows, starts := l.win.Changed(b.Watermark)
		b.Provisional = &store.Provisional{Rows: rows, Starts: starts, All: !l.prov.wrote}
	}
	l.prov.wrote = true
	l.prov.next = now.Add(cfg.ProvisionalInterval)
}

// closesWithin tells whether the window ending at first (zero: none) is
// final at watermark wm, or will be within d of wall clock if the watermark
// goes on moving as it moved from prev to wm in elapsed.
func closesWithin(first, wm, prev time.Time, elapsed, d time.Duration) bool {
	if first.IsZero() {
		return false
	}
	left := first.Sub(wm)
	if left <= 0 {
		return true
	}
	moved := wm.Sub(prev)
	if prev.IsZero() || moved <= 0 || elapsed <= 0 {
		return false // the watermark stands still: the window does not close soon
	}
	return left.Seconds()*elapsed.Seconds() < d.Seconds()*moved.Seconds()
}
