package consumer

import (
	"time"

	"github.com/ovstream/ovstream/store"
)

// provisionalState is what the loop remembers of its provisional writes
// (Config.ProvisionalInterval).
type provisionalState struct {
	next   time.Time // no provisional write before this
	wrote  bool      // a batch of this loop carries provisional rows already
	logged bool      // the split pipeline's "none" was logged
}

// provisional adds to b, taken at now, the provisional rows of the open
// windows that changed since the loop's last provisional write, when
// Config.ProvisionalInterval has passed since it. They count exactly the
// records below b's consumed offsets (the Windower holds every record of an
// open window read since the loop's seek to the stored next offset). The
// loop's first write replaces every provisional row of the pipeline: rows a
// loop before wrote may count records this one has not read again yet.
// A split pipeline writes none: its windows are per source partition and
// final only once merged, so it logs that once.
func (l *loop) provisional(b *store.Batch, now time.Time) {
	cfg := l.cfg
	if cfg.ProvisionalInterval <= 0 || cfg.Drain || now.Before(l.prov.next) {
		return
	}
	if b.Split != nil {
		if !l.prov.logged {
			l.prov.logged = true
			cfg.Logger.Warn("provisional rows are not written by the instances of a split pipeline: readers see its final windows only",
				"pipeline", cfg.Pipeline)
		}
		return
	}
	rows, starts := l.win.Changed(b.Watermark)
	b.Provisional = &store.Provisional{Rows: rows, Starts: starts, All: !l.prov.wrote}
	l.prov.wrote = true
	l.prov.next = now.Add(cfg.ProvisionalInterval)
}
