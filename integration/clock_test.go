//go:build integration

package integration

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ovstream/ovstream/consumer"
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
		addr, db := onePartitionBroker(t), freshDB(t)
		const n = 1200
		now := time.Now().Truncate(time.Second)
		msgs := synthetic(n, now.Add(-n*time.Second), time.Second)
		for _, m := range msgs {
			m.Partition = 0
		}
		sendAll(t, addr, msgs)
		clock := &skewClock{}
		clock.jump(-10 * time.Minute)
		run := runInProcess(t, db, addr, clock, consumer.Config{Drain: true})
		sum := run.wait(t, 2*time.Minute)
		checkOnce(t, db, addr, map[int64]string{})
		if sum.Predictions != n || total(sum.DeadLetters) != 0 {
			t.Errorf("the drain counted %d predictions, dead letters %v; want %d and none", sum.Predictions, sum.DeadLetters, n)
		}
		checkSkew(t, run, -600, "behind")
	})
	t.Run("ahead", func(t *testing.T) {
		addr, db := onePartitionBroker(t), freshDB(t)
		produceToZero(t, addr, pred("t0", "L", "S", "AT", 60, rfc(time.Now().Add(-time.Minute))))
		clock := &skewClock{}
		clock.jump(10 * time.Minute)
		run := runInProcess(t, db, addr, clock, consumer.Config{Drain: true})
		run.wait(t, 2*time.Minute)
		checkOnce(t, db, addr, map[int64]string{})
		checkSkew(t, run, 600, "ahead of")
	})
}

// checkSkew checks that run exported a clock skew of want seconds (within
// 0.5 s: a measurement's round trip), logged the warning once, and exported
// its last commit by the database's clock (within 5 s of the test's clock).
func checkSkew(t *testing.T, run *inProcess, want float64, way string) {
	t.Helper()
	if got := value(run.cfg.Metrics.ClockSkew); math.Abs(got-want) > 0.5 {
		t.Errorf("ovstream_clock_skew_seconds %v, want %v", got, want)
	}
	if got := value(run.cfg.Metrics.LastCommit); math.Abs(got-float64(time.Now().UnixNano())/1e9) > 5 {
		t.Errorf("ovstream_last_commit_timestamp_seconds %v is %.0f s from the database's clock, want within 5 s",
			got, got-float64(time.Now().Unix()))
	}
	log := run.logText()
	warn := `level=WARN msg="this host's clock is ` + way + ` PostgreSQL's clock: `
	if c := strings.Count(log, warn); c != 1 || !strings.Contains(log, "clock=host skew=") {
		t.Errorf("the log holds %d warnings %q naming clock=host, want 1:\n%s", c, warn, log)
	}
}
