//go:build integration

package integration

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/ovstream/ovstream/broker/embedded"
	"github.com/ovstream/ovstream/consumer"
	"github.com/ovstream/ovstream/store"
)

// skewClock is a wall clock the test moves: real time plus an offset, so
// flush intervals and timeouts still pass while the clock jumps.
type skewClock struct{ off atomic.Int64 }

func (c *skewClock) Now() time.Time       { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *skewClock) jump(d time.Duration) { c.off.Add(int64(d)) }

// inProcess is consumer.Run in the test's process, on clock.
type inProcess struct {
	cfg    consumer.Config
	cancel context.CancelFunc
	done   chan struct{}
	sum    *consumer.Summary
	err    error
	log    *lockedWriter // the run's log lines (slog text)
}

// onePartitionBroker starts the embedded broker with one partition of the
// predictions topic.
func onePartitionBroker(t *testing.T) string {
	t.Helper()
	b, err := embedded.Start(embedded.Config{Addr: "127.0.0.1:0", Topics: map[string]int32{predictionsTopic: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b.Addr()
}

var inProcessRuns atomic.Int64

// runInProcess starts consumer.Run on the predictions topic at addr into db,
// with the wall clock of clock, 100 ms flushes and cfg's other settings. Its
// log is shown when the test fails.
func runInProcess(t *testing.T, db, addr string, clock *skewClock, cfg consumer.Config) *inProcess {
	t.Helper()
	cfg.Brokers = []string{addr}
	if cfg.Owner == "" { // one owner per run, as one process each
		cfg.Owner = fmt.Sprintf("inprocess-%d", inProcessRuns.Add(1))
	}
	cfg.PredictionsTopic = predictionsTopic
	cfg.FlushInterval = 100 * time.Millisecond
	cfg.Now = clock.Now
	cfg.Metrics = consumer.NewMetrics(nil)
	log := &lockedWriter{w: &bytes.Buffer{}}
	cfg.Logger = slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithCancel(context.Background())
	r := &inProcess{cfg: cfg, cancel: cancel, done: make(chan struct{}), log: log}
	go func() {
		defer close(r.done)
		r.sum, r.err = consumer.Run(ctx, cfg, db)
	}()
	t.Cleanup(func() {
		cancel()
		<-r.done
		if t.Failed() {
			log.mu.Lock()
			t.Logf("consumer log:\n%s", log.w.String())
			log.mu.Unlock()
		}
	})
	return r
}

// wait waits for Run to return and fails the test unless it returned nil.
func (r *inProcess) wait(t *testing.T, timeout time.Duration) *consumer.Summary {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(timeout):
		t.Fatalf("consumer.Run did not return within %v", timeout)
	}
	if r.err != nil {
		t.Fatalf("consumer.Run: %v", r.err)
	}
	return r.sum
}

// stop is SIGTERM: cancel, final commit, wait.
func (r *inProcess) stop(t *testing.T) *consumer.Summary {
	t.Helper()
	r.cancel()
	return r.wait(t, time.Minute)
}

// logText returns what the run logged so far.
func (r *inProcess) logText() string {
	r.log.mu.Lock()
	defer r.log.mu.Unlock()
	return r.log.w.String()
}

// value reads a counter or gauge of the run's metrics.
func value(m prometheus.Metric) float64 {
	var d dto.Metric
	_ = m.Write(&d)
	return d.GetCounter().GetValue() + d.GetGauge().GetValue()
}

// newDeadLetters is what the run's ovstream_dead_letters_total counts, over
// every reason.
func (r *inProcess) newDeadLetters() int {
	n := 0.0
	for _, reason := range []string{store.ReasonDecode, store.ReasonFuture, store.ReasonLate, store.ReasonRejected} {
		n += value(r.cfg.Metrics.DeadLetters.WithLabelValues(predictionsTopic, reason))
	}
	return int(n)
}

// storedConsumed returns stream_positions.consumed_offset of partition 0 of
// the predictions topic, -1 when none is stored yet.
func storedConsumed(t *testing.T, db string) int64 {
	t.Helper()
	rows := dump(t, db, `SELECT coalesce(max(consumed_offset), -1) FROM stream_positions
		WHERE pipeline = 'ovstream' AND topic = 'arrival_predictions' AND partition = 0`)
	var n int64
	scan(t, rows[0], "[%d]", &n)
	return n
}

// produceToZero produces values to partition 0 of the predictions topic, in order.
func produceToZero(t *testing.T, addr string, values ...[]byte) {
	t.Helper()
	for i, v := range values {
		produceRecords(t, addr, rec{topic: predictionsTopic, partition: 0, key: fmt.Sprintf("k%d", i), value: v})
	}
}

// checkOnce asserts G9 over the whole topic: delay_aggregates equals the SQL
// oracle over the records minus the dead letters, every record is counted
// (network rows) or dead-lettered, once, and dead_letters holds exactly
// want (offset -> reason).
func checkOnce(t *testing.T, db, addr string, want map[int64]string) {
	t.Helper()
	dump(t, db, `DROP TABLE IF EXISTS oracle_msgs`) // the topic as it is now
	n := loadOracleInput(t, db, addr, predictionsTopic)
	sameRows(t, "delay_aggregates vs SQL oracle", dump(t, db, dumpAggregates), dump(t, db, oracleAggregates))
	var wantDead []string
	for off, reason := range want {
		wantDead = append(wantDead, fmt.Sprintf("[%d %s]", off, reason))
	}
	sameRows(t, "dead letters (offset, reason) vs wanted", dump(t, db, `SELECT "offset", reason FROM dead_letters`), wantDead)
	counted := dump(t, db, `SELECT coalesce(sum(event_count), 0)::bigint FROM delay_aggregates WHERE dimension = 'network'`)
	var c int
	scan(t, counted[0], "[%d]", &c)
	if c+len(want) != n {
		t.Errorf("counted %d + dead letters %d = %d, want every record once: %d", c, len(want), c+len(want), n)
	}
}

func total(m map[string]int64) int {
	n := int64(0)
	for _, v := range m {
		n += v
	}
	return int(n)
}

func rfc(t time.Time) string { return t.UTC().Format(time.RFC3339) }
