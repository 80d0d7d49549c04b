//go:build integration

package ops

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/ovstream/ovstream/integration/harness"
)

// A DBA's pg_cancel_backend of run's commit backend while the commit runs
// (SQLSTATE 57014 query_canceled, as statement_timeout gives too) is
// retried: logged, counted as a retryable commit failure, and the drain
// ends with the tables equal to the SQL oracle. The commit is held in a
// statement by a lock on trip_delay_latest, so the cancel finds it running.
func TestCommitCancelledStatementIsRetried(t *testing.T) {
	addr, db := harness.StartBroker(t), harness.FreshDB(t)
	base := time.Date(2016, 5, 18, 20, 0, 0, 0, time.UTC)
	harness.ProduceRecords(t, addr, harness.Events(1, 30, base)...)

	ctx := harness.OpsCtx(t)
	locker, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close(context.Background())
	tx, err := locker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE trip_delay_latest IN EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}

	// Another session watches: pg_stat_activity inside the locker's
	// transaction would show the snapshot of its first read.
	watcher, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Close(context.Background())

	p := harness.StartOvstream(t, harness.CliEnv(), harness.RunArgs(db, addr, "--drain", "--metrics-addr", "127.0.0.1:0", "--topics", harness.PredictionsTopic+",")...)
	ops := harness.OpsAddr(t, p)
	// The commit backend waits for the lock inside its statement.
	const blocked = `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'ovstream'
		AND state = 'active' AND wait_event_type = 'Lock' AND query ILIKE '%trip_delay_latest%'`
	var pid int32
	if !harness.Eventually(time.Minute, func() bool { return watcher.QueryRow(ctx, blocked).Scan(&pid) == nil }) {
		t.Fatalf("run's commit does not wait for the lock on trip_delay_latest: sessions %v\n%s",
			harness.Dump(t, db, `SELECT application_name, state, wait_event_type, query FROM pg_stat_activity WHERE datname = current_database()`), p.Output())
	}
	var cancelled bool
	if err := watcher.QueryRow(ctx, `SELECT pg_cancel_backend($1)`, pid).Scan(&cancelled); err != nil || !cancelled {
		t.Fatalf("pg_cancel_backend(%d): %v, %v", pid, cancelled, err)
	}
	// The failure is counted and the commit retried: it waits for the lock again.
	harness.WaitFor(t, time.Minute, "the cancelled commit counted as retryable, and retried", func() bool {
		if harness.Exited(p) {
			t.Fatalf("run exited %d after its commit was cancelled, want it to retry:\n%s", p.Cmd.ProcessState.ExitCode(), p.Output())
		}
		m := harness.Scrape(t, ops)
		var again int32
		return m[`ovstream_commit_failures_total{reason="retryable"}`] == 1 &&
			m[`ovstream_commit_failures_total{reason="terminal"}`] == 0 &&
			watcher.QueryRow(ctx, blocked).Scan(&again) == nil
	})
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if code := p.Wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("run --drain exited %d after its commit was cancelled, want 0:\n%s", code, p.Output())
	}
	out := p.Output()
	if !strings.Contains(out, "commit failed; retrying") || !strings.Contains(out, "SQLSTATE 57014") ||
		!strings.Contains(out, "1 failed") {
		t.Errorf("the cancelled commit is not logged as retried (57014) and counted in the summary:\n%s", out)
	}

	harness.LoadOracleInput(t, db, addr, harness.PredictionsTopic)
	got := harness.Dump(t, db, harness.DumpAggregates)
	if len(got) != 6*4 {
		t.Errorf("%d delay_aggregates rows, want 24 (6 windows x 4 dimensions)", len(got))
	}
	harness.SameRows(t, "delay_aggregates vs SQL oracle", got, harness.Dump(t, db, harness.OracleAggregates))
	if trips := harness.Dump(t, db, `SELECT count(*) FROM trip_delay_latest`); trips[0] != "[30]" {
		t.Errorf("trip_delay_latest holds %v rows, want 30", trips)
	}
	if dl := harness.Dump(t, db, `SELECT count(*) FROM dead_letters`); dl[0] != "[0]" {
		t.Errorf("dead letters %v, want none", dl)
	}
}
