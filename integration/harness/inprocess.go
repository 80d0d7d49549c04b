//go:build integration

package harness

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

// SkewClock is a wall clock the test moves: real time plus an offset, so
// flush intervals and timeouts still pass while the clock jumps.
type SkewClock struct{ off atomic.Int64 }

// Now is the wall clock plus the skew of every Jump so far.
func (c *SkewClock) Now() time.Time { return time.Now().Add(time.Duration(c.off.Load())) }

// Jump moves the clock by d (negative: backwards).
func (c *SkewClock) Jump(d time.Duration) { c.off.Add(int64(d)) }

// InProcess is consumer.Run in the test's process, on clock.
type InProcess struct {
	Cfg    consumer.Config
	cancel context.CancelFunc
	done   chan struct{}
	sum    *consumer.Summary
	err    error
	log    *LockedWriter // the run's log lines (slog text)
}

// OnePartitionBroker starts the embedded broker with one partition of the
// predictions topic.
func OnePartitionBroker(t *testing.T) string {
	t.Helper()
	b, err := embedded.Start(embedded.Config{Addr: "127.0.0.1:0", Topics: map[string]int32{PredictionsTopic: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b.Addr()
}

var inProcessRuns atomic.Int64

// RunInProcess starts consumer.Run on the predictions topic at addr into db,
// with the wall clock of clock, 100 ms flushes and cfg's other settings. Its
// log is shown when the test fails.
func RunInProcess(t *testing.T, db, addr string, clock *SkewClock, cfg consumer.Config) *InProcess {
	t.Helper()
	cfg.Brokers = []string{addr}
	if cfg.Owner == "" { // one owner per run, as one process each
		cfg.Owner = fmt.Sprintf("inprocess-%d", inProcessRuns.Add(1))
	}
	cfg.PredictionsTopic = PredictionsTopic
	cfg.FlushInterval = 100 * time.Millisecond
	cfg.Now = clock.Now
	cfg.Metrics = consumer.NewMetrics(nil)
	log := &LockedWriter{W: &bytes.Buffer{}}
	cfg.Logger = slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithCancel(context.Background())
	r := &InProcess{Cfg: cfg, cancel: cancel, done: make(chan struct{}), log: log}
	go func() {
		defer close(r.done)
		r.sum, r.err = consumer.Run(ctx, cfg, db)
	}()
	t.Cleanup(func() {
		cancel()
		<-r.done
		if t.Failed() {
			log.mu.Lock()
			t.Logf("consumer log:\n%s", log.W.String())
			log.mu.Unlock()
		}
	})
	return r
}

// Wait waits for Run to return and fails the test unless it returned nil.
func (r *InProcess) Wait(t *testing.T, timeout time.Duration) *consumer.Summary {
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

// Stop is SIGTERM: cancel, final commit, wait.
func (r *InProcess) Stop(t *testing.T) *consumer.Summary {
	t.Helper()
	r.cancel()
	return r.Wait(t, time.Minute)
}

// LogText returns what the run logged so far.
func (r *InProcess) LogText() string {
	r.log.mu.Lock()
	defer r.log.mu.Unlock()
	return r.log.W.String()
}

// Value reads a counter or gauge of the run's metrics.
func Value(m prometheus.Metric) float64 {
	var d dto.Metric
	_ = m.Write(&d)
	return d.GetCounter().GetValue() + d.GetGauge().GetValue()
}

// NewDeadLetters is what the run's ovstream_dead_letters_total counts, over
// every reason.
func (r *InProcess) NewDeadLetters() int {
	n := 0.0
	for _, reason := range []string{store.ReasonDecode, store.ReasonFuture, store.ReasonLate, store.ReasonRejected} {
		n += Value(r.Cfg.Metrics.DeadLetters.WithLabelValues(PredictionsTopic, reason))
	}
	return int(n)
}

// StoredConsumed returns stream_positions.consumed_offset of partition 0 of
// the predictions topic, -1 when none is stored yet.
func StoredConsumed(t *testing.T, db string) int64 {
	t.Helper()
	rows := Dump(t, db, `SELECT coalesce(max(consumed_offset), -1) FROM stream_positions
		WHERE pipeline = 'ovstream' AND topic = 'arrival_predictions' AND partition = 0`)
	var n int64
	Scan(t, rows[0], "[%d]", &n)
	return n
}

// ProduceToZero produces values to partition 0 of the predictions topic, in order.
func ProduceToZero(t *testing.T, addr string, values ...[]byte) {
	t.Helper()
	for i, v := range values {
		ProduceRecords(t, addr, Rec{Topic: PredictionsTopic, Partition: 0, Key: fmt.Sprintf("k%d", i), Value: v})
	}
}

// CheckOnce asserts G9 over the whole topic: delay_aggregates equals the SQL
// oracle over the records minus the dead letters, every record is counted
// (network rows) or dead-lettered, once, and dead_letters holds exactly
// want (offset -> reason).
func CheckOnce(t *testing.T, db, addr string, want map[int64]string) {
	t.Helper()
	Dump(t, db, `DROP TABLE IF EXISTS oracle_msgs`) // the topic as it is now
	n := LoadOracleInput(t, db, addr, PredictionsTopic)
	SameRows(t, "delay_aggregates vs SQL oracle", Dump(t, db, DumpAggregates), Dump(t, db, OracleAggregates))
	var wantDead []string
	for off, reason := range want {
		wantDead = append(wantDead, fmt.Sprintf("[%d %s]", off, reason))
	}
	SameRows(t, "dead letters (offset, reason) vs wanted", Dump(t, db, `SELECT "offset", reason FROM dead_letters`), wantDead)
	counted := Dump(t, db, `SELECT coalesce(sum(event_count), 0)::bigint FROM delay_aggregates WHERE dimension = 'network'`)
	var c int
	Scan(t, counted[0], "[%d]", &c)
	if c+len(want) != n {
		t.Errorf("counted %d + dead letters %d = %d, want every record once: %d", c, len(want), c+len(want), n)
	}
}

// Total is the sum of m's values.
func Total(m map[string]int64) int {
	n := int64(0)
	for _, v := range m {
		n += v
	}
	return int(n)
}

// Rfc formats t in UTC as RFC 3339 (seconds).
func Rfc(t time.Time) string { return t.UTC().Format(time.RFC3339) }
