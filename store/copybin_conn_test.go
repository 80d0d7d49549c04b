//go:build integration

package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestCopyConnectionBroken breaks the connection of a COPY of windows while
// its tuple source runs (a merge meeting a corrupt partial): the server ends
// the session (pg_terminate_backend, FATAL 57P01) and pgconn's CopyFrom
// returns without waiting for its reader goroutine, which is still inside
// Read. copyWindows must still return the source's error, read only once
// that Read is over: under the race detector (make test runs this test with
// -race), reading it while the Read runs is a data race. It needs the
// database of the integration tests (DATABASE_URL, else the local one) and
// writes nothing to it: the COPY goes to a temporary table.
func TestCopyConnectionBroken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url, conn := connectTestDB(ctx, t)
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	// A temporary table shadows delay_aggregates (pg_temp comes first in the
	// search path): no migrations, and the session's end drops it.
	if _, err := conn.Exec(ctx, createTempTables+`
CREATE TEMP TABLE delay_aggregates (LIKE ovs_windows)`); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Once the source runs, another connection ends this one's session.
	// pg_terminate_backend with a timeout returns once the backend is gone:
	// its FATAL error is then on its way to CopyFrom, which returns on it
	// while the source still runs.
	pid := conn.PgConn().PID()
	inRead := make(chan struct{})
	terminated := make(chan error, 1)
	go func() {
		<-inRead
		var gone bool
		err := admin.QueryRow(ctx, "SELECT pg_terminate_backend($1, 10000)", pid).Scan(&gone)
		if err == nil && !gone {
			err = fmt.Errorf("backend %d still there after 10s", pid)
		}
		terminated <- err
	}()
	errCorrupt := errors.New("corrupt partial")
	calls := 0 // written by the source, read after copyWindows: as a merge cursor's Err, Rows, Windows
	ended := make(chan struct{})
	source := func(b []byte) ([]byte, bool, error) {
		if calls == 0 {
			close(inRead)
			defer close(ended)
			// Give the session's end the time to reach CopyFrom before the
			// source ends, synchronizing with nothing (no I/O either, which
			// the race detector counts as synchronization). Were the source
			// to end first, CopyFrom would take its error and wait for this
			// goroutine: nothing would race, and the test would pass on the
			// old code too (a slow machine can only hide the bug, never
			// fail the fix).
			time.Sleep(300 * time.Millisecond)
		}
		calls++
		return b, false, errCorrupt
	}
	err = copyWindows(ctx, tx, func() tupleFunc { return source })
	if !errors.Is(err, errCorrupt) || calls != 1 {
		t.Errorf("copyWindows = %v after %d calls of the source, want %v after 1", err, calls, errCorrupt)
	}
	if err := <-terminated; err != nil {
		t.Errorf("pg_terminate_backend: %v", err)
	}
	<-ended // a source still running (a race) writes calls before the test ends: the race detector sees it
}
