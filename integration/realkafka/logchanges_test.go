//go:build integration

package realkafka_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ovstream/ovstream/integration/harness"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// networkCount is the sum of event_count over delay_aggregates' network rows.
func networkCount(t *testing.T, db string) string {
	t.Helper()
	return harness.Dump(t, db, `SELECT coalesce(sum(event_count), 0)::bigint FROM delay_aggregates WHERE dimension = 'network'`)[0]
}

// drainExit runs `run --drain ARGS` and returns its exit code and output.
func drainExit(t *testing.T, db, brokers string, args ...string) (int, string) {
	t.Helper()
	p := harness.StartOvstream(t, nil, harness.RunArgs(db, brokers, append([]string{"--drain"}, args...)...)...)
	code := p.Wait(t, time.Minute)
	return code, p.Output()
}

// The log changes under stored offsets on Apache Kafka, one partition:
// DeleteRecords past the stored offset 10 (log start 25): run refuses with
// exit 1 naming the range, and earliest resumes at 25 (15 events counted in
// all: 10 before, 25-29 after); then the topic deleted and created again
// with 4 new records (Kafka 4.3 in KRaft frees the name at once, seen: the
// first CreateTopics ~200 ms after DeleteTopics succeeds; the test retries
// TOPIC_ALREADY_EXISTS for 30 s all the same; a client that cached the old
// topic ID gets UNKNOWN_TOPIC_ID): run refuses naming both topic IDs;
// earliest counts the 4.
func TestRealKafkaLogChangesUnderStoredOffsets(t *testing.T) {
	c := sharedKafka(t)
	topic := "logchg_predictions"
	ctx := kafkaTopic(t, c, topic, 1)
	cl := kafkaClient(t, c)
	adm := kadm.NewClient(cl)
	produce := func(recs []*kgo.Record) {
		t.Helper()
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	delays := func(n int) []int {
		d := make([]int, n)
		for i := range d {
			d[i] = i
		}
		return d
	}
	db := harness.FreshDB(t)
	args := []string{"--pipeline", "rk_logchg", "--topics", topic + ","}
	stored := func() string {
		return harness.Dump(t, db, `SELECT next_offset FROM stream_positions WHERE pipeline = 'rk_logchg' AND partition = 0`)[0]
	}
	produce(txnPreds(topic, "a", 0, delays(10)...))
	harness.Drain(t, db, c.Bootstrap(), args...)
	produce(txnPreds(topic, "b", 10, delays(20)...))
	del, err := adm.DeleteRecords(ctx, func() kadm.Offsets {
		var o kadm.Offsets
		o.Add(kadm.Offset{Topic: topic, Partition: 0, At: 25})
		return o
	}())
	if err == nil {
		err = del.Error()
	}
	if err != nil {
		t.Fatalf("DeleteRecords: %v", err)
	}
	code, out := drainExit(t, db, c.Bootstrap(), args...)
	if want := topic + "/0: stored offset 10 is outside the available range [25, 30]"; code != 1 || !strings.Contains(out, want) {
		t.Fatalf("after DeleteRecords past the stored offset: exit %d, want 1 and %q:\n%s", code, want, harness.Tail(out, 20))
	}
	if got := stored(); got != "[10]" {
		t.Fatalf("stored offset moved to %s after a refused start", got)
	}
	out = harness.Drain(t, db, c.Bootstrap(), append(args, "--on-offset-out-of-range", "earliest")...)
	if !strings.Contains(out, "resume_at=25") || stored() != "[30]" || networkCount(t, db) != "[15]" {
		t.Fatalf("earliest: stored %s, %s events counted; want 30 and 15 (10 + offsets 25-29); log:\n%s",
			stored(), networkCount(t, db), harness.Tail(out, 20))
	}

	oldID := harness.TopicID(t, c.Nodes[0].Addr(), topic)
	if resp, err := adm.DeleteTopic(ctx, topic); err != nil || resp.Err != nil {
		t.Fatalf("delete topic: %v %v", err, resp.Err)
	}
	began := time.Now()
	attempts := 0
	for {
		attempts++
		err := c.CreateTopic(topic, 1, 0, nil)
		if err == nil {
			break
		}
		if !errors.Is(err, kerr.TopicAlreadyExists) || time.Since(began) > 30*time.Second {
			t.Fatalf("create topic %s again: %v", topic, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("topic deleted: created again after %d attempts, %v", attempts, time.Since(began).Round(time.Millisecond))
	newID := harness.TopicID(t, c.Nodes[0].Addr(), topic)
	cl = kafkaClient(t, c) // the old one would produce to the old topic ID (UNKNOWN_TOPIC_ID)
	produce(txnPreds(topic, "c", 20, delays(4)...))
	code, out = drainExit(t, db, c.Bootstrap(), args...)
	want := fmt.Sprintf("topic %s was recreated: the stored offsets belong to topic ID %s, the broker's topic has ID %s", topic, oldID, newID)
	if code != 1 || !strings.Contains(out, want) || oldID == newID {
		t.Fatalf("after the topic was recreated: exit %d, want 1 and %q:\n%s", code, want, harness.Tail(out, 20))
	}
	out = harness.Drain(t, db, c.Bootstrap(), append(args, "--on-offset-out-of-range", "earliest")...)
	if got := harness.Dump(t, db, `SELECT next_offset, topic_id FROM stream_positions WHERE pipeline = 'rk_logchg' AND partition = 0`)[0]; got != fmt.Sprintf("[4 %s]", newID) || networkCount(t, db) != "[19]" {
		t.Fatalf("earliest after the recreation: stored %s, %s events; want [4 %s] and 19:\n%s", got, networkCount(t, db), newID, harness.Tail(out, 20))
	}
}

// Partitions added with Kafka's TopicCommand --alter while run reads (2 ->
// 4): run finds them at its next metadata refresh and reads them from
// offset 0; after a SIGTERM and a drain, delay_aggregates equals the SQL
// oracle over all 4 partitions.
func TestRealKafkaPartitionsAddedWhileRunning(t *testing.T) {
	c := sharedKafka(t)
	topic := "grow_predictions"
	ctx := kafkaTopic(t, c, topic, 2)
	var cl *kgo.Client
	produceTo := func(partition int32, tag string, minute int, delays ...int) int {
		t.Helper()
		recs := txnPreds(topic, tag, minute, delays...)
		for _, r := range recs {
			r.Partition = partition
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		return len(recs)
	}
	db := harness.FreshDB(t)
	args := []string{"--pipeline", "rk_grow", "--topics", topic + ",", "--metadata-refresh", "1s"}
	cl = kafkaClient(t, c)
	n := produceTo(0, "p0", 0, 1, 2, 3) + produceTo(1, "p1", 0, 4, 5)
	run := harness.StartOvstream(t, nil, harness.RunArgs(db, c.Bootstrap(), args...)...)
	harness.WaitFor(t, time.Minute, "run consumed partitions 0 and 1", func() bool {
		s := harness.StoredConsumedOf(t, db, "rk_grow")
		return s[topic+"/0"] == 3 && s[topic+"/1"] == 2
	})
	out, err := c.Java(ctx, 128, "", "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", c.Bootstrap(),
		"--alter", "--topic", topic, "--partitions", "4")
	if err != nil {
		t.Fatalf("TopicCommand --alter: %v\n%s", err, out)
	}
	harness.WaitFor(t, 30*time.Second, "4 partitions in the metadata", func() bool {
		_, _, err := c.Leader(topic, 3)
		return err == nil
	})
	cl = kafkaClient(t, c) // one that knows the 4 partitions
	n += produceTo(2, "p2", 1, 10, 11) + produceTo(3, "p3", 1, 12, 13, 14, 15)
	harness.WaitFor(t, time.Minute, "run consumed the added partitions", func() bool {
		s := harness.StoredConsumedOf(t, db, "rk_grow")
		return s[topic+"/2"] == 2 && s[topic+"/3"] == 4
	})
	if !strings.Contains(run.Output(), "partition added: consuming") {
		t.Errorf("no partition added logged:\n%s", harness.Tail(run.Output(), 20))
	}
	_ = run.Cmd.Process.Signal(harness.Sigterm)
	if code := run.Wait(t, time.Minute); code != 0 {
		t.Fatalf("run after SIGTERM: exit %d\n%s", code, harness.Tail(run.Output(), 30))
	}
	harness.Drain(t, db, c.Bootstrap(), args...)
	rows := aggregatesEqualOracle(t, db, c.Bootstrap(), topic, n)
	t.Logf("2 partitions added while running; %d records, %d delay_aggregates rows equal the oracle", n, rows)
}

// A topic that does not exist, on a broker with Kafka's default
// auto.create.topics.enable=true: run --drain
// exits 1 with one line naming it (seen: 809 ms after start) and stores
// nothing; status and produce exit 1 too, and none of them creates it.
func TestRealKafkaMissingTopic(t *testing.T) {
	c := sharedKafka(t)
	db := harness.FreshDB(t)
	code, out := drainExit(t, db, c.Bootstrap(), "--pipeline", "rk_missing", "--topics", "no_such_topic,")
	want := `ovstream run: consumer: partitions of topic "no_such_topic": no_such_topic: kafka server: Request was for a topic or partition that does not exist on this broker`
	if code != 1 || !strings.Contains(out, want+"\n") {
		t.Fatalf("run on a missing topic: exit %d, want 1 and %q:\n%s", code, want, harness.Tail(out, 10))
	}
	if got := harness.Dump(t, db, `SELECT count(*) FROM stream_positions`); got[0] != "[0]" {
		t.Errorf("stream_positions rows after a refused start: %v, want none", got)
	}
	// status reads the topic's offsets: it must not create it either. The
	// refused run made no pipeline: status of a pipeline the database does
	// not know stops before Kafka, so the pipeline's row is made here.
	harness.ExecSQL(t, db, `INSERT INTO pipelines (name) VALUES ('rk_missing')`)
	if _, _, code := harness.RunCLI(t, nil, "status", "--database-url", db, "--brokers", c.Bootstrap(), "--pipeline", "rk_missing",
		"--topics", "no_such_topic"); code != 1 {
		t.Errorf("status on a missing topic: exit %d, want 1", code)
	}
	// produce does not create it either, unless asked (TestProduceMissingTopicNotCreated).
	lines := filepath.Join(t.TempDir(), "lines.jsonl")
	if err := os.WriteFile(lines, []byte(`{"trip_id":"t1"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := harness.RunCLI(t, nil, "produce", "--brokers", c.Bootstrap(), "--jsonl", lines, "--topic", "no_such_topic"); code != 1 ||
		!strings.Contains(errOut, `ovstream produce: topic "no_such_topic" does not exist (`) {
		t.Errorf("produce to a missing topic: exit %d, want 1 naming it: %s", code, errOut)
	}
	cl := kafkaClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topics, err := kadm.NewClient(cl).ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if topics.Has("no_such_topic") {
		t.Errorf("the broker (auto.create.topics.enable=true) created no_such_topic for ovstream")
	}
}
