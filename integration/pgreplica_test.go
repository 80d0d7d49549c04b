//go:build integration

package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/migrations"
)

// pgReplicaSet is a replicated private cluster of the test's own: a primary
// and a hot standby streaming from it through a physical replication slot,
// each on a free port of 127.0.0.1, asynchronous or synchronous
// (synchronous_commit=on with the standby as synchronous_standby_names).
// wal_log_hints=on lets pg_rewind turn a dead primary into a replica of the
// promoted standby. Nodes are named "node0" (the first primary) and "node1";
// the name is the node's cluster_name, hence the application_name its
// walreceiver reports, and its replication slot on the other node.
// Everything is stopped and removed when the test ends, also on failure.
type pgReplicaSet struct {
	t       *testing.T
	sync    bool
	nodes   [2]*pgNode
	primary int // index of the node that is the primary now
}

// pgNode is one node of a pgReplicaSet.
type pgNode struct {
	*privatePG
	name string
	held []int // processes stopped by hold, continued at the test's end
}

// replicaConf is written to every node's postgresql.conf at initdb (and so
// copied by pg_basebackup and pg_rewind); node.conf holds what is the node's
// own and is rewritten after every copy.
const replicaConf = "wal_level = replica\nmax_wal_senders = 5\nmax_replication_slots = 5\nwal_log_hints = on\n" +
	"hot_standby = on\nwal_keep_size = '256MB'\nwal_receiver_status_interval = 1s\nsynchronous_commit = on\n" +
	"wal_retrieve_retry_interval = '100ms'\n" + // a promotion waits for it when the stream is gone
	"include_if_exists = 'node.conf'\n"

// startReplicaSet initializes node0 as the primary, copies it to node1 with
// pg_basebackup -R -C -S and starts node1 as its hot standby; it returns once
// node1 streams (and, when sync, is the synchronous standby).
func startReplicaSet(t *testing.T, sync bool) *pgReplicaSet {
	t.Helper()
	began := time.Now()
	rs := &pgReplicaSet{t: t, sync: sync}
	for i := range rs.nodes {
		n := &pgNode{privatePG: newPrivatePG(t), name: fmt.Sprintf("node%d", i)}
		rs.nodes[i] = n
		t.Cleanup(func() { // a stopped walsender would hold up the stop
			for _, pid := range n.held {
				_ = syscall.Kill(pid, syscall.SIGCONT)
			}
		})
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range rs.nodes {
				b, _ := os.ReadFile(filepath.Join(filepath.Dir(n.dir), "log"))
				lines := strings.Split(strings.TrimSpace(string(b)), "\n")
				t.Logf("%s's server log (last lines):\n%s", n.name, strings.Join(lines[max(0, len(lines)-25):], "\n"))
			}
		}
	})
	a, b := rs.nodes[0], rs.nodes[1]
	a.run("initdb", "-D", a.dir, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8")
	a.appendConf("postgresql.conf", replicaConf)
	a.appendConf("pg_hba.conf", "host replication postgres 127.0.0.1/32 trust\n")
	rs.writeNodeConf(0, true)
	a.start()
	b.run("pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(a.port), "-U", "postgres", "-D", b.dir,
		"-X", "stream", "-R", "-C", "-S", b.name, "--no-sync")
	rs.writeNodeConf(1, false)
	b.start()
	rs.waitStreaming(0, 1)
	t.Logf("replicated private PostgreSQL (%s): primary %s on port %d, hot standby %s on port %d, ready in %v",
		rs.mode(), a.name, a.port, b.name, b.port, time.Since(began).Round(time.Millisecond))
	return rs
}

func (rs *pgReplicaSet) mode() string {
	if rs.sync {
		return "synchronous"
	}
	return "asynchronous"
}

// writeNodeConf (re)writes node i's own settings: port, socket folder,
// cluster_name and synchronous_standby_names: the other node on the primary
// of a synchronous set once that node streams (withStandby), else none (a
// standby, once promoted, commits alone).
func (rs *pgReplicaSet) writeNodeConf(i int, withStandby bool) {
	n := rs.nodes[i]
	conf := n.baseConf() + fmt.Sprintf("cluster_name = '%s'\n", n.name)
	if rs.sync && withStandby {
		conf += fmt.Sprintf("synchronous_standby_names = '%s'\n", rs.nodes[1-i].name)
	} else {
		conf += "synchronous_standby_names = ''\n"
	}
	n.writeConf("node.conf", conf, os.O_TRUNC)
}

// exec runs sql on node n (database db).
func (n *pgNode) exec(db, sql string) {
	n.t.Helper()
	execSQL(n.t, n.url(db), sql)
}

// url is a libpq URL of database db on node i.
func (n *pgNode) url(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", n.port, db)
}

// multiHostURL is what `run` is given: both nodes, the session on whichever
// accepts writes (pgx tries the hosts in order).
func (rs *pgReplicaSet) multiHostURL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/%s?target_session_attrs=read-write&sslmode=disable",
		rs.nodes[0].port, rs.nodes[1].port, db)
}

// query returns the one value, as text, of sql on node n (database db);
// NULL is "".
func (n *pgNode) query(db, sql string) string {
	n.t.Helper()
	if v := scalar[*string](n.t, n.url(db), sql); v != nil {
		return *v
	}
	return ""
}

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

// waitStreaming waits until node standby streams from node primary (and is
// its synchronous standby in a synchronous set).
func (rs *pgReplicaSet) waitStreaming(primary, standby int) {
	rs.t.Helper()
	p, s := rs.nodes[primary], rs.nodes[standby]
	want := "streaming async"
	if rs.sync {
		want = "streaming sync"
	}
	var got string
	deadline := time.Now().Add(time.Minute)
	for {
		got = p.query("postgres", `SELECT coalesce(min(state || ' ' || sync_state), '') FROM pg_stat_replication WHERE application_name = '`+s.name+`'`)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			rs.t.Fatalf("%s does not stream from %s within a minute: %q, want %q", s.name, p.name, got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// createDB creates database ovs on the primary, applies every migration
// through the primary's URL and waits until the standby replayed it all;
// it returns the multi-host URL of the database.
func (rs *pgReplicaSet) createDB() string {
	rs.t.Helper()
	p := rs.nodes[rs.primary]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.url("postgres"))
	if err != nil {
		rs.t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE ovs"); err != nil {
		rs.t.Fatal(err)
	}
	if err := migrations.Up(ctx, p.url("ovs")); err != nil {
		rs.t.Fatal(err)
	}
	rs.waitReplayed()
	return rs.multiHostURL("ovs")
}

// lagBytes is how many bytes of WAL the primary wrote that the standby has
// not replayed: pg_current_wal_lsn() on the primary minus
// pg_last_wal_replay_lsn() on the standby.
func (rs *pgReplicaSet) lagBytes() int64 {
	rs.t.Helper()
	p, s := rs.nodes[rs.primary], rs.nodes[1-rs.primary]
	replayed := s.query("postgres", "SELECT pg_last_wal_replay_lsn()::text")
	diff := p.query("postgres", "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '"+replayed+"')::bigint::text")
	n, err := strconv.ParseInt(diff, 10, 64)
	if err != nil {
		rs.t.Fatal(err)
	}
	return n
}

// waitReplayed waits until the standby replayed everything the primary wrote.
func (rs *pgReplicaSet) waitReplayed() {
	rs.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for rs.lagBytes() > 0 {
		if time.Now().After(deadline) {
			rs.t.Fatalf("the standby does not catch up within a minute (%d bytes behind)", rs.lagBytes())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitStandbyQuiet waits, once the primary is dead, until the standby's
// walreceiver no longer streams and its replay stopped moving (it replayed
// every whole record it received; pg_last_wal_receive_lsn may stay ahead,
// inside a record received in part).
func (rs *pgReplicaSet) waitStandbyQuiet() {
	rs.t.Helper()
	s := rs.nodes[1-rs.primary]
	deadline := time.Now().Add(30 * time.Second)
	last, same := "", 0
	for same < 5 {
		if time.Now().After(deadline) {
			rs.t.Fatalf("%s still streams or replays 30 s after its primary died", s.name)
		}
		time.Sleep(20 * time.Millisecond)
		lsn := s.query("postgres", `SELECT CASE WHEN EXISTS (SELECT FROM pg_stat_wal_receiver WHERE status = 'streaming') THEN 'streaming'
			ELSE pg_last_wal_replay_lsn()::text END`)
		if lsn != "streaming" && lsn == last {
			same++
		} else {
			same = 0
		}
		last = lsn
	}
}

// hold stops (SIGSTOP) the walsenders of the primary: the standby receives
// nothing more while commits on the primary go on (asynchronous) or wait
// (synchronous). release continues them; the test's end does too.
func (rs *pgReplicaSet) hold() (release func()) {
	rs.t.Helper()
	p := rs.nodes[rs.primary]
	pids := p.query("postgres", "SELECT string_agg(pid::text, ' ') FROM pg_stat_replication")
	var stopped []int
	for _, f := range strings.Fields(pids) {
		pid, _ := strconv.Atoi(f)
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			rs.t.Fatalf("SIGSTOP walsender %d: %v", pid, err)
		}
		stopped = append(stopped, pid)
	}
	if len(stopped) == 0 {
		rs.t.Fatalf("%s has no walsender to hold", p.name)
	}
	p.held = append(p.held, stopped...)
	return func() {
		for _, pid := range stopped {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
}

// postmasterPID reads the postmaster's pid from postmaster.pid.
func (n *pgNode) postmasterPID() int {
	n.t.Helper()
	b, err := os.ReadFile(filepath.Join(n.dir, "postmaster.pid"))
	if err != nil {
		n.t.Fatalf("%s: %v", n.name, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil {
		n.t.Fatalf("%s: postmaster.pid: %v", n.name, err)
	}
	return pid
}

// childrenOf lists the processes whose parent is pid (from /proc).
func childrenOf(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, _ := procStat(c); ppid == pid {
			out = append(out, c)
		}
	}
	return out
}

// procStat returns the parent and the state (R, S, T, Z ...) of process pid,
// or 0 and "" when it is gone.
func procStat(pid int) (ppid int, state string) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, ""
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 2 {
		return 0, ""
	}
	ppid, _ = strconv.Atoi(f[1])
	return ppid, f[0]
}

// kill9 is a machine losing its PostgreSQL: the postmaster and every child
// of it are frozen at once (SIGSTOP, so no backend commits after its
// postmaster is gone), then SIGKILLed; it returns when all are gone, with
// the shared memory segment removed and postmaster.pid deleted (nothing is
// left running on the data folder).
func (n *pgNode) kill9() time.Time {
	n.t.Helper()
	pm := n.postmasterPID()
	pids := append([]int{pm}, childrenOf(pm)...)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGSTOP)
	}
	pids = append(pids, childrenOf(pm)...) // forked between the listing and the stop
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	died := time.Now()
	deadline := died.Add(30 * time.Second)
	for _, pid := range pids {
		for {
			if _, st := procStat(pid); st == "" || st == "Z" || st == "X" {
				break
			}
			if time.Now().After(deadline) {
				n.t.Fatalf("%s: process %d survives SIGKILL", n.name, pid)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	n.held = nil
	pidFile := filepath.Join(n.dir, "postmaster.pid")
	b, _ := os.ReadFile(pidFile) // line 7: shared memory key and id
	if lines := strings.Split(string(b), "\n"); len(lines) >= 7 {
		if fs := strings.Fields(lines[6]); len(fs) == 2 {
			_ = exec.Command("ipcrm", "-m", fs[1]).Run()
		}
	}
	// The lock files name a dead postmaster, which may stay a zombie when
	// nothing reaps it (a container's init): PostgreSQL would refuse them.
	sock := filepath.Join(filepath.Dir(n.dir), fmt.Sprintf(".s.PGSQL.%d", n.port))
	for _, f := range []string{pidFile, sock + ".lock", sock} {
		if err := os.Remove(f); err != nil && !os.IsNotExist(err) {
			n.t.Fatal(err)
		}
	}
	n.t.Logf("%s (port %d): postmaster %d and %d children SIGKILLed", n.name, n.port, pm, len(pids)-1)
	return died
}

// killPrimary SIGKILLs the primary; it returns the moment it died.
func (rs *pgReplicaSet) killPrimary() time.Time {
	rs.t.Helper()
	return rs.nodes[rs.primary].kill9()
}

// promote promotes the standby (pg_ctl promote) and waits until it accepts
// writes; it is the primary from then on.
func (rs *pgReplicaSet) promote() {
	rs.t.Helper()
	s := 1 - rs.primary
	n := rs.nodes[s]
	began := time.Now()
	n.run("pg_ctl", "-D", n.dir, "-w", "-t", "60", "promote")
	for n.query("postgres", "SELECT pg_is_in_recovery()::text") != "false" {
		time.Sleep(20 * time.Millisecond)
	}
	rs.primary = s
	rs.writeNodeConf(s, false) // alone now: no synchronous standby to wait for
	n.exec("postgres", "SELECT pg_reload_conf()")
	rs.t.Logf("%s promoted in %v", n.name, time.Since(began).Round(time.Millisecond))
}

// rejoin turns the dead old primary into a hot standby of the new one:
// pg_rewind from the new primary (a replication slot for it created first),
// then standby.signal, primary_conninfo and primary_slot_name, start, and
// wait until it streams (as the synchronous standby when sync).
func (rs *pgReplicaSet) rejoin() {
	rs.t.Helper()
	p, old := rs.nodes[rs.primary], rs.nodes[1-rs.primary]
	began := time.Now()
	p.exec("postgres", `SELECT pg_create_physical_replication_slot('`+old.name+`', true)
		WHERE NOT EXISTS (SELECT FROM pg_replication_slots WHERE slot_name = '`+old.name+`')`)
	// The promotion's end-of-recovery checkpoint runs in the background:
	// until a checkpoint, the control file pg_rewind reads still names the
	// old timeline ("no rewind required").
	p.exec("postgres", "CHECKPOINT")
	src := fmt.Sprintf("host=127.0.0.1 port=%d user=postgres", p.port)
	c := old.cmd("pg_rewind", "--target-pgdata", old.dir, "--source-server", src+" dbname=postgres", "--no-sync")
	out, err := exec.Command(c[0], c[1:]...).CombinedOutput()
	if err != nil {
		rs.t.Fatalf("%v: %v\n%s", c, err, out)
	}
	var said []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "pg_rewind: ") {
			said = append(said, l)
		}
	}
	rs.t.Logf("pg_rewind of %s from %s:\n%s", old.name, p.name, strings.Join(said, "\n"))
	rs.writeNodeConf(1-rs.primary, false)
	old.writeConf("postgresql.auto.conf", fmt.Sprintf("primary_conninfo = '%s'\nprimary_slot_name = '%s'\n", src, old.name), os.O_TRUNC)
	old.writeConf("standby.signal", "", os.O_TRUNC)
	old.start()
	if rs.sync {
		rs.writeNodeConf(rs.primary, true)
		p.exec("postgres", "SELECT pg_reload_conf()")
	}
	rs.waitStreaming(rs.primary, 1-rs.primary)
	rs.t.Logf("%s rejoined as a hot standby of %s in %v", old.name, p.name, time.Since(began).Round(time.Millisecond))
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
			rs := startReplicaSet(t, sync)
			db := rs.multiHostURL("postgres")
			exec1 := func(sql string) error { return tryExec(db, sql) }
			if err := exec1("CREATE TABLE acks (n int)"); err != nil {
				t.Fatal(err)
			}
			if err := exec1("INSERT INTO acks VALUES (1)"); err != nil {
				t.Fatal(err)
			}
			rs.waitReplayed()
			release := rs.hold()
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
			lag := rs.lagBytes()
			if lag <= 0 {
				t.Fatalf("standby %d bytes behind with the stream held, want > 0", lag)
			}
			t.Logf("held the stream: the standby is %d bytes of WAL behind", lag)
			onPrimary := rs.nodes[rs.primary].query("postgres", "SELECT string_agg(n::text, ',' ORDER BY n) FROM acks")
			rs.killPrimary()
			release()
			if sync {
				if err := <-done; err == nil {
					t.Fatal("the commit waiting for the synchronous standby was acknowledged by a dead primary")
				}
			}
			rs.promote()
			onNew := rs.nodes[rs.primary].query("postgres", "SELECT string_agg(n::text, ',' ORDER BY n) FROM acks")
			if want := map[bool]string{false: "1,2", true: "1"}[sync]; onPrimary != want || onNew != "1" {
				t.Fatalf("rows read on the primary just before its death %q (want %q), on the promoted standby %q (want 1)", onPrimary, want, onNew)
			}
			if err := exec1("INSERT INTO acks VALUES (3)"); err != nil {
				t.Fatal(err)
			}
			rs.rejoin()
			rs.waitReplayed()
			if got := rs.nodes[1-rs.primary].query("postgres", "SELECT string_agg(n::text, ',' ORDER BY n) FROM acks"); got != "1,3" {
				t.Fatalf("the rewound old primary holds %q, want 1,3 (its own 2 rewound away)", got)
			}
			rs.killPrimary()
			rs.promote()
			if err := exec1("INSERT INTO acks VALUES (4)"); err != nil {
				t.Fatal(err)
			}
			if got := rs.nodes[rs.primary].query("postgres", "SELECT string_agg(n::text, ',' ORDER BY n) FROM acks"); got != "1,3,4" || rs.primary != 0 {
				t.Fatalf("after failing back to node%d: %q, want node0 with 1,3,4", rs.primary, got)
			}
		})
	}
}
