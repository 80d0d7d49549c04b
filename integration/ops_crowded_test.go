//go:build integration

package integration

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

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
	pg := startPrivatePG(t)
	admin := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", pg.port)
	execSQL(t, admin, `CREATE ROLE ovs LOGIN`)
	execSQL(t, admin, `CREATE DATABASE ovs OWNER ovs`)
	db := fmt.Sprintf("postgres://ovs@127.0.0.1:%d/ovs?sslmode=disable", pg.port) // ovstream's
	su := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/ovs?sslmode=disable", pg.port)
	ctx := opsCtx(t)
	if err := migrations.Up(ctx, db); err != nil {
		t.Fatal(err)
	}
	limit := func(n int) { execSQL(t, admin, fmt.Sprintf(`ALTER ROLE ovs CONNECTION LIMIT %d`, n)) }
	addr := startBroker(t)
	base := time.Date(2016, 5, 18, 20, 0, 0, 0, time.UTC)
	produceRecords(t, addr, events(1, 20, base)...)

	// 1. No slot at all: every command waits by the one rule, then gives up.
	limit(0)
	for _, args := range [][]string{
		{"status", "--database-url", db, "--brokers", addr, "--pipeline", "p1"},
		{"dlq", "list", "--database-url", db, "--pipeline", "p1"},
		{"serve", "--database-url", db, "--pipeline", "p1", "--addr", "127.0.0.1:0"},
		{"migrate", "version", "--database-url", db},
		runArgs(db, addr, "--pipeline", "p1", "--topics", predictionsTopic+","),
	} {
		p := startOvstream(t, cliEnv(), append(args, "--connect-timeout", "1s")...)
		code := p.wait(t, time.Minute)
		out := p.output()
		if code != 1 || strings.Count(out, slotLine) < 2 || !strings.Contains(out, slotGiveUp) {
			t.Errorf("%s with no connection slot free: exit %d; want exit 1 after at least two waits logged (%q) and %q:\n%s",
				strings.Join(args[:2], " "), code, slotLine, slotGiveUp, tail(out, 15))
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	flags := []string{"--topics", predictionsTopic + ",", "--connect-timeout", "5m"}
	a1 := startOvstream(t, cliEnv(), runArgs(db, addr, append([]string{"--pipeline", "p1"}, flags...)...)...)
	waitLog(t, a1, slotLine, time.Minute)
	limit(100)
	waitLog(t, a1, claimedLine, time.Minute)
	a2 := startOvstream(t, cliEnv(), runArgs(db, addr, append([]string{"--pipeline", "p2"}, flags...)...)...)
	waitLog(t, a2, claimedLine, time.Minute)

	// 2. A standby holds its lease connection only.
	s1 := startOvstream(t, cliEnv(), runArgs(db, addr, append([]string{"--pipeline", "p1"}, flags...)...)...)
	s2 := startOvstream(t, cliEnv(), runArgs(db, addr, append([]string{"--pipeline", "p2"}, flags...)...)...)
	waitLog(t, s1, standbyLine, time.Minute)
	waitLog(t, s2, standbyLine, time.Minute)
	const sessions = `SELECT application_name, count(*) FROM pg_stat_activity WHERE usename = 'ovs' GROUP BY 1`
	want := []string{"[ovstream 2]", "[ovstream-lease 4]"}
	if !eventually(30*time.Second, func() bool { return fmt.Sprint(dump(t, su, sessions)) == fmt.Sprint(want) }) {
		t.Fatalf("sessions of two active instances and two standbys: %v, want %v (a standby holds its lease connection only)",
			dump(t, su, sessions), want)
	}

	// 3. No slot free, a newcomer waiting for one, and the active
	// instances' commit sessions gone.
	limit(4)
	s3 := startOvstream(t, cliEnv(), runArgs(db, addr, append([]string{"--pipeline", "p1"}, flags...)...)...)
	waitLog(t, s3, slotLine, time.Minute)
	if got := dump(t, su, `SELECT count(pg_terminate_backend(pid, 10000)) FROM pg_stat_activity
		WHERE usename = 'ovs' AND application_name = 'ovstream'`); fmt.Sprint(got) != "[[2]]" {
		t.Fatalf("terminated %v commit sessions, want 2", got)
	}
	terminated := time.Now()
	produceRecords(t, addr, events(21, 20, base.Add(20*time.Minute))...)
	for _, pl := range []string{"p1", "p2"} {
		a := map[string]*proc{"p1": a1, "p2": a2}[pl]
		if !eventually(2*time.Minute, func() bool { return storedConsumedOf(t, su, pl)[predictionsTopic+"/0"] >= 40 || exited(a) }) || exited(a) {
			t.Fatalf("pipeline %s committed %v of 40 records after its commit session was terminated with no slot free; output:\n%s",
				pl, storedConsumedOf(t, su, pl), tail(a.output(), 30))
		}
		t.Logf("pipeline %s: the records produced after its commit session was terminated committed %v later, with no slot free",
			pl, time.Since(terminated).Round(time.Millisecond))
		if !strings.Contains(a.output(), "commits go on on the lease connection") {
			t.Errorf("pipeline %s: its active instance does not say that it commits on its lease connection:\n%s", pl, tail(a.output(), 30))
		}
	}
	if n := dump(t, su, `SELECT count(*) FROM pg_stat_activity WHERE usename = 'ovs'`); fmt.Sprint(n) != "[[4]]" {
		t.Errorf("%v sessions of ovs while no slot was free, want the 4 that were left", n)
	}
	for _, s := range []*proc{s1, s2, s3} {
		if exited(s) || strings.Contains(s.output(), claimedLine) {
			t.Fatalf("a standby exited or claimed while the active instances lived:\n%s", tail(s.output(), 20))
		}
	}
	if !strings.Contains(s3.output(), slotLine) || strings.Contains(s3.output(), standbyLine) {
		t.Fatalf("the newcomer did not wait for a slot:\n%s", tail(s3.output(), 20))
	}

	// 4. Slots again: stop everything; each pipeline drains to the oracle.
	limit(100)
	for _, p := range []*proc{s3, s1, s2, a1, a2} {
		stopProc(t, p)
	}
	for _, pl := range []string{"p1", "p2"} {
		drain(t, db, addr, "--pipeline", pl, "--topics", predictionsTopic+",")
	}
	loadOracleInput(t, su, addr, predictionsTopic)
	oracle := dump(t, su, oracleAggregates)
	if len(oracle) != 8*4 {
		t.Fatalf("%d oracle rows, want 32 (8 windows x 4 dimensions)", len(oracle))
	}
	for _, pl := range []string{"p1", "p2"} {
		sameRows(t, "delay_aggregates of "+pl+" vs SQL oracle", dump(t, su, dumpAggregates+" WHERE pipeline = '"+pl+"'"), oracle)
	}
}

// stopProc sends SIGTERM to p and requires exit 0 within a minute.
func stopProc(t *testing.T, p *proc) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t, time.Minute); code != 0 {
		t.Fatalf("SIGTERM: exit %d, want 0:\n%s", code, tail(p.output(), 30))
	}
}
