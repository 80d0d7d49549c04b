package consumer

import (
	"testing"
	"time"

	"github.com/ovstream/ovstream/store"
)

// An instance is held back while its stored watermark is more than
// aheadOfMerge past the merge frontier, reads again within half of it, and
// is never held while the frontier is unknown or has not moved for
// frontierStall (a stopped peer must not stop it).
func TestSplitFlowHoldsBackAheadOfTheMerge(t *testing.T) {
	cfg := Config{Window: 5 * time.Minute, AllowedLateness: 10 * time.Minute}
	limit := aheadOfMerge(cfg)
	if limit != time.Hour {
		t.Fatalf("aheadOfMerge = %v, want 1h", limit)
	}
	t0 := time.Date(2016, 5, 19, 0, 0, 0, 0, time.UTC)
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	var f splitFlow
	step := func(wm, frontier time.Time, dt time.Duration, wantHeld bool) {
		t.Helper()
		now = now.Add(dt)
		f.committed(wm, store.Merged{Frontier: frontier}, now)
		f.update(cfg, now)
		if f.held != wantHeld {
			t.Fatalf("stored %v, frontier %v: held %v, want %v", wm.Sub(t0), frontier.Sub(t0), f.held, wantHeld)
		}
	}
	step(t0.Add(2*time.Hour), time.Time{}, 0, false)                      // frontier unknown (a partition never committed)
	step(t0.Add(2*time.Hour), t0, time.Second, true)                      // 2h ahead
	step(t0.Add(2*time.Hour), t0.Add(59*time.Minute), time.Second, true)  // 61m ahead: still held (hysteresis)
	step(t0.Add(2*time.Hour), t0.Add(90*time.Minute), time.Second, false) // 30m ahead: reads again
	step(t0.Add(150*time.Minute), t0.Add(90*time.Minute), time.Second, false)
	step(t0.Add(151*time.Minute), t0.Add(90*time.Minute), time.Second, true)
	// The frontier does not move for frontierStall: a peer stopped; read on.
	step(t0.Add(151*time.Minute), t0.Add(90*time.Minute), frontierStall-3*time.Second, true) // 29s since it moved
	step(t0.Add(151*time.Minute), t0.Add(90*time.Minute), 2*time.Second, false)              // 31s
	// It moves again: held again.
	step(t0.Add(151*time.Minute), t0.Add(91*time.Minute), time.Second, false) // 60m: within the limit
	step(t0.Add(200*time.Minute), t0.Add(92*time.Minute), time.Second, true)
	// The instance holding the frontier is never held.
	step(t0.Add(300*time.Minute), t0.Add(300*time.Minute), time.Second, false)
}
