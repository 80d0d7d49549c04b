//go:build integration

package crash

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/ovstream/ovstream/integration/harness"
)

// allPartitions is every partition of both topics: one instance on it owns
// the whole pipeline.
const allPartitions = "arrival_predictions:0,arrival_predictions:1,arrival_predictions:2," +
	"arrival_predictions:3,arrival_predictions:4,arrival_predictions:5," +
	"vehicle_positions:0,vehicle_positions:1,vehicle_positions:2"

// splitLayouts are the assignments a schedule moves between: each entry is
// the --partitions of one instance. Moving from one to another moves
// partitions between instances, or gives one instance every partition.
var splitLayouts = []struct {
	name  string
	parts []string
}{
	{"halves", harness.Split2},
	{"moved", []string{ // predictions 3 and positions 1 move to the first instance
		"arrival_predictions:0,arrival_predictions:1,arrival_predictions:2,arrival_predictions:3,vehicle_positions:0,vehicle_positions:1",
		"arrival_predictions:4,arrival_predictions:5,vehicle_positions:2",
	}},
	{"interleaved", []string{
		"arrival_predictions:0,arrival_predictions:2,arrival_predictions:4,vehicle_positions:1",
		"arrival_predictions:1,arrival_predictions:3,arrival_predictions:5,vehicle_positions:0,vehicle_positions:2",
	}},
	{"one takes all", []string{allPartitions}},
}

// startLayout starts one instance per entry of parts, with extra run flags.
func (r *rig) startLayout(parts []string, extra ...string) []*harness.Proc {
	r.t.Helper()
	var ps []*harness.Proc
	for i, p := range parts {
		ps = append(ps, r.startInstance(i, p, extra...))
	}
	return ps
}

// startInstance starts instance i of a layout on parts, with extra run
// flags after r.instanceFlags(i).
func (r *rig) startInstance(i int, parts string, extra ...string) *harness.Proc {
	r.t.Helper()
	flags := []string{"--partitions", parts}
	if r.instanceFlags != nil {
		flags = append(flags, r.instanceFlags(i)...)
	}
	return r.startWith(nil, append(flags, extra...)...)
}

// splitDrains makes finish end with one `run --drain` per entry of parts,
// side by side: the drains of a split pipeline, merged by the last one.
func (r *rig) splitDrains(parts []string) {
	r.finalDrain = func() string {
		r.t.Helper()
		ps := r.startLayout(parts, "--drain")
		harness.WaitAll(r.t, ps, "final drains")
		var out []string
		for i, p := range ps {
			out = append(out, fmt.Sprintf("--- drain %d (%s):\n%s", i, parts[i], harness.Tail(p.Output(), 15)))
		}
		return strings.Join(out, "\n")
	}
}

// sleepAll sleeps d, failing the test when one of ps exits meanwhile.
func (r *rig) sleepAll(ps []*harness.Proc, d time.Duration, when string) {
	r.t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		for _, p := range ps {
			r.alive(p, when)
		}
		time.Sleep(min(20*time.Millisecond, time.Until(deadline)))
	}
}

// partsFilter is an SQL condition on stream_positions for the partitions
// of parts ("topic:N,...").
func partsFilter(t *testing.T, parts string) string {
	t.Helper()
	var in []string
	for _, tp := range strings.Split(parts, ",") {
		topic, n, ok := strings.Cut(tp, ":")
		if _, err := strconv.Atoi(n); !ok || err != nil {
			t.Fatalf("partition %q: want topic:N", tp)
		}
		in = append(in, fmt.Sprintf("('%s', %s)", topic, n))
	}
	return "(topic, partition) IN (" + strings.Join(in, ", ") + ")"
}

// waitInstanceCommits waits until the instance p on parts commits n more
// times: each commit upserts the stream_positions rows of its partitions.
func (r *rig) waitInstanceCommits(p *harness.Proc, parts string, n int, timeout time.Duration, when string) {
	r.t.Helper()
	q := `SELECT coalesce(max(updated_at), 'epoch') FROM stream_positions WHERE ` + partsFilter(r.t, parts)
	deadline := time.Now().Add(timeout)
	prev := harness.Scalar[time.Time](r.t, r.db, q)
	for seen := 0; seen < n; {
		r.alive(p, when)
		if time.Now().After(deadline) {
			r.t.Fatalf("%d of %d commits of the instance on %s within %v %s; output:\n%s", seen, n, parts, timeout, when, harness.Tail(p.Output(), 60))
		}
		time.Sleep(20 * time.Millisecond)
		if c := harness.Scalar[time.Time](r.t, r.db, q); c.After(prev) {
			seen++
			prev = c
		}
	}
}

// mergedUntil returns pipelines.merged_until ("" until a first merge).
func (r *rig) mergedUntil() string {
	r.t.Helper()
	return harness.Scalar[string](r.t, r.db, `SELECT coalesce((SELECT merged_until::text FROM pipelines WHERE name = 'ovstream'), '')`)
}

// mergeState returns the end of the last merged window's merge frontier
// (pipelines.merged_until, "HH:MM:SS" UTC, "-" before the first merge) and
// how many windows have partials waiting for the merge.
func (r *rig) mergeState() (until string, pending int) {
	r.t.Helper()
	s := harness.Scalar[string](r.t, r.db, `SELECT coalesce((SELECT to_char(merged_until AT TIME ZONE 'UTC', 'HH24:MI:SS') FROM pipelines
		WHERE name = 'ovstream'), '-') || ' ' || (SELECT count(DISTINCT window_start) FROM delay_partial_windows)`)
	harness.Scan(r.t, s, "%s %d", &until, &pending)
	return until, pending
}

// waitMergedPast waits until the pipeline merged windows past until ("":
// any merge), with every instance of ps alive.
func (r *rig) waitMergedPast(ps []*harness.Proc, until string, timeout time.Duration, when string) {
	r.t.Helper()
	q := `SELECT coalesce((SELECT merged_until > '-infinity'::timestamptz FROM pipelines WHERE name = 'ovstream'), false)`
	if until != "" {
		q = fmt.Sprintf(`SELECT coalesce((SELECT merged_until > '%s' FROM pipelines WHERE name = 'ovstream'), false)`, until)
	}
	deadline := time.Now().Add(timeout)
	for !harness.Scalar[bool](r.t, r.db, q) {
		for _, p := range ps {
			r.alive(p, when)
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("no merge past %q within %v %s", until, timeout, when)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// terminate stops p with SIGTERM, which may come at any moment of its
// start-up, and requires exit 0. It waits until p logged its metrics
// address, before it connects to anything: a SIGTERM before main installs
// its handler would kill the process (exit -1) before it ran any of ovstream.
func (r *rig) terminate(p *harness.Proc) {
	r.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(p.Output(), "serving /metrics") {
		r.alive(p, "before SIGTERM")
		if time.Now().After(deadline) {
			r.t.Fatalf("no metrics address logged within a minute; output:\n%s", harness.Tail(p.Output(), 20))
		}
		time.Sleep(5 * time.Millisecond)
	}
	r.stopGracefully(p)
}

// waitClaimed waits until p logged its claim: a --takeover after it fences it.
func waitClaimed(t *testing.T, p *harness.Proc) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(p.Output(), "claimed partitions") {
		select {
		case <-p.Done:
			t.Fatalf("ovstream exited (%v) before it claimed; output:\n%s", p.Err, harness.Tail(p.Output(), 40))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no claim within a minute; output:\n%s", harness.Tail(p.Output(), 40))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Two instances of one pipeline on disjoint partitions of both topics run as
// services while the feed is produced in chunks. At seeded random moments
// either instance is SIGKILLed and restarted on its partitions; now and then
// the partitions are reassigned instead (a partition moving to the other
// instance, or one instance taking all), either after both stopped (SIGKILL
// or SIGTERM) or by starting the new instances with --takeover while the old
// ones run, which fences them (exit 3). Then the instances of the last
// assignment drain: the tables equal the uninterrupted single run and the
// SQL oracle, and no stored position ever moved backwards or passed the high
// water mark. The second instance allows more lateness than the first, so
// windows the first finalized wait as partials for it.
func TestSplitCrashRandomKills(t *testing.T) {
	t.Parallel()
	rng := harness.CrashSeed(t)
	ds := harness.Auckland2h(t)
	const kills = 16
	r := newRig(t, rng, ds, harness.StartBroker(t), 3*kills)
	r.flags = append(r.flags, "--metrics-addr", "127.0.0.1:0") // logged at once: see terminate
	// The second instance of a layout allows 10 minutes more lateness (no
	// event of the data is late under either): its watermark trails, so
	// the first one's partials wait for it, and most disruptions come
	// while partials wait for the merge.
	r.instanceFlags = func(i int) []string {
		if i == 1 {
			return []string{"--allowed-lateness", "20m"}
		}
		return nil
	}
	r.feed.Paced(200 * time.Millisecond)
	layout := splitLayouts[0]
	ps := r.startLayout(layout.parts)
	var schedule []string
	merging, waiting := 0, 0 // disruptions after the first merge; of them, with partials waiting
	for r.kills < kills || !r.feed.Finished() {
		r.sleepAll(ps, time.Duration(200+rng.IntN(1000))*time.Millisecond, "between disruptions")
		merged, pending := r.mergeState()
		if merged != "-" {
			merging++
			waiting += min(pending, 1)
		}
		schedule = append(schedule, fmt.Sprintf("[merged until %s, %d windows pending]", merged, pending))
		roll := rng.IntN(10)
		if roll < 7 || len(ps) == 1 && roll < 8 {
			i := rng.IntN(len(ps))
			r.kill(ps[i])
			ps[i] = r.startInstance(i, layout.parts[i])
			schedule = append(schedule, fmt.Sprintf("kill %d;", i))
			continue
		}
		next := splitLayouts[rng.IntN(len(splitLayouts))]
		if roll < 9 {
			// Every instance stops first (a SIGKILLed one keeps its
			// lease: the new ones claim with --takeover, the rig's flag).
			how := []string{}
			for _, p := range ps {
				if rng.IntN(3) == 0 {
					r.terminate(p)
					how = append(how, "SIGTERM")
				} else {
					r.kill(p)
					how = append(how, "SIGKILL")
				}
			}
			ps = r.startLayout(next.parts)
			schedule = append(schedule, fmt.Sprintf("%s, then %s;", strings.Join(how, "+"), next.name))
		} else {
			// The new instances take the partitions over from live owners:
			// each old instance is fenced at its next commit and exits 3.
			for _, p := range ps {
				waitClaimed(t, p)
			}
			old := ps
			ps = r.startLayout(next.parts)
			for i, p := range old {
				if code := p.Wait(t, time.Minute); code != 3 || !strings.Contains(p.Output(), "fenced") {
					t.Fatalf("old instance %d after the takeover by %s: exit %d, want 3 (fenced); output:\n%s", i, next.name, code, harness.Tail(p.Output(), 40))
				}
			}
			r.mon.check(t, "after the takeover by "+next.name)
			schedule = append(schedule, "takeover by "+next.name+";")
		}
		layout = next
	}
	t.Logf("schedule: %s", strings.Join(schedule, " "))
	t.Logf("%d of the %d disruptions came after the first merge (%d with partials waiting for the merge)", merging, len(schedule)/2, waiting)
	for _, p := range ps {
		r.terminate(p)
	}
	r.splitDrains(layout.parts)
	r.finish(kills / 3)
}

// stopInMerge stops p (SIGSTOP) while its commit session, whose
// application_name is app, is inside a transaction that merges windows: an
// instance of a split pipeline writes delay_aggregates only when it merges,
// so its session's RowExclusiveLock on delay_aggregates says so. When the
// transaction ended before the stop took effect, p goes on (SIGCONT) and the
// watch goes on. It returns the attempts it took.
func (r *rig) stopInMerge(p *harness.Proc, app string, timeout time.Duration) int {
	t := r.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, r.db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	const inMerge = `SELECT l.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE a.application_name = $1 AND l.locktype = 'relation' AND l.relation = 'delay_aggregates'::regclass
  AND l.mode = 'RowExclusiveLock' AND l.granted`
	for attempt := 1; ; attempt++ {
		var pid int32
		for {
			r.alive(p, "while waiting for its merge")
			err := conn.QueryRow(ctx, inMerge, app).Scan(&pid)
			if err == nil {
				break
			}
			if !errors.Is(err, pgx.ErrNoRows) {
				t.Fatalf("no merge of %s caught within %v (%d attempts): %v", app, timeout, attempt, err)
			}
			time.Sleep(2 * time.Millisecond)
		}
		r.signal(p, syscall.SIGSTOP)
		harness.WaitStopped(t, p)
		time.Sleep(50 * time.Millisecond)
		var still bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (`+inMerge+` AND l.pid = $2)`, app, pid).Scan(&still); err != nil {
			t.Fatal(err)
		}
		if still {
			return attempt
		}
		r.signal(p, syscall.SIGCONT)
	}
}

// withApp returns the database URL db with application_name app, so the
// test can tell the instances' sessions apart.
func withApp(db, app string) string {
	sep := "?"
	if strings.Contains(db, "?") {
		sep = "&"
	}
	return db + sep + "application_name=" + app
}

// Two instances of one pipeline on a private PostgreSQL cluster. The cluster
// is restarted twice while they run, each time while one instance is inside a
// merge transaction (stopped there by SIGSTOP: the restart rolls it back and
// the instance learns it only after SIGCONT). Both ride it out without
// exiting, commit again, and the windows of the rolled-back merge are merged
// later; after the feed ends both stop with SIGTERM, and the two drains give
// the tables of the uninterrupted single run and the SQL oracle.
func TestSplitPostgresRestart(t *testing.T) {
	t.Parallel()
	rng := harness.CrashSeed(t)
	ds := harness.Auckland2h(t)
	pg := harness.StartPrivatePG(t)
	r := newRigOn(t, rng, ds, harness.StartBroker(t), 100, pg.FreshDB())
	apps := []string{"ovstream-split-0", "ovstream-split-1"}
	ps := make([]*harness.Proc, 2)
	for i := range ps {
		ps[i] = r.startWith(nil, "--partitions", harness.Split2[i], "--database-url", withApp(r.db, apps[i]))
	}
	r.feed.HoldBack(1) // the positions, after the restarts
	r.feed.Paced(150 * time.Millisecond)
	r.waitMergedPast(ps, "", 2*time.Minute, "before the first restart")
	first := rng.IntN(2)
	for round, i := range []int{first, 1 - first} { // each instance's merge once
		attempts := r.stopInMerge(ps[i], apps[i], 2*time.Minute)
		merged := r.mergedUntil()
		before := []int{failures(ps[0]), failures(ps[1])}
		pg.Restart()
		r.signal(ps[i], syscall.SIGCONT)
		for j, p := range ps {
			r.waitInstanceCommits(p, harness.Split2[j], 2, 2*time.Minute, fmt.Sprintf("after PostgreSQL restart %d", round+1))
		}
		if failures(ps[i]) == before[i] {
			t.Fatalf("restart %d: instance %d, stopped inside its merge, logged no failed and retried commit; output:\n%s",
				round+1, i, harness.Tail(ps[i].Output(), 40))
		}
		r.waitMergedPast(ps, merged, 2*time.Minute, fmt.Sprintf("after PostgreSQL restart %d", round+1))
		r.mon.check(t, fmt.Sprintf("after PostgreSQL restart %d", round+1))
		t.Logf("restart %d: instance %d stopped inside a merge transaction (attempt %d), merged until %s; retried failures: %d and %d",
			round+1, i, attempts, merged, failures(ps[0])-before[0], failures(ps[1])-before[1])
	}
	r.feed.Release()
	r.feed.Paced(150 * time.Millisecond)
	r.feed.Wait(t, 3*time.Minute)
	r.waitConsumedTo(ps[0], harness.HighWaterMarks(t, r.brokers), 2*time.Minute, "after the feed ended")
	for _, p := range ps {
		r.stopGracefully(p)
	}
	r.splitDrains(harness.Split2)
	r.finish(0) // no kill: the restarts are the disruptions
}

// mergeCommit is what the test saw of one merge COMMIT the proxy broke.
type mergeCommit struct {
	mode  string
	xid   string   // the merge transaction's id (backend_xid), when it was open
	start string   // its start (xact_start): the updated_at of every row it wrote
	rows  []string // dumpAggregates rows it wrote, once the server committed
	until string   // pipelines.merged_until it stored
	err   error
}

// inspector records, for each armed COMMIT of the proxy, the merge
// transaction behind it, on a connection of its own to db.
type inspector struct {
	db string

	mu      sync.Mutex
	commits []*mergeCommit
}

func (in *inspector) hook(mode string) func(stage string, port int) {
	c := &mergeCommit{mode: mode}
	in.mu.Lock()
	in.commits = append(in.commits, c)
	in.mu.Unlock()
	return func(stage string, port int) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, in.db)
		if err != nil {
			in.fail(c, err)
			return
		}
		defer conn.Close(ctx)
		switch stage {
		case "open":
			// The rows are written inside a savepoint, whose own
			// transaction id is their xmin: they are found by the
			// transaction's start, now() for each of them.
			err = conn.QueryRow(ctx, `SELECT backend_xid::text, xact_start::text FROM pg_stat_activity
				WHERE client_port = $1 AND backend_xid IS NOT NULL`, port).Scan(&c.xid, &c.start)
		case "answered":
			var rows pgx.Rows
			rows, err = conn.Query(ctx, harness.DumpAggregates+` WHERE updated_at = $1::timestamptz`, c.start)
			if err == nil {
				for rows.Next() {
					vals, _ := rows.Values()
					c.rows = append(c.rows, fmt.Sprintf("%v", vals))
				}
				rows.Close()
				err = rows.Err()
			}
			if err == nil {
				err = conn.QueryRow(ctx, `SELECT merged_until::text FROM pipelines WHERE name = 'ovstream' AND xmin::text = $1`,
					c.xid).Scan(&c.until)
				if errors.Is(err, pgx.ErrNoRows) {
					// The other instance merged (and moved merged_until) since
					// this COMMIT: this one merged at least up to the newest
					// window it wrote.
					err = conn.QueryRow(ctx, `SELECT max(window_end)::text FROM delay_aggregates WHERE updated_at = $1::timestamptz`,
						c.start).Scan(&c.until)
				}
			}
		}
		if err != nil {
			in.fail(c, fmt.Errorf("%s: %w", stage, err))
		}
	}
}

func (in *inspector) fail(c *mergeCommit, err error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	c.err = errors.Join(c.err, err)
}

// Two instances of one pipeline; the first reaches PostgreSQL through the
// proxy, which breaks the COMMIT of three of its merge transactions (a
// transaction that wrote delay_aggregates rows): twice the server commits
// and the answer is lost, once COMMIT never reaches it. Each time the
// instance says the outcome is unknown, re-reads its positions and goes on.
// The rows a lost-answer merge committed (found by its transaction's start,
// their updated_at) are the rows of the uninterrupted run, and they are still there, unchanged
// and never written again, at the end: neither lost nor doubled. A merge
// rolled back is done again by a later commit. The drains end with the
// tables of the uninterrupted single run and the SQL oracle.
func TestSplitAmbiguousCommitDuringMerge(t *testing.T) {
	t.Parallel()
	rng := harness.CrashSeed(t)
	ds := harness.Auckland2h(t)
	r := newRig(t, rng, ds, harness.StartBroker(t), 80)
	proxy := startPgProxy(t, harness.TestServerAddr(t))
	ins := &inspector{db: r.db}
	ps := []*harness.Proc{
		r.startWith(nil, "--partitions", harness.Split2[0], "--database-url", proxy.url(r.db)),
		r.startWith(nil, "--partitions", harness.Split2[1]),
	}
	a := ps[0]
	r.feed.HoldBack(1) // the positions, after the broken COMMITs
	r.feed.Paced(150 * time.Millisecond)
	r.waitMergedPast(ps, "", 2*time.Minute, "before the first broken COMMIT")
	modes := []string{dropAfterWindows, dropAfterWindows, dropBeforeWindows}
	rng.Shuffle(len(modes), func(i, j int) { modes[i], modes[j] = modes[j], modes[i] })
	for i, mode := range modes {
		r.sleepAll(ps, time.Duration(100+rng.IntN(400))*time.Millisecond, "before arming the proxy")
		resyncs := strings.Count(a.Output(), "COMMIT outcome unknown")
		proxy.mu.Lock()
		proxy.inspect = ins.hook(mode)
		proxy.mu.Unlock()
		proxy.armNext(mode)
		deadline := time.Now().Add(2 * time.Minute)
		for len(proxy.dropped()) <= i || strings.Count(a.Output(), "COMMIT outcome unknown") == resyncs {
			r.alive(ps[1], "while the proxy waits for a merge")
			r.alive(a, "after its merge COMMIT was broken")
			if time.Now().After(deadline) {
				t.Fatalf("merge COMMIT %d (%s): drops %q; no unknown outcome reported; output:\n%s", i+1, mode, proxy.dropped(), harness.Tail(a.Output(), 40))
			}
			time.Sleep(10 * time.Millisecond)
		}
		c := ins.commits[i]
		if c.err != nil || c.xid == "" {
			t.Fatalf("merge COMMIT %d (%s): transaction id %q: %v", i+1, mode, c.xid, c.err)
		}
		switch mode {
		case dropAfterWindows:
			if d := proxy.dropped()[i]; !strings.Contains(d, "answered COMMIT") || len(c.rows) == 0 || c.until == "" {
				t.Fatalf("merge COMMIT %d: %s; %d merged rows seen, merged_until %q", i+1, d, len(c.rows), c.until)
			}
			// Nothing of a merged window is written again as a partial.
			if n := harness.Dump(t, r.db, fmt.Sprintf(`SELECT count(*) FROM delay_partial_windows WHERE window_end <= '%s'`, c.until))[0]; n != "[0]" {
				t.Fatalf("merge COMMIT %d: %s partials of windows merged until %s", i+1, n, c.until)
			}
		case dropBeforeWindows:
			if n := harness.Dump(t, r.db, `SELECT count(*) FROM delay_aggregates WHERE updated_at = '`+c.start+`'`)[0]; n != "[0]" {
				t.Fatalf("merge COMMIT %d, never sent: %s rows of its transaction stored", i+1, n)
			}
		}
		merged := r.mergedUntil()
		r.waitInstanceCommits(a, harness.Split2[0], 2, 2*time.Minute, fmt.Sprintf("after broken merge COMMIT %d (%s)", i+1, mode))
		r.waitMergedPast(ps, merged, 2*time.Minute, fmt.Sprintf("after broken merge COMMIT %d (%s)", i+1, mode))
		r.mon.check(t, fmt.Sprintf("after broken merge COMMIT %d (%s)", i+1, mode))
		t.Logf("merge COMMIT %d (%s): transaction %s, %d rows merged, until %s", i+1, mode, c.xid, len(c.rows), c.until)
	}
	r.feed.Release()
	r.feed.Paced(150 * time.Millisecond)
	r.feed.Wait(t, 3*time.Minute)
	r.waitConsumedTo(a, harness.HighWaterMarks(t, r.brokers), 2*time.Minute, "after the feed ended")
	for _, p := range ps {
		r.stopGracefully(p)
	}
	r.splitDrains(harness.Split2)
	r.finish(0)
	// The rows of the merges whose answer was lost: exactly once in the
	// table, as the uninterrupted run has them, never written again.
	ref := map[string]bool{}
	for _, row := range r.ref.Tables[harness.DumpAggregates] {
		ref[row] = true
	}
	checked := 0
	for i, c := range ins.commits {
		if c.mode != dropAfterWindows {
			continue
		}
		for _, row := range c.rows {
			if !ref[row] {
				t.Errorf("merge COMMIT %d wrote a row the uninterrupted run does not have: %s", i+1, row)
			}
		}
		harness.SameRows(t, fmt.Sprintf("rows of merge COMMIT %d (answer lost) at the end vs when it committed", i+1),
			harness.Dump(t, r.db, harness.DumpAggregates+` WHERE updated_at = '`+c.start+`'`), c.rows)
		checked += len(c.rows)
	}
	t.Logf("%d rows of merges whose COMMIT answer was lost: each once, equal to the uninterrupted run, never rewritten", checked)
}

// The drains of a split pipeline, the second breaking its last commit: the
// one that found every partition drained, merged every remaining window and
// ended the drain (docs/design.md "Draining a split pipeline"). Once the server
// committed and COMMIT's answer is lost, once COMMIT never reaches it, once
// the connection breaks at the statement that ends the drain. The stored
// rows cannot tell the second drain whether its commit ended the drain (the
// flags it set are cleared either way), and a retried batch is the whole
// drain: it must end with exit 0, as the first does, without a resync, and
// the tables equal one uninterrupted drain and the SQL oracle. Before the
// fix the second drain waited for ever after the lost answer (it resynced,
// marked its partitions drained again and waited for the others) and after
// the broken connection (its retried commit ended the drain, and one more
// commit marked its partitions drained again). The proxy breaks the COMMIT
// of the transaction that clears the drained flags with the merge's
// watermark; it took a claim's for it before (a claim clears the flags of
// the partitions it takes), so each mode broke the second drain's claim
// and none its last commit.
func TestSplitAmbiguousDrainEnd(t *testing.T) {
	t.Parallel()
	ds := harness.Auckland2h(t)
	ref := harness.ReferenceFor(t, ds)
	addr := harness.StartBroker(t)
	f := harness.NewFeed(ds, addr, 1)
	f.Steps[len(f.Steps)-1].Settle = false
	f.All(t)
	for _, mode := range []string{dropAfterDrainEnd, dropBeforeDrainEnd, cutDrainEnd} {
		t.Run(mode, func(t *testing.T) {
			db := harness.FreshDB(t)
			proxy := startPgProxy(t, harness.TestServerAddr(t))
			drainOn := func(db, parts string) *harness.Proc {
				return harness.StartOvstream(t, nil, harness.RunArgs(db, addr, "--drain", "--partitions", parts, "--flush-interval", "50ms",
					"--allowed-lateness", ds.Lateness, "--log-level", "info")...)
			}
			first := drainOn(db, harness.Split2[1])
			harness.WaitFor(t, 2*time.Minute, "the first drain waiting for the merge", func() bool {
				if harness.Exited(first) {
					t.Fatalf("the first drain ended before the second started:\n%s", harness.Tail(first.Output(), 40))
				}
				return harness.Dump(t, db, `SELECT count(*) FROM stream_positions WHERE drained AND `+partsFilter(t, harness.Split2[1]))[0] == "[5]"
			})
			proxy.armNext(mode)
			second := drainOn(proxy.url(db), harness.Split2[0])
			for i, p := range []*harness.Proc{first, second} {
				if code := p.Wait(t, time.Minute); code != 0 {
					t.Fatalf("drain %d exited %d; drops %q; output:\n%s", i+1, code, proxy.dropped(), harness.Tail(p.Output(), 30))
				}
			}
			d := proxy.dropped()
			if len(d) != 1 || mode == dropAfterDrainEnd && !strings.Contains(d[0], "answered COMMIT") ||
				mode != dropAfterDrainEnd && !strings.HasPrefix(d[0], strings.Split(mode, "-")[0]) {
				t.Fatalf("the COMMIT that ends the drain was not broken: drops %q; output:\n%s", d, harness.Tail(second.Output(), 30))
			}
			if strings.Contains(second.Output(), "claim partitions failed") {
				t.Fatalf("the proxy broke the second drain's claim, not its last commit; output:\n%s", harness.Tail(second.Output(), 30))
			}
			// The lost answer is resolved by reading, on a new connection, the
			// commit sequences its fencing statement raised (store/outcome.go),
			// not by a resync: the rest of the stored rows could not tell.
			if resyncs := strings.Count(second.Output(), "COMMIT outcome unknown"); resyncs != 0 {
				t.Errorf("the second drain resynced %d times; its COMMIT's outcome is resolved by PostgreSQL", resyncs)
			}
			compared, differing := harness.CompareWithReference(t, db, ref, "split drains, the drain-ending COMMIT broken")
			harness.CheckOracle(t, db, addr, ds)
			t.Logf("%s: %d rows compared with one uninterrupted drain, %d differ", d[0], compared, differing)
		})
	}
}
