//go:build integration

package crash

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/integration/harness"
)

var (
	crashLong  = flag.Bool("crash.long", false, "TestCrashRandomKills: the long schedule (make crash): -crash.kills kills over the GTFS-realtime files in -crash.data")
	crashData  = flag.String("crash.data", "", "folder of GTFS-realtime TripUpdates files for -crash.long (make crash unpacks the Auckland 48 h archive there)")
	crashKills = flag.Int("crash.kills", 0, "SIGKILLs of TestCrashRandomKills (default 24; 200 with -crash.long)")
)

// monitor samples stream_positions every 100 ms, and after each disruption,
// and records every violation of G3: a stored offset that moved backwards,
// passed the high water mark, or a next_offset past its consumed_offset.
// Database or broker errors (a restart in progress) skip the sample.
type monitor struct {
	db, addr string

	mu         sync.Mutex
	conn       *pgx.Conn
	client     sarama.Client
	last       map[aggregate.PartitionID][2]int64
	violations []string
	samples    int
	stop, done chan struct{}
}

func startMonitor(t *testing.T, db, addr string) *monitor {
	m := &monitor{db: db, addr: addr, last: map[aggregate.PartitionID][2]int64{},
		stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		for {
			select {
			case <-m.stop:
				return
			case <-time.After(100 * time.Millisecond):
				_ = m.sample()
			}
		}
	}()
	t.Cleanup(m.close)
	return m
}

func (m *monitor) close() {
	select {
	case <-m.stop:
		return
	default:
	}
	close(m.stop)
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.conn != nil {
		m.conn.Close(context.Background())
	}
	if m.client != nil {
		m.client.Close()
	}
}

// sample reads the positions, then the high water marks (which only grow, so
// a stored offset above them is a real violation), and checks them.
func (m *monitor) sample() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if m.conn == nil || m.conn.IsClosed() {
		conn, err := pgx.Connect(ctx, m.db)
		if err != nil {
			return err
		}
		m.conn = conn
	}
	rows, err := m.conn.Query(ctx, `SELECT topic, partition, next_offset, consumed_offset FROM stream_positions WHERE next_offset IS NOT NULL`)
	if err != nil {
		m.conn.Close(ctx)
		m.conn = nil
		return err
	}
	pos := map[aggregate.PartitionID][2]int64{}
	var tp aggregate.PartitionID
	var next, consumed int64
	if _, err := pgx.ForEachRow(rows, []any{&tp.Topic, &tp.Partition, &next, &consumed}, func() error {
		pos[tp] = [2]int64{next, consumed}
		return nil
	}); err != nil {
		m.conn.Close(ctx)
		m.conn = nil
		return err
	}
	if m.client == nil {
		cfg := sarama.NewConfig()
		cfg.Metadata.Retry.Max = 1
		client, err := sarama.NewClient([]string{m.addr}, cfg)
		if err != nil {
			return err
		}
		m.client = client
	}
	hw, err := harness.ReadHighWater(m.client)
	if err != nil {
		m.client.Close()
		m.client = nil
		return err
	}
	m.samples++
	for tp, p := range pos {
		prev, seen := m.last[tp]
		switch {
		case seen && (p[0] < prev[0] || p[1] < prev[1]):
			m.violations = append(m.violations, fmt.Sprintf("%s moved backwards: next %d -> %d, consumed %d -> %d", tp, prev[0], p[0], prev[1], p[1]))
		case p[0] > hw[tp] || p[1] > hw[tp]:
			m.violations = append(m.violations, fmt.Sprintf("%s stored next %d, consumed %d past the high water mark %d", tp, p[0], p[1], hw[tp]))
		case p[0] > p[1]:
			m.violations = append(m.violations, fmt.Sprintf("%s stored next %d past consumed %d", tp, p[0], p[1]))
		}
		m.last[tp] = p
	}
	return nil
}

// check takes a sample now (retrying while the database or broker is away)
// and fails the test on any violation so far.
func (m *monitor) check(t *testing.T, when string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := m.sample()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("G3 check %s: %v", when, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.violations) > 0 {
		t.Fatalf("G3 violated (found by the check %s): %s", when, strings.Join(m.violations, "; "))
	}
}

type rig struct {
	t       *testing.T
	rng     *rand.Rand
	ds      *harness.Dataset
	ref     *harness.Reference
	db      string
	brokers string
	feed    *harness.Feed
	mon     *monitor
	env     []string // added to every incarnation's environment
	// flags are added to the run flags of every incarnation and of the
	// final drain: --takeover by default, since an incarnation restarted
	// after a kill would otherwise wait for its predecessor's lease (15 s).
	flags []string
	// finalDrain, when set, replaces finish's one `run --drain` over every
	// partition (e.g. by the drains of a split pipeline) and returns their output.
	finalDrain func() string
	// instanceFlags, when set, gives instance i of a split pipeline's
	// layout its own run flags (startInstance).
	instanceFlags func(i int) []string

	incarnations int
	kills        int       // SIGKILLs, by the test or at a crash point
	afterCommits int       // kills that came after a commit of the same incarnation
	since        time.Time // the last commit when the current incarnation started
	last         *harness.Proc
}

// newRig makes a fresh database and a feed of ds in chunks into the broker at brokers.
func newRig(t *testing.T, rng *rand.Rand, ds *harness.Dataset, brokers string, chunks int) *rig {
	t.Helper()
	return newRigOn(t, rng, ds, brokers, chunks, harness.FreshDB(t))
}

// newRigOn is newRig on the database db.
func newRigOn(t *testing.T, rng *rand.Rand, ds *harness.Dataset, brokers string, chunks int, db string) *rig {
	t.Helper()
	r := &rig{t: t, rng: rng, ds: ds, ref: harness.ReferenceFor(t, ds), db: db, brokers: brokers,
		flags: []string{"--takeover"}}
	r.feed = harness.NewFeed(ds, brokers, chunks)
	t.Cleanup(r.feed.Close)
	r.mon = startMonitor(t, r.db, brokers)
	t.Cleanup(func() {
		if t.Failed() && r.last != nil {
			t.Logf("output of the last ovstream run (tail):\n%s", harness.Tail(r.last.Output(), 60))
		}
	})
	return r
}

// args are the run flags of every incarnation: commit on every tick.
func (r *rig) args(extra ...string) []string {
	flags := append([]string{"--flush-interval", "50ms", "--allowed-lateness", r.ds.Lateness, "--log-level", "info"}, r.flags...)
	return harness.RunArgs(r.db, r.brokers, append(flags, extra...)...)
}

// start starts an incarnation of the service.
func (r *rig) start(env ...string) *harness.Proc {
	r.t.Helper()
	return r.startWith(env)
}

// startWith starts an incarnation with env and extra run flags.
func (r *rig) startWith(env []string, extra ...string) *harness.Proc {
	r.t.Helper()
	r.incarnations++
	r.since = r.lastCommit()
	p := harness.StartOvstream(r.t, append(append([]string{}, r.env...), env...), r.args(extra...)...)
	r.last = p
	return p
}

// lastCommit returns max(stream_positions.updated_at): it moves with every
// commit (each upserts every assigned partition) and with nothing else.
func (r *rig) lastCommit() time.Time {
	r.t.Helper()
	return harness.Scalar[time.Time](r.t, r.db, `SELECT coalesce(max(updated_at), 'epoch') FROM stream_positions`)
}

// positionsSum returns the sum of every stored next_offset: progress.
func (r *rig) positionsSum() int64 {
	r.t.Helper()
	return harness.Scalar[int64](r.t, r.db, `SELECT coalesce(sum(next_offset), 0)::bigint FROM stream_positions`)
}

// storedConsumed returns every partition's stored consumed_offset.
func (r *rig) storedConsumed() map[aggregate.PartitionID]int64 {
	r.t.Helper()
	rows := harness.Scalar[[]string](r.t, r.db, `SELECT coalesce(array_agg(topic || ' ' || partition || ' ' || consumed_offset), '{}') FROM stream_positions WHERE consumed_offset IS NOT NULL`)
	out := map[aggregate.PartitionID]int64{}
	for _, row := range rows {
		var tp aggregate.PartitionID
		var off int64
		harness.Scan(r.t, row, "%s %d %d", &tp.Topic, &tp.Partition, &off)
		out[tp] = off
	}
	return out
}

// waitConsumedTo waits until p's commits stored every partition as consumed
// up to hw at least: p reads and commits what was written after hw was taken.
func (r *rig) waitConsumedTo(p *harness.Proc, hw map[aggregate.PartitionID]int64, timeout time.Duration, when string) {
	r.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		r.alive(p, when)
		stored, behind := r.storedConsumed(), []string{}
		for tp, off := range hw {
			if stored[tp] < off {
				behind = append(behind, fmt.Sprintf("%s %d < %d", tp, stored[tp], off))
			}
		}
		if len(behind) == 0 {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("not consumed and committed within %v %s: %v; output:\n%s", timeout, when, behind, harness.Tail(p.Output(), 60))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// alive fails the test when p has exited.
func (r *rig) alive(p *harness.Proc, when string) {
	r.t.Helper()
	select {
	case <-p.Done:
		r.t.Fatalf("ovstream exited %s (%v); it must ride it out. Output:\n%s", when, p.Err, harness.Tail(p.Output(), 60))
	default:
	}
}

// waitCommits waits until p made n more commits (and is still running).
func (r *rig) waitCommits(p *harness.Proc, n int, timeout time.Duration, when string) {
	r.t.Helper()
	deadline := time.Now().Add(timeout)
	prev := r.lastCommit()
	for seen := 0; seen < n; {
		r.alive(p, when)
		if time.Now().After(deadline) {
			r.t.Fatalf("%d of %d commits within %v %s; output:\n%s", seen, n, timeout, when, harness.Tail(p.Output(), 60))
		}
		time.Sleep(20 * time.Millisecond)
		if c := r.lastCommit(); c.After(prev) {
			seen++
			prev = c
		}
	}
}

// waitProgress waits until p commits again and its commits move the stored
// positions forward, or have stored everything the topics hold (when the feed
// has no more records for it, that is all the progress there can be).
func (r *rig) waitProgress(p *harness.Proc, timeout time.Duration, when string) {
	r.t.Helper()
	deadline := time.Now().Add(timeout)
	prevCommit, prevSum := r.lastCommit(), r.positionsSum()
	for {
		r.alive(p, when)
		if r.lastCommit().After(prevCommit) && (r.positionsSum() > prevSum || r.storedAll()) {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("no commit that moved the stored positions within %v %s; output:\n%s", timeout, when, harness.Tail(p.Output(), 60))
		}
		time.Sleep(30 * time.Millisecond)
	}
}

// storedAll tells whether every record of the topics is stored as consumed.
func (r *rig) storedAll() bool {
	r.t.Helper()
	stored := r.storedConsumed()
	for tp, hw := range harness.HighWaterMarks(r.t, r.brokers) {
		if stored[tp] < hw {
			return false
		}
	}
	return true
}

// kill SIGKILLs p and checks G3.
func (r *rig) kill(p *harness.Proc) {
	r.t.Helper()
	p.Kill()
	r.killed("after SIGKILL")
}

// killed records a kill of the current incarnation and checks G3.
func (r *rig) killed(when string) {
	r.t.Helper()
	r.kills++
	if r.lastCommit().After(r.since) {
		r.afterCommits++
	}
	r.mon.check(r.t, fmt.Sprintf("%s of incarnation %d", when, r.incarnations))
}

// signal sends sig to p.
func (r *rig) signal(p *harness.Proc, sig syscall.Signal) {
	r.t.Helper()
	if err := p.Cmd.Process.Signal(sig); err != nil {
		r.t.Fatalf("signal %v: %v", sig, err)
	}
}

// stopGracefully sends SIGTERM and requires exit 0.
func (r *rig) stopGracefully(p *harness.Proc) {
	r.t.Helper()
	r.signal(p, syscall.SIGTERM)
	if code := p.Wait(r.t, time.Minute); code != 0 {
		r.t.Fatalf("SIGTERM: exit %d, want 0; output:\n%s", code, harness.Tail(p.Output(), 60))
	}
	r.mon.check(r.t, "after SIGTERM")
}

// finish produces what is left, requires that the schedule crashed after
// real commits (windows and positions stored, and at least minAfterCommits
// kills after a commit of the killed incarnation), runs the final drain and
// checks everything: G3 throughout, the result tables against the
// uninterrupted run, delay_aggregates against the SQL oracle.
func (r *rig) finish(minAfterCommits int) {
	t := r.t
	t.Helper()
	r.feed.Wait(t, 5*time.Minute)
	windows := harness.Dump(t, r.db, `SELECT count(*) FROM delay_aggregates`)[0]
	stored := r.positionsSum()
	t.Logf("before the final drain: %d incarnations, %d kills (%d after a commit of their incarnation), %s window rows written, stored offsets sum %d",
		r.incarnations, r.kills, r.afterCommits, windows, stored)
	if windows == "[0]" || stored == 0 {
		t.Fatalf("the schedule wrote no window (%s rows) or stored no position (sum %d) before the final drain: it proves nothing", windows, stored)
	}
	if r.afterCommits < minAfterCommits {
		t.Fatalf("only %d kills came after a commit of their incarnation, want at least %d: the schedule proves too little", r.afterCommits, minAfterCommits)
	}
	drainStart := time.Now()
	var out string
	if r.finalDrain != nil {
		out = r.finalDrain()
	} else {
		out = harness.Drain(t, r.db, r.brokers, append([]string{"--flush-interval", "50ms", "--allowed-lateness", r.ds.Lateness}, r.flags...)...)
	}
	t.Logf("final drain took %v", time.Since(drainStart).Round(time.Millisecond))
	if time.Since(drainStart) > 5*time.Second {
		t.Logf("slow final drain; its output:\n%s", out)
	}
	r.mon.check(t, "after the final drain")
	r.mon.close()
	if r.mon.samples < 3 {
		t.Fatalf("the positions monitor took %d samples", r.mon.samples)
	}
	rows := 0
	for _, q := range harness.ResultTables {
		got := harness.Dump(t, r.db, q.Sql)
		harness.SameRows(t, q.What+" (after the schedule vs uninterrupted run)", got, r.ref.Tables[q.Sql])
		rows += len(got)
	}
	harness.CheckOracle(t, r.db, r.brokers, r.ds)
	if t.Failed() {
		t.Logf("final drain output (tail):\n%s", harness.Tail(out, 40))
		t.FailNow()
	}
	t.Logf("after the final drain: %d rows compared with the uninterrupted run and %d with the SQL oracle: 0 differences; %d G3 samples",
		rows, len(r.ref.Tables[harness.DumpAggregates]), r.mon.samples)
}

// sleepOrExit sleeps d, or fails the test when p exits meanwhile.
func (r *rig) sleepOrExit(p *harness.Proc, d time.Duration, when string) {
	r.t.Helper()
	select {
	case <-p.Done:
		r.t.Fatalf("ovstream exited %s (%v); output:\n%s", when, p.Err, harness.Tail(p.Output(), 60))
	case <-time.After(d):
	}
}

// crashPlan says how the schedule drives each crash point: the N of
// OVSTREAM_CRASHPOINT=NAME:N for three rounds (round 0 is always N=1). For
// shutdown, N is always 1: the crash comes from the final commit after SIGTERM.
var crashPlan = map[string]func(rng *rand.Rand, round int) int{
	"after_consume": func(rng *rand.Rand, round int) int { return []int{1, 50 + rng.IntN(400), 700 + rng.IntN(1300)}[round] },
	"before_begin":  func(rng *rand.Rand, round int) int { return []int{1, 2 + rng.IntN(4), 6 + rng.IntN(10)}[round] },
	"mid_commit":    func(rng *rand.Rand, round int) int { return []int{1, 2 + rng.IntN(4), 6 + rng.IntN(10)}[round] },
	"before_commit": func(rng *rand.Rand, round int) int { return []int{1, 2 + rng.IntN(4), 6 + rng.IntN(10)}[round] },
	"after_commit":  func(rng *rand.Rand, round int) int { return []int{1, 2 + rng.IntN(4), 6 + rng.IntN(10)}[round] },
	"shutdown":      func(*rand.Rand, int) int { return 1 },
}

// drivenElsewhere are crash points of other commands than run, each driven
// by the test named.
var drivenElsewhere = map[string]string{"replay_acked": "TestDLQReplayKilledAndRerun"}

// requiredCrashPoints are the points the suite must cover: after
// a record is consumed, before BEGIN, in the middle of the commit, before
// and after COMMIT, and at shutdown.
var requiredCrashPoints = []string{"after_consume", "before_begin", "mid_commit", "before_commit", "after_commit", "shutdown"}

// binaryCrashPoints lists the crash points the test binary knows.
func binaryCrashPoints(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command(harness.OvstreamBin(t), "crashpoints").CombinedOutput()
	if err != nil {
		t.Fatalf("ovstream crashpoints: %v\n%s", err, out)
	}
	return strings.Fields(string(out))
}

// The binary built with -tags crashpoints lists every crash point the issue
// asks for, and the crash schedule knows how to drive every point it lists;
// a binary built without the tag has no crash points at all.
func TestCrashPointsKnown(t *testing.T) {
	points := binaryCrashPoints(t)
	known := map[string]bool{}
	for _, p := range points {
		known[p] = true
		if crashPlan[p] == nil && drivenElsewhere[p] == "" {
			t.Errorf("the binary knows crash point %q, which TestCrashPoints does not drive: add it to crashPlan", p)
		}
	}
	for _, p := range requiredCrashPoints {
		if !known[p] {
			t.Errorf("crash point %q is missing from `ovstream crashpoints` (it lists %v)", p, points)
		}
	}
	plain := filepath.Join(t.TempDir(), "ovstream")
	if out, err := exec.Command("go", "build", "-o", plain, "../../cmd/ovstream").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(plain, "crashpoints").CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), `unknown command "crashpoints"`) {
		t.Errorf("a binary built without -tags crashpoints must not know the crashpoints command: %v\n%s", err, out)
	}
}

// Every crash point, at several N, each followed by a restart: the
// N-th time the point is reached the process dies by SIGKILL (for shutdown:
// during the final commit after SIGTERM). Then a final drain; the tables
// equal the uninterrupted run and the SQL oracle, and no stored position ever
// moved backwards or passed the high water mark.
func TestCrashPoints(t *testing.T) {
	t.Parallel()
	rng := harness.CrashSeed(t)
	ds := harness.Auckland2h(t)
	points := binaryCrashPoints(t)
	type item struct {
		point string
		n     int
	}
	var plan []item
	for round := 0; round < 3; round++ {
		for _, p := range points {
			if drivenElsewhere[p] != "" {
				continue
			}
			f := crashPlan[p]
			if f == nil {
				t.Fatalf("no plan for crash point %q (see TestCrashPointsKnown)", p)
			}
			if p == "shutdown" && round == 2 {
				continue
			}
			plan = append(plan, item{p, f(rng, round)})
		}
	}
	rng.Shuffle(len(plan)-1, func(i, j int) { plan[i+1], plan[j+1] = plan[j+1], plan[i+1] })
	// Each incarnation gets 3 feed steps while it runs; the last two steps
	// are the bad predictions and the positions.
	const perIncarnation = 3
	r := newRig(t, rng, ds, harness.StartBroker(t), perIncarnation*len(plan)-2)
	t.Logf("plan: %v", plan)

	reached := map[string]int{}
	for i, it := range plan {
		p := r.start(fmt.Sprintf("OVSTREAM_CRASHPOINT=%s:%d", it.point, it.n))
		r.feed.Async(perIncarnation, 60*time.Millisecond) // fresh records for this incarnation
		if it.point == "shutdown" {
			r.waitCommits(p, 1+rng.IntN(4), time.Minute, "before SIGTERM")
			r.signal(p, syscall.SIGTERM)
		}
		select {
		case <-p.Done:
		case <-time.After(90 * time.Second):
			p.Kill()
			t.Fatalf("step %d: crash point %s:%d not reached within 90s; output:\n%s", i, it.point, it.n, harness.Tail(p.Output(), 40))
		}
		ws, _ := p.Cmd.ProcessState.Sys().(syscall.WaitStatus)
		want := fmt.Sprintf("crashpoint: %s reached %d time(s): SIGKILL", it.point, it.n)
		if !ws.Signaled() || ws.Signal() != syscall.SIGKILL || !strings.Contains(p.Output(), want) {
			t.Fatalf("step %d: %s:%d: the process ended with %v, want SIGKILL after %q; output:\n%s",
				i, it.point, it.n, p.Cmd.ProcessState, want, harness.Tail(p.Output(), 40))
		}
		reached[it.point]++
		r.killed(fmt.Sprintf("after crash point %s:%d", it.point, it.n))
	}
	for _, p := range points {
		if reached[p] == 0 && drivenElsewhere[p] == "" {
			t.Errorf("crash point %s never fired", p)
		}
	}
	// At least the kills at N > 1 of the commit points and at shutdown
	// came after commits of their incarnation.
	r.finish(len(plan) / 3)
}

// At least 24 SIGKILLs (200 with -crash.long, over the whole 48 h archive)
// at seeded random moments of a live feed, each followed by a restart, then
// a final drain: the tables equal the uninterrupted run and the SQL oracle.
func TestCrashRandomKills(t *testing.T) {
	t.Parallel()
	rng := harness.CrashSeed(t)
	kills, ds := 24, (*harness.Dataset)(nil)
	if *crashLong {
		if *crashData == "" {
			t.Fatal("-crash.long needs -crash.data DIR: the unpacked Auckland 48 h archive (make crash does this)")
		}
		// 15m: the archive's worst real lag is 579 s; a restart may briefly
		// leave a freshly written partition out of the watermark for up to a
		// chunk's span.
		ds, kills = harness.LoadDataset(t, "auckland-48h", *crashData, "15m"), 200
	} else {
		ds = harness.Auckland2h(t)
	}
	if *crashKills > 0 {
		kills = *crashKills
	}
	// Incarnations live 100 ms - 1 s (startup to first commit is ~0.2 s):
	// some die before their first commit, most after several. The feed lasts
	// about as long as the kills.
	const meanLife = 550 * time.Millisecond
	chunks := 3 * kills
	interval := meanLife / 3
	r := newRig(t, rng, ds, harness.StartBroker(t), chunks)
	t.Logf("%d kills; %d predictions in %d chunks, one every %v", kills, len(ds.Predictions), chunks, interval)
	r.feed.Paced(interval)
	for r.kills < kills || !r.feed.Finished() {
		p := r.start()
		life := time.Duration(100+rng.IntN(900)) * time.Millisecond
		r.sleepOrExit(p, life, fmt.Sprintf("in incarnation %d before its kill", r.incarnations))
		r.kill(p)
		if r.kills%50 == 0 {
			t.Logf("%d kills, %d after a commit of their incarnation", r.kills, r.afterCommits)
		}
	}
	r.finish(kills / 2)
}

// terminateBackends terminates every connection of ovstream (application
// name "ovstream") to db and returns how many there were.
func terminateBackends(t *testing.T, db string) int {
	t.Helper()
	return int(harness.Scalar[int64](t, db, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = 'ovstream' AND datname = current_database() AND pid <> pg_backend_pid()`))
}

// failures counts the retried failures the service logged.
func failures(p *harness.Proc) int {
	out := p.Output()
	return strings.Count(out, "failed; retrying") + strings.Count(out, "COMMIT outcome unknown")
}

// One service process lives through killed connections (twice) and two
// PostgreSQL restarts without exiting, committing again after each; SIGTERM
// then ends it with exit 0, and a final drain gives the exact tables. The
// server restarted is a private cluster of the test's own.
func TestCrashPostgresRestarts(t *testing.T) {
	t.Parallel()
	rng := harness.CrashSeed(t)
	ds := harness.Auckland2h(t)
	pg := harness.StartPrivatePG(t)
	r := newRigOn(t, rng, ds, harness.StartBroker(t), 50, pg.FreshDB())
	r.feed.Paced(200 * time.Millisecond)
	p := r.start()
	r.waitProgress(p, time.Minute, "before the first disruption")
	for i := 1; i <= 2; i++ {
		r.sleepOrExit(p, time.Duration(100+rng.IntN(400))*time.Millisecond, "before killing its connections")
		before := failures(p)
		if n := terminateBackends(t, r.db); n == 0 {
			t.Fatalf("no connection of ovstream to terminate")
		}
		r.waitCommits(p, 2, time.Minute, fmt.Sprintf("after its connections were killed (%d)", i))
		if failures(p) == before {
			t.Fatalf("killed connections (%d): the service logged no failed and retried operation; output:\n%s", i, harness.Tail(p.Output(), 40))
		}
		r.mon.check(t, fmt.Sprintf("after killed connections (%d)", i))
	}
	for i := 1; i <= 2; i++ {
		r.sleepOrExit(p, time.Duration(200+rng.IntN(800))*time.Millisecond, "before the PostgreSQL restart")
		before := failures(p)
		pg.Restart()
		r.alive(p, fmt.Sprintf("through PostgreSQL restart %d", i))
		r.waitProgress(p, 2*time.Minute, fmt.Sprintf("after PostgreSQL restart %d", i))
		if failures(p) == before {
			t.Fatalf("PostgreSQL restart %d: the service logged no failed and retried operation; output:\n%s", i, harness.Tail(p.Output(), 40))
		}
		r.mon.check(t, fmt.Sprintf("after PostgreSQL restart %d", i))
	}
	r.feed.Wait(t, 2*time.Minute)
	r.waitCommits(p, 2, time.Minute, "after the feed ended")
	r.stopGracefully(p)
	// One process, no kill: the disruptions themselves are what came after commits.
	r.finish(0)
}

// SIGSTOP for much longer than the flush interval, then SIGCONT, three times
// (once with the connections killed while stopped); then SIGKILL while
// stopped and a restart. The service goes on each time; the tables are exact.
func TestCrashSigstop(t *testing.T) {
	t.Parallel()
	rng := harness.CrashSeed(t)
	ds := harness.Auckland2h(t)
	r := newRig(t, rng, ds, harness.StartBroker(t), 40)
	r.feed.Paced(150 * time.Millisecond)
	p := r.start()
	r.waitProgress(p, time.Minute, "before the first SIGSTOP")
	for i := 1; i <= 3; i++ {
		r.signal(p, syscall.SIGSTOP)
		harness.WaitStopped(t, p)
		if i == 2 {
			if n := terminateBackends(t, r.db); n == 0 {
				t.Fatal("no connection of ovstream to terminate")
			}
		}
		time.Sleep(time.Duration(500+rng.IntN(1000)) * time.Millisecond) // >= 10 flush intervals
		r.signal(p, syscall.SIGCONT)
		r.waitProgress(p, time.Minute, fmt.Sprintf("after SIGCONT %d", i))
		r.mon.check(t, fmt.Sprintf("after SIGSTOP/SIGCONT %d", i))
	}
	r.signal(p, syscall.SIGSTOP)
	harness.WaitStopped(t, p)
	time.Sleep(time.Duration(200+rng.IntN(500)) * time.Millisecond)
	r.kill(p)
	p = r.start()
	r.waitProgress(p, time.Minute, "after the restart")
	r.feed.Wait(t, 2*time.Minute)
	r.waitCommits(p, 2, time.Minute, "after the feed ended")
	r.stopGracefully(p)
	r.finish(1)
}

// warnings counts the warnings p logged.
func warnings(p *harness.Proc) int { return strings.Count(p.Output(), "level=WARN") }

// brokerProc runs `ovstream broker --data-dir DIR` on a fixed address, so
// clients reconnect to the same place after a restart.
type brokerProc struct {
	t    *testing.T
	dir  string
	addr string
	p    *harness.Proc
}

func startBrokerProc(t *testing.T, dir, addr string) *brokerProc {
	t.Helper()
	b := &brokerProc{t: t, dir: dir, addr: addr}
	b.start()
	return b
}

func (b *brokerProc) start() {
	b.t.Helper()
	b.p = harness.StartOvstream(b.t, nil, "broker", "--data-dir", b.dir, "--addr", b.addr,
		"--topics", fmt.Sprintf("%s:6,%s:3", harness.PredictionsTopic, harness.PositionsTopic))
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(b.p.Output(), "broker listening on") {
		select {
		case <-b.p.Done:
			b.t.Fatalf("broker exited: %v\n%s", b.p.Err, b.p.Output())
		default:
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("broker not listening within 30s:\n%s", b.p.Output())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The broker (a subprocess with --data-dir on a fixed port) is restarted
// three times under a running service: SIGTERM, SIGKILL, and SIGKILL with the
// service killed while the broker is down and started again after it. The
// service reconnects and goes on; the tables are exact.
func TestCrashBrokerRestart(t *testing.T) {
	t.Parallel()
	rng := harness.CrashSeed(t)
	ds := harness.Auckland2h(t)
	addr := harness.FreeAddr(t)
	b := startBrokerProc(t, t.TempDir(), addr)
	r := newRig(t, rng, ds, addr, 40)
	r.feed.Paced(200 * time.Millisecond)
	p := r.start()
	r.waitProgress(p, time.Minute, "before the first broker restart")
	for i, how := range []string{"SIGTERM", "SIGKILL", "SIGKILL with the service killed meanwhile"} {
		r.sleepOrExit(p, time.Duration(200+rng.IntN(600))*time.Millisecond, "before the broker restart")
		r.feed.Pause()
		warned := warnings(p)
		if how == "SIGTERM" {
			_ = b.p.Cmd.Process.Signal(syscall.SIGTERM)
			if code := b.p.Wait(t, 30*time.Second); code != 0 {
				t.Fatalf("broker: SIGTERM: exit %d\n%s", code, b.p.Output())
			}
		} else {
			b.p.Kill()
		}
		down := time.Duration(300+rng.IntN(1200)) * time.Millisecond
		if i == 2 {
			r.sleepOrExit(p, down/2, "while the broker is down")
			p.Kill() // its G3 check below, once the broker is back
			time.Sleep(down / 2)
		} else {
			r.sleepOrExit(p, down, "while the broker is down")
		}
		b.start()
		r.feed.Resume()
		if i == 2 {
			r.killed("after SIGKILL while the broker was down")
			p = r.start()
		} else {
			// The broker process died, and its connections with it; sarama
			// may reconnect without a word, so warnings are only logged.
			t.Logf("broker restart %d (%s): down for %v, %d warnings from the service", i+1, how, down, warnings(p)-warned)
		}
		// Records written after the restart are read and committed.
		r.feed.Step()
		back := time.Now()
		r.waitConsumedTo(p, harness.HighWaterMarks(t, addr), 2*time.Minute, fmt.Sprintf("after broker restart %d (%s)", i+1, how))
		t.Logf("broker restart %d: records written after it committed %v after it was back", i+1, time.Since(back).Round(time.Millisecond))
		r.mon.check(t, fmt.Sprintf("after broker restart %d", i+1))
	}
	r.feed.Wait(t, 2*time.Minute)
	r.waitCommits(p, 2, time.Minute, "after the feed ended")
	r.stopGracefully(p)
	r.finish(1)
}
