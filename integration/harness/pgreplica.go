//go:build integration

package harness

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

// PgReplicaSet is a replicated private cluster of the test's own: a primary
// and a hot standby streaming from it through a physical replication slot,
// each on a free port of 127.0.0.1, asynchronous or synchronous
// (synchronous_commit=on with the standby as synchronous_standby_names).
// wal_log_hints=on lets pg_rewind turn a dead primary into a replica of the
// promoted standby. Nodes are named "node0" (the first primary) and "node1";
// the name is the node's cluster_name, hence the application_name its
// walreceiver reports, and its replication slot on the other node.
// Everything is stopped and removed when the test ends, also on failure.
type PgReplicaSet struct {
	t       *testing.T
	Sync    bool
	Nodes   [2]*pgNode
	Primary int // index of the node that is the primary now
}

// pgNode is one node of a PgReplicaSet.
type pgNode struct {
	*privatePG
	Name string
	held []int // processes stopped by hold, continued at the test's end
}

// replicaConf is written to every node's postgresql.conf at initdb (and so
// copied by pg_basebackup and pg_rewind); node.conf holds what is the node's
// own and is rewritten after every copy.
const replicaConf = "wal_level = replica\nmax_wal_senders = 5\nmax_replication_slots = 5\nwal_log_hints = on\n" +
	"hot_standby = on\nwal_keep_size = '256MB'\nwal_receiver_status_interval = 1s\nsynchronous_commit = on\n" +
	"wal_retrieve_retry_interval = '100ms'\n" + // a promotion waits for it when the stream is gone
	"include_if_exists = 'node.conf'\n"

// StartReplicaSet initializes node0 as the primary, copies it to node1 with
// pg_basebackup -R -C -S and starts node1 as its hot standby; it returns once
// node1 streams (and, when sync, is the synchronous standby).
func StartReplicaSet(t *testing.T, sync bool) *PgReplicaSet {
	t.Helper()
	began := time.Now()
	rs := &PgReplicaSet{t: t, Sync: sync}
	for i := range rs.Nodes {
		n := &pgNode{privatePG: newPrivatePG(t), Name: fmt.Sprintf("node%d", i)}
		rs.Nodes[i] = n
		t.Cleanup(func() { // a stopped walsender would hold up the stop
			for _, pid := range n.held {
				_ = syscall.Kill(pid, syscall.SIGCONT)
			}
		})
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range rs.Nodes {
				b, _ := os.ReadFile(n.LogPath())
				lines := strings.Split(strings.TrimSpace(string(b)), "\n")
				t.Logf("%s's server log (last lines):\n%s", n.Name, strings.Join(lines[max(0, len(lines)-25):], "\n"))
			}
		}
	})
	a, b := rs.Nodes[0], rs.Nodes[1]
	a.Run("initdb", "-D", a.Dir, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8")
	a.appendConf("postgresql.conf", replicaConf)
	a.appendConf("pg_hba.conf", "host replication postgres 127.0.0.1/32 trust\n")
	rs.writeNodeConf(0, true)
	a.Start()
	b.Run("pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(a.Port), "-U", "postgres", "-D", b.Dir,
		"-X", "stream", "-R", "-C", "-S", b.Name, "--no-sync")
	rs.writeNodeConf(1, false)
	b.Start()
	rs.waitStreaming(0, 1)
	t.Logf("replicated private PostgreSQL (%s): primary %s on port %d, hot standby %s on port %d, ready in %v",
		rs.Mode(), a.Name, a.Port, b.Name, b.Port, time.Since(began).Round(time.Millisecond))
	return rs
}

// Mode names the replication: "synchronous" or "asynchronous".
func (rs *PgReplicaSet) Mode() string {
	if rs.Sync {
		return "synchronous"
	}
	return "asynchronous"
}

// writeNodeConf (re)writes node i's own settings: port, socket folder,
// cluster_name and synchronous_standby_names: the other node on the primary
// of a synchronous set once that node streams (withStandby), else none (a
// standby, once promoted, commits alone).
func (rs *PgReplicaSet) writeNodeConf(i int, withStandby bool) {
	n := rs.Nodes[i]
	conf := n.baseConf() + fmt.Sprintf("cluster_name = '%s'\n", n.Name)
	if rs.Sync && withStandby {
		conf += fmt.Sprintf("synchronous_standby_names = '%s'\n", rs.Nodes[1-i].Name)
	} else {
		conf += "synchronous_standby_names = ''\n"
	}
	n.writeConf("node.conf", conf, os.O_TRUNC)
}

// exec runs sql on node n (database db).
func (n *pgNode) exec(db, sql string) {
	n.t.Helper()
	ExecSQL(n.t, n.Url(db), sql)
}

// Url is a libpq URL of database db on node i.
func (n *pgNode) Url(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", n.Port, db)
}

// MultiHostURL is what `run` is given: both nodes, the session on whichever
// accepts writes (pgx tries the hosts in order).
func (rs *PgReplicaSet) MultiHostURL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/%s?target_session_attrs=read-write&sslmode=disable",
		rs.Nodes[0].Port, rs.Nodes[1].Port, db)
}

// Query returns the one value, as text, of sql on node n (database db);
// NULL is "".
func (n *pgNode) Query(db, sql string) string {
	n.t.Helper()
	if v := Scalar[*string](n.t, n.Url(db), sql); v != nil {
		return *v
	}
	return ""
}

// waitStreaming waits until node standby streams from node primary (and is
// its synchronous standby in a synchronous set).
func (rs *PgReplicaSet) waitStreaming(primary, standby int) {
	rs.t.Helper()
	p, s := rs.Nodes[primary], rs.Nodes[standby]
	want := "streaming async"
	if rs.Sync {
		want = "streaming sync"
	}
	var got string
	deadline := time.Now().Add(time.Minute)
	for {
		got = p.Query("postgres", `SELECT coalesce(min(state || ' ' || sync_state), '') FROM pg_stat_replication WHERE application_name = '`+s.Name+`'`)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			rs.t.Fatalf("%s does not stream from %s within a minute: %q, want %q", s.Name, p.Name, got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// CreateDB creates database ovs on the primary, applies every migration
// through the primary's URL and waits until the standby replayed it all;
// it returns the multi-host URL of the database.
func (rs *PgReplicaSet) CreateDB() string {
	rs.t.Helper()
	p := rs.Nodes[rs.Primary]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.Url("postgres"))
	if err != nil {
		rs.t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE ovs"); err != nil {
		rs.t.Fatal(err)
	}
	if err := migrations.Up(ctx, p.Url("ovs")); err != nil {
		rs.t.Fatal(err)
	}
	rs.WaitReplayed()
	return rs.MultiHostURL("ovs")
}

// LagBytes is how many bytes of WAL the primary wrote that the standby has
// not replayed: pg_current_wal_lsn() on the primary minus
// pg_last_wal_replay_lsn() on the standby.
func (rs *PgReplicaSet) LagBytes() int64 {
	rs.t.Helper()
	p, s := rs.Nodes[rs.Primary], rs.Nodes[1-rs.Primary]
	replayed := s.Query("postgres", "SELECT pg_last_wal_replay_lsn()::text")
	diff := p.Query("postgres", "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '"+replayed+"')::bigint::text")
	n, err := strconv.ParseInt(diff, 10, 64)
	if err != nil {
		rs.t.Fatal(err)
	}
	return n
}

// WaitReplayed waits until the standby replayed everything the primary wrote.
func (rs *PgReplicaSet) WaitReplayed() {
	rs.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for rs.LagBytes() > 0 {
		if time.Now().After(deadline) {
			rs.t.Fatalf("the standby does not catch up within a minute (%d bytes behind)", rs.LagBytes())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WaitStandbyQuiet waits, once the primary is dead, until the standby's
// walreceiver no longer streams and its replay stopped moving (it replayed
// every whole record it received; pg_last_wal_receive_lsn may stay ahead,
// inside a record received in part).
func (rs *PgReplicaSet) WaitStandbyQuiet() {
	rs.t.Helper()
	s := rs.Nodes[1-rs.Primary]
	deadline := time.Now().Add(30 * time.Second)
	last, same := "", 0
	for same < 5 {
		if time.Now().After(deadline) {
			rs.t.Fatalf("%s still streams or replays 30 s after its primary died", s.Name)
		}
		time.Sleep(20 * time.Millisecond)
		lsn := s.Query("postgres", `SELECT CASE WHEN EXISTS (SELECT FROM pg_stat_wal_receiver WHERE status = 'streaming') THEN 'streaming'
			ELSE pg_last_wal_replay_lsn()::text END`)
		if lsn != "streaming" && lsn == last {
			same++
		} else {
			same = 0
		}
		last = lsn
	}
}

// Hold stops (SIGSTOP) the walsenders of the primary: the standby receives
// nothing more while commits on the primary go on (asynchronous) or wait
// (synchronous). release continues them; the test's end does too.
func (rs *PgReplicaSet) Hold() (release func()) {
	rs.t.Helper()
	p := rs.Nodes[rs.Primary]
	pids := p.Query("postgres", "SELECT string_agg(pid::text, ' ') FROM pg_stat_replication")
	var stopped []int
	for _, f := range strings.Fields(pids) {
		pid, _ := strconv.Atoi(f)
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			rs.t.Fatalf("SIGSTOP walsender %d: %v", pid, err)
		}
		stopped = append(stopped, pid)
	}
	if len(stopped) == 0 {
		rs.t.Fatalf("%s has no walsender to hold", p.Name)
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
	b, err := os.ReadFile(filepath.Join(n.Dir, "postmaster.pid"))
	if err != nil {
		n.t.Fatalf("%s: %v", n.Name, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil {
		n.t.Fatalf("%s: postmaster.pid: %v", n.Name, err)
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
				n.t.Fatalf("%s: process %d survives SIGKILL", n.Name, pid)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	n.held = nil
	pidFile := filepath.Join(n.Dir, "postmaster.pid")
	b, _ := os.ReadFile(pidFile) // line 7: shared memory key and id
	if lines := strings.Split(string(b), "\n"); len(lines) >= 7 {
		if fs := strings.Fields(lines[6]); len(fs) == 2 {
			_ = exec.Command("ipcrm", "-m", fs[1]).Run()
		}
	}
	// The lock files name a dead postmaster, which may stay a zombie when
	// nothing reaps it (a container's init): PostgreSQL would refuse them.
	sock := filepath.Join(filepath.Dir(n.Dir), fmt.Sprintf(".s.PGSQL.%d", n.Port))
	for _, f := range []string{pidFile, sock + ".lock", sock} {
		if err := os.Remove(f); err != nil && !os.IsNotExist(err) {
			n.t.Fatal(err)
		}
	}
	n.t.Logf("%s (port %d): postmaster %d and %d children SIGKILLed", n.Name, n.Port, pm, len(pids)-1)
	return died
}

// KillPrimary SIGKILLs the primary; it returns the moment it died.
func (rs *PgReplicaSet) KillPrimary() time.Time {
	rs.t.Helper()
	return rs.Nodes[rs.Primary].kill9()
}

// Promote promotes the standby (pg_ctl promote) and waits until it accepts
// writes; it is the primary from then on.
func (rs *PgReplicaSet) Promote() {
	rs.t.Helper()
	s := 1 - rs.Primary
	n := rs.Nodes[s]
	began := time.Now()
	n.Run("pg_ctl", "-D", n.Dir, "-w", "-t", "60", "promote")
	for n.Query("postgres", "SELECT pg_is_in_recovery()::text") != "false" {
		time.Sleep(20 * time.Millisecond)
	}
	rs.Primary = s
	rs.writeNodeConf(s, false) // alone now: no synchronous standby to wait for
	n.exec("postgres", "SELECT pg_reload_conf()")
	rs.t.Logf("%s promoted in %v", n.Name, time.Since(began).Round(time.Millisecond))
}

// Rejoin turns the dead old primary into a hot standby of the new one:
// pg_rewind from the new primary (a replication slot for it created first),
// then standby.signal, primary_conninfo and primary_slot_name, start, and
// wait until it streams (as the synchronous standby when sync).
func (rs *PgReplicaSet) Rejoin() {
	rs.t.Helper()
	p, old := rs.Nodes[rs.Primary], rs.Nodes[1-rs.Primary]
	began := time.Now()
	p.exec("postgres", `SELECT pg_create_physical_replication_slot('`+old.Name+`', true)
		WHERE NOT EXISTS (SELECT FROM pg_replication_slots WHERE slot_name = '`+old.Name+`')`)
	// The promotion's end-of-recovery checkpoint runs in the background:
	// until a checkpoint, the control file pg_rewind reads still names the
	// old timeline ("no rewind required").
	p.exec("postgres", "CHECKPOINT")
	src := fmt.Sprintf("host=127.0.0.1 port=%d user=postgres", p.Port)
	c := old.cmd("pg_rewind", "--target-pgdata", old.Dir, "--source-server", src+" dbname=postgres", "--no-sync")
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
	rs.t.Logf("pg_rewind of %s from %s:\n%s", old.Name, p.Name, strings.Join(said, "\n"))
	rs.writeNodeConf(1-rs.Primary, false)
	old.writeConf("postgresql.auto.conf", fmt.Sprintf("primary_conninfo = '%s'\nprimary_slot_name = '%s'\n", src, old.Name), os.O_TRUNC)
	old.writeConf("standby.signal", "", os.O_TRUNC)
	old.Start()
	if rs.Sync {
		rs.writeNodeConf(rs.Primary, true)
		p.exec("postgres", "SELECT pg_reload_conf()")
	}
	rs.waitStreaming(rs.Primary, 1-rs.Primary)
	rs.t.Logf("%s rejoined as a hot standby of %s in %v", old.Name, p.Name, time.Since(began).Round(time.Millisecond))
}
