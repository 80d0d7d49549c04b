//go:build integration

package schema

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/integration/harness"
	"github.com/ovstream/ovstream/migrations"
	"github.com/ovstream/ovstream/store"
)

// insertDistributionSQL inserts a station row of the window starting at
// %[2]s (12:00 UTC) whose distribution (5,000 distinct delays) is large
// enough to be TOASTed and compressed, under dimension_id %[1]s.
const insertDistributionSQL = `INSERT INTO delay_aggregates (pipeline, window_start, window_end, dimension, dimension_id,
    event_count, mean_delay_s, p90_delay_s, min_delay_s, max_delay_s, delay_values, delay_counts)
SELECT 'p', '%[2]s 12:00:00+00', '%[2]s 12:05:00+00', 'station', '%[1]s', 5000, 0, 0, 0, 4999,
       array_agg(v::double precision ORDER BY v), array_agg(1::bigint ORDER BY v)
FROM generate_series(0, 4999) v`

// Migration 14: where the server has lz4, the distributions written from
// then on are compressed with lz4, by PostgreSQL's own account
// (pg_column_compression): in a partition that existed before the
// migration, in one created after it, and in the rows `run` COPYs; the rows
// compressed with pglz before stay readable; down 13 writes pglz again.
// Where the server lacks lz4 the migration changes nothing.
func TestMigration14LZ4Distributions(t *testing.T) {
	db := harness.EmptyDB(t)
	ctx := harness.TestCtx(t)
	if err := migrations.UpTo(ctx, db, 13); err != nil {
		t.Fatal(err)
	}
	harness.ExecSQL(t, db, `SELECT ovs_create_delay_partition('2026-03-02')`)
	compression := func(id string) string {
		t.Helper()
		return harness.Query[string](t, db, `SELECT coalesce(pg_column_compression(delay_values), 'none') || '/' || coalesce(pg_column_compression(delay_counts), 'none')
			FROM delay_aggregates WHERE dimension_id = $1`, id)
	}
	insert := func(id, day string) {
		t.Helper()
		harness.ExecSQL(t, db, fmt.Sprintf(insertDistributionSQL, id, day))
	}
	insert("before", "2026-03-02")
	if got := compression("before"); got != "pglz/pglz" {
		t.Fatalf("at version 13 a 5,000-value distribution is stored %s, want pglz/pglz (the server's default)", got)
	}
	if err := migrations.Up(ctx, db); err != nil {
		t.Fatal(err)
	}
	lz4 := harness.Query[bool](t, db, `SELECT 'lz4' = ANY (enumvals) FROM pg_settings WHERE name = 'default_toast_compression'`)
	want := "lz4/lz4"
	if !lz4 {
		want = "pglz/pglz"
	}
	insert("existing partition", "2026-03-02")
	harness.ExecSQL(t, db, `SELECT ovs_create_delay_partition('2026-03-03')`)
	insert("new partition", "2026-03-03")
	for _, id := range []string{"existing partition", "new partition"} {
		if got := compression(id); got != want {
			t.Errorf("after migration 14 (server has lz4: %t) the distribution of %q is stored %s, want %s", lz4, id, got, want)
		}
	}
	if got := harness.Query[int64](t, db, `SELECT sum(v) FROM delay_aggregates, unnest(delay_values) v WHERE dimension_id = 'before'`); got != 4999*5000/2 {
		t.Errorf("the pglz distribution written before migration 14 sums to %d, want %d", got, 4999*5000/2)
	}

	// What run writes: a window of 3,000 records with 300 distinct delays.
	addr := harness.StartBroker(t)
	harness.ProduceLines(t, addr, harness.PredictionsTopic, harness.FlakyLines(0, 9000)...)
	harness.Drain(t, db, addr, "--topics", harness.PredictionsTopic+",", "--pipeline", "run")
	byMethod := strings.Join(harness.Dump(t, db, `SELECT coalesce(pg_column_compression(delay_values), 'inline') AS method, count(*) FROM delay_aggregates
		WHERE pipeline = 'run' AND dimension = 'network' GROUP BY 1 ORDER BY 1`), " ")
	wantRows := "[lz4 3]"
	if !lz4 {
		wantRows = "[pglz 3]"
	}
	if byMethod != wantRows {
		t.Errorf("network rows of run by compression: %q, want %q", byMethod, wantRows)
	}

	if err := migrations.DownTo(ctx, db, 13); err != nil {
		t.Fatal(err)
	}
	insert("after down", "2026-03-03")
	if got := compression("after down"); got != "pglz/pglz" {
		t.Errorf("after down 13 a distribution is stored %s, want pglz/pglz", got)
	}
	if got := harness.Query[int64](t, db, `SELECT count(*) FROM delay_aggregates WHERE array_length(delay_values, 1) = 5000`); got != 4 {
		t.Errorf("%d rows of 5,000 delays readable after down 13, want 4", got)
	}
}

// A window committed again (a replay after an ambiguous COMMIT: the first
// COPY meets the stored row, 23505, and the rows go through the commit's
// temporary table, ovs_windows, and INSERT ... ON CONFLICT DO UPDATE) is
// stored with the compression of delay_aggregates, as the first commit
// stored it: PostgreSQL copies a compressed value as it is, so the
// temporary table's method is the one the row keeps.
func TestMigration14ReplayedWindowKeepsLZ4(t *testing.T) {
	ctx := harness.TestCtx(t)
	s, url, epoch := harness.OpenStore(t)
	r := harness.Row(aggregate.DimStation, "S1", 5000, 2499.5, 4499, 0, 4999)
	r.Values, r.Counts = make([]float64, 5000), make([]int64, 5000)
	for i := range r.Values {
		r.Values[i], r.Counts[i] = float64(i), 1
	}
	b := store.Batch{Pipeline: "p", Owner: harness.Owner0, Epoch: epoch, Windows: []aggregate.Row{r}, Positions: harness.At0(10)}
	lz4 := harness.Query[bool](t, url, `SELECT 'lz4' = ANY (enumvals) FROM pg_settings WHERE name = 'default_toast_compression'`)
	want := map[bool]string{true: "lz4/lz4", false: "pglz/pglz"}[lz4]
	const compression = `SELECT pg_column_compression(delay_values) || '/' || pg_column_compression(delay_counts) FROM delay_aggregates`
	for _, pass := range []string{"first commit (COPY)", "replay (temporary table, upsert)"} {
		if err := s.Commit(ctx, harness.WithSeqs(t, s, b)); err != nil {
			t.Fatal(err)
		}
		if got := harness.Query[string](t, url, compression); got != want {
			t.Errorf("after the %s the distribution is stored %s, want %s (server has lz4: %t)", pass, got, want, lz4)
		}
	}
	if got := harness.Query[int64](t, url, `SELECT sum(v) FROM delay_aggregates, unnest(delay_values) v`); got != 4999*5000/2 {
		t.Errorf("the replayed distribution sums to %d, want %d", got, 4999*5000/2)
	}
}
