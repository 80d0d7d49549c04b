//go:build integration

package schema

import (
	"cmp"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/integration/harness"
	"github.com/ovstream/ovstream/migrations"
)

// migrationDB is a database migration 8 is tested in: its encoding and the
// client_encoding of every session on it, ovstream's and the migration's
// (the database URL's), and ids it holds beyond ASCII and the Latin-1
// letters of the tests: where the encoding allows, ones that its bytes
// sort otherwise than their UTF-8 bytes (a PartialWindow's order).
type migrationDB struct {
	name    string // the subtest's
	options string // of CREATE DATABASE; "": the server's default, UTF8
	client  string // client_encoding; "": the database's (pgx sets none)
	ids     []string
}

const (
	latin1  = "ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0"
	win1252 = "ENCODING 'WIN1252' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0"
)

// migrationDBs: in a LATIN1 or WIN1252 database, ovstream's text is stored
// as its UTF-8 bytes taken as that encoding's when the URL sets no
// client_encoding, and converted when it sets UTF8. 'Œ' is 0x8C and '€'
// 0x80 in WIN1252, below 'Ä' (0xC4); in UTF-8 above.
var migrationDBs = []migrationDB{
	{"UTF8", "", "", []string{"e\u0301", "😀", "\uffff"}},
	{"LATIN1", latin1, "", []string{"ÿ"}},
	{"LATIN1_client_UTF8", latin1, "UTF8", []string{"ÿ"}},
	{"WIN1252", win1252, "", []string{"Œ", "€"}},
	{"WIN1252_client_UTF8", win1252, "UTF8", []string{"Œ", "€"}},
}

// create creates the database for the test (emptyDBWith) and returns its
// URL.
func (m migrationDB) create(t *testing.T) string {
	db := harness.EmptyDBWith(t, m.options)
	if m.client == "" {
		return db
	}
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("client_encoding", m.client)
	u.RawQuery = q.Encode()
	return u.String()
}

// rawPartialEvents are events of 3 windows read from 4 source partitions:
// whole, half and tenth seconds, negative delays, ties across partitions, a
// second operator on some stations, ids that sort differently bytewise and
// in a natural collation, ids and an operator with Latin-1 letters. %s are
// more line ids (SQL literals, comma-separated), %d their number plus 4.
const rawPartialEvents = `
CREATE TABLE raw_events AS
SELECT '2016-05-16 20:00:00+00'::timestamptz + (g %% 3) * interval '5 minutes' AS ws,
       g %% 4 AS part,
       (ARRAY['L1', 'l2', 'L10', 'Ä', %s])[g %% 11 %% %d + 1] AS line,
       (ARRAY['S', 'Stationsplein é '])[g / 5 %% 2 + 1] || (g * 7919 %% 41) AS stop,
       CASE WHEN g %% 13 = 0 THEN 'B' ELSE 'Qbuzz ü' END AS op,
       ((g * 104729 %% 601) - 120)::float8 + (ARRAY[0, 0.5, 0.1])[g %% 5 %% 3 + 1] AS delay
FROM generate_series(0, 2999) AS g`

// Migration 8 turns the per-row partials of schema 7 into partial windows,
// in every database of migrationDBs: merged, they give exactly the rows the
// raw events give (count, min, max, operator and distribution equal; mean
// and P90 within 1e-9 of avg and percentile_cont). `migrate down 7` refuses
// while partial windows wait, leaving the schema clean at 8, and goes back
// once none do.
func TestMigration8ConvertsPartials(t *testing.T) {
	for _, m := range migrationDBs {
		t.Run(m.name, func(t *testing.T) { migration8ConvertsPartials(t, m.create(t), m.ids) })
	}
}

func migration8ConvertsPartials(t *testing.T, db string, ids []string) {
	ctx := harness.TestCtx(t)
	seedSchema7Partials(t, db, ids)
	if err := migrations.UpTo(ctx, db, 8); err != nil {
		t.Fatal(err)
	}
	if n := harness.Query[int64](t, db, `SELECT count(*) FROM pg_class WHERE relname = 'delay_partials'`); n != 0 {
		t.Fatal("delay_partials left after migration 8")
	}
	if n := harness.Query[int64](t, db, `SELECT count(*) FROM delay_partial_windows`); n != 12 {
		t.Fatalf("%d partial windows, want 12 (3 windows x 4 partitions)", n)
	}
	checkPartialsMergeToRawRows(t, db, "rows")

	if err := migrations.DownTo(ctx, db, 7); err == nil || !strings.Contains(err.Error(), "refused, nothing changed: 12 partial windows") {
		t.Fatalf("migrate down 7 while partial windows wait: %v", err)
	}
	if v, dirty, err := migrations.Version(ctx, db); v != 8 || dirty || err != nil {
		t.Fatalf("after the refused down: version %d, dirty %v, %v; want 8, clean", v, dirty, err)
	}
	harness.ExecSQL(t, db, `DELETE FROM delay_partial_windows`)
	if err := migrations.DownTo(ctx, db, 7); err != nil {
		t.Fatal(err)
	}
	if n := harness.Query[int64](t, db, `SELECT count(*) FROM delay_partials`); n != 0 {
		t.Fatalf("%d rows in delay_partials after down 7", n)
	}
}

// seedSchema7Partials migrates db to version 7 and fills it with the raw
// events (table raw_events; rawPartialEvents with the line ids ids beyond
// its own), their rows per dimension (view raw_rows) and their per-row
// partials (delay_partials).
func seedSchema7Partials(t *testing.T, db string, ids []string) {
	if err := migrations.UpTo(harness.TestCtx(t), db, 7); err != nil {
		t.Fatal(err)
	}
	lines := make([]string, len(ids))
	for i, id := range ids {
		lines[i] = "'" + id + "'"
	}
	harness.ExecSQL(t, db, fmt.Sprintf(rawPartialEvents, strings.Join(lines, ", "), 4+len(ids)))
	harness.ExecSQL(t, db, `
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
	if n := harness.Query[int64](t, db, `SELECT count(*) FROM delay_partials`); n == 0 {
		t.Fatal("no partials at version 7")
	}
}

// checkPartialsMergeToRawRows merges every partial window of db (their
// bytes in column, rows up to version 8, data from 9) and checks that the
// merge gives exactly the rows raw_rows gives (seedSchema7Partials): count,
// min, max, operator and distribution equal, mean and P90 within 1e-9 of avg
// and percentile_cont.
func checkPartialsMergeToRawRows(t *testing.T, db, column string) {
	ctx := harness.TestCtx(t)
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT window_start, window_end, partition, row_count, `+column+` FROM delay_partial_windows`)
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
	// The oracle, sorted here in the merge's order: ids by the bytes the
	// client reads.
	oracle, err := conn.Query(ctx, `
SELECT ws, dimension, id, count(*), avg(delay), percentile_cont(0.9) WITHIN GROUP (ORDER BY delay), min(delay), max(delay),
       CASE WHEN min(op) = max(op) THEN min(op) ELSE '' END,
       (SELECT array_agg(d ORDER BY d) FROM (SELECT delay AS d FROM raw_rows i
            WHERE (i.ws, i.dimension, i.id) = (o.ws, o.dimension, o.id) GROUP BY delay) AS x),
       (SELECT array_agg(c ORDER BY d) FROM (SELECT delay AS d, count(*) AS c FROM raw_rows i
            WHERE (i.ws, i.dimension, i.id) = (o.ws, o.dimension, o.id) GROUP BY delay) AS x)
FROM raw_rows o GROUP BY ws, dimension, id`)
	if err != nil {
		t.Fatal(err)
	}
	var want []aggregate.Row
	var r aggregate.Row
	if _, err = pgx.ForEachRow(oracle, []any{&r.WindowStart, &r.Dimension, &r.DimensionID, &r.Count, &r.Mean,
		&r.P90, &r.Min, &r.Max, &r.Operator, &r.Values, &r.Counts}, func() error {
		want = append(want, r)
		r.Values, r.Counts = nil, nil
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(want, func(a, b aggregate.Row) int {
		return cmp.Or(a.WindowStart.Compare(b.WindowStart), cmp.Compare(a.Dimension, b.Dimension),
			cmp.Compare(a.DimensionID, b.DimensionID))
	})
	if len(want) != len(merged) || len(want) < 100 {
		t.Fatalf("oracle %d rows, merged %d", len(want), len(merged))
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9 }
	for i, got := range merged {
		w := want[i]
		if !got.WindowStart.Equal(w.WindowStart) || !got.WindowEnd.Equal(w.WindowStart.Add(5*time.Minute)) ||
			got.Dimension != w.Dimension || got.DimensionID != w.DimensionID || got.Count != w.Count ||
			!near(got.Mean, w.Mean) || !near(got.P90, w.P90) || got.Min != w.Min || got.Max != w.Max ||
			got.Operator != w.Operator || !slices.Equal(got.Values, w.Values) || !slices.Equal(got.Counts, w.Counts) {
			t.Fatalf("row %d: merged id %q, operator %q: %+v\nwant id %q, operator %q: %+v", i+1,
				got.DimensionID, got.Operator, got, w.DimensionID, w.Operator, w)
		}
	}
	t.Logf("%d rows from %d partial windows equal the oracle", len(merged), len(ws))
}
