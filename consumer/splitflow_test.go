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
	if limit != 12*time.Hour {
		t.Fatalf("aheadOfMerge = %v, want 12h", limit)
	}
	if long := aheadOfMerge(Config{Window: 2 * time.Hour, AllowedLateness: 2 * time.Hour}); long != 16*time.Hour {
		t.Fatalf("aheadOfMerge with 2h windows and lateness = %v, want 16h", long)
	}
	h := func(f float64) time.Duration { return time.Duration(f * float64(limit)) } // a fraction of the limit
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
	at := func(f float64) time.Time { return t0.Add(h(f)) }
	step(at(2), time.Time{}, 0, false)         // frontier unknown (a partition never committed)
	step(at(2), t0, time.Second, true)         // 2 limits ahead
	step(at(2), at(1.2), time.Second, true)    // 0.8 limit ahead: still held (hysteresis)
	step(at(2), at(1.6), time.Second, false)   // 0.4 limit ahead: reads again
	step(at(2.5), at(1.6), time.Second, false) // 0.9
	step(at(2.7), at(1.6), time.Second, true)  // 1.1
	// The frontier does not move for frontierStall: a peer stopped; read on.
	step(at(2.7), at(1.6), frontierStall-3*time.Second, true) // 29s since it moved
	step(at(2.7), at(1.6), 2*time.Second, false)              // 31s
	// It moves again: held again past the limit.
	step(at(2.7), at(1.7), time.Second, false) // exactly the limit
	step(at(3), at(1.8), time.Second, true)
	// The instance holding the frontier is never held.
	step(at(4), at(4), time.Second, false)
}
