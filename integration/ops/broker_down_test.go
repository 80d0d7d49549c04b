//go:build integration

package ops

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ovstream/ovstream/integration/harness"
)

// The broker SIGKILLed under a running service: its partitions' high water
// marks become unknown, and every surface says so instead of the last value
// (the lag metric is NaN, the progress line says lag=unknown, /readyz turns
// 503 naming Kafka once that lasts three flush intervals); with the broker
// back on its data, they are known again and the service is ready.
func TestOpsBrokerDownHealth(t *testing.T) {
	dir := t.TempDir()
	addr, broker := harness.StartBrokerProcess(t, "127.0.0.1:0", dir)
	db := harness.FreshDB(t)
	harness.ProduceLines(t, addr, harness.PredictionsTopic, string(harness.Pred("t1", "L1", "S1", "AT", 30, "2016-05-19T08:01:00Z")))
	run := harness.StartOvstream(t, nil, harness.RunArgs(db, addr, "--metrics-addr", "127.0.0.1:0", "--progress-interval", "500ms",
		"--connect-timeout", "5s")...)
	ops := harness.OpsAddr(t, run)
	lag := `ovstream_partition_lag_messages{partition="0",topic="arrival_predictions"}`
	harness.WaitFor(t, time.Minute, "ready with the lag known", func() bool {
		code, body := harness.HttpGet(t, "http://"+ops+"/readyz")
		return code == 200 && strings.Contains(body, "kafka: ok") && harness.Scrape(t, ops)[lag] == 0
	})

	broker.Kill()
	harness.WaitFor(t, time.Minute, "/readyz 503 naming Kafka", func() bool {
		code, body := harness.HttpGet(t, "http://"+ops+"/readyz")
		return code == 503 && strings.Contains(body, "kafka: the high water marks of 9 partitions unknown for ")
	})
	m := harness.Scrape(t, ops)
	for _, p := range []string{`{partition="0",topic="arrival_predictions"}`, `{partition="5",topic="arrival_predictions"}`,
		`{partition="2",topic="vehicle_positions"}`} {
		if v := m["ovstream_partition_lag_messages"+p]; !math.IsNaN(v) {
			t.Errorf("lag of %s with the broker down: %v, want NaN (unknown)", p, v)
		}
	}
	harness.WaitFor(t, 30*time.Second, "the progress line says lag=unknown", func() bool {
		return strings.Contains(run.Output(), "lag=unknown")
	})
	if !strings.Contains(run.Output(), "high water mark unknown: the partition holds the watermark until it is read") {
		t.Errorf("no warning that the high water mark is unknown:\n%s", run.Output())
	}

	harness.StartBrokerProcess(t, addr, dir)
	harness.WaitFor(t, time.Minute, "ready again with the lag known", func() bool {
		code, body := harness.HttpGet(t, "http://"+ops+"/readyz")
		return code == 200 && strings.Contains(body, "kafka: ok") && harness.Scrape(t, ops)[lag] == 0
	})
	_ = run.Cmd.Process.Signal(harness.Sigterm)
	if code := run.Wait(t, time.Minute); code != 0 {
		t.Fatalf("run after SIGTERM: exit %d\n%s", code, harness.Tail(run.Output(), 30))
	}
}
