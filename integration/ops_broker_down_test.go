//go:build integration

package integration

import (
	"math"
	"strings"
	"testing"
	"time"
)

// The broker SIGKILLed under a running service: its partitions' high water
// marks become unknown, and every surface says so instead of the last value
// (the lag metric is NaN, the progress line says lag=unknown, /readyz turns
// 503 naming Kafka once that lasts three flush intervals); with the broker
// back on its data, they are known again and the service is ready.
func TestOpsBrokerDownHealth(t *testing.T) {
	dir := t.TempDir()
	addr, broker := startBrokerProcess(t, "127.0.0.1:0", dir)
	db := freshDB(t)
	produceLines(t, addr, predictionsTopic, string(pred("t1", "L1", "S1", "AT", 30, "2016-05-19T08:01:00Z")))
	run := startOvstream(t, nil, runArgs(db, addr, "--metrics-addr", "127.0.0.1:0", "--progress-interval", "500ms",
		"--connect-timeout", "5s")...)
	ops := opsAddr(t, run)
	lag := `ovstream_partition_lag_messages{partition="0",topic="arrival_predictions"}`
	waitFor(t, time.Minute, "ready with the lag known", func() bool {
		code, body := httpGet(t, "http://"+ops+"/readyz")
		return code == 200 && strings.Contains(body, "kafka: ok") && scrape(t, ops)[lag] == 0
	})

	broker.kill()
	waitFor(t, time.Minute, "/readyz 503 naming Kafka", func() bool {
		code, body := httpGet(t, "http://"+ops+"/readyz")
		return code == 503 && strings.Contains(body, "kafka: the high water marks of 9 partitions unknown for ")
	})
	m := scrape(t, ops)
	for _, p := range []string{`{partition="0",topic="arrival_predictions"}`, `{partition="5",topic="arrival_predictions"}`,
		`{partition="2",topic="vehicle_positions"}`} {
		if v := m["ovstream_partition_lag_messages"+p]; !math.IsNaN(v) {
			t.Errorf("lag of %s with the broker down: %v, want NaN (unknown)", p, v)
		}
	}
	waitFor(t, 30*time.Second, "the progress line says lag=unknown", func() bool {
		return strings.Contains(run.output(), "lag=unknown")
	})
	if !strings.Contains(run.output(), "high water mark unknown: the partition holds the watermark until it is read") {
		t.Errorf("no warning that the high water mark is unknown:\n%s", run.output())
	}

	startBrokerProcess(t, addr, dir)
	waitFor(t, time.Minute, "ready again with the lag known", func() bool {
		code, body := httpGet(t, "http://"+ops+"/readyz")
		return code == 200 && strings.Contains(body, "kafka: ok") && scrape(t, ops)[lag] == 0
	})
	_ = run.cmd.Process.Signal(sigterm)
	if code := run.wait(t, time.Minute); code != 0 {
		t.Fatalf("run after SIGTERM: exit %d\n%s", code, tail(run.output(), 30))
	}
}
