//go:build integration

package ops

import (
	"strings"
	"testing"
	"time"

	"github.com/ovstream/ovstream/integration/harness"
)

// PostgreSQL stopped for 30 s during a run over the real 2 h Auckland
// slice: the service keeps running, pauses fetching at
// --max-uncommitted-messages, /readyz turns false (database unreachable) and
// true again, and the result equals the SQL oracle.
//
// The server stopped is a private cluster of the test's own.
func TestOpsPostgresOutage(t *testing.T) {
	t.Parallel()
	pg := harness.StartPrivatePG(t)
	addr := harness.StartBroker(t)
	db := pg.FreshDB()
	res := harness.LoadFeeds(t, "AT", harness.ExtractTarGz(t, "../../testdata/auckland-20160518-2h.tar.gz"))
	total := len(res.Predictions)
	half := total / 2
	first, second := *res, *res
	first.Predictions, second.Predictions = res.Predictions[:half], res.Predictions[half:]
	harness.ProduceFeeds(t, addr, &first)

	const maxUncommitted = 3000
	p := harness.StartOvstream(t, nil, harness.RunArgs(db, addr, "--pipeline", "outage", "--metrics-addr", "127.0.0.1:0",
		"--max-uncommitted-messages", "3000", "--log-level", "info")...)
	ops := harness.OpsAddr(t, p)
	consumed := `ovstream_consumed_messages_total{topic="arrival_predictions"}`
	var m map[string]float64
	harness.WaitFor(t, time.Minute, "the first half consumed and committed", func() bool {
		m = harness.Scrape(t, ops)
		return m[consumed] == float64(half) && m["ovstream_uncommitted_messages"] == 0 && m["ovstream_windows_finalized_total"] > 0
	})

	down := time.Now()
	pg.Stop()
	harness.ProduceFeeds(t, addr, &second)

	var body string
	harness.WaitFor(t, 15*time.Second, "/readyz 503 with the database down", func() bool {
		c, b := harness.HttpGet(t, "http://"+ops+"/readyz")
		body = b
		return c == 503 && strings.Contains(b, "database: unreachable")
	})
	if !strings.Contains(body, "partitions: assigned") {
		t.Errorf("/readyz during the outage: %q", body)
	}
	// Fetching pauses at the bound: the uncommitted records stop growing.
	harness.WaitFor(t, 15*time.Second, "fetching paused at --max-uncommitted-messages", func() bool {
		m = harness.Scrape(t, ops)
		return m["ovstream_uncommitted_messages"] >= maxUncommitted
	})
	time.Sleep(time.Second)
	paused := harness.Scrape(t, ops)
	u0, u1 := m["ovstream_uncommitted_messages"], paused["ovstream_uncommitted_messages"]
	if u1 != u0 || paused[consumed] != m[consumed] || u1 < maxUncommitted || u1 >= maxUncommitted+512 {
		t.Errorf("during the outage: uncommitted %v then %v, consumed %v then %v; want fetching stopped in [%d, %d)",
			u0, u1, m[consumed], paused[consumed], maxUncommitted, maxUncommitted+512)
	}
	if paused[consumed] >= float64(total) || paused[`ovstream_commit_failures_total{reason="retryable"}`] < 1 {
		t.Errorf("during the outage: consumed %v of %d, retryable commit failures %v", paused[consumed], total,
			paused[`ovstream_commit_failures_total{reason="retryable"}`])
	}
	time.Sleep(time.Until(down.Add(30 * time.Second)))
	select {
	case <-p.Done:
		t.Fatalf("ovstream exited during the outage:\n%s", p.Output())
	default:
	}
	pg.Start()
	harness.WaitFor(t, 30*time.Second, "PostgreSQL back", pg.Ready)
	back := time.Now()

	harness.WaitFor(t, 90*time.Second, "/readyz 200 after the outage", func() bool { c, _ := harness.HttpGet(t, "http://"+ops+"/readyz"); return c == 200 })
	t.Logf("database down %v; ready again %v after it came back", back.Sub(down).Round(time.Second), time.Since(back).Round(100*time.Millisecond))
	harness.WaitFor(t, time.Minute, "every record consumed and committed", func() bool {
		m = harness.Scrape(t, ops)
		return m[consumed] == float64(total) && m["ovstream_uncommitted_messages"] == 0
	})
	// The windows still open at SIGTERM are finalized by the drain.
	harness.StopDrainCompare(t, p, db, addr, "outage", total, "delay_aggregates after a 30 s outage vs SQL oracle")
	if dl := harness.Dump(t, db, `SELECT count(*) FROM dead_letters`); dl[0] != "[0]" {
		t.Errorf("dead letters %v, want none (allowed lateness 10m)", dl)
	}
}
