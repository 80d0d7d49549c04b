//go:build integration

package realkafka_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ovstream/ovstream/integration/harness"
	"github.com/ovstream/ovstream/integration/realkafka"
)

// txnPreds are prediction records (one window of 5 minutes per minute
// argument) with the given delays, keyed by trip.
func txnPreds(topic, tag string, minute int, delays ...int) []*kgo.Record {
	var out []*kgo.Record
	for i, d := range delays {
		trip := fmt.Sprintf("%s-%d", tag, i)
		v := fmt.Sprintf(`{"trip_id":%q,"line":"L1","stop_id":"S1","operator":"AT","delay_s":%d,"event_time":"2016-05-19T08:%02d:%02dZ"}`,
			trip, d, minute, i)
		out = append(out, &kgo.Record{Topic: topic, Partition: 0, Key: []byte(trip), Value: []byte(v)})
	}
	return out
}

// kafkaTopic creates topic on c with partitions partitions (replication:
// every node) and returns a context of 2 minutes for the test's requests.
func kafkaTopic(t *testing.T, c *realkafka.Cluster, topic string, partitions int32) context.Context {
	t.Helper()
	if err := c.CreateTopic(topic, partitions, 0, nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// kafkaClient is a franz-go client of c writing to partitions by number, closed with the test.
func kafkaClient(t *testing.T, c *realkafka.Cluster, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := c.Client(append([]kgo.Opt{kgo.RecordPartitioner(kgo.ManualPartitioner())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// produceSync produces recs with cl and fails the test on an error.
func produceSync(t *testing.T, ctx context.Context, cl *kgo.Client, recs []*kgo.Record) {
	t.Helper()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// partitionEnds returns a function reading partition 0 of topic's high
// water mark and last stable offset through kadm (ListOffsets).
func partitionEnds(t *testing.T, ctx context.Context, cl *kgo.Client, topic string) func() (hw, lso int64) {
	adm := kadm.NewClient(cl)
	return func() (hw, lso int64) {
		t.Helper()
		h, err1 := adm.ListEndOffsets(ctx, topic)
		l, err2 := adm.ListCommittedOffsets(ctx, topic)
		if err1 != nil || err2 != nil {
			t.Fatalf("ListOffsets: %v %v", err1, err2)
		}
		a, _ := h.Lookup(topic, 0)
		b, _ := l.Lookup(topic, 0)
		return a.Offset, b.Offset
	}
}

// networkRows is delay_aggregates' network rows: window start (UTC), count,
// mean, p90, min, max.
func networkRows(t *testing.T, db string) []string {
	t.Helper()
	return harness.Dump(t, db, `SELECT to_char(window_start AT TIME ZONE 'UTC', 'HH24:MI'), event_count, mean_delay_s, p90_delay_s,
		min_delay_s, max_delay_s FROM delay_aggregates WHERE dimension = 'network'`)
}

// Transactions on Apache Kafka, one partition: plain records (delays 1-3),
// a committed transaction (10-12), an aborted one (1000-1002), plain (4, 5),
// then a transaction left open (20-22, window 08:10) and plain records
// behind it (6, 7, window 08:10). Offsets: 0-2, 3-5 + commit marker 6,
// 7-9 + abort marker 10, 11-12, open 13-15, 16-17; the last stable offset
// is 13 while the transaction is open.
//
// A drain meanwhile ends at the last stable offset (before the fix it
// targeted the high water mark, which read_committed fetches never reach
// while the transaction is open, and waited, committing nothing, until the
// transaction ended or timed out): it counts the 8 visible
// records of window 08:00 (never the aborted ones), stores next offset 13,
// and leaves the rest; once the transaction commits (marker 18, high water
// 19) a second drain counts window 08:10's 5 records and stores 19: the
// control records' offset gaps leave no lag in status.
func TestRealKafkaTransactionsAndLastStableOffset(t *testing.T) {
	c := sharedKafka(t)
	pred := "txn_predictions"
	ctx := kafkaTopic(t, c, pred, 1)
	plain := kafkaClient(t, c)
	produce := func(cl *kgo.Client, recs []*kgo.Record) { t.Helper(); produceSync(t, ctx, cl, recs) }
	ends := partitionEnds(t, ctx, plain, pred)
	// txn produces recs in a transaction of its own and returns its client
	// with the transaction still open.
	txn := func(id string, recs []*kgo.Record) *kgo.Client {
		t.Helper()
		cl := kafkaClient(t, c, kgo.TransactionalID(id), kgo.TransactionTimeout(2*time.Minute))
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		produce(cl, recs)
		return cl
	}
	// end ends the transaction of cl and waits for its marker: Kafka writes
	// the markers after EndTransaction returns (seen: high water 18 with last
	// stable offset 19 just after the call), and a record produced before
	// the marker would take its offset.
	end := func(cl *kgo.Client, how kgo.TransactionEndTry) {
		t.Helper()
		if err := cl.EndTransaction(ctx, how); err != nil {
			t.Fatal(err)
		}
		harness.WaitFor(t, 30*time.Second, "the transaction marker written", func() bool {
			hw, lso := ends()
			return hw == lso
		})
	}
	produce(plain, txnPreds(pred, "p1", 0, 1, 2, 3))
	end(txn("rk-committed", txnPreds(pred, "a", 1, 10, 11, 12)), kgo.TryCommit)
	end(txn("rk-aborted", txnPreds(pred, "b", 2, 1000, 1001, 1002)), kgo.TryAbort)
	produce(plain, txnPreds(pred, "p2", 3, 4, 5))
	open := txn("rk-open", txnPreds(pred, "c", 10, 20, 21, 22))
	produce(plain, txnPreds(pred, "p3", 11, 6, 7))

	if hw, lso := ends(); hw != 18 || lso != 13 {
		t.Fatalf("with the transaction open: high water %d, last stable offset %d; want 18 and 13", hw, lso)
	}

	db := harness.FreshDB(t)
	args := []string{"--pipeline", "rk_txn", "--topics", pred + ","}
	p := harness.StartOvstream(t, nil, harness.RunArgs(db, c.Bootstrap(), append([]string{"--drain"}, args...)...)...)
	if code := p.Wait(t, time.Minute); code != 0 {
		t.Fatalf("drain with a transaction open: exit %d\n%s", code, harness.Tail(p.Output(), 30))
	}
	want := []string{"[08:00 8 6 11.3 1 12]"}
	if got := networkRows(t, db); strings.Join(got, ";") != strings.Join(want, ";") {
		t.Fatalf("network rows after the drain with a transaction open: %v, want %v", got, want)
	}
	if got := harness.StoredNext(t, db, "rk_txn"); got[pred+"/0"] != 13 {
		t.Fatalf("stored next offset %v, want 13 (the last stable offset)", got)
	}

	end(open, kgo.TryCommit)
	if hw, lso := ends(); hw != 19 || lso != 19 {
		t.Fatalf("after the commit: high water %d, last stable offset %d; want 19 and 19", hw, lso)
	}
	harness.Drain(t, db, c.Bootstrap(), args...)
	want = append(want, "[08:10 5 15.2 21.6 6 22]")
	if got := networkRows(t, db); strings.Join(got, ";") != strings.Join(want, ";") {
		t.Fatalf("network rows after the commit and a second drain: %v, want %v", got, want)
	}
	if got := harness.StoredNext(t, db, "rk_txn"); got[pred+"/0"] != 19 {
		t.Fatalf("stored next offset %v, want 19 (the high water mark, past the commit marker)", got)
	}
	if st := harness.Status(t, db, c.Bootstrap(), "rk_txn"); st.Lag() != 0 {
		t.Fatalf("status lag %d after the last drain, want 0", st.Lag())
	}
}
