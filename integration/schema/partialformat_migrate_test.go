//go:build integration

package schema

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/integration/harness"
	"github.com/ovstream/ovstream/migrations"
)

// insertPartialSQL inserts one partial window of pipeline 'p' in
// partition $1 with data $2 (column col: rows at 8, data at 9).
func insertPartialSQL(col string) string {
	return `INSERT INTO delay_partial_windows (pipeline, window_start, topic, partition, window_end, row_count, ` + col + `)
		VALUES ('p', '2026-03-01 12:00:00+00', 'arrival_predictions', $1, '2026-03-01 12:05:00+00', 1, $2)`
}

// A partial window whose data is empty (no CHECK forbids it; a hand edit or
// a corruption) is not in format 2: `migrate down 8` goes down, the schema
// clean at 8 with the row kept; before, the guard failed on get_byte's
// "index 0 out of valid range".
func TestMigration9DownKeepsEmptyPartialWindow(t *testing.T) {
	db := harness.EmptyDB(t)
	ctx := harness.TestCtx(t)
	if err := migrations.Up(ctx, db); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, insertPartialSQL("data"), 0, []byte{}); err != nil {
		t.Fatal(err)
	}
	if err := migrations.DownTo(ctx, db, 8); err != nil {
		t.Fatalf("migrate down 8 with an empty partial window: %v", err)
	}
	if v, dirty, err := migrations.Version(ctx, db); v != 8 || dirty || err != nil {
		t.Fatalf("after down 8: version %d, dirty %v, %v; want 8, clean", v, dirty, err)
	}
	if n := harness.Query[int64](t, db, `SELECT count(*) FROM delay_partial_windows WHERE octet_length(rows) = 0`); n != 1 {
		t.Fatalf("%d empty partial windows after down 8, want the 1 written", n)
	}
}

// Up and down and up again with partial windows of format 1 waiting: their
// bytes survive every step; down 7 refuses (guard 8) and leaves the schema
// clean at 9.
func TestMigration9UpDownCyclesKeepPartialBytes(t *testing.T) {
	db := harness.EmptyDB(t)
	ctx := harness.TestCtx(t)
	if err := migrations.UpTo(ctx, db, 8); err != nil {
		t.Fatal(err)
	}
	format1 := []byte{0, 0, 0, 0, 1, 'L', 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 1, 0x40, 0x14, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3}
	execOne := func(sql string, args ...any) {
		t.Helper()
		conn, err := pgx.Connect(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	execOne(insertPartialSQL("rows"), 0, format1)
	for i, step := range []struct {
		down bool
		to   uint
		col  string
	}{{false, 9, "data"}, {true, 8, "rows"}, {false, 9, "data"}, {true, 8, "rows"}, {false, 9, "data"}} {
		var err error
		if step.down {
			err = migrations.DownTo(ctx, db, step.to)
		} else {
			err = migrations.UpTo(ctx, db, step.to)
		}
		if err != nil {
			t.Fatalf("step %d (to %d): %v", i, step.to, err)
		}
		if got := harness.Query[[]byte](t, db, `SELECT `+step.col+` FROM delay_partial_windows`); string(got) != string(format1) {
			t.Fatalf("step %d: %x, want %x", i, got, format1)
		}
	}
	if err := migrations.DownTo(ctx, db, 7); err == nil || !strings.Contains(err.Error(), "refused, nothing changed: 1 partial windows") {
		t.Fatalf("down 7 with a partial window waiting: %v", err)
	}
	if v, dirty, err := migrations.Version(ctx, db); v != 9 || dirty || err != nil {
		t.Fatalf("after the refused down 7: version %d, dirty %v, %v; want 9, clean", v, dirty, err)
	}
}

// waitLockWait returns once a session waits for a lock on
// delay_partial_windows (pg_locks: not granted).
func waitLockWait(t *testing.T, ctx context.Context, admin *pgx.Conn) {
	t.Helper()
	for {
		var n int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
			WHERE c.relname = 'delay_partial_windows' AND NOT l.granted
			  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("no session waited for a lock on delay_partial_windows")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// A split instance of version 9 commits a partial window in format 2 while
// `migrate down 8` runs: its transaction holds the table when the guard and
// the .down.sql count (they see nothing committed), and commits while the
// RENAME waits for its lock. The down must then refuse (or fail); it must
// not leave a partial window in format 2 at version 8, which version 8
// cannot read.
func TestMigration9DownRefusesPartialCommittedMeanwhile(t *testing.T) {
	downRefusesPartialCommittedMeanwhile(t, 9, 8, "data", []byte{0x82, 0, 1, 'L', 0, 1, 0, 10, 1},
		"1 partial windows in format 2 wait for the merge")
}

// The same for `migrate down 7` at version 8: a partial window committed
// while the DROP TABLE waits is dropped with the table; its events are lost
// (the instance's positions, committed with it, moved past them).
func TestMigration8DownRefusesPartialCommittedMeanwhile(t *testing.T) {
	downRefusesPartialCommittedMeanwhile(t, 8, 7, "rows",
		[]byte{0, 0, 0, 0, 1, 'L', 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 1, 0x40, 0x14, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3},
		"delay_partial_windows holds 1 partial windows not merged yet")
}

// downRefusesPartialCommittedMeanwhile commits a partial window (data, in column
// col at version from) while `migrate down to` waits for its lock: the down
// must refuse with refusal and the partial window must still be there.
func downRefusesPartialCommittedMeanwhile(t *testing.T, from, to uint, col string, data []byte, refusal string) {
	db := harness.EmptyDB(t)
	ctx := harness.TestCtx(t)
	if err := migrations.UpTo(ctx, db, from); err != nil {
		t.Fatal(err)
	}
	writer, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close(ctx)
	admin, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	tx, err := writer.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, insertPartialSQL(col), 0, data); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- migrations.DownTo(ctx, db, to) }()
	waitLockWait(t, ctx, admin)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	downErr := <-done
	v, dirty, err := migrations.Version(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("down %d: %v; version %d, dirty %v", to, downErr, v, dirty)
	if downErr == nil || !strings.Contains(downErr.Error(), refusal) {
		t.Fatalf("down %d while a partial window committed: %v (version %d); want the refusal %q", to, downErr, v, refusal)
	}
	// The migration's transaction rolled back: the table and the partial
	// window committed during it are there, its bytes unchanged.
	if got := harness.Query[[]byte](t, db, `SELECT `+col+` FROM delay_partial_windows`); string(got) != string(data) {
		t.Fatalf("after the refused down %d: partial window %x, want %x", to, got, data)
	}
}

// Migration 8's SQL builds, from the per-row partials of schema 7, partial
// windows in format 1 that read as exactly what the Go encoder
// (ClosedSet.PartialWindows, format 2 since version 9) wrote: the same rows,
// bit for bit, per window and partition (the reader takes one encoding per
// row in either format, so these are the bytes of format 1), in every
// database of migrationDBs: ids with multibyte UTF-8 that sort differently
// bytewise and by code point, collation or the database's encoding, operators one or several (NULL), a -0 stored at version 7
// (written as 0), fractional delays.
func TestMigration8BytesEqualTheGoEncoder(t *testing.T) {
	for _, m := range migrationDBs {
		t.Run(m.name, func(t *testing.T) { migration8BytesEqualTheGoEncoder(t, m.create(t), m.ids) })
	}
}

func migration8BytesEqualTheGoEncoder(t *testing.T, db string, moreIDs []string) {
	ctx := harness.TestCtx(t)
	if err := migrations.UpTo(ctx, db, 7); err != nil {
		t.Fatal(err)
	}
	const w = 5 * time.Minute
	win := aggregate.NewPartitionedWindower(w)
	ids := append([]string{"L1", "L10", "L2", "Ä", "a", "Z", "é", "ß", "ä", "A", "l10"}, moreIDs...)
	r := rand.New(rand.NewPCG(8, 8))
	for i := range 4000 {
		part := int32(r.IntN(3))
		win.AddFrom(part, aggregate.Prediction{TripID: "t", Line: ids[r.IntN(len(ids))], StopID: ids[r.IntN(len(ids))] + "/s",
			Operator: []string{"AT", "ÅT", "AT"}[r.IntN(3)*(i%2)], DelayS: float64(r.IntN(200)-100) + []float64{0, 0.5, 0.1}[r.IntN(3)],
			EventTime: harness.T0.Add(time.Duration(r.IntN(900)) * time.Second)})
	}
	ws := win.ClosedSet(harness.T0.Add(3 * w)).PartialWindows()
	if len(ws) != 9 {
		t.Fatalf("%d partial windows, want 9", len(ws))
	}
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, pw := range ws {
		rows, err := aggregate.MergePartialWindows([]aggregate.PartialWindow{pw})
		if err != nil {
			t.Fatal(err)
		}
		for _, row := range rows {
			var op any
			if row.Operator != "" {
				op = row.Operator
			}
			values := append([]float64(nil), row.Values...)
			if values[0] == 0 {
				values[0] = math.Copysign(0, -1) // schema 7 may hold -0: written as 0
			}
			if _, err := conn.Exec(ctx, `INSERT INTO delay_partials (pipeline, window_start, dimension, dimension_id, topic,
	partition, window_end, operator, event_count, sum_delay_s, min_delay_s, max_delay_s, delay_values, delay_counts)
VALUES ('p', $1, $2, $3, 'arrival_predictions', $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
				pw.WindowStart, row.Dimension, row.DimensionID, pw.Partition, pw.WindowEnd, op, row.Count,
				row.Mean*float64(row.Count), row.Min, row.Max, values, row.Counts); err != nil {
				t.Fatal(err)
			}
		}
	}
	conn.Close(ctx)
	if err := migrations.UpTo(ctx, db, 8); err != nil {
		t.Fatal(err)
	}
	conn, err = pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, pw := range ws {
		sql := pw
		if err := conn.QueryRow(ctx, `SELECT rows, row_count FROM delay_partial_windows WHERE pipeline = 'p'
	AND window_start = $1 AND partition = $2`, pw.WindowStart, pw.Partition).Scan(&sql.Data, &sql.Rows); err != nil {
			t.Fatal(err)
		}
		if len(sql.Data) == 0 || sql.Data[0] == 0x82 {
			t.Fatalf("window %s partition %d: migration 8 wrote %x..., not format 1", pw.WindowStart, pw.Partition, sql.Data[:min(4, len(sql.Data))])
		}
		got, err := aggregate.MergePartialWindows([]aggregate.PartialWindow{sql})
		if err != nil {
			t.Fatalf("window %s partition %d: %v", pw.WindowStart, pw.Partition, err)
		}
		want, _ := aggregate.MergePartialWindows([]aggregate.PartialWindow{pw})
		if sql.Rows != pw.Rows || len(got) != len(want) {
			t.Fatalf("window %s partition %d: migration wrote %d rows (%d read), Go %d", pw.WindowStart, pw.Partition,
				sql.Rows, len(got), pw.Rows)
		}
		for i := range got {
			if fmt.Sprintf("%#v", got[i]) != fmt.Sprintf("%#v", want[i]) {
				t.Fatalf("window %s partition %d row %d: migration's %#v\nGo's %#v", pw.WindowStart, pw.Partition, i, got[i], want[i])
			}
		}
	}
	t.Logf("%d partial windows converted, every row bit for bit", len(ws))
}
