//go:build integration

package crash

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/integration/harness"
)

// tryExec runs sql on db once and returns its error.
func tryExec(db, sql string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

// The replicated private cluster itself, without ovstream: a commit
// acknowledged by the asynchronous primary while its walsender is held is
// missing on the promoted standby; the old primary, rewound, streams from
// the new one and takes over again with what the new one committed; in
// synchronous mode a commit waits while the stream is held, and none
// acknowledged is lost.
func TestReplicaSetFailover(t *testing.T) {
	for _, sync := range []bool{false, true} {
		t.Run(map[bool]string{false: "async", true: "sync"}[sync], func(t *testing.T) {
			t.Parallel()
			rs := harness.StartReplicaSet(t, sync)
			db := rs.MultiHostURL("postgres")
			exec1 := func(sql string) error { return tryExec(db, sql) }
			if err := exec1("CREATE TABLE acks (n int)"); err != nil {
				t.Fatal(err)
			}
			if err := exec1("INSERT INTO acks VALUES (1)"); err != nil {
				t.Fatal(err)
			}
			rs.WaitReplayed()
			release := rs.Hold()
			done := make(chan error, 1)
			go func() { done <- exec1("INSERT INTO acks VALUES (2)") }()
			select {
			case err := <-done:
				if sync {
					t.Fatalf("synchronous commit acknowledged with the stream held: %v", err)
				}
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(2 * time.Second):
				if !sync {
					t.Fatal("asynchronous commit not acknowledged within 2 s with the stream held")
				}
			}
			lag := rs.LagBytes()
			if lag <= 0 {
				t.Fatalf("standby %d bytes behind with the stream held, want > 0", lag)
			}
			t.Logf("held the stream: the standby is %d bytes of WAL behind", lag)
			onPrimary := rs.Nodes[rs.Primary].Query("postgres", "SELECT string_agg(n::text, ',' ORDER BY n) FROM acks")
			rs.KillPrimary()
			release()
			if sync {
				if err := <-done; err == nil {
					t.Fatal("the commit waiting for the synchronous standby was acknowledged by a dead primary")
				}
			}
			rs.Promote()
			onNew := rs.Nodes[rs.Primary].Query("postgres", "SELECT string_agg(n::text, ',' ORDER BY n) FROM acks")
			if want := map[bool]string{false: "1,2", true: "1"}[sync]; onPrimary != want || onNew != "1" {
				t.Fatalf("rows read on the primary just before its death %q (want %q), on the promoted standby %q (want 1)", onPrimary, want, onNew)
			}
			if err := exec1("INSERT INTO acks VALUES (3)"); err != nil {
				t.Fatal(err)
			}
			rs.Rejoin()
			rs.WaitReplayed()
			if got := rs.Nodes[1-rs.Primary].Query("postgres", "SELECT string_agg(n::text, ',' ORDER BY n) FROM acks"); got != "1,3" {
				t.Fatalf("the rewound old primary holds %q, want 1,3 (its own 2 rewound away)", got)
			}
			rs.KillPrimary()
			rs.Promote()
			if err := exec1("INSERT INTO acks VALUES (4)"); err != nil {
				t.Fatal(err)
			}
			if got := rs.Nodes[rs.Primary].Query("postgres", "SELECT string_agg(n::text, ',' ORDER BY n) FROM acks"); got != "1,3,4" || rs.Primary != 0 {
				t.Fatalf("after failing back to node%d: %q, want node0 with 1,3,4", rs.Primary, got)
			}
		})
	}
}
