package aggregate

import (
	"testing"
	"time"
)

var (
	pA = PartitionID{Topic: "arrival_predictions", Partition: 0}
	pB = PartitionID{Topic: "arrival_predictions", Partition: 1}
	pC = PartitionID{Topic: "vehicle_positions", Partition: 0}
)

const (
	lateness = 2 * time.Minute
	idleTO   = 30 * time.Second
)

// wall is the wall clock of the tests; event times are around t0.
var wall = time.Date(2026, 5, 4, 13, 0, 0, 0, time.UTC)

func TestWatermarkMinOverActive(t *testing.T) {
	w := NewWatermark(lateness, idleTO, time.Time{})
	w.Assign(pA)
	w.Assign(pB)
	w.Observe(pA, t0.Add(10*time.Minute), wall)
	// B is not caught up and has delivered nothing: it holds the watermark.
	if got := settle(w, wall); !got.IsZero() {
		t.Fatalf("watermark %v while B has delivered nothing", got)
	}
	w.Observe(pB, t0.Add(4*time.Minute), wall)
	w.Observe(pA, t0.Add(8*time.Minute), wall) // older: A's max stays 12:10
	if got, want := settle(w, wall), t0.Add(2*time.Minute); !got.Equal(want) {
		t.Fatalf("watermark %v, want min(12:10, 12:04) - 2m = %v", got, want)
	}
	if !w.Current().Equal(t0.Add(2 * time.Minute)) {
		t.Fatalf("Current %v", w.Current())
	}
}

func TestWatermarkIgnoresEmptyCaughtUpPartition(t *testing.T) {
	w := NewWatermark(lateness, idleTO, time.Time{})
	w.Assign(pA)
	w.Assign(pB) // empty partition
	w.SetCaughtUp(pB, true, wall)
	w.Observe(pA, t0.Add(10*time.Minute), wall)
	// At once, not after the idle timeout.
	if !w.Idle(pB, wall) {
		t.Fatal("empty caught-up partition not idle at once")
	}
	if got, want := settle(w, wall), t0.Add(8*time.Minute); !got.Equal(want) {
		t.Fatalf("watermark %v, want %v", got, want)
	}
}

func TestWatermarkIgnoresIdleCaughtUpPartition(t *testing.T) {
	w := NewWatermark(lateness, idleTO, time.Time{})
	w.Assign(pA)
	w.Assign(pB)
	w.Observe(pA, t0.Add(20*time.Minute), wall)
	w.Observe(pB, t0.Add(5*time.Minute), wall)
	w.SetCaughtUp(pB, true, wall)
	if got, want := settle(w, wall.Add(idleTO-time.Nanosecond)), t0.Add(3*time.Minute); !got.Equal(want) {
		t.Fatalf("before idle timeout: %v, want %v", got, want)
	}
	if w.Idle(pB, wall.Add(idleTO-time.Nanosecond)) || !w.Idle(pB, wall.Add(idleTO)) {
		t.Fatal("idle timeout boundary")
	}
	// A keeps delivering; B has been quiet for the idle timeout.
	w.Observe(pA, t0.Add(20*time.Minute), wall.Add(idleTO))
	if got, want := settle(w, wall.Add(idleTO)), t0.Add(18*time.Minute); !got.Equal(want) {
		t.Fatalf("B idle: %v, want %v", got, want)
	}
	// B delivers again: active at once; the watermark does not go back.
	w.Observe(pB, t0.Add(6*time.Minute), wall.Add(time.Minute))
	if w.Idle(pB, wall.Add(time.Minute)) {
		t.Fatal("B idle right after a delivery")
	}
	if got, want := settle(w, wall.Add(time.Minute)), t0.Add(18*time.Minute); !got.Equal(want) {
		t.Fatalf("after B woke: %v, want %v (never decreases)", got, want)
	}
}

func TestWatermarkWaitsForCatchingUpPartition(t *testing.T) {
	w := NewWatermark(lateness, idleTO, time.Time{})
	w.Assign(pA)
	w.Assign(pB)
	w.Observe(pA, t0.Add(30*time.Minute), wall)
	w.Observe(pB, t0, wall)
	w.SetCaughtUp(pA, true, wall)
	w.SetCaughtUp(pB, false, wall)
	// However long B takes, it holds the watermark at its own max.
	for _, d := range []time.Duration{0, time.Minute, time.Hour, 24 * time.Hour} {
		w.Observe(pA, t0.Add(30*time.Minute), wall.Add(d))
		if got, want := settle(w, wall.Add(d)), t0.Add(-lateness); !got.Equal(want) {
			t.Fatalf("after %v: %v, want %v", d, got, want)
		}
		if w.Idle(pB, wall.Add(d)) {
			t.Fatalf("catching-up partition idle after %v", d)
		}
	}
	// Also one still catching up that has delivered nothing yet: no candidate.
	w2 := NewWatermark(lateness, idleTO, time.Time{})
	w2.Assign(pA)
	w2.Assign(pC)
	w2.Observe(pA, t0, wall)
	if got := settle(w2, wall.Add(time.Hour)); !got.IsZero() {
		t.Fatalf("empty catching-up partition: %v", got)
	}
}

func TestWatermarkAllIdle(t *testing.T) {
	w := NewWatermark(lateness, idleTO, time.Time{})
	w.Assign(pA)
	w.Assign(pB)
	w.Assign(pC)
	w.Observe(pA, t0.Add(10*time.Minute), wall)
	w.Observe(pB, t0.Add(4*time.Minute), wall)
	w.SetCaughtUp(pA, true, wall)
	w.SetCaughtUp(pB, true, wall)
	w.SetCaughtUp(pC, true, wall) // empty
	if got, want := settle(w, wall), t0.Add(2*time.Minute); !got.Equal(want) {
		t.Fatalf("active: %v, want %v", got, want)
	}
	// Quiet, caught-up stream: max over all partitions, so windows still close.
	if got, want := settle(w, wall.Add(idleTO)), t0.Add(8*time.Minute); !got.Equal(want) {
		t.Fatalf("all idle: %v, want %v", got, want)
	}
	// No partitions, or all empty: nothing to go on, the watermark stays.
	w2 := NewWatermark(lateness, idleTO, t0)
	if got := settle(w2, wall); !got.Equal(t0) {
		t.Fatalf("no partitions: %v", got)
	}
	w2.Assign(pA)
	w2.SetCaughtUp(pA, true, wall)
	if got := settle(w2, wall); !got.Equal(t0) {
		t.Fatalf("all empty: %v", got)
	}
}

func TestWatermarkNeverDecreases(t *testing.T) {
	w := NewWatermark(lateness, idleTO, time.Time{})
	w.Assign(pA)
	w.Observe(pA, t0.Add(10*time.Minute), wall)
	if got := settle(w, wall); !got.Equal(t0.Add(8 * time.Minute)) {
		t.Fatalf("%v", got)
	}
	// A new partition with older events joins the min: no step back.
	w.Assign(pB)
	w.Observe(pB, t0, wall)
	if got := settle(w, wall); !got.Equal(t0.Add(8 * time.Minute)) {
		t.Fatalf("decreased to %v", got)
	}
	w.Raise(t0) // lower: ignored
	if !w.Current().Equal(t0.Add(8 * time.Minute)) {
		t.Fatalf("Raise lowered to %v", w.Current())
	}
	w.Raise(t0.Add(time.Hour)) // a drain
	if !w.Current().Equal(t0.Add(time.Hour)) || !settle(w, wall).Equal(t0.Add(time.Hour)) {
		t.Fatalf("Raise: %v", w.Current())
	}
}

func TestWatermarkSeed(t *testing.T) {
	seed := t0.Add(time.Hour).In(time.FixedZone("CEST", 2*3600))
	w := NewWatermark(lateness, idleTO, seed)
	if !w.Current().Equal(seed) || w.Current().Location() != time.UTC {
		t.Fatalf("Current %v, want seed %v in UTC", w.Current(), seed)
	}
	w.Assign(pA)
	w.Observe(pA, t0, wall)
	if got := settle(w, wall); !got.Equal(seed) {
		t.Fatalf("below seed: %v", got)
	}
	w.Observe(pA, t0.Add(2*time.Hour), wall)
	if got, want := settle(w, wall), t0.Add(2*time.Hour-lateness); !got.Equal(want) {
		t.Fatalf("past seed: %v, want %v", got, want)
	}
}

func TestWatermarkObserveWithoutEventTime(t *testing.T) {
	w := NewWatermark(lateness, idleTO, time.Time{})
	w.Assign(pA)
	w.Assign(pB)
	w.SetCaughtUp(pB, true, wall)
	w.Observe(pA, t0, wall)
	w.Observe(pB, time.Time{}, wall) // a dead letter: a delivery, no event time
	if w.Idle(pB, wall) {
		t.Fatal("B idle right after a delivery")
	}
	if got := settle(w, wall); !got.IsZero() {
		t.Fatalf("B without event time should hold: %v", got)
	}
	if got, want := settle(w, wall.Add(idleTO)), t0.Add(-lateness); !got.Equal(want) {
		t.Fatalf("after B idle: %v, want %v", got, want)
	}
	if w.Idle(PartitionID{Topic: "x"}, wall) {
		t.Fatal("unassigned partition idle")
	}
}

// A live feed (event times follow the wall clock) goes quiet. Without
// IdleFinalize the watermark stays at its max event time - lateness for
// ever; with it, once every partition is idle, it follows the wall clock -
// lateness, so the last window is finalized idle timeout + lateness after its
// end at the latest.
func TestWatermarkIdleFinalize(t *testing.T) {
	for _, on := range []bool{false, true} {
		w := NewWatermark(lateness, idleTO, time.Time{})
		w.IdleFinalize(on)
		w.Assign(pA)
		w.Assign(pB)
		w.Observe(pA, wall.Add(-2*time.Minute), wall) // 12:58, window [12:55, 13:00)
		w.Observe(pB, wall.Add(-3*time.Minute), wall)
		w.SetCaughtUp(pA, true, wall)
		w.SetCaughtUp(pB, true, wall)
		at := func(d time.Duration) time.Time { return settle(w, wall.Add(d)) }
		if got, want := at(idleTO-time.Nanosecond), wall.Add(-5*time.Minute); !got.Equal(want) {
			t.Fatalf("on=%v, not idle yet: %v, want min - lateness = %v", on, got, want)
		}
		if !on {
			if got, want := at(24*time.Hour), wall.Add(-4*time.Minute); !got.Equal(want) {
				t.Fatalf("off, quiet a day: %v, want max - lateness = %v", got, want)
			}
			continue
		}
		if got, want := at(idleTO), wall.Add(idleTO-lateness); !got.Equal(want) {
			t.Fatalf("all idle: %v, want wall clock - lateness = %v", got, want)
		}
		// The window [12:55, 13:00) is finalized at 13:00 + lateness.
		if got := at(lateness - time.Nanosecond); !got.Before(wall) {
			t.Fatalf("finalized before its end + lateness: %v", got)
		}
		if got := at(lateness); !got.Equal(wall) {
			t.Fatalf("at end + lateness: %v, want %v", got, wall)
		}
		// The clock steps back: the watermark does not.
		if got := at(-time.Hour); !got.Equal(wall) {
			t.Fatalf("clock back: %v, want %v", got, wall)
		}
		// A delivery makes pA active: event time rules again (13:01 - 2m), never lower.
		w.Observe(pA, wall.Add(time.Minute), wall.Add(4*time.Minute))
		if got := at(4 * time.Minute); !got.Equal(wall) {
			t.Fatalf("pA active: %v, want %v", got, wall)
		}
		// A partition catching up is never idle: no processing time, though
		// pA is idle again.
		w.SetCaughtUp(pB, false, wall)
		if got := at(time.Hour); !got.Equal(wall) {
			t.Fatalf("pB catching up: %v, want %v", got, wall)
		}
	}
	// Every partition empty and caught up at start: idle at once.
	w := NewWatermark(lateness, idleTO, time.Time{})
	w.IdleFinalize(true)
	w.Assign(pA)
	w.SetCaughtUp(pA, true, wall)
	if got, want := settle(w, wall), wall.Add(-lateness); !got.Equal(want) {
		t.Fatalf("empty feed: %v, want %v", got, want)
	}
	// No partitions at all: nothing is idle, the seed stays.
	w2 := NewWatermark(lateness, idleTO, t0)
	w2.IdleFinalize(true)
	if got := settle(w2, wall); !got.Equal(t0) {
		t.Fatalf("no partitions: %v", got)
	}
}

// settle is one high water mark poll at wall time now: a Proposal, a reading
// sent at now that finds each partition as caught up as it was last set,
// Confirm; then Advance.
func settle(w *Watermark, now time.Time) time.Time {
	p := w.Propose(now)
	for _, s := range w.parts {
		s.caughtUpAsOf = now
	}
	w.Confirm(p)
	return w.Advance(now)
}

// A quiet, caught-up partition is left out of the watermark only through a
// proposal confirmed by a reading sent at or after it: a reading sent before
// the proposal, a reading that failed, a delivery since the proposal or a
// partition assigned since confirm nothing, and Advance alone never leaves a
// partition out.
func TestWatermarkProposalNeedsLaterReading(t *testing.T) {
	setup := func() *Watermark {
		w := NewWatermark(lateness, idleTO, time.Time{})
		w.Observe(pA, t0.Add(10*time.Minute), wall.Add(idleTO))
		w.Observe(pB, t0, wall) // B quiet from wall + idleTO on
		return w
	}
	at := wall.Add(idleTO)
	holdB, leaveOutB := t0.Add(-lateness), t0.Add(10*time.Minute-lateness)
	for _, tc := range []struct {
		name string
		act  func(w *Watermark, p Proposal)
		want time.Time
	}{
		{"reading sent after the proposal", func(w *Watermark, p Proposal) {
			w.SetCaughtUp(pB, true, at.Add(time.Millisecond))
		}, leaveOutB},
		{"reading sent at the proposal", func(w *Watermark, p Proposal) {
			w.SetCaughtUp(pB, true, at)
		}, leaveOutB},
		{"reading sent before the proposal", func(w *Watermark, p Proposal) {
			w.SetCaughtUp(pB, true, at.Add(-time.Millisecond))
		}, holdB},
		{"reading failed", func(w *Watermark, p Proposal) {
			w.SetCaughtUp(pB, false, time.Time{})
		}, holdB},
		{"records found unread", func(w *Watermark, p Proposal) {
			w.SetCaughtUp(pB, false, at.Add(time.Millisecond))
		}, holdB},
		{"delivery since the proposal", func(w *Watermark, p Proposal) {
			w.Observe(pB, t0.Add(time.Second), at.Add(time.Millisecond))
			w.SetCaughtUp(pB, true, at.Add(2*time.Millisecond))
		}, holdB.Add(time.Second)},
		{"partition assigned since the proposal", func(w *Watermark, p Proposal) {
			w.Assign(pC)
			w.SetCaughtUp(pB, true, at.Add(time.Millisecond))
		}, holdB},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := setup()
			w.SetCaughtUp(pB, true, wall) // the last reading: caught up, so B is idle
			if !w.Idle(pB, at) {
				t.Fatal("B not idle")
			}
			if got := w.Advance(at); !got.Equal(holdB) {
				t.Fatalf("Advance left B out: %v, want %v", got, holdB)
			}
			p := w.Propose(at)
			tc.act(w, p)
			w.Confirm(p)
			if got := w.Advance(at.Add(time.Second)); !got.Equal(tc.want) {
				t.Fatalf("watermark %v, want %v", got, tc.want)
			}
		})
	}
}

// Nothing to leave out: a confirmed proposal gives what Advance gives.
func TestWatermarkProposeNothing(t *testing.T) {
	w := NewWatermark(lateness, idleTO, time.Time{})
	w.Observe(pA, t0, wall)
	w.Observe(pB, t0.Add(time.Minute), wall)
	w.SetCaughtUp(pA, true, wall)
	w.SetCaughtUp(pB, true, wall)
	p := w.Propose(wall.Add(time.Second))
	w.SetCaughtUp(pA, true, wall.Add(time.Second))
	w.SetCaughtUp(pB, true, wall.Add(time.Second))
	w.Confirm(p)
	if got := w.Current(); !got.Equal(t0.Add(-lateness)) {
		t.Fatalf("watermark %v while every partition delivered within the idle timeout, want %v", got, t0.Add(-lateness))
	}
}

// One reading both finds an empty partition caught up and confirms the
// proposal made before it was sent: a fresh run's watermark leaves its
// empty partitions out after one reading, not two.
func TestWatermarkOneReadingConfirms(t *testing.T) {
	w := NewWatermark(lateness, idleTO, time.Time{})
	w.Assign(pA)
	w.Assign(pB) // empty
	w.SetCaughtUp(pB, false, time.Time{})
	w.Observe(pA, t0.Add(10*time.Minute), wall)
	p := w.Propose(wall)
	w.SetCaughtUp(pB, true, wall)
	if !w.Confirm(p) || !w.Current().Equal(t0.Add(8*time.Minute)) {
		t.Fatalf("watermark %v after one reading, want %v", w.Current(), t0.Add(8*time.Minute))
	}
}

// CouldRaise: only when leaving the quiet partitions out would raise the
// watermark.
func TestWatermarkCouldRaise(t *testing.T) {
	w := NewWatermark(lateness, idleTO, time.Time{})
	w.Assign(pB) // empty, quiet from the start
	if w.CouldRaise(wall) {
		t.Fatal("nothing delivered anywhere: nothing to raise")
	}
	w.Observe(pA, t0.Add(10*time.Minute), wall)
	if !w.CouldRaise(wall) {
		t.Fatal("A delivered, B empty and quiet: leaving B out would raise the watermark")
	}
	w.SetCaughtUp(pB, true, wall)
	p := w.Propose(wall)
	w.Confirm(p)
	if w.CouldRaise(wall) {
		t.Fatalf("watermark %v already as high as leaving B out gives", w.Current())
	}
}
