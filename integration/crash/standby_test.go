//go:build integration

package crash

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/ovstream/ovstream/integration/harness"
)

// ownerOf is the owner string (host:pid-nonce) of the instance p, from its
// starting line.
func ownerOf(t *testing.T, p *harness.Proc) string {
	t.Helper()
	l := harness.LineWith(p, "msg=starting ")
	_, owner, ok := strings.Cut(l, " owner=")
	if !ok {
		t.Fatalf("no owner in the starting line %q; output:\n%s", l, harness.Tail(p.Output(), 20))
	}
	owner, _, _ = strings.Cut(owner, " ")
	return owner
}

// A standby (--lease 3s) waits while the owner lives, saying whom it waits
// for (log, /readyz "standby", ovstream_standby 1, `status`); SIGKILL of the
// owner: the standby claims within the lease + 5 s. A second standby: SIGTERM
// of the owner releases the partitions and it claims at once, far within its
// lease (10 s). The tables are exact.
func TestStandbyTakeover(t *testing.T) {
	t.Parallel()
	rng := harness.CrashSeed(t)
	ds := harness.Auckland2h(t)
	r := newRig(t, rng, ds, harness.StartBroker(t), 60)
	r.flags = []string{"--lease", "3s"}
	const lease = 3 * time.Second
	r.feed.Paced(300 * time.Millisecond)
	a := r.start()
	r.waitProgress(a, time.Minute, "before the standby starts")
	b := r.startWith(nil, "--metrics-addr", "127.0.0.1:0")
	harness.WaitLog(t, b, harness.StandbyLine, time.Minute)
	if l := harness.LineWith(b, harness.StandbyLine); !strings.Contains(l, "holder="+ownerOf(t, a)) || !strings.Contains(l, "holder_since=") {
		t.Fatalf("the standby does not name the holder %s and since when: %s", ownerOf(t, a), l)
	}
	ops := harness.OpsAddr(t, b)
	if code, body := harness.HttpGet(t, "http://"+ops+"/readyz"); code != 503 || !strings.HasPrefix(body, "standby\n") ||
		!strings.Contains(body, "held by "+ownerOf(t, a)) {
		t.Fatalf("/readyz of the standby: %d %q; want 503 standby naming %s", code, body, ownerOf(t, a))
	}
	if m := harness.Scrape(t, ops); m["ovstream_standby"] != 1 {
		t.Fatalf("ovstream_standby = %v while waiting, want 1", m["ovstream_standby"])
	}
	st := harness.Status(t, r.db, r.brokers, "ovstream")
	roles := map[string]string{}
	for _, in := range st.Instances {
		roles[in.Owner] = fmt.Sprintf("%s alive=%t", in.Role, in.Alive)
	}
	if roles[ownerOf(t, a)] != "active alive=true" || roles[ownerOf(t, b)] != "standby alive=true" || len(roles) != 2 {
		t.Fatalf("status instances %v; want A active and B standby, both alive", roles)
	}
	for _, p := range st.Partitions {
		if p.Owner != ownerOf(t, a) || p.Lease != "alive" || p.Epoch != 1 {
			t.Fatalf("status partition %s/%d: owner %q lease %q epoch %d; want A's, alive, 1", p.Topic, p.Partition, p.Owner, p.Lease, p.Epoch)
		}
	}
	// The owner goes on committing while the standby waits.
	r.waitCommits(a, 3, time.Minute, "while the standby waits")
	if strings.Contains(b.Output(), harness.ClaimedLine) {
		t.Fatalf("the standby claimed while the owner lived; output:\n%s", harness.Tail(b.Output(), 20))
	}
	// Liveness is not progress: a transaction of the test holds the
	// partitions' rows for three leases, so A's commits wait on it; A's
	// heartbeat goes on, and B goes on waiting.
	holdRows(t, r, 3*lease, func() {
		if strings.Contains(b.Output(), harness.ClaimedLine) {
			t.Fatalf("the standby claimed while the owner's commit waited on a lock; output:\n%s", harness.Tail(b.Output(), 20))
		}
	})
	r.waitCommits(a, 2, time.Minute, "after its commit waited on a lock")

	killed := time.Now()
	r.kill(a)
	took := harness.WaitLog(t, b, harness.ClaimedLine, lease+time.Minute).Sub(killed)
	t.Logf("SIGKILL of the owner: the standby claimed %v later (lease %v)", took.Round(time.Millisecond), lease)
	if took > lease+5*time.Second {
		t.Fatalf("the standby claimed %v after the owner's SIGKILL; want within the lease + 5 s", took)
	}
	if l := harness.LineWith(b, harness.ClaimedLine); !strings.Contains(l, ownerOf(t, a)+" expired") || !strings.Contains(l, "epoch=2") {
		t.Fatalf("the claim does not say it took A's expired partitions at epoch 2: %s", l)
	}
	r.waitProgress(b, time.Minute, "after the takeover")
	if m := harness.Scrape(t, ops); m["ovstream_standby"] != 0 {
		t.Fatalf("ovstream_standby = %v after the claim, want 0", m["ovstream_standby"])
	}

	c := r.startWith(nil, "--lease", "10s")
	harness.WaitLog(t, c, harness.StandbyLine, time.Minute)
	stopped := time.Now()
	r.stopGracefully(b)
	took = harness.WaitLog(t, c, harness.ClaimedLine, time.Minute).Sub(stopped)
	t.Logf("SIGTERM of the owner: the standby claimed %v after the signal (lease 10s)", took.Round(time.Millisecond))
	if l := harness.LineWith(c, harness.ClaimedLine); !strings.Contains(l, "released x9") {
		t.Fatalf("the claim after SIGTERM does not say the partitions were released: %s", l)
	}
	if took > 3*time.Second {
		t.Fatalf("the standby claimed %v after the owner's SIGTERM; want at once (well under the 10 s lease)", took)
	}
	if !strings.Contains(b.Output(), "released partitions") {
		t.Fatalf("the owner did not say it released its partitions; output:\n%s", harness.Tail(b.Output(), 20))
	}
	r.waitProgress(c, time.Minute, "after the release")
	r.feed.Wait(t, 2*time.Minute)
	r.waitCommits(c, 2, time.Minute, "after the feed ended")
	r.stopGracefully(c)
	r.finish(1)
}

// holdRows locks every stream_positions row of r's database in a
// transaction for d, so the owner's commits wait (its fencing UPDATE), while
// check runs every 100 ms; it requires that no commit landed meanwhile and
// that the owner's pipeline_instances heartbeat kept being renewed.
func holdRows(t *testing.T, r *rig, d time.Duration, check func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d+time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, r.db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM stream_positions FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	committed := r.lastCommit()
	beat := func() time.Time {
		return harness.Scalar[time.Time](t, r.db, `SELECT max(heartbeat_at) FROM pipeline_instances WHERE role = 'active'`)
	}
	first, beats := beat(), 0
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		check()
		if b := beat(); b.After(first) {
			beats++
			first = b
		}
	}
	if c := r.lastCommit(); !c.Equal(committed) {
		t.Fatalf("a commit landed while the test held the rows (%v, then %v): the hold proves nothing", committed, c)
	}
	if beats < 3 {
		t.Fatalf("the owner's heartbeat was renewed %d times in %v while its commit waited", beats, d)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("the owner's commits waited %v on a lock; its heartbeat was renewed %d times; the standby kept waiting", d, beats)
}

// supervised runs ovstream again whenever it exits, 100 ms later, like
// systemd's Restart=always, until stop; it keeps every incarnation.
type supervised struct {
	mu    sync.Mutex
	procs []*harness.Proc
	exits []int
}

func (s *supervised) run(ctx context.Context, t *testing.T, args []string) {
	for {
		p := harness.StartOvstream(t, nil, args...)
		s.mu.Lock()
		s.procs = append(s.procs, p)
		s.mu.Unlock()
		select {
		case <-p.Done:
		case <-ctx.Done():
			_ = p.Cmd.Process.Signal(syscall.SIGTERM)
			<-p.Done
		}
		s.mu.Lock()
		s.exits = append(s.exits, p.Cmd.ProcessState.ExitCode())
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// claims counts the claims all incarnations logged.
func (s *supervised) claims() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, p := range s.procs {
		n += strings.Count(p.Output(), harness.ClaimedLine)
	}
	return n
}

// Two instances of one pipeline (every partition, the default lease), each
// under a supervisor that restarts it whenever it exits, for 30 s while the
// feed flows: one claims, the other waits as a standby; fewer than 3 claims
// in all, no exit 3; after SIGTERM of both, the tables are exact.
func TestStandbySupervisor(t *testing.T) {
	t.Parallel()
	rng := harness.CrashSeed(t)
	ds := harness.Auckland2h(t)
	r := newRig(t, rng, ds, harness.StartBroker(t), 40)
	r.flags = nil // the defaults: what a service file would run
	const span = 30 * time.Second
	r.feed.Paced(span / 42)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	units := []*supervised{{}, {}}
	var wg sync.WaitGroup
	for _, u := range units {
		wg.Go(func() { u.run(ctx, t, r.args()) })
	}
	began := time.Now()
	r.feed.Wait(t, 2*span)
	deadline := time.Now().Add(time.Minute)
	for !r.storedAll() {
		if time.Now().After(deadline) {
			t.Fatalf("the topics were not consumed and committed within a minute of the feed's end")
		}
		time.Sleep(50 * time.Millisecond)
	}
	ran := time.Since(began)
	stop()
	wg.Wait()
	r.mon.check(t, "after the supervised run")
	claims, incarnations := 0, 0
	for i, u := range units {
		claims += u.claims()
		incarnations += len(u.procs)
		for j, code := range u.exits {
			if code != 0 {
				t.Errorf("instance %d, incarnation %d exited %d (3 = fenced); output:\n%s", i, j, code, harness.Tail(u.procs[j].Output(), 30))
			}
		}
	}
	t.Logf("supervised for %v: %d incarnations, %d claims", ran.Round(time.Millisecond), incarnations, claims)
	if claims >= 3 || incarnations != 2 {
		t.Fatalf("%d claims and %d incarnations in %v: the instances fence each other; want fewer than 3 claims and no restart", claims, incarnations, ran)
	}
	standbys := 0
	for _, u := range units {
		if strings.Contains(u.procs[0].Output(), harness.StandbyLine) {
			standbys++
		}
	}
	if standbys != 1 {
		t.Fatalf("%d of the 2 instances waited as a standby, want 1", standbys)
	}
	r.finish(0)
}

// A frozen owner: A stops itself (SIGSTOP) inside its commit transaction
// (crash point mid_commit, after the fencing UPDATE locked its partitions'
// rows), and holds those row locks for as long as it is stopped. B (same
// partitions, --lease 8s) does not block on them: it waits as a standby,
// answering /readyz all along, until A's lease expires; then it terminates
// A's database session (logging the pid and why), A's transaction rolls
// back, and B claims. A, continued, finds its connection gone, commits again
// and is fenced: exit 3, nothing written after B's claim. The tables are
// exact.
func TestStandbyFrozenOwner(t *testing.T) {
	t.Parallel()
	rng := harness.CrashSeed(t)
	ds := harness.Auckland2h(t)
	r := newRig(t, rng, ds, harness.StartBroker(t), 40)
	const lease = 8 * time.Second // B reaches its first claim within it, under load too
	r.flags = []string{"--lease", lease.String()}
	r.feed.Paced(150 * time.Millisecond)
	k := 3 + rng.IntN(5)
	a := r.start(fmt.Sprintf("OVSTREAM_CRASHPOINT=mid_commit:%d", k), "OVSTREAM_CRASHPOINT_ACTION=stop")
	waitCrashpointStop(t, a, "mid_commit", k)
	frozen := time.Now()
	inFlight := harness.Snapshot(t, r.db)
	epoch := harness.Scalar[int64](t, r.db, `SELECT max(epoch) FROM stream_positions`)
	b := r.startWith([]string{"OVSTREAM_CRASHPOINT=before_begin:1", "OVSTREAM_CRASHPOINT_ACTION=stop"}, "--metrics-addr", "127.0.0.1:0")
	harness.WaitLog(t, b, harness.StandbyLine, lease)
	if l := harness.LineWith(b, harness.StandbyLine); !strings.Contains(l, "holder="+ownerOf(t, a)) {
		t.Fatalf("the standby does not name the frozen owner %s: %s", ownerOf(t, a), l)
	}
	ops := harness.OpsAddr(t, b)
	answers := 0
	for !strings.Contains(b.Output(), harness.ClaimedLine) {
		if code, body := harness.HttpGet(t, "http://"+ops+"/readyz"); code != 503 || !strings.HasPrefix(body, "standby\n") {
			if strings.Contains(b.Output(), harness.ClaimedLine) {
				break
			}
			t.Fatalf("/readyz of the waiting standby: %d %q", code, body)
		}
		answers++
		if time.Since(frozen) > lease+time.Minute {
			t.Fatalf("B did not claim within a minute of A's lease; output:\n%s", harness.Tail(b.Output(), 30))
		}
		time.Sleep(100 * time.Millisecond)
	}
	took := time.Since(frozen)
	t.Logf("A frozen in its commit: B answered /readyz %d times while waiting and claimed %v after the freeze (lease %v)",
		answers, took.Round(time.Millisecond), lease)
	if answers < 3 {
		t.Fatalf("B answered /readyz only %d times while it waited", answers)
	}
	term := harness.LineWith(b, "terminated the database session")
	if !strings.Contains(term, "owner="+ownerOf(t, a)) || !strings.Contains(term, "lease=expired") ||
		!strings.Contains(term, `reason="its owner's lease expired"`) || !strings.Contains(term, "pid=") {
		t.Fatalf("B did not log terminating A's session after its lease expired: %q; output:\n%s", term, harness.Tail(b.Output(), 30))
	}
	waitCrashpointStop(t, b, "before_begin", 1)
	claimed := harness.Snapshot(t, r.db)
	if got := harness.Scalar[int64](t, r.db, `SELECT max(epoch) FROM stream_positions`); got != epoch+1 {
		t.Fatalf("epoch %d after B's claim, want %d", got, epoch+1)
	}
	harness.SameSnapshot(t, "A's commit in flight was not rolled back by the termination", inFlight, claimed)
	r.signal(a, syscall.SIGCONT)
	waitFenced(t, a)
	harness.SameSnapshot(t, "A (frozen, then fenced) wrote after B's claim", claimed, harness.Snapshot(t, r.db))
	r.kill(b)

	c := r.startWith(nil, "--takeover") // B is dead (its lease runs on)
	r.waitProgress(c, time.Minute, "after the frozen owner")
	r.feed.Wait(t, 2*time.Minute)
	r.waitCommits(c, 2, time.Minute, "after the feed ended")
	r.stopGracefully(c)
	r.finish(0) // the kills here came before commits; TestCrashPoints covers those after

}
