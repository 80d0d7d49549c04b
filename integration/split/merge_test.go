//go:build integration

package split

import (
	"strings"
	"testing"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/integration/harness"
	"github.com/ovstream/ovstream/store"
)

// A merge of two windows whose partials two instances wrote in two commits
// (instance A both windows of partition 0, then B both of partition 1, one
// merge chunk) reports 2 windows merged (Merged.Windows), and the rows of
// one Windower fed every event. DELETE ... RETURNING gives the partials in
// no particular order (here as they lie in the table: w1/p0, w2/p0, w1/p1,
// w2/p1, once the table is analyzed), so counting the changes of window_start in that order counted 4.
func TestSplitMergeCountsEachWindowOnce(t *testing.T) {
	g := harness.NewSplitStoreRig(t)
	if m := g.Commit(g.Sa, g.Batch(g.Ea, g.Ta, g.W2, false)); m.Windows != 0 || m.Pending != 2 {
		t.Fatalf("A past both windows: %+v", m)
	}
	// The statistics autovacuum gathers of a small table: the DELETE of the
	// merge then scans it in the order its rows lie in.
	harness.ExecSQL(t, g.Url, `ANALYZE delay_partial_windows`)
	m := g.Commit(g.Sb, g.Batch(g.Eb, g.Tb, g.W2, false))
	want := g.Plain.Closed(g.W2)
	if m.Windows != 2 || m.Rows != len(want) || m.Pending != 0 || g.Partials() != 0 {
		t.Fatalf("B past both windows: %+v, %d partials; want 2 windows, %d rows", m, g.Partials(), len(want))
	}
	harness.SameAggregates(t, g.Url, want)
}

// conflictRow stores a stale delay_aggregates row under the key of want[i]
// (event_count 999): the first COPY of the merge fails on it with 23505
// after the rows before it, and the second pass (temporary table, upsert)
// must send every row again and replace it.
func conflictRow(t *testing.T, url string, want []aggregate.Row, i int) {
	t.Helper()
	w := want[i]
	harness.ExecSQL(t, url, `INSERT INTO delay_aggregates (pipeline, window_start, window_end, dimension, dimension_id, operator,
		event_count, mean_delay_s, p90_delay_s, min_delay_s, max_delay_s, delay_values, delay_counts)
		VALUES ('p', '`+w.WindowStart.UTC().Format("2006-01-02T15:04:05Z")+`', '`+w.WindowEnd.UTC().Format("2006-01-02T15:04:05Z")+
		`', '`+w.Dimension+`', '`+strings.ReplaceAll(w.DimensionID, "'", "''")+`', NULL, 999, 1, 1, 1, 1, '{1}', '{999}')`)
}

// A merge whose first COPY meets a stored row (23505) at its first, middle
// or last row goes the second way and stores exactly the rows of one
// Windower fed every event; Merged counts each row and window once.
func TestSplitMergeSecondPassAfterConflict(t *testing.T) {
	for _, at := range []string{"first", "middle", "last"} {
		t.Run(at, func(t *testing.T) {
			g := harness.NewSplitStoreRig(t)
			g.Commit(g.Sa, g.Batch(g.Ea, g.Ta, g.W2, false))
			want := g.Plain.Closed(g.W2)
			i := map[string]int{"first": 0, "middle": len(want) / 2, "last": len(want) - 1}[at]
			conflictRow(t, g.Url, want, i)
			harness.ExecSQL(t, g.Url, `ANALYZE delay_partial_windows`) // a sequential scan: partials in no window order
			m := g.Commit(g.Sb, g.Batch(g.Eb, g.Tb, g.W2, false))
			if m.Windows != 2 || m.Rows != len(want) || g.Partials() != 0 {
				t.Fatalf("merge after a conflict at row %d: %+v; want 2 windows, %d rows", i, m, len(want))
			}
			harness.SameAggregates(t, g.Url, want)
		})
	}
}

// A corrupt partial of the second window met by the second pass (the first
// COPY failed with 23505 on a stored row of the first window) stops the
// commit with the merge's error (not retryable, naming the corrupt partial
// window, not PostgreSQL's 57014 of the COPY's CopyFail) and writes nothing.
func TestSplitMergeCorruptPartialInSecondPass(t *testing.T) {
	ctx := harness.TestCtx(t)
	g := harness.NewSplitStoreRig(t)
	g.Commit(g.Sa, g.Batch(g.Ea, g.Ta, g.W2, false))
	want := g.Plain.Closed(g.W2)
	conflictRow(t, g.Url, want, 0)
	harness.ExecSQL(t, g.Url, `UPDATE delay_partial_windows SET data = substring(data FROM 1 FOR 10)
		WHERE window_start = (SELECT max(window_start) FROM delay_partial_windows)`)
	before := harness.Snapshot(t, g.Url)
	partials := harness.Dump(t, g.Url, `SELECT t::text FROM delay_partial_windows t`)
	_, err := g.Sb.CommitSplit(ctx, harness.WithSeqs(t, g.Sb, g.Batch(g.Eb, g.Tb, g.W2, false)))
	if err == nil || store.Retryable(err) || !strings.Contains(err.Error(), "merge partials of pipeline") ||
		!strings.Contains(err.Error(), "corrupt partial window") || strings.Contains(err.Error(), "57014") {
		t.Fatalf("merge of a corrupt partial in the second pass: %v (retryable %v)", err, store.Retryable(err))
	}
	harness.SameSnapshot(t, "after the failed merge", before, harness.Snapshot(t, g.Url))
	harness.SameRows(t, "partials after the failed merge", partials, harness.Dump(t, g.Url, `SELECT t::text FROM delay_partial_windows t`))
}
