//go:build integration

package crash

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/integration/harness"
	"github.com/ovstream/ovstream/store"
)

// Static membership (, as KIP-345's group.instance.id): a
// process restarted at once after SIGKILL (an OOM kill; systemd or
// Kubernetes restarts it) is a new owner, and without --instance-id it waits
// its dead predecessor's whole lease (15 s by default) while the pipeline
// stands still. With the same --instance-id it claims at once: the
// predecessor's lease session is gone from pg_stat_activity. A second live
// process with the same id does not take over (no fencing in turn): it waits
// as a standby, saying that two processes share an id. Another id still
// waits the lease. The result equals the SQL oracle.
func TestInstanceIDRestartClaimsAtOnce(t *testing.T) {
	t.Parallel()
	addr, db := harness.StartBroker(t), harness.FreshDB(t)
	total, half, second := harness.ProduceFirstHalf(t, addr)
	args := func(id string) []string {
		return harness.RunArgs(db, addr, "--pipeline", "static", "--metrics-addr", "127.0.0.1:0", "--flush-interval", "200ms",
			"--log-level", "info", "--instance-id", id)
	}
	committed := func(ops string, n int) func() bool { return harness.CommittedIn(t, db, "static", ops, n) }

	a := harness.StartOvstream(t, nil, args("pod-0")...)
	harness.WaitFor(t, time.Minute, "the first half consumed and committed", committed(harness.OpsAddr(t, a), half))
	a.Kill()
	<-a.Done

	restarted := time.Now()
	b := harness.StartOvstream(t, nil, args("pod-0")...)
	opsB := harness.OpsAddr(t, b)
	harness.WaitLog(t, b, harness.ClaimedLine, 2*time.Minute)
	claimedAfter := time.Since(restarted)
	harness.WaitFor(t, time.Minute, "a commit of the restarted process", func() bool { return harness.Scrape(t, opsB)["ovstream_commits_total"] > 0 })
	committedAfter := time.Since(restarted)
	line := harness.LineWith(b, harness.ClaimedLine)
	// Taken while the predecessor's lease was alive: not a wait for its expiry.
	if !strings.Contains(line, "restarted_from=") || !strings.Contains(line, "alive (heartbeat") ||
		strings.Contains(b.Output(), harness.StandbyLine) {
		t.Fatalf("the restart with the same --instance-id did not take the partitions of its dead predecessor at once:\n%s",
			harness.Tail(b.Output(), 20))
	}
	t.Logf("restart with the same --instance-id (lease 15s): claimed %v, first commit %v after the start",
		claimedAfter.Round(time.Millisecond), committedAfter.Round(time.Millisecond))
	// status lists the instances that run: the dead incarnation's row went
	// with the claim that took its partitions.
	if got := statusInstances(t, db, addr); len(got) != 1 || !strings.HasPrefix(got[0], "pod-0@") || !strings.HasSuffix(got[0], " alive") ||
		strings.Contains(line, "restarted_from="+strings.TrimSuffix(got[0], " alive")) {
		t.Errorf("status --json lists instances %q after the restart, want the restarted process alone, alive", got)
	}

	// A second live process with the same id waits and says why; b goes on.
	twin := harness.StartOvstream(t, nil, args("pod-0")...)
	harness.WaitLog(t, twin, "two processes share an instance id", time.Minute)
	harness.ProduceFeeds(t, addr, second)
	harness.WaitFor(t, time.Minute, "the second half consumed and committed by the live process", committed(opsB, total))
	if strings.Contains(twin.Output(), harness.ClaimedLine) || strings.Contains(b.Output(), "fenced") {
		t.Fatalf("a second process with the same id took over:\ntwin:\n%s\nlive:\n%s", harness.Tail(twin.Output(), 20), harness.Tail(b.Output(), 20))
	}
	if err := twin.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := twin.Wait(t, time.Minute); code != 0 {
		t.Fatalf("the waiting twin exited %d after SIGTERM:\n%s", code, twin.Output())
	}

	// Another id after a SIGKILL still waits for the lease.
	b.Kill()
	<-b.Done
	c := harness.StartOvstream(t, nil, args("pod-1")...)
	harness.WaitLog(t, c, harness.StandbyLine, time.Minute)
	harness.WaitLog(t, c, harness.ClaimedLine, time.Minute)
	if line := harness.LineWith(c, harness.ClaimedLine); !strings.Contains(line, "expired (heartbeat") || strings.Contains(line, "restarted_from=") {
		t.Fatalf("another instance id claimed before the lease expired: %s", line)
	}
	harness.WaitFor(t, time.Minute, "everything committed again", committed(harness.OpsAddr(t, c), total))
	harness.StopDrainCompare(t, c, db, addr, "static", total, "delay_aggregates after restarts with --instance-id vs SQL oracle")
}

// statusInstances returns the instances of pipeline static that
// `status --json` lists, each as its owner, then " alive" when its
// heartbeat is younger than the lease.
func statusInstances(t *testing.T, db, addr string) []string {
	t.Helper()
	stdout, stderr, code := harness.RunCLI(t, nil, "status", "--json", "--pipeline", "static", "--database-url", db, "--brokers", addr)
	var st struct {
		Instances []struct {
			Owner string `json:"owner"`
			Alive bool   `json:"alive"`
		} `json:"instances"`
	}
	if err := json.Unmarshal([]byte(stdout), &st); code != 0 || err != nil {
		t.Fatalf("status --json: exit %d, %v\n%s", code, err, stderr)
	}
	var out []string
	for _, in := range st.Instances {
		s := in.Owner
		if in.Alive {
			s += " alive"
		}
		out = append(out, s)
	}
	return out
}

// restartedOwners compares pg_stat_activity.backend_start
// with the one the holder's heartbeat recorded. For a session of another
// role, a claimer without pg_read_all_stats reads backend_start as NULL, so
// NOT EXISTS holds and a LIVE holder with the same --instance-id counts as
// a dead predecessor: its partitions are taken at once.
func TestInstanceIDLiveHolderOfAnotherRoleHeld(t *testing.T) {
	ctx := harness.TestCtx(t)
	db := harness.FreshDB(t)
	role := fmt.Sprintf("ovs_otherrole_%d", time.Now().UnixNano()%1_000_000_000)
	harness.ExecSQL(t, db, fmt.Sprintf(`CREATE ROLE %[1]s LOGIN;
GRANT USAGE, CREATE ON SCHEMA public TO %[1]s;
GRANT ALL ON ALL TABLES IN SCHEMA public TO %[1]s;
GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO %[1]s;`, role))
	t.Cleanup(func() {
		for _, q := range []struct{ db, sql string }{{db, "DROP OWNED BY " + role}, {harness.TestDatabaseURL(), "DROP ROLE IF EXISTS " + role}} {
			if c, err := pgx.Connect(context.Background(), q.db); err == nil {
				_, _ = c.Exec(context.Background(), q.sql)
				c.Close(context.Background())
			}
		}
	})
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	dbB := u.String()

	a, err := store.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	parts := []aggregate.PartitionID{{Topic: "t", Partition: 0}}
	opts := store.ClaimOptions{Lease: time.Minute, InstanceID: "pod-0"}
	if _, err := a.Claim(ctx, "sid", "pod-0@a:1-x", parts, opts); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Heartbeat(ctx, "sid", "pod-0@a:1-x", store.RoleActive, parts, true, time.Time{}); err != nil {
		t.Fatal(err)
	}
	b, err := store.Open(ctx, dbB)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(context.Background())
	c, err := b.Claim(ctx, "sid", "pod-0@b:2-y", parts, opts)
	var held *store.HeldError
	if !errors.As(err, &held) {
		t.Errorf("a second process with the same --instance-id (another role) claimed a live holder's partitions: err %v, restarted_from %v",
			err, strings.Join(c.Restarted, ","))
	}
	// a is alive: its heartbeat session is there.
	if _, err := a.Heartbeat(ctx, "sid", "pod-0@a:1-x", store.RoleActive, parts, false, time.Time{}); err != nil {
		t.Fatal(err)
	}
}
