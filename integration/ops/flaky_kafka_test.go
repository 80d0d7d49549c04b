//go:build integration

package ops

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ovstream/ovstream/integration/harness"
)

// consumedOf is the records p consumed (ovstream_consumed_messages_total of
// the predictions topic), scraped from its metrics address ops.
func consumedOf(t *testing.T, ops string) float64 {
	t.Helper()
	return harness.Scrape(t, ops)[`ovstream_consumed_messages_total{topic="`+harness.PredictionsTopic+`"}`]
}

// readRate measures how fast p reads: the records per second it consumes
// over the next d. The counter moves a fetched batch at a time, so d spans
// many batches (a 10,000-record window, 0.6 s, let one buffered burst read
// as a 2.4 times faster instance). It fails the test when p reads the
// backlog's last record in d, so a rate is never that of a reader gone idle.
func readRate(t *testing.T, p *harness.Proc, ops string, d time.Duration, backlog float64) (rate, read float64) {
	t.Helper()
	from, began := consumedOf(t, ops), time.Now()
	for time.Since(began) < d {
		if harness.Exited(p) {
			t.Fatalf("ovstream exited while its reading rate was measured:\n%s", harness.Tail(p.Output(), 30))
		}
		time.Sleep(100 * time.Millisecond)
	}
	now := consumedOf(t, ops)
	if now >= backlog {
		t.Fatalf("the reader read the whole backlog (%v records) within the %v its rate was measured: the backlog is too small to measure", backlog, d)
	}
	read = now - from
	return read / time.Since(began).Seconds(), read
}

// saramaRate is how fast a plain sarama consumer (6 partition consumers, the
// fetch settings of run) reads n records of the predictions topic from the
// start through addr: records per second from its first record on.
func saramaRate(t *testing.T, addr string, n int) float64 {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V2_8_0_0
	cfg.Consumer.MaxWaitTime = 100 * time.Millisecond
	cfg.Consumer.Fetch.Default = 128 << 10
	c, err := sarama.NewConsumer([]string{addr}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := make(chan struct{}, 1024)
	for p := int32(0); p < 6; p++ {
		pc, err := c.ConsumePartition(harness.PredictionsTopic, p, 0)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for range pc.Messages() {
				got <- struct{}{}
			}
		}()
	}
	var began time.Time
	for read := 0; read < n; read++ {
		select {
		case <-got:
		case <-time.After(time.Minute):
			t.Fatalf("the sarama consumer read %d of %d records", read, n)
		}
		if read == 0 {
			began = time.Now()
		}
	}
	return float64(n-1) / time.Since(began).Seconds()
}

// A flaky network, at start: the bootstrap connections through a proxy
// that resets the first ones it accepts. run retries them within
// --connect-timeout, logging each, and drains to the SQL oracle's result
// (before: exit 1 at once, "kafka: cannot connect: ... connection reset by
// peer").
func TestFlakyKafkaBootstrap(t *testing.T) {
	px := harness.StartFlakyProxy(t)
	harness.StartBrokerBehind(t, px)
	addr, db := px.Addr(), harness.FreshDB(t)
	harness.ProduceLines(t, addr, harness.PredictionsTopic, harness.FlakyLines(0, 2000)...)
	px.SetLatency(100 * time.Millisecond)
	px.ResetNext(4)
	p := harness.StartOvstream(t, harness.CliEnv(), harness.RunArgs(db, addr, "--drain", "--topics", harness.PredictionsTopic+",", "--connect-timeout", "1m")...)
	if code := p.Wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("run --drain through a proxy that reset its first 4 connections exited %d, want 0 (retried within --connect-timeout):\n%s",
			code, harness.Tail(p.Output(), 30))
	}
	if px.ResetCount() < 4 || !strings.Contains(p.Output(), "cannot reach Kafka yet; retrying") {
		t.Fatalf("%d connections reset; the run does not log its retries:\n%s", px.ResetCount(), harness.Tail(p.Output(), 30))
	}
	px.SetLatency(0)
	harness.LoadOracleInput(t, db, addr, harness.PredictionsTopic)
	harness.SameRows(t, "delay_aggregates vs SQL oracle", harness.Dump(t, db, harness.DumpAggregates), harness.Dump(t, db, harness.OracleAggregates))
}

// A flaky network, while reading: after a network fault the reading rate
// recovers. Through a proxy adding 300 ms each way, instance A reads a
// backlog while the proxy resets every connection every 2-5 s for 12 s;
// 3 s after the resets stopped its reading rate is measured over 8 s, then a fresh instance's (another pipeline) and a plain sarama
// consumer's (a client we did not write) through the same proxy. A's rate
// must be at least half the fresh one's (before: 78 records/s against a
// fresh instance's 17,849: the run loop asked for the high water marks one
// partition after the other, each a round trip, more after a reset), the
// fresh one's a quarter of sarama's (before, in another run: 147 records/s),
// and both pipelines drain to the SQL oracle's result.
func TestFlakyKafkaRecovers(t *testing.T) {
	px := harness.StartFlakyProxy(t)
	harness.StartBrokerBehind(t, px)
	addr, db := px.Addr(), harness.FreshDB(t)
	// Large enough that A, reading on through the resets on a quiet machine
	// (54,000 of 60,000 read during the fault), leaves a backlog to measure.
	// Each rate is measured over rateWindow: at most about 17,000 records/s
	// here, so A (over 200,000 left after the fault) and the fresh instance
	// keep a backlog throughout.
	const backlog, rateWindow = 300000, 8 * time.Second
	harness.ProduceLines(t, addr, harness.PredictionsTopic, harness.FlakyLines(0, backlog)...)
	px.SetLatency(300 * time.Millisecond)
	args := func(pipeline string) []string {
		return harness.RunArgs(db, addr, "--pipeline", pipeline, "--topics", harness.PredictionsTopic+",", "--metrics-addr", "127.0.0.1:0",
			"--log-level", "info")
	}
	a := harness.StartOvstream(t, harness.CliEnv(), args("a")...)
	opsA := harness.OpsAddr(t, a)
	harness.WaitFor(t, time.Minute, "A reads", func() bool { return consumedOf(t, opsA) > 0 })
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 27))
	for until := time.Now().Add(12 * time.Second); time.Now().Before(until); {
		time.Sleep(2*time.Second + time.Duration(rng.Int64N(int64(3*time.Second))))
		px.ResetAll()
	}
	faulted, errsDuring := consumedOf(t, opsA), strings.Count(a.Output(), "kafka consumer error")
	time.Sleep(3 * time.Second)
	rateA, readA := readRate(t, a, opsA, rateWindow, backlog)
	errsAfter := strings.Count(a.Output(), "kafka consumer error") - errsDuring
	t.Logf("A logged %d consumer errors during the fault, %d after it", errsDuring, errsAfter)
	stopProc(t, a)
	f := harness.StartOvstream(t, harness.CliEnv(), args("fresh")...)
	opsF := harness.OpsAddr(t, f)
	harness.WaitFor(t, time.Minute, "the fresh instance reads", func() bool { return consumedOf(t, opsF) >= 5000 })
	rateF, readF := readRate(t, f, opsF, rateWindow, backlog)
	stopProc(t, f)
	rateS := saramaRate(t, addr, 20000)
	t.Logf("%d connections reset; A read %v records during the fault; after it: %.0f records/s (%v records); fresh instance: %.0f records/s (%v records); "+
		"plain sarama consumer: %.0f records/s; ratios %.2f (A/fresh), %.2f (fresh/sarama)",
		px.ResetCount(), faulted, rateA, readA, rateF, readF, rateS, rateA/rateF, rateF/rateS)
	if rateA < 0.5*rateF {
		t.Errorf("after the fault A reads %.0f records/s, under half a fresh instance's %.0f records/s through the same proxy", rateA, rateF)
	}
	if rateF < 0.25*rateS {
		t.Errorf("a fresh instance reads %.0f records/s, under a quarter of a plain sarama consumer's %.0f records/s through the same proxy", rateF, rateS)
	}

	px.SetLatency(0)
	for _, pl := range []string{"a", "fresh"} {
		harness.Drain(t, db, addr, "--pipeline", pl, "--topics", harness.PredictionsTopic+",", "--log-level", "info")
	}
	harness.LoadOracleInput(t, db, addr, harness.PredictionsTopic)
	oracle := harness.Dump(t, db, harness.OracleAggregates)
	for _, pl := range []string{"a", "fresh"} {
		harness.SameRows(t, "delay_aggregates of "+pl+" vs SQL oracle", harness.Dump(t, db, harness.DumpAggregates+" WHERE pipeline = '"+pl+"'"), oracle)
	}
}
