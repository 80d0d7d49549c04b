//go:build integration

package crash

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/integration/harness"
)

// watchCommits polls max(stream_positions.updated_at) on db every 2 ms
// over one connection (each commit upserts every partition it owns, so the
// maximum moves with every commit) until the returned function is called,
// which returns the distinct values seen: the commits made meanwhile.
func watchCommits(t *testing.T, db string) func() []time.Time {
	ctx, cancel := context.WithCancel(context.Background())
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	var seen []time.Time
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer conn.Close(context.Background())
		for ctx.Err() == nil {
			var c time.Time
			if err := conn.QueryRow(ctx, `SELECT coalesce(max(updated_at), 'epoch') FROM stream_positions`).Scan(&c); err != nil {
				return
			}
			if len(seen) == 0 || !c.Equal(seen[len(seen)-1]) {
				seen = append(seen, c)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	return func() []time.Time {
		cancel()
		<-done
		return seen
	}
}

// aliveAll fails the test when one of ps has exited.
func (r *rig) aliveAll(ps []*harness.Proc, when string) {
	r.t.Helper()
	for _, p := range ps {
		r.alive(p, when)
	}
}

// ambiguousLine is what the service logs when a COMMIT's outcome is unknown
// (the server died during it).
const ambiguousLine = "COMMIT outcome unknown"

// lostLine is what the service logs, per partition, when the database lost
// commits it made.
const lostLine = "the database lost commits this instance made"

// failoverFigures is what one failover did.
type failoverFigures struct {
	held         time.Duration // the replication stream held before the kill
	lagBytes     int64         // WAL the standby had not replayed at the kill
	lostCommits  int           // commits the old primary acknowledged that the new one lacks (seen on it)
	lostSeq      int64         // the same by commit_seq: the most a partition's went back
	loggedLost   int64         // the most commits_lost the service logged for a partition
	lostParts    []string      // partitions whose stored offsets went back
	lostRecords  int64         // sum over partitions of next_offset lost
	lostWindows  int64         // delay_aggregates rows lost
	firstCommit  time.Duration // from the primary's death to the first commit on the new primary
	promoteAfter time.Duration // from the primary's death to the promoted standby accepting writes
}

// failover holds the replication stream while the service p commits (at
// least minHold, and until the primary holds a commit the standby lacks in
// asynchronous mode, or a commit waits in synchronous mode), SIGKILLs the
// primary, promotes the standby and waits until p commits on it. The
// positions monitor is told the database lost what the new primary lacks.
func (r *rig) failover(rs *harness.PgReplicaSet, p *harness.Proc, minHold time.Duration) failoverFigures {
	r.t.Helper()
	return r.failoverWith(rs, []*harness.Proc{p}, minHold, nil)
}

// failoverWith is failover with held run first while the stream is held
// (e.g. an instance's death and its standby's claim).
func (r *rig) failoverWith(rs *harness.PgReplicaSet, ps []*harness.Proc, minHold time.Duration, held func()) failoverFigures {
	t := r.t
	t.Helper()
	var f failoverFigures
	primary, standby := rs.Nodes[rs.Primary], rs.Nodes[1-rs.Primary]
	rs.WaitReplayed()
	began := time.Now()
	rs.Hold()
	commitsSeen := watchCommits(t, primary.Url("ovs"))
	if held != nil {
		held()
	}
	var before harness.DbState
	for {
		r.aliveAll(ps, "while the replication stream is held")
		time.Sleep(20 * time.Millisecond)
		on := standby.State()
		before = primary.State()
		f.held = time.Since(began)
		parts, _ := before.Ahead(on)
		if f.held >= minHold && (rs.Sync || len(parts) > 0) {
			break
		}
		if f.held > 15*time.Second {
			t.Fatalf("replication held %v: the primary holds no commit that moved a position past the standby's; output:\n%s",
				f.held.Round(time.Millisecond), harness.Tail(ps[0].Output(), 40))
		}
	}
	f.lagBytes = rs.LagBytes()
	if f.lagBytes <= 0 {
		t.Fatalf("replication held %v, yet the standby is %d bytes behind the primary", f.held, f.lagBytes)
	}
	commits := commitsSeen()
	// The losses the service logged before this failover; no monitor sample
	// until its baseline is the new primary's.
	logged, unknown := make([]int, len(ps)), make([]int, len(ps))
	for i, p := range ps {
		logged[i] = strings.Count(p.Output(), lostLine)
		unknown[i] = strings.Count(p.Output(), ambiguousLine)
	}
	var died time.Time
	var after harness.DbState
	func() {
		r.mon.mu.Lock()
		defer r.mon.mu.Unlock() // also on t.Fatal: the rig's cleanup closes the monitor
		died = rs.KillPrimary()
		// What the new primary starts from, read on the standby before its
		// promotion (once promoted, the service writes on it at once): all it
		// received replayed, the stream gone.
		rs.WaitStandbyQuiet()
		after = standby.State()
		rs.Promote()
		f.promoteAfter = time.Since(died)
		r.mon.last = map[aggregate.PartitionID][2]int64{}
	}()

	for _, c := range commits {
		if c.After(after.LastCommit) {
			f.lostCommits++
		}
	}
	f.lostParts, f.lostRecords = before.Ahead(after)
	f.lostWindows = before.WindowRows - after.WindowRows
	f.lostSeq = before.SeqsAhead(after)
	t.Logf("failover %s -> %s (%s): stream held %v, standby %d bytes of WAL behind; the old primary had acknowledged %d commits the new one lacks "+
		"(commit_seq back by %d): %d delay_aggregates rows, stored offsets of %d partitions back by %d records %v",
		primary.Name, rs.Nodes[rs.Primary].Name, rs.Mode(), f.held.Round(time.Millisecond), f.lagBytes, f.lostCommits, f.lostSeq,
		f.lostWindows, len(f.lostParts), f.lostRecords, f.lostParts)

	deadline := died.Add(time.Minute)
	for !r.lastCommit().After(died) {
		r.aliveAll(ps, "after the failover")
		if time.Now().After(deadline) {
			t.Fatalf("no commit on the new primary within a minute of the failover; output:\n%s", harness.Tail(ps[0].Output(), 60))
		}
		time.Sleep(10 * time.Millisecond)
	}
	f.firstCommit = time.Since(died)
	if f.lostSeq > 0 { // the service must have said so, naming how many commits it lost
		var parts int
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
			parts, f.loggedLost = 0, 0
			for i, p := range ps {
				lines := 0
				for _, l := range strings.Split(p.Output(), "\n") {
					if _, n, ok := strings.Cut(l, "commits_lost="); ok && strings.Contains(l, lostLine) {
						if lines++; lines > logged[i] {
							var c int64
							harness.Scan(t, n, "%d", &c)
							f.loggedLost = max(f.loggedLost, c)
							parts++
						}
					}
				}
			}
			if f.loggedLost >= f.lostSeq {
				break
			}
			resynced := false // a COMMIT in flight at the kill: the resync re-read the positions
			for i, p := range ps {
				resynced = resynced || strings.Count(p.Output(), ambiguousLine) > unknown[i]
			}
			if resynced && f.loggedLost == 0 {
				t.Logf("a COMMIT was in flight at the kill: the service re-read the stored positions after its unknown outcome " +
					"and replayed from them, without logging the loss of the commits acknowledged before it")
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("the service logged %d commits lost, the database lost %d (commit_seq)", f.loggedLost, f.lostSeq)
				break
			}
		}
		t.Logf("the service logged the loss on %d partitions, up to %d commits each, and replayed them from the stored offsets", parts, f.loggedLost)
	}
	t.Logf("from the primary's death: promoted standby accepting writes after %v, first commit of the service on it after %v",
		f.promoteAfter.Round(time.Millisecond), f.firstCommit.Round(time.Millisecond))
	return f
}

// startFailoverRig starts a replicated cluster, the feed of the Auckland
// 2 h slice in chunks paced so that commits go on for many seconds, and the
// service on the multi-host URL, and waits for its first real commits.
func startFailoverRig(t *testing.T, sync bool, chunks int, flags ...string) (*rig, *harness.PgReplicaSet, *harness.Proc) {
	t.Helper()
	rng := harness.CrashSeed(t)
	ds := harness.Auckland2h(t)
	rs := harness.StartReplicaSet(t, sync)
	r := newRigOn(t, rng, ds, harness.StartBroker(t), chunks, rs.CreateDB())
	if len(flags) > 0 {
		r.flags = flags
	}
	r.feed.Paced(200 * time.Millisecond)
	p := r.start()
	r.waitProgress(p, time.Minute, "before the failover")
	r.sleepOrExit(p, time.Duration(300+rng.IntN(700))*time.Millisecond, "before the failover")
	return r, rs, p
}

// endFailoverRig lets the feed end, stops the service with SIGTERM (exit 0)
// and checks the final drain's tables (rig.finish).
func endFailoverRig(r *rig, p *harness.Proc) {
	r.t.Helper()
	r.feed.All(r.t) // the failovers are over: the rest of the feed at once
	r.waitCommits(p, 2, time.Minute, "after the feed ended")
	r.stopGracefully(p)
	r.finish(0)
	if n := strings.Count(p.Output(), "read-only"); n > 0 {
		r.t.Logf("the service met %d read-only errors (25006) on the way", n)
	}
}

// An asynchronous hot standby promoted after the primary's SIGKILL loses the
// commits the primary acknowledged during a ~1 s hold of the replication
// stream (at least one, or the test fails: it would not have exercised the
// hole). The service reconnects by itself, recomputes what was lost, and
// the final tables are exact.
func TestFailoverAsync(t *testing.T) {
	t.Parallel()
	r, rs, p := startFailoverRig(t, false, 50)
	f := r.failover(rs, p, 700*time.Millisecond)
	if f.lostCommits == 0 || f.lostSeq == 0 || len(f.lostParts) == 0 {
		t.Fatalf("the failover lost %d commits, %d partitions' offsets: it did not exercise the hole", f.lostCommits, len(f.lostParts))
	}
	endFailoverRig(r, p)
}

// A synchronous standby (synchronous_commit=on, synchronous_standby_names):
// a commit waits while the stream is held and is never acknowledged by the
// primary alone, so the promoted standby holds every acknowledged commit
// (stream_positions read on the primary just before its death is equal to,
// or behind, the promoted standby's); the final tables are exact.
func TestFailoverSync(t *testing.T) {
	t.Parallel()
	r, rs, p := startFailoverRig(t, true, 50)
	f := r.failover(rs, p, 700*time.Millisecond)
	if f.lostCommits != 0 || f.lostSeq != 0 || len(f.lostParts) != 0 || f.lostWindows > 0 {
		t.Fatalf("synchronous failover lost acknowledged commits: %d commits (commit_seq %d), %d window rows, offsets %v",
			f.lostCommits, f.lostSeq, f.lostWindows, f.lostParts)
	}
	if strings.Contains(p.Output(), lostLine) {
		t.Fatalf("the service says the database lost commits after a synchronous failover:\n%s", harness.LineWith(p, lostLine))
	}
	endFailoverRig(r, p)
}

// The old primary, rewound by pg_rewind, rejoins as a hot standby of the
// promoted one; then a second failover goes back to it. Both failovers
// are asynchronous with the stream held, so both lose acknowledged
// commits; the final tables are exact.
func TestFailoverRewindBack(t *testing.T) {
	t.Parallel()
	r, rs, p := startFailoverRig(t, false, 60)
	r.feed.HoldBack(30) // the second half for the second failover
	f1 := r.failover(rs, p, 500*time.Millisecond)
	rs.Rejoin()
	r.feed.Release()
	r.feed.Paced(200 * time.Millisecond)
	r.waitProgress(p, time.Minute, "before the failover back")
	f2 := r.failover(rs, p, 500*time.Millisecond)
	if rs.Primary != 0 {
		t.Fatalf("after failing back the primary is node%d, want node0", rs.Primary)
	}
	for i, f := range []failoverFigures{f1, f2} {
		if f.lostCommits == 0 || f.lostSeq == 0 || len(f.lostParts) == 0 {
			t.Fatalf("failover %d lost %d commits, %d partitions' offsets: it did not exercise the hole", i+1, f.lostCommits, len(f.lostParts))
		}
	}
	endFailoverRig(r, p)
}

// A failover during a standby takeover: the owner A is SIGKILLed while the
// replication stream is held, its standby B (--lease 3s) claims the
// partitions and commits on the primary; then the primary is SIGKILLed and
// the asynchronous standby promoted: B's claim (epoch 2) and its commits are
// lost, the new primary holds A's expired lease at epoch 1. B must carry on
// (claim again, recompute what was lost) and the final tables are exact.
func TestFailoverDuringTakeover(t *testing.T) {
	t.Parallel()
	r, rs, a := startFailoverRig(t, false, 50, "--lease", "3s")
	b := r.startWith(nil)
	harness.WaitLog(t, b, harness.StandbyLine, time.Minute)
	f := r.failoverWith(rs, []*harness.Proc{b}, 0, func() {
		r.kill(a)
		harness.WaitLog(t, b, harness.ClaimedLine, time.Minute)
		r.waitCommits(b, 2, time.Minute, "after the takeover, on the primary whose stream is held")
	})
	if f.lostCommits == 0 || f.lostSeq == 0 || len(f.lostParts) == 0 {
		t.Fatalf("the failover lost %d commits, %d partitions' offsets: it did not exercise the hole", f.lostCommits, len(f.lostParts))
	}
	if epochs := harness.Dump(t, r.db, `SELECT DISTINCT epoch FROM stream_positions`); len(epochs) != 1 {
		t.Logf("epochs stored on the new primary: %v", epochs)
	}
	r.kills-- // A's death came before the failover and is not what the test is about
	endFailoverRig(r, b)
}

// A failover under a split pipeline: two instances on disjoint partitions
// (split2) write partial aggregates and merge them; the asynchronous
// failover loses commits of both, merges included. Both ride it out, commit
// and merge again on the new primary; after the feed ends both stop with
// SIGTERM, and the two drains give the tables of the uninterrupted single
// run and the SQL oracle.
func TestFailoverSplitMerge(t *testing.T) {
	t.Parallel()
	rng := harness.CrashSeed(t)
	ds := harness.Auckland2h(t)
	rs := harness.StartReplicaSet(t, false)
	r := newRigOn(t, rng, ds, harness.StartBroker(t), 60, rs.CreateDB())
	ps := make([]*harness.Proc, 2)
	for i := range ps {
		ps[i] = r.startWith(nil, "--partitions", harness.Split2[i])
	}
	r.feed.Paced(200 * time.Millisecond)
	r.waitMergedPast(ps, "", 2*time.Minute, "before the failover")
	merged := r.mergedUntil()
	f := r.failoverWith(rs, ps, 700*time.Millisecond, nil)
	if f.lostCommits == 0 || f.lostSeq == 0 || len(f.lostParts) == 0 {
		t.Fatalf("the failover lost %d commits, %d partitions' offsets: it did not exercise the hole", f.lostCommits, len(f.lostParts))
	}
	for j, p := range ps {
		r.waitInstanceCommits(p, harness.Split2[j], 2, 2*time.Minute, "after the failover")
	}
	r.waitMergedPast(ps, merged, 2*time.Minute, "after the failover")
	for i, p := range ps {
		t.Logf("instance %d logged the loss on %d partitions", i, strings.Count(p.Output(), lostLine))
	}
	r.feed.All(t)
	r.waitConsumedTo(ps[0], harness.HighWaterMarks(t, r.brokers), 2*time.Minute, "after the feed ended")
	for _, p := range ps {
		r.stopGracefully(p)
	}
	r.splitDrains(harness.Split2)
	r.finish(0)
}
