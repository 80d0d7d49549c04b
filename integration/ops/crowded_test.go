//go:build integration

package ops

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ovstream/ovstream/integration/harness"
	"github.com/ovstream/ovstream/migrations"
)

// slotLine is what every command logs while PostgreSQL has no connection
// slot free for it (store.LogRetry); slotGiveUp is its error after
// --connect-timeout.
const (
	slotLine   = "PostgreSQL has no connection slot free (SQLSTATE 53300: max_connections"
	slotGiveUp = "no PostgreSQL connection slot free for"
)

// A crowded database. A private cluster; ovstream runs as
// the role ovs, whose CONNECTION LIMIT the test sets (SQLSTATE 53300 "too
// many connections for role", the code max_connections gives), while the
// test's own sessions are the superuser's.
//
//  1. One rule at start-up: with no slot free, status, dlq list, serve,
//     migrate version and run each log the wait naming max_connections and
//     exit 1 after --connect-timeout saying so (before: status, dlq, serve
//     and migrate exited 1 at once; run said "cannot reach PostgreSQL yet");
//     a run started without a slot claims once one is granted.
//  2. Two pipelines, each an active instance and a standby: the standbys
//     hold their lease connection only: 2 commit and 4 lease sessions
//     (before: 4 commit sessions, each standby kept its own).
//  3. The limit is lowered to the sessions open less two, and both active
//     instances' commit sessions are terminated: no slot is free, a third
//     standby waits for one at start-up. Both active instances commit what
//     the test produces after that point (before: they could not connect
//     again and committed nothing), no standby claims, and no session of
//     ovs is added.
//  4. Slots again: each pipeline drains to the SQL oracle's result.
func TestCrowdedDatabase(t *testing.T) {
	pg := harness.StartPrivatePG(t)
	admin := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", pg.Port)
	harness.ExecSQL(t, admin, `CREATE ROLE ovs LOGIN`)
	harness.ExecSQL(t, admin, `CREATE DATABASE ovs OWNER ovs`)
	db := fmt.Sprintf("postgres://ovs@127.0.0.1:%d/ovs?sslmode=disable", pg.Port) // ovstream's
	su := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/ovs?sslmode=disable", pg.Port)
	ctx := harness.OpsCtx(t)
	if err := migrations.Up(ctx, db); err != nil {
		t.Fatal(err)
	}
	limit := func(n int) { harness.ExecSQL(t, admin, fmt.Sprintf(`ALTER ROLE ovs CONNECTION LIMIT %d`, n)) }
	addr := harness.StartBroker(t)
	base := time.Date(2016, 5, 18, 20, 0, 0, 0, time.UTC)
	harness.ProduceRecords(t, addr, harness.Events(1, 20, base)...)

	// 1. No slot at all: every command waits by the one rule, then gives up.
	limit(0)
	for _, args := range [][]string{
		{"status", "--database-url", db, "--brokers", addr, "--pipeline", "p1"},
		{"dlq", "list", "--database-url", db, "--pipeline", "p1"},
		{"serve", "--database-url", db, "--pipeline", "p1", "--addr", "127.0.0.1:0"},
		{"migrate", "version", "--database-url", db},
		harness.RunArgs(db, addr, "--pipeline", "p1", "--topics", harness.PredictionsTopic+","),
	} {
		p := harness.StartOvstream(t, harness.CliEnv(), append(args, "--connect-timeout", "1s")...)
		code := p.Wait(t, time.Minute)
		out := p.Output()
		if code != 1 || strings.Count(out, slotLine) < 2 || !strings.Contains(out, slotGiveUp) {
			t.Errorf("%s with no connection slot free: exit %d; want exit 1 after at least two waits logged (%q) and %q:\n%s",
				strings.Join(args[:2], " "), code, slotLine, slotGiveUp, harness.Tail(out, 15))
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	flags := []string{"--topics", harness.PredictionsTopic + ",", "--connect-timeout", "5m"}
	a1 := harness.StartOvstream(t, harness.CliEnv(), harness.RunArgs(db, addr, append([]string{"--pipeline", "p1"}, flags...)...)...)
	harness.WaitLog(t, a1, slotLine, time.Minute)
	limit(100)
	harness.WaitLog(t, a1, harness.ClaimedLine, time.Minute)
	a2 := harness.StartOvstream(t, harness.CliEnv(), harness.RunArgs(db, addr, append([]string{"--pipeline", "p2"}, flags...)...)...)
	harness.WaitLog(t, a2, harness.ClaimedLine, time.Minute)

	// 2. A standby holds its lease connection only.
	s1 := harness.StartOvstream(t, harness.CliEnv(), harness.RunArgs(db, addr, append([]string{"--pipeline", "p1"}, flags...)...)...)
	s2 := harness.StartOvstream(t, harness.CliEnv(), harness.RunArgs(db, addr, append([]string{"--pipeline", "p2"}, flags...)...)...)
	harness.WaitLog(t, s1, harness.StandbyLine, time.Minute)
	harness.WaitLog(t, s2, harness.StandbyLine, time.Minute)
	const sessions = `SELECT application_name, count(*) FROM pg_stat_activity WHERE usename = 'ovs' GROUP BY 1`
	want := []string{"[ovstream 2]", "[ovstream-lease 4]"}
	if !harness.Eventually(30*time.Second, func() bool { return fmt.Sprint(harness.Dump(t, su, sessions)) == fmt.Sprint(want) }) {
		t.Fatalf("sessions of two active instances and two standbys: %v, want %v (a standby holds its lease connection only)",
			harness.Dump(t, su, sessions), want)
	}

	// 3. No slot free, a newcomer waiting for one, and the active
	// instances' commit sessions gone.
	limit(4)
	s3 := harness.StartOvstream(t, harness.CliEnv(), harness.RunArgs(db, addr, append([]string{"--pipeline", "p1"}, flags...)...)...)
	harness.WaitLog(t, s3, slotLine, time.Minute)
	if got := harness.Dump(t, su, `SELECT count(pg_terminate_backend(pid, 10000)) FROM pg_stat_activity
		WHERE usename = 'ovs' AND application_name = 'ovstream'`); fmt.Sprint(got) != "[[2]]" {
		t.Fatalf("terminated %v commit sessions, want 2", got)
	}
	terminated := time.Now()
	harness.ProduceRecords(t, addr, harness.Events(21, 20, base.Add(20*time.Minute))...)
	for _, pl := range []string{"p1", "p2"} {
		a := map[string]*harness.Proc{"p1": a1, "p2": a2}[pl]
		if !harness.Eventually(2*time.Minute, func() bool {
			return harness.StoredConsumedOf(t, su, pl)[harness.PredictionsTopic+"/0"] >= 40 || harness.Exited(a)
		}) || harness.Exited(a) {
			t.Fatalf("pipeline %s committed %v of 40 records after its commit session was terminated with no slot free; output:\n%s",
				pl, harness.StoredConsumedOf(t, su, pl), harness.Tail(a.Output(), 30))
		}
		t.Logf("pipeline %s: the records produced after its commit session was terminated committed %v later, with no slot free",
			pl, time.Since(terminated).Round(time.Millisecond))
		if !strings.Contains(a.Output(), "commits go on on the lease connection") {
			t.Errorf("pipeline %s: its active instance does not say that it commits on its lease connection:\n%s", pl, harness.Tail(a.Output(), 30))
		}
	}
	if n := harness.Dump(t, su, `SELECT count(*) FROM pg_stat_activity WHERE usename = 'ovs'`); fmt.Sprint(n) != "[[4]]" {
		t.Errorf("%v sessions of ovs while no slot was free, want the 4 that were left", n)
	}
	for _, s := range []*harness.Proc{s1, s2, s3} {
		if harness.Exited(s) || strings.Contains(s.Output(), harness.ClaimedLine) {
			t.Fatalf("a standby exited or claimed while the active instances lived:\n%s", harness.Tail(s.Output(), 20))
		}
	}
	if !strings.Contains(s3.Output(), slotLine) || strings.Contains(s3.Output(), harness.StandbyLine) {
		t.Fatalf("the newcomer did not wait for a slot:\n%s", harness.Tail(s3.Output(), 20))
	}

	// 4. Slots again: stop everything; each pipeline drains to the oracle.
	limit(100)
	for _, p := range []*harness.Proc{s3, s1, s2, a1, a2} {
		stopProc(t, p)
	}
	for _, pl := range []string{"p1", "p2"} {
		harness.Drain(t, db, addr, "--pipeline", pl, "--topics", harness.PredictionsTopic+",")
	}
	harness.LoadOracleInput(t, su, addr, harness.PredictionsTopic)
	oracle := harness.Dump(t, su, harness.OracleAggregates)
	if len(oracle) != 8*4 {
		t.Fatalf("%d oracle rows, want 32 (8 windows x 4 dimensions)", len(oracle))
	}
	for _, pl := range []string{"p1", "p2"} {
		harness.SameRows(t, "delay_aggregates of "+pl+" vs SQL oracle", harness.Dump(t, su, harness.DumpAggregates+" WHERE pipeline = '"+pl+"'"), oracle)
	}
}

// stopProc sends SIGTERM to p and requires exit 0 within a minute.
func stopProc(t *testing.T, p *harness.Proc) {
	t.Helper()
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	if code := p.Wait(t, time.Minute); code != 0 {
		t.Fatalf("SIGTERM: exit %d, want 0:\n%s", code, harness.Tail(p.Output(), 30))
	}
}
