package status

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ovstream/ovstream/store"
)

// Merge is the merge lag of a split pipeline in `status --json`.
type Merge struct {
	PendingWindows int        `json:"pending_windows"`   // windows with partials waiting for every partition to pass them
	OldestPending  *time.Time `json:"oldest_pending"`    // window_start of the oldest of them
	MergedUntil    *time.Time `json:"merged_until"`      // end of the last window final for the whole pipeline (merged from partials, or written by an instance owning every partition)
	Holding        []string   `json:"holding,omitempty"` // partitions holding the merge (lowest stored watermark, or none)
}

func MergeOf(ctx context.Context, db store.Querier, pipeline string) (*Merge, error) {
	ml, err := store.ReadMergeLag(ctx, db, pipeline)
	if err != nil {
		return nil, err
	}
	return &Merge{PendingWindows: ml.Pending, OldestPending: timePtr(ml.Oldest),
		MergedUntil: timePtr(ml.MergedUntil), Holding: ml.Holding}, nil
}

// printMerge prints the merge line of a pipeline that was ever split.
func printMerge(w io.Writer, m *Merge, ts func(*time.Time) string) {
	if m == nil || m.MergedUntil == nil && m.PendingWindows == 0 {
		return
	}
	fmt.Fprintf(w, "merge: %d windows of partials waiting", m.PendingWindows)
	if m.PendingWindows > 0 {
		fmt.Fprintf(w, " (oldest %s, held by %s)", ts(m.OldestPending), strings.Join(m.Holding, ", "))
	}
	fmt.Fprintf(w, "; merged until %s\n", ts(m.MergedUntil))
}
