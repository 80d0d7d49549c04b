//go:build integration

package crash

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/integration/harness"
)

// ovstreamTables returns the tables of db's public schema that ovstream
// writes (partitioned tables as their parent, schema_migrations left out).
func ovstreamTables(t *testing.T, ctx context.Context, conn *pgx.Conn) []string {
	t.Helper()
	rows, err := conn.Query(ctx, `SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition
		AND c.relname <> 'schema_migrations' AND c.relname NOT LIKE 'bak\_%' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return tables
}

// backupTables copies every ovstream table of db into bak_<table>, in one
// REPEATABLE READ transaction: a consistent snapshot, as a backup is.
func backupTables(t *testing.T, db string) {
	t.Helper()
	ctx := harness.OpsCtx(t)
	conn := harness.Connect(t, ctx, db)
	defer conn.Close(ctx)
	err := pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		for _, table := range ovstreamTables(t, ctx, conn) {
			if _, err := tx.Exec(ctx, fmt.Sprintf(`CREATE TABLE bak_%s AS SELECT * FROM %s`, table, table)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("backup: %v", err)
	}
}

// restoreTables puts back what backupTables copied, in one transaction, as a
// restore from that backup (or a failover to a replica that stopped there)
// leaves the database.
func restoreTables(t *testing.T, db string) {
	t.Helper()
	ctx := harness.OpsCtx(t)
	conn := harness.Connect(t, ctx, db)
	defer conn.Close(ctx)
	tables := ovstreamTables(t, ctx, conn)
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "LOCK TABLE "+strings.Join(tables, ", ")+" IN ACCESS EXCLUSIVE MODE"); err != nil {
			return err
		}
		for _, table := range tables {
			if _, err := tx.Exec(ctx, fmt.Sprintf(`DELETE FROM %s; INSERT INTO %s SELECT * FROM bak_%s`, table, table, table)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
}

// The database goes back under a running service (a restore from
// a backup; a failover to an asynchronous replica is the same to ovstream):
// the commits made after the backup are gone, with their offsets. The
// instance must notice at its next commit (the commit sequence checked by
// the fencing statement), say which partitions lost what, drop what it holds
// in memory and replay from the stored offsets, without a restart; the
// result then equals the SQL oracle. Before the check, the instance wrote
// its later offsets over the hole and the windows finalized between backup
// and restore were never written.
func TestRestoreBehindReplays(t *testing.T) {
	t.Parallel()
	addr, db := harness.StartBroker(t), harness.FreshDB(t)
	total, half, second := harness.ProduceFirstHalf(t, addr)

	p := harness.StartOvstream(t, nil, harness.RunArgs(db, addr, "--pipeline", "restore", "--metrics-addr", "127.0.0.1:0",
		"--flush-interval", "200ms", "--log-level", "info")...)
	ops := harness.OpsAddr(t, p)
	consumed := `ovstream_consumed_messages_total{topic="arrival_predictions"}`
	committedAll := func(n int) func() bool {
		return func() bool {
			m := harness.Scrape(t, ops)
			return m[consumed] >= float64(n) && m["ovstream_uncommitted_messages"] == 0 && m["ovstream_windows_finalized_total"] > 0
		}
	}
	harness.WaitFor(t, time.Minute, "the first half consumed and committed", committedAll(half))
	backupTables(t, db)
	backedUp := harness.Dump(t, db, `SELECT count(*) FROM bak_delay_aggregates`)
	seqBefore := harness.Dump(t, db, `SELECT sum(commit_seq)::bigint FROM bak_stream_positions`)

	harness.ProduceFeeds(t, addr, second)
	harness.WaitFor(t, time.Minute, "the second half consumed and committed", committedAll(total))
	// The windows the second half closed: written once the watermark moves
	// past them, which may take a high water mark poll after the records
	// are read (an idle partition is left out of the watermark only by a
	// reading after it).
	var written []string
	harness.WaitFor(t, 30*time.Second, "a window written after the backup", func() bool {
		written = harness.Dump(t, db, `SELECT count(*) FROM delay_aggregates`)
		return written[0] != backedUp[0]
	})
	seqAfter := harness.Dump(t, db, `SELECT sum(commit_seq)::bigint FROM stream_positions`)
	restoreTables(t, db)
	t.Logf("restored to %v delay_aggregates rows (commit sequence sum %v) from %v (%v)", backedUp, seqBefore, written, seqAfter)

	// Not waitFor: without the check nothing is noticed, and the rows
	// compared below show what that loses.
	noticed := false
	for deadline := time.Now().Add(time.Minute); !noticed && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		m := harness.Scrape(t, ops)
		noticed = strings.Contains(p.Output(), "the database lost commits this instance made") &&
			m[`ovstream_commit_failures_total{reason="behind"}`] >= 1 && m["ovstream_uncommitted_messages"] == 0 &&
			m[consumed] >= float64(total+half/2)
	}
	if !noticed {
		t.Errorf("within a minute of the restore, the instance did not say it replays the lost commits:\n%s", harness.Tail(p.Output(), 20))
	}
	if m := harness.Scrape(t, ops); m[`ovstream_commit_failures_total{reason="behind"}`] != 1 {
		t.Errorf("commits that found the database behind: %v, want 1 (one loss, one replay)",
			m[`ovstream_commit_failures_total{reason="behind"}`])
	}
	harness.StopDrainCompare(t, p, db, addr, "restore", total, "delay_aggregates after a restore under the service vs SQL oracle")
}

// A database that lost the FIRST claim of a partition (a
// restore from a backup taken before the pipeline ran, or a failover to an
// asynchronous replica that had not received the claim's INSERT; equally a
// partition added while running, whose row ClaimAdded inserted) holds no
// stream_positions row for it. The fencing statement matches nothing and
// behind() answers ErrFenced for a missing row (!ok), so the instance stops
// with exit 3 "fenced: another instance claimed a partition" although no
// instance claimed anything: the claim that was lost is not claimed again
// (contrast TestRestoreBehindReplays, where the rows exist at a lower commit
// sequence).
func TestRestoreBeforeFirstClaimClaimsAgainAndReplays(t *testing.T) {
	t.Parallel()
	addr, db := harness.StartBroker(t), harness.FreshDB(t)
	total, half, second := harness.ProduceFirstHalf(t, addr)
	backupTables(t, db) // nothing of the pipeline yet

	p := harness.StartOvstream(t, nil, harness.RunArgs(db, addr, "--pipeline", "restore0", "--metrics-addr", "127.0.0.1:0",
		"--flush-interval", "200ms", "--log-level", "info")...)
	ops := harness.OpsAddr(t, p)
	consumed := `ovstream_consumed_messages_total{topic="arrival_predictions"}`
	harness.WaitFor(t, time.Minute, "the first half consumed and committed", func() bool {
		m := harness.Scrape(t, ops)
		return m[consumed] >= float64(half) && m["ovstream_uncommitted_messages"] == 0 && m["ovstream_windows_finalized_total"] > 0
	})
	restoreTables(t, db)
	harness.ProduceFeeds(t, addr, second)
	select {
	case <-p.Done:
		t.Fatalf("after a restore to before its first claim the instance exited %d (want: claim again and replay):\n%s",
			p.Wait(t, time.Second), harness.Tail(p.Output(), 12))
	case <-time.After(20 * time.Second):
	}
	harness.StopDrainCompare(t, p, db, addr, "restore0", total, "delay_aggregates after a restore to before the first claim vs SQL oracle")
}
