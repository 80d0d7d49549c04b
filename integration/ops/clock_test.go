//go:build integration

package ops

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ovstream/ovstream/consumer"
	"github.com/ovstream/ovstream/integration/harness"
)

// A host whose clock is 10 minutes behind PostgreSQL's: 1,200 live
// predictions, their event times one a second over the last 20 minutes of
// the real clock, are all counted (none dead-lettered `future`, though 300
// are more than max future skew ahead of the host's clock), the drain equals
// the SQL oracle, the skew is logged as a warning naming the host's clock and
// exported (ovstream_clock_skew_seconds -600), and the last-commit metric is
// the database's time. A host 10 minutes ahead: the last-commit metric is the
// database's time too, not 600 s in the future.
func TestClockSkewAgainstDatabase(t *testing.T) {
	t.Run("behind", func(t *testing.T) {
		addr, db := harness.OnePartitionBroker(t), harness.FreshDB(t)
		const n = 1200
		now := time.Now().Truncate(time.Second)
		msgs := harness.Synthetic(n, now.Add(-n*time.Second), time.Second)
		for _, m := range msgs {
			m.Partition = 0
		}
		harness.SendAll(t, addr, msgs)
		clock := &harness.SkewClock{}
		clock.Jump(-10 * time.Minute)
		run := harness.RunInProcess(t, db, addr, clock, consumer.Config{Drain: true})
		sum := run.Wait(t, 2*time.Minute)
		harness.CheckOnce(t, db, addr, map[int64]string{})
		if sum.Predictions != n || harness.Total(sum.DeadLetters) != 0 {
			t.Errorf("the drain counted %d predictions, dead letters %v; want %d and none", sum.Predictions, sum.DeadLetters, n)
		}
		checkSkew(t, run, -600, "behind")
	})
	t.Run("ahead", func(t *testing.T) {
		addr, db := harness.OnePartitionBroker(t), harness.FreshDB(t)
		harness.ProduceToZero(t, addr, harness.Pred("t0", "L", "S", "AT", 60, harness.Rfc(time.Now().Add(-time.Minute))))
		clock := &harness.SkewClock{}
		clock.Jump(10 * time.Minute)
		run := harness.RunInProcess(t, db, addr, clock, consumer.Config{Drain: true})
		run.Wait(t, 2*time.Minute)
		harness.CheckOnce(t, db, addr, map[int64]string{})
		checkSkew(t, run, 600, "ahead of")
	})
}

// checkSkew checks that run exported a clock skew of want seconds (within
// 0.5 s: a measurement's round trip), logged the warning once, and exported
// its last commit by the database's clock (within 5 s of the test's clock).
func checkSkew(t *testing.T, run *harness.InProcess, want float64, way string) {
	t.Helper()
	if got := harness.Value(run.Cfg.Metrics.ClockSkew); math.Abs(got-want) > 0.5 {
		t.Errorf("ovstream_clock_skew_seconds %v, want %v", got, want)
	}
	if got := harness.Value(run.Cfg.Metrics.LastCommit); math.Abs(got-float64(time.Now().UnixNano())/1e9) > 5 {
		t.Errorf("ovstream_last_commit_timestamp_seconds %v is %.0f s from the database's clock, want within 5 s",
			got, got-float64(time.Now().Unix()))
	}
	log := run.LogText()
	warn := `level=WARN msg="this host's clock is ` + way + ` PostgreSQL's clock: `
	if c := strings.Count(log, warn); c != 1 || !strings.Contains(log, "clock=host skew=") {
		t.Errorf("the log holds %d warnings %q naming clock=host, want 1:\n%s", c, warn, log)
	}
}
