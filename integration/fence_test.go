//go:build integration

package integration

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"
)

// snapshot dumps every table ovstream writes, whole rows with their
// timestamps (updated_at, heartbeat_at, created_at): any write shows.
func snapshot(t *testing.T, db string) map[string][]string {
	t.Helper()
	s := map[string][]string{}
	for _, table := range []string{"pipelines", "delay_aggregates", "vehicle_latest",
		"trip_delay_latest", "dead_letters"} {
		s[table] = dump(t, db, fmt.Sprintf("SELECT t::text FROM %s t", table))
	}
	// A claim writes owner, epoch and heartbeat_at; what a commit writes
	// (offsets, watermark, updated_at) shows in the rest.
	s["stream_positions"] = dump(t, db, `SELECT (pipeline, topic, partition, next_offset, consumed_offset,
		watermark, topic_id, updated_at)::text FROM stream_positions`)
	return s
}

// sameSnapshot fails the test unless a and b hold the same rows, table by
// table, leaving out the tables in except.
func sameSnapshot(t *testing.T, what string, a, b map[string][]string, except ...string) {
	t.Helper()
	for table, rows := range a {
		skip := false
		for _, e := range except {
			skip = skip || e == table
		}
		if !skip {
			sameRows(t, what+": "+table, rows, b[table])
		}
	}
}

// waitCrashpointStop waits until p stopped itself at its crash point (stop action).
func waitCrashpointStop(t *testing.T, p *proc, point string, n int) {
	t.Helper()
	want := fmt.Sprintf("crashpoint: %s reached %d time(s): SIGSTOP", point, n)
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(p.output(), want) {
		select {
		case <-p.done:
			t.Fatalf("ovstream exited (%v) before %q; output:\n%s", p.err, want, tail(p.output(), 40))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q within a minute; output:\n%s", want, tail(p.output(), 40))
		}
		time.Sleep(10 * time.Millisecond)
	}
	waitStopped(t, p)
}

// waitFenced waits for p to exit and requires exit code 3 and the message
// that it was fenced.
func waitFenced(t *testing.T, p *proc) {
	t.Helper()
	if code := p.wait(t, time.Minute); code != 3 {
		t.Fatalf("the fenced instance exited %d, want 3; output:\n%s", code, tail(p.output(), 40))
	}
	if out := p.output(); !strings.Contains(out, "fenced: another instance claimed the pipeline") {
		t.Fatalf("the fenced instance did not say it was fenced; output:\n%s", tail(out, 40))
	}
}

// G6: a fenced instance writes nothing after the new owner's claim. The
// new owner claims with --takeover (at once, although the old owner's lease
// lives; without it the claim waits as a standby: TestStandbyFrozenOwner).
//
// Phase 1, a zombie with work to write: instance A stops itself (SIGSTOP)
// at its N-th consumed record, with records consumed since its last commit.
// Instance B of the same pipeline takes its partitions over and dies before
// its first commit (crash point before_begin:1), so the tables after the
// claim are known. Then A continues: its next commit is refused, A exits
// with code 3 saying it was fenced, and every table, timestamps included, is
// exactly as it was after B's claim, although A held consumed offsets that
// were not stored. (Should A have stopped with a commit in flight, B
// terminates that transaction's session instead of waiting for it, as in
// phase 2.)
//
// Phase 2, a commit in flight during the claim: A stops itself inside its
// commit transaction (mid_commit, after the fencing UPDATE locked its
// partitions' rows). B's takeover does not wait for that lock: it
// terminates A's session (A's transaction rolls back: nothing of it lands)
// and claims; B stops itself before its first commit. A continues, finds
// its connection gone, commits again and is refused (exit 3); nothing
// changes after B's claim.
//
// Then an instance runs normally and a final drain gives the exact tables.
func TestFencing(t *testing.T) {
	t.Parallel()
	rng := crashSeed(t)
	ds := auckland2h(t)
	addr := startBroker(t)
	r := newRig(t, rng, ds, addr, 40)
	r.flags = nil // takeovers are explicit below

	// Phase 1.
	r.feed.step()
	first := 0
	for _, off := range highWaterMarks(t, addr) {
		first += int(off)
	}
	n := first + 100 + rng.IntN(400)
	a := r.start(fmt.Sprintf("OVSTREAM_CRASHPOINT=after_consume:%d", n), "OVSTREAM_CRASHPOINT_ACTION=stop")
	r.waitConsumedTo(a, highWaterMarks(t, addr), time.Minute, "before the claim") // A committed the first chunk
	r.feed.step()                                                                 // A stops at its n-th record
	waitCrashpointStop(t, a, "after_consume", n)
	before := snapshot(t, r.db)
	b := r.startWith([]string{"OVSTREAM_CRASHPOINT=before_begin:1"}, "--takeover")
	if code := b.wait(t, time.Minute); code != -1 || !strings.Contains(b.output(), "crashpoint: before_begin reached 1 time(s): SIGKILL") {
		t.Fatalf("B: exit %d, want SIGKILL at before_begin:1; output:\n%s", code, tail(b.output(), 40))
	}
	claimed := snapshot(t, r.db)
	if strings.Contains(b.output(), "terminated the database session") {
		t.Log("phase 1: A stopped with a commit in flight; B's takeover terminated its session")
	} else {
		sameSnapshot(t, "B's claim changed more than the partitions' owner and epoch", before, claimed)
	}
	if got := scalar[int64](t, r.db, `SELECT max(epoch) FROM stream_positions`); got != 2 {
		t.Fatalf("epoch %d after B's claim, want 2", got)
	}
	r.signal(a, syscall.SIGCONT)
	waitFenced(t, a)
	after := snapshot(t, r.db)
	sameSnapshot(t, "A (fenced) wrote after B's claim", claimed, after)
	// A consumed n records from offset 0 of a fresh topic (no gaps): the sum
	// of its consumed offsets was n when it was fenced. Less is stored, so A
	// had work it would have written.
	var storedConsumed int64
	for _, off := range r.storedConsumed() {
		storedConsumed += off
	}
	if storedConsumed >= int64(n) {
		t.Fatalf("A consumed %d records and %d are stored: it had nothing unwritten, the test proves nothing", n, storedConsumed)
	}
	r.mon.check(t, "after phase 1")
	t.Logf("phase 1: A held %d consumed records, %d stored; fenced with nothing written", n, storedConsumed)

	// Phase 2. B died before its first commit; its lease lives on: A takes over.
	r.feed.paced(150 * time.Millisecond)
	k := 3 + rng.IntN(5)
	a = r.startWith([]string{fmt.Sprintf("OVSTREAM_CRASHPOINT=mid_commit:%d", k), "OVSTREAM_CRASHPOINT_ACTION=stop"}, "--takeover")
	waitCrashpointStop(t, a, "mid_commit", k)
	inFlight := snapshot(t, r.db)
	if got := scalar[int64](t, r.db, `SELECT max(epoch) FROM stream_positions`); got != 3 {
		t.Fatalf("epoch %d while A is stopped in its commit, want 3 (A's)", got)
	}
	b = r.startWith([]string{"OVSTREAM_CRASHPOINT=before_begin:1", "OVSTREAM_CRASHPOINT_ACTION=stop"}, "--takeover")
	waitCrashpointStop(t, b, "before_begin", 1)
	if strings.Contains(a.output(), "mid_commit: continued") {
		t.Fatal("A went on past its crash point before the test sent SIGCONT: the stop did not hold")
	}
	if l := lineWith(b, "terminated the database session"); !strings.Contains(l, "owner="+ownerOf(t, a)) || !strings.Contains(l, "reason=--takeover") {
		t.Fatalf("B's takeover did not terminate the session of A's commit in flight: %q; output:\n%s", l, tail(b.output(), 30))
	}
	claimed = snapshot(t, r.db)
	if got := scalar[int64](t, r.db, `SELECT max(epoch) FROM stream_positions`); got != 4 {
		t.Fatalf("epoch %d after B's claim, want 4", got)
	}
	sameSnapshot(t, "A's commit in flight during the takeover landed", inFlight, claimed)
	r.signal(a, syscall.SIGCONT)
	waitFenced(t, a)
	sameSnapshot(t, "A (fenced, phase 2) wrote after B's claim", claimed, snapshot(t, r.db))
	b.kill()
	r.killed("B stopped before its first commit")
	r.mon.check(t, "after phase 2")

	// The pipeline goes on, exactly.
	c := r.startWith(nil, "--takeover")
	r.waitProgress(c, time.Minute, "after the fencing")
	r.feed.wait(t, 2*time.Minute)
	r.waitCommits(c, 2, time.Minute, "after the feed ended")
	r.stopGracefully(c)
	r.finish(0)
}

// exited tells whether p has ended.
func exited(p *proc) bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}
