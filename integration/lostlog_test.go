//go:build integration

package integration

// The broker lost the log. A partition reader never ends
// silently, and a topic that was deleted and recreated is told apart from the
// one the offsets were stored for by its Kafka topic ID (KIP-516), even when
// its new range covers the stored offset.

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5"
)

// adminClient is a sarama ClusterAdmin on the broker at addr.
func adminClient(t *testing.T, addr string) sarama.ClusterAdmin {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V2_8_0_0
	admin, err := sarama.NewClusterAdmin([]string{addr}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	return admin
}

// topicID returns the Kafka topic ID of topic (Metadata v10+, KIP-516), as
// Kafka prints it (URL-safe base64 without padding).
func topicID(t *testing.T, addr, topic string) string {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V2_8_0_0
	b := sarama.NewBroker(addr)
	if err := b.Open(cfg); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	resp, err := b.GetMetadata(sarama.NewMetadataRequest(cfg.Version, []string{topic}))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Topics) != 1 || resp.Topics[0].Err != sarama.ErrNoError || resp.Topics[0].Uuid == (sarama.Uuid{}) {
		t.Fatalf("metadata of %s: %+v", topic, resp.Topics)
	}
	return resp.Topics[0].Uuid.String()
}

// recreateTopic deletes topic and creates it again with partitions
// partitions, waiting until the new one has a new topic ID.
func recreateTopic(t *testing.T, addr, topic string, partitions int32) {
	t.Helper()
	old := topicID(t, addr, topic)
	admin := adminClient(t, addr)
	if err := admin.DeleteTopic(topic); err != nil {
		t.Fatalf("delete topic %s: %v", topic, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: 1}, false)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("create topic %s again: %v", topic, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if id := topicID(t, addr, topic); id == old {
		t.Fatalf("recreated topic %s kept its topic ID %s", topic, id)
	}
}

// events returns n predictions for partition 0 of the predictions topic, one
// a minute from start, trip and delay numbered from first.
func events(first, n int, start time.Time) []rec {
	var out []rec
	for i := first; i < first+n; i++ {
		out = append(out, rec{predictionsTopic, 0, fmt.Sprintf("T%d", i),
			pred(fmt.Sprintf("T%d", i), "L", "S", "AT", i, start.Add(time.Duration(i-first)*time.Minute).Format(time.RFC3339))})
	}
	return out
}

// loadOracleRecords writes recs into oracle_msgs of db (created if need be),
// each with a distinct made-up offset: for input that is no longer in Kafka.
func loadOracleRecords(t *testing.T, db string, recs []rec) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS oracle_msgs (topic text, partition int, "offset" bigint, value bytea)`); err != nil {
		t.Fatal(err)
	}
	for i, r := range recs {
		if _, err := conn.Exec(ctx, `INSERT INTO oracle_msgs VALUES ($1, $2, $3, $4)`, r.topic, r.partition, -1-int64(i), r.value); err != nil {
			t.Fatal(err)
		}
	}
}

// The broker restarts without its data while run reads: the partition's
// reader gets OffsetOutOfRange. run stops with exit 1 naming topic,
// partition, the offset being read and the new range, instead of reading
// nothing more without a word. Records then written into the new log cover
// the stored offset: start-up refuses, naming the topic ID change, and with
// --on-offset-out-of-range=earliest every new record is counted: nothing of
// the new log is skipped.
func TestBrokerLostLogWhileRunning(t *testing.T) {
	addr, broker := startBrokerProcess(t, freeAddr(t), "")
	db := freshDB(t)
	old := events(0, 10, time.Date(2016, 5, 18, 20, 0, 0, 0, time.UTC))
	produceRecords(t, addr, old...)
	drain(t, db, addr)
	oldID := topicID(t, addr, predictionsTopic)

	p := startOvstream(t, nil, runArgs(db, addr)...)
	waitFor(t, time.Minute, "run to read partition 0 from offset 10", func() bool {
		return strings.Contains(p.output(), "partition=arrival_predictions/0 from=10")
	})
	broker.kill()
	addr2, _ := startBrokerProcess(t, addr, "")
	if addr2 != addr {
		t.Fatalf("broker restarted on %s, want %s", addr2, addr)
	}
	back := time.Now()
	if code := p.wait(t, time.Minute); code != 1 {
		t.Fatalf("run exit %d after the broker lost the log, want 1:\n%s", code, p.output())
	}
	t.Logf("run stopped %v after the broker was back without its log", time.Since(back).Round(time.Millisecond))
	want := "arrival_predictions/0: offset 10 being read is no longer in the log: available range [0, 0]"
	if !strings.Contains(p.output(), want) {
		t.Fatalf("run output does not say %q:\n%s", want, p.output())
	}

	// 14 new records: the stored offset 10 lies inside the new range [0, 14].
	fresh := events(100, 14, time.Date(2016, 5, 18, 21, 0, 0, 0, time.UTC))
	produceRecords(t, addr, fresh...)
	newID := topicID(t, addr, predictionsTopic)
	p = startOvstream(t, nil, runArgs(db, addr, "--drain")...)
	if code := p.wait(t, time.Minute); code != 1 {
		t.Fatalf("run --drain exit %d on a recreated topic, want 1:\n%s", code, p.output())
	}
	want = fmt.Sprintf("topic arrival_predictions was recreated: the stored offsets belong to topic ID %s, the broker's topic has ID %s", oldID, newID)
	if !strings.Contains(p.output(), want) {
		t.Fatalf("run output does not say %q:\n%s", want, p.output())
	}
	out := drain(t, db, addr, "--on-offset-out-of-range", "earliest")
	if !strings.Contains(out, "topic recreated: resuming") {
		t.Fatalf("the reset is not logged:\n%s", out)
	}
	if got := dump(t, db, `SELECT next_offset, topic_id FROM stream_positions WHERE topic = 'arrival_predictions' AND partition = 0`); len(got) != 1 || got[0] != fmt.Sprintf("[14 %s]", newID) {
		t.Fatalf("stored position %v, want [14 %s]", got, newID)
	}
	loadOracleRecords(t, db, append(old, fresh...))
	if dl := dump(t, db, `SELECT reason, "offset" FROM dead_letters`); len(dl) != 0 {
		t.Fatalf("dead letters %v, want none", dl)
	}
	sameRows(t, "delay_aggregates vs SQL oracle over the old and the new log", dump(t, db, dumpAggregates), dump(t, db, oracleAggregates))
}

// A topic deleted and recreated while run was stopped is detected at
// start-up by its topic ID, whether the new log is shorter than the stored
// offset or covers it; --on-offset-out-of-range=earliest resumes at the new
// log's start and counts every new record once.
func TestRecreatedTopicDetectedAtStart(t *testing.T) {
	addr, db := startBroker(t), freshDB(t)
	old := events(0, 10, time.Date(2016, 5, 18, 20, 0, 0, 0, time.UTC))
	produceRecords(t, addr, old...)
	drain(t, db, addr)
	stored := topicID(t, addr, predictionsTopic)
	if got := dump(t, db, `SELECT DISTINCT topic_id FROM stream_positions WHERE topic = 'arrival_predictions'`); len(got) != 1 || got[0] != "["+stored+"]" {
		t.Fatalf("stored topic IDs %v, want [%s]", got, stored)
	}

	refused := func(what string) {
		t.Helper()
		current := topicID(t, addr, predictionsTopic)
		p := startOvstream(t, nil, runArgs(db, addr, "--drain")...)
		if code := p.wait(t, time.Minute); code != 1 {
			t.Fatalf("%s: exit %d, want 1:\n%s", what, code, p.output())
		}
		want := fmt.Sprintf("topic arrival_predictions was recreated: the stored offsets belong to topic ID %s, the broker's topic has ID %s", stored, current)
		if !strings.Contains(p.output(), want) {
			t.Fatalf("%s: output does not say %q:\n%s", what, want, p.output())
		}
		if got := dump(t, db, `SELECT next_offset FROM stream_positions WHERE topic = 'arrival_predictions' AND partition = 0`); got[0] != "[10]" {
			t.Fatalf("%s: stored offset moved to %v after a refused start", what, got)
		}
	}
	recreateTopic(t, addr, predictionsTopic, 6)
	produceRecords(t, addr, events(50, 4, time.Date(2016, 5, 18, 20, 30, 0, 0, time.UTC))...)
	refused("fewer records than the stored offset")

	recreateTopic(t, addr, predictionsTopic, 6)
	fresh := events(100, 20, time.Date(2016, 5, 18, 21, 0, 0, 0, time.UTC))
	produceRecords(t, addr, fresh...)
	refused("more records than the stored offset")

	out := drain(t, db, addr, "--on-offset-out-of-range", "earliest")
	if !strings.Contains(out, "topic recreated: resuming") {
		t.Fatalf("the reset is not logged:\n%s", out)
	}
	current := topicID(t, addr, predictionsTopic)
	if got := dump(t, db, `SELECT next_offset, topic_id FROM stream_positions WHERE topic = 'arrival_predictions' AND partition = 0`); got[0] != fmt.Sprintf("[20 %s]", current) {
		t.Fatalf("stored position %v, want [20 %s]", got, current)
	}
	loadOracleRecords(t, db, append(old, fresh...))
	if dl := dump(t, db, `SELECT reason, "offset" FROM dead_letters`); len(dl) != 0 {
		t.Fatalf("dead letters %v, want none", dl)
	}
	sameRows(t, "delay_aggregates vs SQL oracle over the old and the new topic", dump(t, db, dumpAggregates), dump(t, db, oracleAggregates))
}

// The broker restarts without its data while run reads, with
// --on-offset-out-of-range=earliest: run logs the range it skips and goes on
// from the new log's start; every record of the new log is counted once.
func TestBrokerLostLogResumeEarliest(t *testing.T) {
	addr, broker := startBrokerProcess(t, freeAddr(t), "")
	db := freshDB(t)
	old := events(0, 10, time.Date(2016, 5, 18, 20, 0, 0, 0, time.UTC))
	produceRecords(t, addr, old...)
	drain(t, db, addr)

	// The default metadata refresh (1m) leaves the reader's end to tell it.
	p := startOvstream(t, nil, runArgs(db, addr, "--on-offset-out-of-range", "earliest")...)
	waitFor(t, time.Minute, "run to read partition 0 from offset 10", func() bool {
		return strings.Contains(p.output(), "partition=arrival_predictions/0 from=10")
	})
	broker.kill()
	startBrokerProcess(t, addr, "")
	waitFor(t, time.Minute, "run to reset partition 0 to the new log's start", func() bool {
		return strings.Contains(p.output(), "partition=arrival_predictions/0 from=0")
	})
	for _, want := range []string{"the log changed while reading: resuming per --on-offset-out-of-range",
		"topic recreated: resuming"} {
		if !strings.Contains(p.output(), want) {
			t.Fatalf("run output does not say %q:\n%s", want, p.output())
		}
	}
	fresh := events(100, 14, time.Date(2016, 5, 18, 21, 0, 0, 0, time.UTC))
	produceRecords(t, addr, fresh...)
	waitFor(t, time.Minute, "run to consume the new log", func() bool {
		return storedConsumedOf(t, db, "ovstream")["arrival_predictions/0"] == 14
	})
	_ = p.cmd.Process.Signal(sigterm)
	if code := p.wait(t, time.Minute); code != 0 {
		t.Fatalf("run exit %d after SIGTERM:\n%s", code, p.output())
	}
	drain(t, db, addr)
	newID := topicID(t, addr, predictionsTopic)
	if got := dump(t, db, `SELECT next_offset, topic_id FROM stream_positions WHERE topic = 'arrival_predictions' AND partition = 0`); len(got) != 1 || got[0] != fmt.Sprintf("[14 %s]", newID) {
		t.Fatalf("stored position %v, want [14 %s]", got, newID)
	}
	loadOracleRecords(t, db, append(old, fresh...))
	if dl := dump(t, db, `SELECT reason, "offset" FROM dead_letters`); len(dl) != 0 {
		t.Fatalf("dead letters %v, want none", dl)
	}
	sameRows(t, "delay_aggregates vs SQL oracle over the old and the new log", dump(t, db, dumpAggregates), dump(t, db, oracleAggregates))
}

// A topic deleted and recreated while run reads it, at a position the new
// topic also has (0): no reader fails, and the metadata refresh finds the
// new topic ID: run stops with exit 1 naming the topic and both IDs.
func TestTopicRecreatedWhileRunning(t *testing.T) {
	addr, db := startBroker(t), freshDB(t)
	produceRecords(t, addr, rec{positionsTopic, 0, "V1", pos("V1", -36.8, "2016-05-18T20:00:00Z")})
	p := startOvstream(t, nil, runArgs(db, addr, "--metadata-refresh", "1s")...)
	waitFor(t, time.Minute, "run to consume the position", func() bool {
		return storedConsumedOf(t, db, "ovstream")["vehicle_positions/0"] == 1
	})
	was := topicID(t, addr, predictionsTopic)
	recreateTopic(t, addr, predictionsTopic, 6)
	now := topicID(t, addr, predictionsTopic)
	recreated := time.Now()
	if code := p.wait(t, time.Minute); code != 1 {
		t.Fatalf("run exit %d after the topic was recreated, want 1:\n%s", code, p.output())
	}
	t.Logf("run stopped %v after the topic was recreated", time.Since(recreated).Round(time.Millisecond))
	want := fmt.Sprintf("topic arrival_predictions was recreated: the stored offsets belong to topic ID %s, the broker's topic has ID %s", was, now)
	if !strings.Contains(p.output(), want) {
		t.Fatalf("run output does not say %q:\n%s", want, p.output())
	}
}

// Retention deletes records run has not read yet (it lags behind): its
// partition reader gets OffsetOutOfRange, and run stops with exit 1 naming
// the offset being read and the range left, instead of reading nothing more.
// The topic is the same (same topic ID): only the reader tells.
func TestRecordsDeletedBeforeRead(t *testing.T) {
	addr, db := startBroker(t), freshDB(t)
	produceRecords(t, addr, events(0, 10, time.Date(2016, 5, 18, 20, 0, 0, 0, time.UTC))...)
	p := startOvstream(t, nil, runArgs(db, addr)...)
	waitFor(t, time.Minute, "run to consume the first 10 records", func() bool {
		return storedConsumedOf(t, db, "ovstream")["arrival_predictions/0"] == 10
	})
	// Stopped, run sends no fetch; the one it had sent returns empty after
	// the fetch wait (500 ms), so the records below are not fetched before
	// retention deletes them.
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, p)
	time.Sleep(time.Second)
	produceRecords(t, addr, events(10, 20, time.Date(2016, 5, 18, 20, 10, 0, 0, time.UTC))...)
	if err := adminClient(t, addr).DeleteRecords(predictionsTopic, map[int32]int64{0: 25}); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, time.Minute); code != 1 {
		t.Fatalf("run exit %d after the records it was to read were deleted, want 1:\n%s", code, p.output())
	}
	want := "arrival_predictions/0: offset 10 being read is no longer in the log: available range [25, 30]"
	if !strings.Contains(p.output(), want) {
		t.Fatalf("run output does not say %q:\n%s", want, p.output())
	}
}
