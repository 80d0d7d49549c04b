package gtfsrt

import (
	"fmt"
	"io"
	"time"
)

// ProgressLines returns an Options.OnFile that reports the progress of
// `produce --gtfs-rt`: a line on w for a file read when every has passed
// since the last line (0: for each file), and for the last file, with the
// new events it gave and the totals.
func ProgressLines(w io.Writer, every time.Duration) func(FileDone) {
	var last time.Time
	var preds, pos int
	began := time.Now()
	return func(f FileDone) {
		preds += f.Predictions
		pos += f.Positions
		now := time.Now()
		if now.Sub(last) < every && f.N != f.Of {
			return
		}
		last = now
		at := "none"
		if !f.FeedTime.IsZero() {
			at = f.FeedTime.Format(time.RFC3339)
		}
		fmt.Fprintf(w, "read file %d/%d %s (feed time %s): %d new predictions, %d new positions; so far %d predictions, %d positions in %s\n",
			f.N, f.Of, f.Path, at, f.Predictions, f.Positions, preds, pos, now.Sub(began).Round(time.Millisecond))
	}
}
