//go:build integration

package schema

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/integration/harness"
	"github.com/ovstream/ovstream/migrations"
)

// Migration 9 (partial windows in format 2): partial windows waiting in
// format 1 (here: migration 8's conversion of schema 7's per-row partials)
// and those a binary of version 9 writes in format 2 for the other
// partitions of the same windows merge into exactly the rows the raw events
// give. `migrate down 8` refuses while any partial window in format 2 waits,
// leaving the schema clean at 9, and once none does, gives the column its
// old name back with the format-1 bytes unchanged.
func TestMigration9MixesPartialFormats(t *testing.T) {
	db := harness.EmptyDB(t)
	ctx := harness.TestCtx(t)
	seedSchema7Partials(t, db, []string{"e\u0301"})
	if err := migrations.UpTo(ctx, db, 8); err != nil {
		t.Fatal(err)
	}
	format1 := harness.Dump(t, db, `SELECT window_start || ' ' || partition || ' ' || encode(rows, 'hex')
		FROM delay_partial_windows WHERE partition < 2 ORDER BY 1`)
	if err := migrations.Up(ctx, db); err != nil {
		t.Fatal(err)
	}

	// Partitions 2 and 3 again, as a binary of version 9 writes them.
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	win := aggregate.NewPartitionedWindower(5 * time.Minute)
	rows, err := conn.Query(ctx, `SELECT ws, part, line, stop, op, delay FROM raw_events WHERE part >= 2`)
	if err != nil {
		t.Fatal(err)
	}
	var ws time.Time
	var part int32
	var p aggregate.Prediction
	if _, err := pgx.ForEachRow(rows, []any{&ws, &part, &p.Line, &p.StopID, &p.Operator, &p.DelayS}, func() error {
		p.TripID, p.EventTime = "t", ws.Add(time.Minute)
		win.AddFrom(part, p)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	harness.ExecSQL(t, db, `DELETE FROM delay_partial_windows WHERE partition >= 2`)
	written := 0
	for _, pw := range win.ClosedSet(ws.Add(time.Hour)).PartialWindows() {
		if _, err := conn.Exec(ctx, `INSERT INTO delay_partial_windows (pipeline, window_start, topic, partition, window_end, row_count, data)
			VALUES ('p', $1, 'arrival_predictions', $2, $3, $4, $5)`, pw.WindowStart, pw.Partition, pw.WindowEnd, pw.Rows, pw.Data); err != nil {
			t.Fatal(err)
		}
		written++
	}
	if n := harness.Query[int64](t, db, `SELECT count(*) FROM delay_partial_windows WHERE get_byte(data, 0) = 130`); n != 6 || written != 6 {
		t.Fatalf("%d partial windows in format 2 (%d written), want 6 (3 windows x partitions 2 and 3)", n, written)
	}
	checkPartialsMergeToRawRows(t, db, "data")

	if err := migrations.DownTo(ctx, db, 8); err == nil ||
		!strings.Contains(err.Error(), "refused, nothing changed: 6 partial windows in format 2") {
		t.Fatalf("migrate down 8 while partial windows in format 2 wait: %v", err)
	}
	if v, dirty, err := migrations.Version(ctx, db); v != migrations.Latest() || dirty || err != nil {
		t.Fatalf("after the refused down: version %d, dirty %v, %v; want %d (unchanged), clean", v, dirty, err, migrations.Latest())
	}
	harness.ExecSQL(t, db, `DELETE FROM delay_partial_windows WHERE get_byte(data, 0) = 130`)
	if err := migrations.DownTo(ctx, db, 8); err != nil {
		t.Fatal(err)
	}
	if got := harness.Dump(t, db, `SELECT window_start || ' ' || partition || ' ' || encode(rows, 'hex')
		FROM delay_partial_windows ORDER BY 1`); !slices.Equal(got, format1) || len(got) != 6 {
		t.Fatalf("format-1 partials after up 9 and down 8: %d, want the %d written at 8, unchanged", len(got), len(format1))
	}
}
