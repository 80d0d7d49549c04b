//go:build integration

package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/feed/gtfsrt"
	"github.com/ovstream/ovstream/store"
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

// connect opens a connection to db for the test; the caller closes it.
func connect(t *testing.T, ctx context.Context, db string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// backupTables copies every ovstream table of db into bak_<table>, in one
// REPEATABLE READ transaction: a consistent snapshot, as a backup is.
func backupTables(t *testing.T, db string) {
	t.Helper()
	ctx := opsCtx(t)
	conn := connect(t, ctx, db)
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
	ctx := opsCtx(t)
	conn := connect(t, ctx, db)
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
	addr, db := startBroker(t), freshDB(t)
	total, half, second := produceFirstHalf(t, addr)

	p := startOvstream(t, nil, runArgs(db, addr, "--pipeline", "restore", "--metrics-addr", "127.0.0.1:0",
		"--flush-interval", "200ms", "--log-level", "info")...)
	ops := opsAddr(t, p)
	consumed := `ovstream_consumed_messages_total{topic="arrival_predictions"}`
	committedAll := func(n int) func() bool {
		return func() bool {
			m := scrape(t, ops)
			return m[consumed] >= float64(n) && m["ovstream_uncommitted_messages"] == 0 && m["ovstream_windows_finalized_total"] > 0
		}
	}
	waitFor(t, time.Minute, "the first half consumed and committed", committedAll(half))
	backupTables(t, db)
	backedUp := dump(t, db, `SELECT count(*) FROM bak_delay_aggregates`)
	seqBefore := dump(t, db, `SELECT sum(commit_seq)::bigint FROM bak_stream_positions`)

	produceFeeds(t, addr, second)
	waitFor(t, time.Minute, "the second half consumed and committed", committedAll(total))
	// The windows the second half closed: written once the watermark moves
	// past them, which may take a high water mark poll after the records
	// are read (an idle partition is left out of the watermark only by a
	// reading after it).
	var written []string
	waitFor(t, 30*time.Second, "a window written after the backup", func() bool {
		written = dump(t, db, `SELECT count(*) FROM delay_aggregates`)
		return written[0] != backedUp[0]
	})
	seqAfter := dump(t, db, `SELECT sum(commit_seq)::bigint FROM stream_positions`)
	restoreTables(t, db)
	t.Logf("restored to %v delay_aggregates rows (commit sequence sum %v) from %v (%v)", backedUp, seqBefore, written, seqAfter)

	// Not waitFor: without the check nothing is noticed, and the rows
	// compared below show what that loses.
	noticed := false
	for deadline := time.Now().Add(time.Minute); !noticed && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		m := scrape(t, ops)
		noticed = strings.Contains(p.output(), "the database lost commits this instance made") &&
			m[`ovstream_commit_failures_total{reason="behind"}`] >= 1 && m["ovstream_uncommitted_messages"] == 0 &&
			m[consumed] >= float64(total+half/2)
	}
	if !noticed {
		t.Errorf("within a minute of the restore, the instance did not say it replays the lost commits:\n%s", tail(p.output(), 20))
	}
	if m := scrape(t, ops); m[`ovstream_commit_failures_total{reason="behind"}`] != 1 {
		t.Errorf("commits that found the database behind: %v, want 1 (one loss, one replay)",
			m[`ovstream_commit_failures_total{reason="behind"}`])
	}
	stopDrainCompare(t, p, db, addr, "restore", total, "delay_aggregates after a restore under the service vs SQL oracle")
}

// stopDrainCompare stops the service p with SIGTERM (exit 0 wanted), drains
// what it left open (pipeline's windows still open at SIGTERM), checks that
// the predictions topic holds total records and compares delay_aggregates
// with the SQL oracle over them.
func stopDrainCompare(t *testing.T, p *proc, db, addr, pipeline string, total int, what string) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, time.Minute); code != 0 {
		t.Fatalf("run exited %d after SIGTERM:\n%s", code, p.output())
	}
	drain(t, db, addr, "--pipeline", pipeline)
	if n := loadOracleInput(t, db, addr, predictionsTopic); n != total {
		t.Fatalf("topic holds %d records, want %d", n, total)
	}
	sameRows(t, what, dump(t, db, dumpAggregates), dump(t, db, oracleAggregates))
}

// withSeqs returns b with each position's commit sequence (store.Position.Seq)
// set to the one stored now, read through st: for the tests that write
// batches by hand and are not about lost commits (the consumer keeps the
// sequence it wrote; TestRestoreBehindReplays proves what it is for).
func withSeqs(t testing.TB, st *store.Store, b store.Batch) store.Batch {
	t.Helper()
	stored, err := st.LoadPositions(context.Background(), b.Pipeline)
	if err != nil {
		t.Fatal(err)
	}
	b.Positions = slices.Clone(b.Positions)
	for i := range b.Positions {
		b.Positions[i].Seq = stored[b.Positions[i].PartitionID].Seq
	}
	return b
}

// produceFirstHalf produces the first half of the predictions of the real
// 2 h Auckland slice (and its positions) to the broker at addr; it returns
// how many predictions the slice holds, how many it produced, and the second
// half, to produce later.
func produceFirstHalf(t *testing.T, addr string) (total, half int, second *gtfsrt.Result) {
	t.Helper()
	res := loadFeeds(t, "AT", extractTarGz(t, "../testdata/auckland-20160518-2h.tar.gz"))
	total, half = len(res.Predictions), len(res.Predictions)/2
	first, rest := *res, *res
	first.Predictions, rest.Predictions = res.Predictions[:half], res.Predictions[half:]
	produceFeeds(t, addr, &first)
	return total, half, &rest
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
	addr, db := startBroker(t), freshDB(t)
	total, half, second := produceFirstHalf(t, addr)
	backupTables(t, db) // nothing of the pipeline yet

	p := startOvstream(t, nil, runArgs(db, addr, "--pipeline", "restore0", "--metrics-addr", "127.0.0.1:0",
		"--flush-interval", "200ms", "--log-level", "info")...)
	ops := opsAddr(t, p)
	consumed := `ovstream_consumed_messages_total{topic="arrival_predictions"}`
	waitFor(t, time.Minute, "the first half consumed and committed", func() bool {
		m := scrape(t, ops)
		return m[consumed] >= float64(half) && m["ovstream_uncommitted_messages"] == 0 && m["ovstream_windows_finalized_total"] > 0
	})
	restoreTables(t, db)
	produceFeeds(t, addr, second)
	select {
	case <-p.done:
		t.Fatalf("after a restore to before its first claim the instance exited %d (want: claim again and replay):\n%s",
			p.wait(t, time.Second), tail(p.output(), 12))
	case <-time.After(20 * time.Second):
	}
	stopDrainCompare(t, p, db, addr, "restore0", total, "delay_aggregates after a restore to before the first claim vs SQL oracle")
}
