//go:build integration

package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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
func TestReviewMigration9DownEmptyData(t *testing.T) {
	db := emptyDB(t)
	ctx := testCtx(t)
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
	if n := query[int64](t, db, `SELECT count(*) FROM delay_partial_windows WHERE octet_length(rows) = 0`); n != 1 {
		t.Fatalf("%d empty partial windows after down 8, want the 1 written", n)
	}
}

// Up and down and up again with partial windows of format 1 waiting: their
// bytes survive every step; down 7 refuses (guard 8) and leaves the schema
// clean at 9.
func TestReviewMigration9Cycles(t *testing.T) {
	db := emptyDB(t)
	ctx := testCtx(t)
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
		if got := query[[]byte](t, db, `SELECT `+step.col+` FROM delay_partial_windows`); string(got) != string(format1) {
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
func TestReviewMigration9DownRacesAPartialCommit(t *testing.T) {
	reviewDownRacesAPartialCommit(t, 9, 8, "data", []byte{0x82, 0, 1, 'L', 0, 1, 0, 10, 1},
		"1 partial windows in format 2 wait for the merge")
}

// The same for `migrate down 7` at version 8: a partial window committed
// while the DROP TABLE waits is dropped with the table; its events are lost
// (the instance's positions, committed with it, moved past them).
func TestReviewMigration8DownRacesAPartialCommit(t *testing.T) {
	reviewDownRacesAPartialCommit(t, 8, 7, "rows",
		[]byte{0, 0, 0, 0, 1, 'L', 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 1, 0x40, 0x14, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3},
		"delay_partial_windows holds 1 partial windows not merged yet")
}

// reviewDownRacesAPartialCommit commits a partial window (data, in column
// col at version from) while `migrate down to` waits for its lock: the down
// must refuse with refusal and the partial window must still be there.
func reviewDownRacesAPartialCommit(t *testing.T, from, to uint, col string, data []byte, refusal string) {
	db := emptyDB(t)
	ctx := testCtx(t)
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
	if got := query[[]byte](t, db, `SELECT `+col+` FROM delay_partial_windows`); string(got) != string(data) {
		t.Fatalf("after the refused down %d: partial window %x, want %x", to, got, data)
	}
}
