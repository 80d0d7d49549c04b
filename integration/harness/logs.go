//go:build integration

package harness

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// FlakyLines returns n predictions from trip first on, each its own trip
// (so they spread over the partitions), 100 ms of event time apart.
func FlakyLines(first, n int) []string {
	base := time.Date(2016, 5, 18, 20, 0, 0, 0, time.UTC)
	out := make([]string, n)
	for i := range out {
		k := first + i
		out[i] = string(Pred(fmt.Sprintf("T%d", k), fmt.Sprintf("L%d", k%7), fmt.Sprintf("S%d", k%11), "AT", k%300-100,
			base.Add(time.Duration(k)*100*time.Millisecond).Format(time.RFC3339Nano)))
	}
	return out
}

const (
	StandbyLine = "standby: waiting for partitions held by a live instance"
	ClaimedLine = "claimed partitions"
)

// WaitLog waits until p's output holds want and returns when it was seen
// (polled every 20 ms); it fails the test when p exits first or timeout passes.
func WaitLog(t *testing.T, p *Proc, want string, timeout time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if strings.Contains(p.Output(), want) {
			return time.Now()
		}
		select {
		case <-p.Done:
			if strings.Contains(p.Output(), want) {
				return time.Now()
			}
			t.Fatalf("ovstream exited (%v) before logging %q; output:\n%s", p.Err, want, Tail(p.Output(), 40))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("ovstream did not log %q within %v; output:\n%s", want, timeout, Tail(p.Output(), 40))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// LineWith returns the first line of p's output that holds want.
func LineWith(p *Proc, want string) string {
	for _, l := range strings.Split(p.Output(), "\n") {
		if strings.Contains(l, want) {
			return l
		}
	}
	return ""
}
