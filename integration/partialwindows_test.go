//go:build integration

package integration

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/migrations"
)

// rawPartialEvents are events of 3 windows read from 4 source partitions:
// whole, half and tenth seconds, negative delays, ties across partitions, a
// second operator on some stations, ids that sort differently bytewise and
// in a natural collation.
const rawPartialEvents = `
CREATE TABLE raw_events AS
SELECT '2016-05-16 20:00:00+00'::timestamptz + (g % 3) * interval '5 minutes' AS ws,
       g % 4 AS part,
       (ARRAY['L1', 'l2', 'L10', 'Ä'])[g % 7 % 4 + 1] AS line,
       'S' || (g * 7919 % 41) AS stop,
       CASE WHEN g % 13 = 0 THEN 'B' ELSE 'A' END AS op,
       ((g * 104729 % 601) - 120)::float8 + (ARRAY[0, 0.5, 0.1])[g % 5 % 3 + 1] AS delay
FROM generate_series(0, 2999) AS g`

// Migration 8 turns the per-row partials of schema 7 into partial windows:
// merged, they give exactly the rows the raw events give (count, min, max,
// operator and distribution equal; mean and P90 within 1e-9 of avg and
// percentile_cont). `migrate down 7` refuses while partial windows wait,
// leaving the schema clean at 8, and goes back once none do.
func TestMigration8ConvertsPartials(t *testing.T) {
	db := emptyDB(t)
	ctx := testCtx(t)
	if err := migrations.UpTo(ctx, db, 7); err != nil {
		t.Fatal(err)
	}
	execSQL(t, db, rawPartialEvents)
	execSQL(t, db, `
CREATE VIEW raw_rows AS
SELECT ws, 'line' AS dimension, line AS id, part, op, delay FROM raw_events
UNION ALL SELECT ws, 'station', stop, part, op, delay FROM raw_events
UNION ALL SELECT ws, 'operator', op, part, op, delay FROM raw_events
UNION ALL SELECT ws, 'network', 'all', part, op, delay FROM raw_events;
INSERT INTO delay_partials (pipeline, window_start, dimension, dimension_id, topic, partition, window_end, operator,
	event_count, sum_delay_s, min_delay_s, max_delay_s, delay_values, delay_counts)
SELECT 'p', ws, dimension, id, 'arrival_predictions', part, ws + interval '5 minutes',
       CASE WHEN min(op) = max(op) THEN min(op) END, count(*), sum(delay), min(delay), max(delay),
       (SELECT array_agg(d ORDER BY d) FROM (SELECT delay AS d FROM raw_rows i
            WHERE (i.ws, i.dimension, i.id, i.part) = (o.ws, o.dimension, o.id, o.part) GROUP BY delay) AS x),
       (SELECT array_agg(c ORDER BY d) FROM (SELECT delay AS d, count(*) AS c FROM raw_rows i
            WHERE (i.ws, i.dimension, i.id, i.part) = (o.ws, o.dimension, o.id, o.part) GROUP BY delay) AS x)
FROM raw_rows o GROUP BY ws, dimension, id, part`)
	if n := query[int64](t, db, `SELECT count(*) FROM delay_partials`); n == 0 {
		t.Fatal("no partials at version 7")
	}
	if err := migrations.Up(ctx, db); err != nil {
		t.Fatal(err)
	}
	if n := query[int64](t, db, `SELECT count(*) FROM pg_class WHERE relname = 'delay_partials'`); n != 0 {
		t.Fatal("delay_partials left after migration 8")
	}
	if n := query[int64](t, db, `SELECT count(*) FROM delay_partial_windows`); n != 12 {
		t.Fatalf("%d partial windows, want 12 (3 windows x 4 partitions)", n)
	}

	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT window_start, window_end, partition, row_count, rows FROM delay_partial_windows`)
	if err != nil {
		t.Fatal(err)
	}
	var ws []aggregate.PartialWindow
	var w aggregate.PartialWindow
	if _, err := pgx.ForEachRow(rows, []any{&w.WindowStart, &w.WindowEnd, &w.Partition, &w.Rows, &w.Data}, func() error {
		ws = append(ws, w)
		w.Data = nil
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	merged, err := aggregate.MergePartialWindows(ws)
	if err != nil {
		t.Fatal(err)
	}
	// The oracle, row by row in the merge's order (bytewise ids).
	oracle, err := conn.Query(ctx, `
SELECT ws, dimension, id, count(*), avg(delay), percentile_cont(0.9) WITHIN GROUP (ORDER BY delay), min(delay), max(delay),
       CASE WHEN min(op) = max(op) THEN min(op) ELSE '' END,
       (SELECT array_agg(d ORDER BY d) FROM (SELECT DISTINCT delay AS d FROM raw_rows i
            WHERE (i.ws, i.dimension, i.id) = (o.ws, o.dimension, o.id)) AS x)
FROM raw_rows o GROUP BY ws, dimension, id ORDER BY ws, dimension COLLATE "C", id COLLATE "C"`)
	if err != nil {
		t.Fatal(err)
	}
	i := 0
	var want aggregate.Row
	var values []float64
	_, err = pgx.ForEachRow(oracle, []any{&want.WindowStart, &want.Dimension, &want.DimensionID, &want.Count, &want.Mean,
		&want.P90, &want.Min, &want.Max, &want.Operator, &values}, func() error {
		if i >= len(merged) {
			return fmt.Errorf("merged %d rows, the oracle has more", len(merged))
		}
		got := merged[i]
		i++
		near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9 }
		var n int64
		for _, c := range got.Counts {
			n += c
		}
		if !got.WindowStart.Equal(want.WindowStart) || !got.WindowEnd.Equal(want.WindowStart.Add(5*time.Minute)) ||
			got.Dimension != want.Dimension || got.DimensionID != want.DimensionID || got.Count != want.Count ||
			n != want.Count || !near(got.Mean, want.Mean) || !near(got.P90, want.P90) || got.Min != want.Min ||
			got.Max != want.Max || got.Operator != want.Operator || fmt.Sprint(got.Values) != fmt.Sprint(values) {
			return fmt.Errorf("row %d: merged %+v\nwant %+v, values %v", i, got, want, values)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if i != len(merged) || i < 100 {
		t.Fatalf("oracle %d rows, merged %d", i, len(merged))
	}
	t.Logf("%d rows from %d partial windows equal the oracle", i, len(ws))

	if err := migrations.DownTo(ctx, db, 7); err == nil || !strings.Contains(err.Error(), "refused, nothing changed: 12 partial windows") {
		t.Fatalf("migrate down 7 while partial windows wait: %v", err)
	}
	if v, dirty, err := migrations.Version(ctx, db); v != 8 || dirty || err != nil {
		t.Fatalf("after the refused down: version %d, dirty %v, %v; want 8, clean", v, dirty, err)
	}
	execSQL(t, db, `DELETE FROM delay_partial_windows`)
	if err := migrations.DownTo(ctx, db, 7); err != nil {
		t.Fatal(err)
	}
	if n := query[int64](t, db, `SELECT count(*) FROM delay_partials`); n != 0 {
		t.Fatalf("%d rows in delay_partials after down 7", n)
	}
}
