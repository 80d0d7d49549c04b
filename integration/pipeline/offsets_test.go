//go:build integration

package pipeline

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ovstream/ovstream/integration/harness"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// transactional produces each group of values to predictions partition 0 in
// its own transaction, committed or aborted as told.
func transactional(t *testing.T, addr string, groups []struct {
	commit bool
	values [][]byte
}) {
	t.Helper()
	cfg := harness.ProducerConfig()
	cfg.Producer.Transaction.ID = fmt.Sprintf("ovstream-test-%d", time.Now().UnixNano())
	p, err := sarama.NewSyncProducer([]string{addr}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, g := range groups {
		if err := p.BeginTxn(); err != nil {
			t.Fatal(err)
		}
		for _, v := range g.values {
			if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: harness.PredictionsTopic, Partition: 0,
				Key: sarama.StringEncoder("T"), Value: sarama.ByteEncoder(v)}); err != nil {
				t.Fatal(err)
			}
		}
		if g.commit {
			err = p.CommitTxn()
		} else {
			err = p.AbortTxn()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// Offset gaps from transactions: records of aborted transactions are not
// counted (read_committed), and the commit marker that ends the partition
// stalls neither the committable offset nor --drain: the stored offset
// reaches the high water mark.
func TestTransactionsAndTrailingMarker(t *testing.T) {
	addr, db := harness.StartBroker(t), harness.FreshDB(t)
	v := func(delay int) []byte { return harness.Pred("T", "L", "S", "AT", delay, "2016-05-18T20:01:00Z") }
	transactional(t, addr, []struct {
		commit bool
		values [][]byte
	}{
		{true, [][]byte{v(1), v(2), v(3)}},
		{false, [][]byte{v(1000), v(2000), v(3000)}},
		{true, [][]byte{v(4), v(5), v(6)}},
	})
	start := time.Now()
	harness.Drain(t, db, addr)
	t.Logf("drain took %v", time.Since(start))
	got := harness.Dump(t, db, `SELECT event_count, min_delay_s, max_delay_s FROM delay_aggregates WHERE dimension = 'network'`)
	if len(got) != 1 || got[0] != "[6 1 6]" {
		t.Fatalf("network row %v, want 6 events from 1 to 6 (the aborted ones not counted)", got)
	}
	// 3 committed + marker + 3 aborted + marker + 3 committed + marker = 12.
	pos := harness.Dump(t, db, `SELECT next_offset, consumed_offset FROM stream_positions WHERE topic = 'arrival_predictions' AND partition = 0`)
	if len(pos) != 1 || pos[0] != "[12 12]" {
		t.Fatalf("stored position %v, want [12 12]: the trailing marker must not stall the committable offset", pos)
	}
}

// A stored offset outside what the broker holds: by default run exits 1 with
// an error naming topic, partition, stored offset and the available range;
// --on-offset-out-of-range=earliest|latest resumes there and logs the skip.
func TestStoredOffsetOutOfRange(t *testing.T) {
	addr, db := harness.StartBroker(t), harness.FreshDB(t)
	var recs []harness.Rec
	for i := 0; i < 30; i++ {
		recs = append(recs, harness.Rec{Topic: harness.PredictionsTopic, Partition: 0, Key: "T", Value: harness.Pred("T", "L", "S", "AT", i, time.Date(2016, 5, 18, 20, i, 0, 0, time.UTC).Format(time.RFC3339))})
	}
	harness.ProduceRecords(t, addr, recs[:10]...)
	harness.Drain(t, db, addr)
	harness.ProduceRecords(t, addr, recs[10:]...)

	// Retention deleted records 0..24: the stored offset 10 is below the log start.
	admin, err := sarama.NewClusterAdmin([]string{addr}, func() *sarama.Config {
		c := sarama.NewConfig()
		c.Version = sarama.V2_8_0_0
		return c
	}())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.DeleteRecords(harness.PredictionsTopic, map[int32]int64{0: 25}); err != nil {
		t.Fatal(err)
	}
	p := harness.StartOvstream(t, nil, harness.RunArgs(db, addr, "--drain")...)
	if code := p.Wait(t, time.Minute); code != 1 {
		t.Fatalf("exit %d, want 1:\n%s", code, p.Output())
	}
	want := "arrival_predictions/0: stored offset 10 is outside the available range [25, 30]"
	if !strings.Contains(p.Output(), want) {
		t.Fatalf("output does not say %q:\n%s", want, p.Output())
	}
	if got := harness.Dump(t, db, `SELECT next_offset FROM stream_positions WHERE partition = 0 AND topic = 'arrival_predictions'`); got[0] != "[10]" {
		t.Fatalf("stored offset moved to %v after a refused start", got)
	}
	out := harness.Drain(t, db, addr, "--on-offset-out-of-range", "earliest")
	if !strings.Contains(out, "stored offset out of range: resuming") || !strings.Contains(out, "resume_at=25") {
		t.Fatalf("the skipped range is not logged:\n%s", out)
	}
	if got := harness.Dump(t, db, `SELECT next_offset FROM stream_positions WHERE partition = 0 AND topic = 'arrival_predictions'`); got[0] != "[30]" {
		t.Fatalf("stored offset %v, want 30", got)
	}

	// Beyond the high water mark (the topic was recreated): the same, with latest.
	harness.Dump(t, db, `UPDATE stream_positions SET next_offset = 500, consumed_offset = 500 WHERE partition = 0 AND topic = 'arrival_predictions' RETURNING 1`)
	p = harness.StartOvstream(t, nil, harness.RunArgs(db, addr, "--drain")...)
	if code := p.Wait(t, time.Minute); code != 1 || !strings.Contains(p.Output(), "stored offset 500 is outside the available range [25, 30]") {
		t.Fatalf("exit %d, want 1 naming offset 500 and [25, 30]:\n%s", code, p.Output())
	}
	harness.Drain(t, db, addr, "--on-offset-out-of-range", "latest")
	if got := harness.Dump(t, db, `SELECT next_offset FROM stream_positions WHERE partition = 0 AND topic = 'arrival_predictions'`); got[0] != "[30]" {
		t.Fatalf("stored offset %v, want 30 (latest)", got)
	}
}

// startControlledBroker starts an in-process kfake cluster of one broker
// with the two topics (6 and 3 partitions), for tests that answer or break
// its requests with ControlKey, and returns it with its address.
func startControlledBroker(t *testing.T) (*kfake.Cluster, string) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(6, harness.PredictionsTopic), kfake.SeedTopics(3, harness.PositionsTopic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, c.ListenAddrs()[0]
}

// A marker probe that fails (the broker answers the probe's fetch at the
// commit marker with an error) is sent again after a backoff: the drain of a partition whose log ends in a commit
// marker still ends, with the stored offset at the high water mark. The
// failed probe had marked its offset probed, so the partition stayed below
// its high water mark and the drain waited for ever.
func TestTrailingMarkerProbeRetried(t *testing.T) {
	c, addr := startControlledBroker(t)
	db := harness.FreshDB(t)
	v := func(delay int) []byte { return harness.Pred("T", "L", "S", "AT", delay, "2016-05-18T20:01:00Z") }
	transactional(t, addr, []struct {
		commit bool
		values [][]byte
	}{{true, [][]byte{v(1), v(2), v(3)}}})
	var failed atomic.Int32
	c.ControlKey(int16(kmsg.Fetch), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.FetchRequest)
		// The partition consumers wait, visibleEnd's probe does not; the
		// probe that fails is the one at the commit marker (offset 3), once.
		if req.MaxWaitMillis != 0 || failed.Load() > 0 || len(req.Topics) != 1 || len(req.Topics[0].Partitions) != 1 ||
			req.Topics[0].Partitions[0].FetchOffset != 3 {
			return nil, nil, false
		}
		failed.Add(1)
		resp := req.ResponseKind().(*kmsg.FetchResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewFetchResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewFetchResponseTopicPartition()
				sp.Partition, sp.ErrorCode, sp.HighWatermark, sp.LastStableOffset = rp.Partition, kerr.UnknownServerError.Code, -1, -1
				sp.RecordBatches = []byte{}
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	p := harness.StartOvstream(t, nil, harness.RunArgs(db, addr, "--drain")...)
	if code := p.Wait(t, time.Minute); code != 0 {
		t.Fatalf("run --drain after a failed marker probe exited %d (want 0 within a minute):\n%s", code, p.Output())
	}
	if n := failed.Load(); n != 1 {
		t.Fatalf("%d probes answered with an error, want 1: the test did not fail a probe", n)
	}
	if !strings.Contains(p.Output(), `msg="transaction marker probe failed; retrying" partition=arrival_predictions/0 offset=3 failures=1`) {
		t.Errorf("the failed probe is not logged:\n%s", p.Output())
	}
	pos := harness.Dump(t, db, `SELECT next_offset, consumed_offset FROM stream_positions WHERE topic = 'arrival_predictions' AND partition = 0`)
	if len(pos) != 1 || pos[0] != "[4 4]" {
		t.Fatalf("stored position %v, want [4 4] (3 records and the commit marker)", pos)
	}
	got := harness.Dump(t, db, `SELECT event_count, min_delay_s, max_delay_s FROM delay_aggregates WHERE dimension = 'network'`)
	if len(got) != 1 || got[0] != "[3 1 3]" {
		t.Fatalf("network row %v, want 3 events from 1 to 3", got)
	}
}

// A connection that breaks under the start-up requests after the offsets
// (here the drain target, a ListOffsets read_committed, whose connection
// the broker closes once) is retried within --connect-timeout like the
// bootstrap connection: the drain ends with every record counted. It
// exited 1 at once.
func TestStartupDrainTargetRetried(t *testing.T) {
	c, addr := startControlledBroker(t)
	db := harness.FreshDB(t)
	var recs []harness.Rec
	for i := range 60 {
		recs = append(recs, harness.Rec{Topic: harness.PredictionsTopic, Partition: int32(i % 6), Key: "T", Value: harness.Pred("T", "L", "S", "AT", i, "2016-05-18T20:01:00Z")})
	}
	harness.ProduceRecords(t, addr, recs...)
	var closed atomic.Int32
	c.ControlKey(int16(kmsg.ListOffsets), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		if kreq.(*kmsg.ListOffsetsRequest).IsolationLevel != 1 || closed.Load() > 0 {
			return nil, nil, false
		}
		closed.Add(1)
		return nil, errors.New("closed by the test"), true // handled with an error: kfake closes the connection
	})
	p := harness.StartOvstream(t, nil, harness.RunArgs(db, addr, "--drain", "--connect-timeout", "30s")...)
	if code := p.Wait(t, time.Minute); code != 0 {
		t.Fatalf("run --drain after a connection closed under the drain target exited %d, want 0:\n%s", code, p.Output())
	}
	if n := closed.Load(); n != 1 {
		t.Fatalf("%d connections closed, want 1: the test did not break a start-up request", n)
	}
	retries := 0
	for _, line := range strings.Split(p.Output(), "\n") {
		if strings.Contains(line, "cannot reach Kafka yet; retrying") {
			retries++
			t.Log(strings.TrimSpace(line))
		}
	}
	if retries == 0 {
		t.Errorf("the retry is not logged:\n%s", p.Output())
	}
	got := harness.Dump(t, db, `SELECT event_count FROM delay_aggregates WHERE dimension = 'network'`)
	if len(got) != 1 || got[0] != "[60]" {
		t.Fatalf("network row %v, want 60 events", got)
	}
}
