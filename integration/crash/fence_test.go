//go:build integration

package crash

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ovstream/ovstream/integration/harness"
)

// waitCrashpointStop waits until p stopped itself at its crash point (stop action).
func waitCrashpointStop(t *testing.T, p *harness.Proc, point string, n int) {
	t.Helper()
	want := fmt.Sprintf("crashpoint: %s reached %d time(s): SIGSTOP", point, n)
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(p.Output(), want) {
		select {
		case <-p.Done:
			t.Fatalf("ovstream exited (%v) before %q; output:\n%s", p.Err, want, harness.Tail(p.Output(), 40))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q within a minute; output:\n%s", want, harness.Tail(p.Output(), 40))
		}
		time.Sleep(10 * time.Millisecond)
	}
	harness.WaitStopped(t, p)
}

// waitFenced waits for p to exit and requires exit code 3 and the message
// that it was fenced.
func waitFenced(t *testing.T, p *harness.Proc) {
	t.Helper()
	if code := p.Wait(t, time.Minute); code != 3 {
		t.Fatalf("the fenced instance exited %d, want 3; output:\n%s", code, harness.Tail(p.Output(), 40))
	}
	if out := p.Output(); !strings.Contains(out, "fenced: another instance claimed the pipeline") {
		t.Fatalf("the fenced instance did not say it was fenced; output:\n%s", harness.Tail(out, 40))
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
	rng := harness.CrashSeed(t)
	ds := harness.Auckland2h(t)
	addr := harness.StartBroker(t)
	r := newRig(t, rng, ds, addr, 40)
	r.flags = nil // takeovers are explicit below

	// Phase 1.
	r.feed.Step()
	first := 0
	for _, off := range harness.HighWaterMarks(t, addr) {
		first += int(off)
	}
	n := first + 100 + rng.IntN(400)
	a := r.start(fmt.Sprintf("OVSTREAM_CRASHPOINT=after_consume:%d", n), "OVSTREAM_CRASHPOINT_ACTION=stop")
	r.waitConsumedTo(a, harness.HighWaterMarks(t, addr), time.Minute, "before the claim") // A committed the first chunk
	r.feed.Step()                                                                         // A stops at its n-th record
	waitCrashpointStop(t, a, "after_consume", n)
	before := harness.Snapshot(t, r.db)
	b := r.startWith([]string{"OVSTREAM_CRASHPOINT=before_begin:1"}, "--takeover")
	if code := b.Wait(t, time.Minute); code != -1 || !strings.Contains(b.Output(), "crashpoint: before_begin reached 1 time(s): SIGKILL") {
		t.Fatalf("B: exit %d, want SIGKILL at before_begin:1; output:\n%s", code, harness.Tail(b.Output(), 40))
	}
	claimed := harness.Snapshot(t, r.db)
	if strings.Contains(b.Output(), "terminated the database session") {
		t.Log("phase 1: A stopped with a commit in flight; B's takeover terminated its session")
	} else {
		harness.SameSnapshot(t, "B's claim changed more than the partitions' owner and epoch", before, claimed)
	}
	if got := harness.Scalar[int64](t, r.db, `SELECT max(epoch) FROM stream_positions`); got != 2 {
		t.Fatalf("epoch %d after B's claim, want 2", got)
	}
	r.signal(a, syscall.SIGCONT)
	waitFenced(t, a)
	after := harness.Snapshot(t, r.db)
	harness.SameSnapshot(t, "A (fenced) wrote after B's claim", claimed, after)
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
	r.feed.Paced(150 * time.Millisecond)
	k := 3 + rng.IntN(5)
	a = r.startWith([]string{fmt.Sprintf("OVSTREAM_CRASHPOINT=mid_commit:%d", k), "OVSTREAM_CRASHPOINT_ACTION=stop"}, "--takeover")
	waitCrashpointStop(t, a, "mid_commit", k)
	inFlight := harness.Snapshot(t, r.db)
	if got := harness.Scalar[int64](t, r.db, `SELECT max(epoch) FROM stream_positions`); got != 3 {
		t.Fatalf("epoch %d while A is stopped in its commit, want 3 (A's)", got)
	}
	b = r.startWith([]string{"OVSTREAM_CRASHPOINT=before_begin:1", "OVSTREAM_CRASHPOINT_ACTION=stop"}, "--takeover")
	waitCrashpointStop(t, b, "before_begin", 1)
	if strings.Contains(a.Output(), "mid_commit: continued") {
		t.Fatal("A went on past its crash point before the test sent SIGCONT: the stop did not hold")
	}
	if l := harness.LineWith(b, "terminated the database session"); !strings.Contains(l, "owner="+ownerOf(t, a)) || !strings.Contains(l, "reason=--takeover") {
		t.Fatalf("B's takeover did not terminate the session of A's commit in flight: %q; output:\n%s", l, harness.Tail(b.Output(), 30))
	}
	claimed = harness.Snapshot(t, r.db)
	if got := harness.Scalar[int64](t, r.db, `SELECT max(epoch) FROM stream_positions`); got != 4 {
		t.Fatalf("epoch %d after B's claim, want 4", got)
	}
	harness.SameSnapshot(t, "A's commit in flight during the takeover landed", inFlight, claimed)
	r.signal(a, syscall.SIGCONT)
	waitFenced(t, a)
	harness.SameSnapshot(t, "A (fenced, phase 2) wrote after B's claim", claimed, harness.Snapshot(t, r.db))
	b.Kill()
	r.killed("B stopped before its first commit")
	r.mon.check(t, "after phase 2")

	// The pipeline goes on, exactly.
	c := r.startWith(nil, "--takeover")
	r.waitProgress(c, time.Minute, "after the fencing")
	r.feed.Wait(t, 2*time.Minute)
	r.waitCommits(c, 2, time.Minute, "after the feed ended")
	r.stopGracefully(c)
	r.finish(0)
}
