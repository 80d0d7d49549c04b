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

// A split drain's last COMMIT, whose answer is lost, then lost with the
// primary: the asynchronous standby promoted never received it. The drain
// must learn that it did not commit and drain again on the new primary; it
// must not take a transaction ID the new primary gave to another
// transaction for its own (txid_status "committed", which the drain believed
// before: it exited 0 while the new primary held none of its drain, and the
// other drain waited for ever).
//
// Two split drains on split2, on a replicated private cluster
// (asynchronous). The first drains its partitions and waits for the merge;
// once the standby replayed that, the walsender is held (SIGSTOP) and the
// second starts, its URL leading to the primary through a proxy armed to
// lose the answer of the COMMIT that ends the drain (the merge of every
// window, the drained flags cleared). At that COMMIT the test reads the
// transaction's ID on the primary (pg_stat_activity.backend_xid), and
// SIGKILLs the primary once it committed and answered (the answer never
// reaches the drain). The standby is promoted; a second proxy, the only way
// of either drain to it, refuses connections until the test has used up the
// new primary's transaction IDs to past that one (SELECT txid_current(),
// each its own transaction), so that txid_status says "committed" for it.
// Both drains must exit 0, the second only once the new primary holds its
// drain, and the tables must equal one uninterrupted drain's (itself equal
// to the SQL oracle).
func TestFailoverSplitDrainEndLost(t *testing.T) {
	t.Parallel()
	ds := harness.Auckland2h(t)
	ref := harness.ReferenceFor(t, ds)
	began := time.Now() // the reference is shared by the tests of the process
	addr := harness.StartBroker(t)
	f := harness.NewFeed(ds, addr, 1)
	f.Steps[len(f.Steps)-1].Settle = false
	f.All(t)
	rs := harness.StartReplicaSet(t, false)
	rs.CreateDB()
	ready := time.Now()
	oldPrimary, standby := rs.Nodes[0], rs.Nodes[1]
	toOld := startPgProxy(t, fmt.Sprintf("127.0.0.1:%d", oldPrimary.Port))
	toNew := startPgProxy(t, fmt.Sprintf("127.0.0.1:%d", standby.Port))
	toNew.setDown(true)
	hosts := func(first string) string {
		return fmt.Sprintf("postgres://postgres@%s,%s/ovs?target_session_attrs=read-write&sslmode=disable", first, toNew.addr())
	}
	drainOn := func(db, parts string) *harness.Proc {
		p := harness.StartOvstream(t, nil, harness.RunArgs(db, addr, "--drain", "--partitions", parts, "--flush-interval", "50ms",
			"--allowed-lateness", ds.Lateness, "--log-level", "info")...)
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("output of the drain of %s (tail):\n%s", parts, harness.Tail(p.Output(), 40))
			}
		})
		return p
	}
	first := drainOn(hosts(fmt.Sprintf("127.0.0.1:%d", oldPrimary.Port)), harness.Split2[1])
	harness.WaitFor(t, 2*time.Minute, "the first drain waiting for the merge", func() bool {
		if harness.Exited(first) {
			t.Fatalf("the first drain ended before the second started:\n%s", harness.Tail(first.Output(), 40))
		}
		return harness.Dump(t, oldPrimary.Url("ovs"), `SELECT count(*) FROM stream_positions WHERE drained AND `+partsFilter(t, harness.Split2[1]))[0] == "[5]"
	})
	rs.WaitReplayed()
	rs.Hold()

	type stop struct {
		stage string
		port  int
		done  chan struct{}
	}
	stops := make(chan stop)
	toOld.mu.Lock()
	toOld.inspect = func(stage string, port int) {
		s := stop{stage, port, make(chan struct{})}
		stops <- s
		<-s.done
	}
	toOld.mu.Unlock()
	toOld.armNext(dropAfterDrainEnd)
	second := drainOn(hosts(toOld.addr()), harness.Split2[0])
	next := func(stage string) stop {
		t.Helper()
		deadline := time.After(2 * time.Minute)
		for {
			select {
			case s := <-stops:
				if s.stage != stage {
					t.Fatalf("the proxy stopped at %q, want %q", s.stage, stage)
				}
				return s
			case <-time.After(100 * time.Millisecond):
				if harness.Exited(second) {
					t.Fatalf("the second drain exited %d before its drain-ending COMMIT was broken:\n%s",
						second.Cmd.ProcessState.ExitCode(), harness.Tail(second.Output(), 40))
				}
			case <-deadline:
				t.Fatalf("no drain-ending COMMIT of the second drain within 2 minutes:\n%s", harness.Tail(second.Output(), 40))
			}
		}
	}
	s := next("open")
	xid := harness.Scalar[int64](t, oldPrimary.Url("postgres"),
		fmt.Sprintf(`SELECT backend_xid::text::bigint FROM pg_stat_activity WHERE client_port = %d`, s.port))
	close(s.done)
	s = next("answered")
	died := rs.KillPrimary()
	close(s.done)
	rs.WaitStandbyQuiet()
	rs.Promote()

	// The new primary's transaction IDs, used up to past the lost one.
	newDB := standby.Url("ovs")
	var from, to int64
	func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := pgx.Connect(ctx, newDB)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		for to <= xid {
			if err := conn.QueryRow(ctx, `SELECT txid_current()`).Scan(&to); err != nil {
				t.Fatal(err)
			}
			if from == 0 {
				from = to
			}
		}
	}()
	status := standby.Query("ovs", fmt.Sprintf(`SELECT txid_status(%d)`, xid))
	if status != "committed" {
		t.Fatalf("txid_status(%d) on the new primary is %q after using its IDs %d..%d, want committed", xid, status, from, to)
	}
	t.Logf("the drain-ending transaction %d committed on the old primary, lost with it; the new primary gave IDs %d..%d "+
		"to transactions of the test: txid_status(%d) says %s there", xid, from, to, xid, status)
	toNew.setDown(false)

	if code := second.Wait(t, time.Minute); code != 0 {
		t.Fatalf("the second drain exited %d; output:\n%s", code, harness.Tail(second.Output(), 40))
	}
	ended := time.Now()
	// It ended only once the new primary holds its drain: every partition
	// consumed to its high water mark, no drained flag left (the last
	// drain's commit merged everything and cleared them).
	hw := harness.HighWaterMarks(t, addr)
	var want []string
	for tp, n := range hw {
		want = append(want, fmt.Sprintf("[%s %d %d]", tp.Topic, tp.Partition, n))
	}
	got := harness.Dump(t, newDB, `SELECT topic, partition, next_offset FROM stream_positions WHERE NOT drained AND next_offset IS NOT NULL`)
	harness.SameRows(t, "stored positions on the new primary when the second drain exited 0 (each partition at its high water mark, none drained)", got, want)
	if t.Failed() {
		t.Fatalf("the second drain exited 0, yet the new primary does not hold its drain; its output:\n%s", harness.Tail(second.Output(), 30))
	}
	if code := first.Wait(t, time.Minute); code != 0 {
		t.Fatalf("the first drain exited %d; output:\n%s", code, harness.Tail(first.Output(), 40))
	}
	if n := strings.Count(second.Output(), "COMMIT outcome unknown"); n != 0 {
		t.Errorf("the second drain resynced %d times after an unknown outcome; the new primary could tell", n)
	}
	// The reference is checked against the SQL oracle (referenceFor): equal
	// to it, every table here is.
	compared, differing := harness.CompareWithReference(t, newDB, ref, "split drains, the drain-ending COMMIT lost in a failover")
	t.Logf("%d rows compared with one uninterrupted drain, %d differ; the second drain: %s", compared, differing,
		harness.LineWith(second, "summary:"))
	t.Logf("without the reference: %v to the feed and the replicated cluster, %v to the primary's death, %v from it to the second drain's exit, %v to the checks' end",
		ready.Sub(began).Round(time.Millisecond), died.Sub(ready).Round(time.Millisecond), ended.Sub(died).Round(time.Millisecond),
		time.Since(ended).Round(time.Millisecond))
}
