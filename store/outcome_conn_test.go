//go:build integration

package store

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/aggregate"
)

// TestOutcomeFromCommitSeq: what outcome (a split drain's lost COMMIT
// answer) says of a transaction that ran the real fencing statement (fence,
// as every commit does first) and then committed or rolled back, on a
// table in the state a failover or another claim leaves: committed only
// when the transaction committed. While the transaction is still open it
// waits for its end (FOR SHARE behind the fencing statement's row locks:
// the test ends it only once pg_stat_activity shows the outcome's session
// waiting for a lock), then reads what it left. It needs the database of
// the integration tests (DATABASE_URL, else the local one) and works in a
// schema of its own, dropped at the end.
func TestOutcomeFromCommitSeq(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	schema := fmt.Sprintf("ovs_outcome_%d", time.Now().UnixNano())
	url, admin := connectTestDB(ctx, t)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := admin.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(`CREATE SCHEMA ` + schema)
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), `DROP SCHEMA `+schema+` CASCADE`) })
	// The columns of stream_positions the fencing statement and outcome use.
	exec(`CREATE TABLE ` + schema + `.stream_positions (pipeline text, topic text, partition integer,
		owner text, epoch bigint NOT NULL, commit_seq bigint NOT NULL, heartbeat_at timestamptz,
		next_offset bigint, consumed_offset bigint, PRIMARY KEY (pipeline, topic, partition))`)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	inSchema := url + sep + "search_path=" + schema + "&application_name=" + schema
	if _, err := pgx.ParseConfig(inSchema); err != nil {
		t.Fatal(err)
	}

	const pipeline, me, epoch = "p", "vm:1-a", int64(3)
	ps := []Position{
		{PartitionID: aggregate.PartitionID{Topic: "arrival_predictions", Partition: 0}, Seq: 5},
		{PartitionID: aggregate.PartitionID{Topic: "vehicle_positions", Partition: 2}, Seq: 7},
	}
	type row struct {
		owner      string
		epoch, seq int64
	}
	// set stores rows (nil: none) for ps, in order.
	set := func(rows ...*row) {
		t.Helper()
		exec(`DELETE FROM ` + schema + `.stream_positions`)
		for i, r := range rows {
			if r != nil {
				exec(`INSERT INTO `+schema+`.stream_positions (pipeline, topic, partition, owner, epoch, commit_seq)
					VALUES ($1, $2, $3, $4, $5, $6)`, pipeline, ps[i].Topic, ps[i].Partition, r.owner, r.epoch, r.seq)
			}
		}
	}
	ours := func() { set(&row{me, epoch, ps[0].Seq}, &row{me, epoch, ps[1].Seq}) }
	// fenced runs the fencing statement in a transaction left open.
	fenced := func() pgx.Tx {
		t.Helper()
		conn, err := pgx.Connect(ctx, inSchema)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close(context.Background()) })
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := fence(ctx, tx, pipeline, me, epoch, ps); err != nil {
			t.Fatalf("fence: %v", err)
		}
		return tx
	}
	ask := func() string {
		t.Helper()
		s, err := Lazy(inSchema)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(context.Background())
		octx, ocancel := context.WithTimeout(ctx, 30*time.Second)
		defer ocancel()
		got := s.outcome(octx, pipeline, me, epoch, ps)
		if octx.Err() != nil {
			t.Fatalf("outcome did not answer within 30 s (it said %q)", got)
		}
		return got
	}
	// waiting asks while tx is open and ends it with end once the
	// outcome's session waits for a row lock.
	waiting := func(tx pgx.Tx, end func(pgx.Tx, context.Context) error) string {
		t.Helper()
		got := make(chan string, 1)
		go func() { got <- ask() }()
		for {
			var n int
			if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE application_name = $1 AND wait_event_type = 'Lock' AND query LIKE '%FOR SHARE%'`, schema).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n > 0 {
				break
			}
			select {
			case g := <-got:
				t.Fatalf("outcome answered %q while the transaction was still open", g)
			case <-time.After(10 * time.Millisecond):
			}
		}
		if err := end(tx, ctx); err != nil {
			t.Fatal(err)
		}
		return <-got
	}
	commit := func(tx pgx.Tx, ctx context.Context) error { return tx.Commit(ctx) }
	rollback := func(tx pgx.Tx, ctx context.Context) error { return tx.Rollback(ctx) }
	ended := func(tx pgx.Tx, end func(pgx.Tx, context.Context) error) string {
		t.Helper()
		if err := end(tx, ctx); err != nil {
			t.Fatal(err)
		}
		return ask()
	}

	for _, c := range []struct {
		name string
		run  func() string
		want string
	}{
		{"fenced and committed", func() string { ours(); return ended(fenced(), commit) }, outcomeCommitted},
		{"fenced and rolled back", func() string { ours(); return ended(fenced(), rollback) }, outcomeAborted},
		{"open, then committed", func() string { ours(); return waiting(fenced(), commit) }, outcomeCommitted},
		{"open, then rolled back", func() string { ours(); return waiting(fenced(), rollback) }, outcomeAborted},
		// A failover to a replica that had not received this commit nor
		// the one before it: a lower sequence under the same claim.
		{"a database behind", func() string {
			set(&row{me, epoch, ps[0].Seq - 1}, &row{me, epoch, ps[1].Seq - 1})
			return ask()
		}, outcomeAborted},
		// The same replica never received the claim of one partition.
		{"a row missing", func() string { set(&row{me, epoch, ps[0].Seq + 1}, nil); return ask() }, outcomeAborted},
		{"an older epoch", func() string {
			set(&row{me, epoch, ps[0].Seq + 1}, &row{"vm:0-z", epoch - 1, ps[1].Seq + 1})
			return ask()
		}, outcomeAborted},
		// Another instance claimed one partition since: fenced either way,
		// and whether the commit came before its claim cannot be told.
		{"claimed since", func() string {
			set(&row{me, epoch, ps[0].Seq + 1}, &row{"vm:2-b", epoch + 1, ps[1].Seq + 1})
			return ask()
		}, outcomeUnknown},
	} {
		if got := c.run(); got != c.want {
			t.Errorf("%s: outcome %q, want %q", c.name, got, c.want)
		}
	}
}
