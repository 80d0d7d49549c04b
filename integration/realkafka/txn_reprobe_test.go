//go:build integration

package realkafka_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ovstream/ovstream/integration/harness"
)

// A transaction aborted after its partition was probed for markers does not
// hold the watermark for ever (Apache Kafka, two partitions, a live
// service). Partition 0 holds three visible records (window 08:00) and then
// a transaction left open: read_committed fetches end at the last stable
// offset 3, and the marker probe at offset 3 finds nothing to skip. The
// transaction is then aborted (its records and the abort marker take
// offsets 3-6, high water 7): nothing of it is ever delivered, so only a
// new probe at offset 3 can find partition 0 caught up. Partition 1 then
// gets records of 08:20. With allowed lateness 0 and idle timeout 2 s,
// partition 0 must stop holding the watermark and window 08:00 (delays 1-5)
// must be written. Before the fix a partition was probed once per position:
// window 08:00 was never written.
func TestRealKafkaAbortAfterProbeReleasesWatermark(t *testing.T) {
	c := sharedKafka(t)
	pred := "txn_reprobe"
	ctx := kafkaTopic(t, c, pred, 2)
	plain := kafkaClient(t, c)
	recs := func(part int32, tag string, minute int, delays ...int) []*kgo.Record {
		var out []*kgo.Record
		for i, d := range delays {
			trip := fmt.Sprintf("%s-%d", tag, i)
			v := fmt.Sprintf(`{"trip_id":%q,"line":"L1","stop_id":"S1","operator":"AT","delay_s":%d,"event_time":"2016-05-19T08:%02d:%02dZ"}`,
				trip, d, minute, i)
			out = append(out, &kgo.Record{Topic: pred, Partition: part, Key: []byte(trip), Value: []byte(v)})
		}
		return out
	}
	produce := func(cl *kgo.Client, rs []*kgo.Record) { t.Helper(); produceSync(t, ctx, cl, rs) }
	ends := partitionEnds(t, ctx, plain, pred)
	produce(plain, recs(0, "a", 0, 1, 2, 3))
	produce(plain, recs(1, "b", 1, 4, 5))
	open := kafkaClient(t, c, kgo.TransactionalID("rk-reprobe"), kgo.TransactionTimeout(2*time.Minute))
	if err := open.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produce(open, recs(0, "c", 3, 1000, 1001, 1002))
	if hw, lso := ends(); hw != 6 || lso != 3 {
		t.Fatalf("with the transaction open: high water %d, last stable offset %d; want 6 and 3", hw, lso)
	}

	db := harness.FreshDB(t)
	p := harness.StartOvstream(t, nil, harness.RunArgs(db, c.Bootstrap(), "--pipeline", "rk_reprobe", "--topics", pred+",",
		"--allowed-lateness", "0s", "--idle-timeout", "2s")...)
	harness.WaitFor(t, time.Minute, "partition 0 read up to the last stable offset", func() bool {
		return harness.Dump(t, db, `SELECT coalesce(max(consumed_offset), -1) FROM stream_positions WHERE pipeline = 'rk_reprobe' AND partition = 0`)[0] == "[3]"
	})
	time.Sleep(3 * time.Second) // quiet past probeAfter: the probe at offset 3 went out and found the open transaction

	if err := open.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 30*time.Second, "the abort marker written", func() bool {
		hw, lso := ends()
		return hw == 7 && lso == 7
	})
	produce(plain, recs(1, "d", 20, 6, 7))

	want := "[08:00 5 3 4.6 1 5]"
	deadline := time.Now().Add(40 * time.Second)
	for {
		got := strings.Join(networkRows(t, db), ";")
		if got == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("network rows 40 s after the abort: %q, want %q (partition 0 still holds the watermark)\n%s", got, want, harness.Tail(p.Output(), 40))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got := harness.Dump(t, db, `SELECT partition, next_offset FROM stream_positions WHERE pipeline = 'rk_reprobe'`); strings.Join(got, ";") != "[0 7];[1 2]" {
		t.Fatalf("stored offsets %v, want partition 0 past the abort marker (7) and partition 1 at 2 (its 08:20 records in an open window)", got)
	}
}
