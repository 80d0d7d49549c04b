//go:build integration

package pipeline

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5"
	"github.com/ovstream/ovstream/integration/harness"
)

// recreateTopic deletes topic and creates it again with partitions
// partitions, waiting until the new one has a new topic ID.
func recreateTopic(t *testing.T, addr, topic string, partitions int32) {
	t.Helper()
	old := harness.TopicID(t, addr, topic)
	admin := harness.AdminClient(t, addr)
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
	if id := harness.TopicID(t, addr, topic); id == old {
		t.Fatalf("recreated topic %s kept its topic ID %s", topic, id)
	}
}

// loadOracleRecords writes recs into oracle_msgs of db (created if need be),
// each with a distinct made-up offset: for input that is no longer in Kafka.
func loadOracleRecords(t *testing.T, db string, recs []harness.Rec) {
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
		if _, err := conn.Exec(ctx, `INSERT INTO oracle_msgs VALUES ($1, $2, $3, $4)`, r.Topic, r.Partition, -1-int64(i), r.Value); err != nil {
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
	addr, broker := harness.StartBrokerProcess(t, harness.FreeAddr(t), "")
	db := harness.FreshDB(t)
	old := harness.Events(0, 10, time.Date(2016, 5, 18, 20, 0, 0, 0, time.UTC))
	harness.ProduceRecords(t, addr, old...)
	harness.Drain(t, db, addr)
	oldID := harness.TopicID(t, addr, harness.PredictionsTopic)

	p := harness.StartOvstream(t, nil, harness.RunArgs(db, addr)...)
	harness.WaitFor(t, time.Minute, "run to read partition 0 from offset 10", func() bool {
		return strings.Contains(p.Output(), "partition=arrival_predictions/0 from=10")
	})
	broker.Kill()
	addr2, _ := harness.StartBrokerProcess(t, addr, "")
	if addr2 != addr {
		t.Fatalf("broker restarted on %s, want %s", addr2, addr)
	}
	back := time.Now()
	if code := p.Wait(t, time.Minute); code != 1 {
		t.Fatalf("run exit %d after the broker lost the log, want 1:\n%s", code, p.Output())
	}
	t.Logf("run stopped %v after the broker was back without its log", time.Since(back).Round(time.Millisecond))
	want := "arrival_predictions/0: offset 10 being read is no longer in the log: available range [0, 0]"
	if !strings.Contains(p.Output(), want) {
		t.Fatalf("run output does not say %q:\n%s", want, p.Output())
	}

	// 14 new records: the stored offset 10 lies inside the new range [0, 14].
	fresh := harness.Events(100, 14, time.Date(2016, 5, 18, 21, 0, 0, 0, time.UTC))
	harness.ProduceRecords(t, addr, fresh...)
	newID := harness.TopicID(t, addr, harness.PredictionsTopic)
	p = harness.StartOvstream(t, nil, harness.RunArgs(db, addr, "--drain")...)
	if code := p.Wait(t, time.Minute); code != 1 {
		t.Fatalf("run --drain exit %d on a recreated topic, want 1:\n%s", code, p.Output())
	}
	want = fmt.Sprintf("topic arrival_predictions was recreated: the stored offsets belong to topic ID %s, the broker's topic has ID %s", oldID, newID)
	if !strings.Contains(p.Output(), want) {
		t.Fatalf("run output does not say %q:\n%s", want, p.Output())
	}
	out := harness.Drain(t, db, addr, "--on-offset-out-of-range", "earliest")
	if !strings.Contains(out, "topic recreated: resuming") {
		t.Fatalf("the reset is not logged:\n%s", out)
	}
	if got := harness.Dump(t, db, `SELECT next_offset, topic_id FROM stream_positions WHERE topic = 'arrival_predictions' AND partition = 0`); len(got) != 1 || got[0] != fmt.Sprintf("[14 %s]", newID) {
		t.Fatalf("stored position %v, want [14 %s]", got, newID)
	}
	loadOracleRecords(t, db, append(old, fresh...))
	if dl := harness.Dump(t, db, `SELECT reason, "offset" FROM dead_letters`); len(dl) != 0 {
		t.Fatalf("dead letters %v, want none", dl)
	}
	harness.SameRows(t, "delay_aggregates vs SQL oracle over the old and the new log", harness.Dump(t, db, harness.DumpAggregates), harness.Dump(t, db, harness.OracleAggregates))
}

// A topic deleted and recreated while run was stopped is detected at
// start-up by its topic ID, whether the new log is shorter than the stored
// offset or covers it; --on-offset-out-of-range=earliest resumes at the new
// log's start and counts every new record once.
func TestRecreatedTopicDetectedAtStart(t *testing.T) {
	addr, db := harness.StartBroker(t), harness.FreshDB(t)
	old := harness.Events(0, 10, time.Date(2016, 5, 18, 20, 0, 0, 0, time.UTC))
	harness.ProduceRecords(t, addr, old...)
	harness.Drain(t, db, addr)
	stored := harness.TopicID(t, addr, harness.PredictionsTopic)
	if got := harness.Dump(t, db, `SELECT DISTINCT topic_id FROM stream_positions WHERE topic = 'arrival_predictions'`); len(got) != 1 || got[0] != "["+stored+"]" {
		t.Fatalf("stored topic IDs %v, want [%s]", got, stored)
	}

	refused := func(what string) {
		t.Helper()
		current := harness.TopicID(t, addr, harness.PredictionsTopic)
		p := harness.StartOvstream(t, nil, harness.RunArgs(db, addr, "--drain")...)
		if code := p.Wait(t, time.Minute); code != 1 {
			t.Fatalf("%s: exit %d, want 1:\n%s", what, code, p.Output())
		}
		want := fmt.Sprintf("topic arrival_predictions was recreated: the stored offsets belong to topic ID %s, the broker's topic has ID %s", stored, current)
		if !strings.Contains(p.Output(), want) {
			t.Fatalf("%s: output does not say %q:\n%s", what, want, p.Output())
		}
		if got := harness.Dump(t, db, `SELECT next_offset FROM stream_positions WHERE topic = 'arrival_predictions' AND partition = 0`); got[0] != "[10]" {
			t.Fatalf("%s: stored offset moved to %v after a refused start", what, got)
		}
	}
	recreateTopic(t, addr, harness.PredictionsTopic, 6)
	harness.ProduceRecords(t, addr, harness.Events(50, 4, time.Date(2016, 5, 18, 20, 30, 0, 0, time.UTC))...)
	refused("fewer records than the stored offset")

	recreateTopic(t, addr, harness.PredictionsTopic, 6)
	fresh := harness.Events(100, 20, time.Date(2016, 5, 18, 21, 0, 0, 0, time.UTC))
	harness.ProduceRecords(t, addr, fresh...)
	refused("more records than the stored offset")

	out := harness.Drain(t, db, addr, "--on-offset-out-of-range", "earliest")
	if !strings.Contains(out, "topic recreated: resuming") {
		t.Fatalf("the reset is not logged:\n%s", out)
	}
	current := harness.TopicID(t, addr, harness.PredictionsTopic)
	if got := harness.Dump(t, db, `SELECT next_offset, topic_id FROM stream_positions WHERE topic = 'arrival_predictions' AND partition = 0`); got[0] != fmt.Sprintf("[20 %s]", current) {
		t.Fatalf("stored position %v, want [20 %s]", got, current)
	}
	loadOracleRecords(t, db, append(old, fresh...))
	if dl := harness.Dump(t, db, `SELECT reason, "offset" FROM dead_letters`); len(dl) != 0 {
		t.Fatalf("dead letters %v, want none", dl)
	}
	harness.SameRows(t, "delay_aggregates vs SQL oracle over the old and the new topic", harness.Dump(t, db, harness.DumpAggregates), harness.Dump(t, db, harness.OracleAggregates))
}

// The broker restarts without its data while run reads, with
// --on-offset-out-of-range=earliest: run logs the range it skips and goes on
// from the new log's start; every record of the new log is counted once.
func TestBrokerLostLogResumeEarliest(t *testing.T) {
	addr, broker := harness.StartBrokerProcess(t, harness.FreeAddr(t), "")
	db := harness.FreshDB(t)
	old := harness.Events(0, 10, time.Date(2016, 5, 18, 20, 0, 0, 0, time.UTC))
	harness.ProduceRecords(t, addr, old...)
	harness.Drain(t, db, addr)

	// The default metadata refresh (1m) leaves the reader's end to tell it.
	p := harness.StartOvstream(t, nil, harness.RunArgs(db, addr, "--on-offset-out-of-range", "earliest")...)
	harness.WaitFor(t, time.Minute, "run to read partition 0 from offset 10", func() bool {
		return strings.Contains(p.Output(), "partition=arrival_predictions/0 from=10")
	})
	broker.Kill()
	harness.StartBrokerProcess(t, addr, "")
	harness.WaitFor(t, time.Minute, "run to reset partition 0 to the new log's start", func() bool {
		return strings.Contains(p.Output(), "partition=arrival_predictions/0 from=0")
	})
	for _, want := range []string{"the log changed while reading: resuming per --on-offset-out-of-range",
		"topic recreated: resuming"} {
		if !strings.Contains(p.Output(), want) {
			t.Fatalf("run output does not say %q:\n%s", want, p.Output())
		}
	}
	fresh := harness.Events(100, 14, time.Date(2016, 5, 18, 21, 0, 0, 0, time.UTC))
	harness.ProduceRecords(t, addr, fresh...)
	harness.WaitFor(t, time.Minute, "run to consume the new log", func() bool {
		return harness.StoredConsumedOf(t, db, "ovstream")["arrival_predictions/0"] == 14
	})
	_ = p.Cmd.Process.Signal(harness.Sigterm)
	if code := p.Wait(t, time.Minute); code != 0 {
		t.Fatalf("run exit %d after SIGTERM:\n%s", code, p.Output())
	}
	harness.Drain(t, db, addr)
	newID := harness.TopicID(t, addr, harness.PredictionsTopic)
	if got := harness.Dump(t, db, `SELECT next_offset, topic_id FROM stream_positions WHERE topic = 'arrival_predictions' AND partition = 0`); len(got) != 1 || got[0] != fmt.Sprintf("[14 %s]", newID) {
		t.Fatalf("stored position %v, want [14 %s]", got, newID)
	}
	loadOracleRecords(t, db, append(old, fresh...))
	if dl := harness.Dump(t, db, `SELECT reason, "offset" FROM dead_letters`); len(dl) != 0 {
		t.Fatalf("dead letters %v, want none", dl)
	}
	harness.SameRows(t, "delay_aggregates vs SQL oracle over the old and the new log", harness.Dump(t, db, harness.DumpAggregates), harness.Dump(t, db, harness.OracleAggregates))
}

// A topic deleted and recreated while run reads it, at a position the new
// topic also has (0): no reader fails, and the metadata refresh finds the
// new topic ID: run stops with exit 1 naming the topic and both IDs.
func TestTopicRecreatedWhileRunning(t *testing.T) {
	addr, db := harness.StartBroker(t), harness.FreshDB(t)
	harness.ProduceRecords(t, addr, harness.Rec{Topic: harness.PositionsTopic, Partition: 0, Key: "V1", Value: harness.Pos("V1", -36.8, "2016-05-18T20:00:00Z")})
	p := harness.StartOvstream(t, nil, harness.RunArgs(db, addr, "--metadata-refresh", "1s")...)
	harness.WaitFor(t, time.Minute, "run to consume the position", func() bool {
		return harness.StoredConsumedOf(t, db, "ovstream")["vehicle_positions/0"] == 1
	})
	was := harness.TopicID(t, addr, harness.PredictionsTopic)
	recreateTopic(t, addr, harness.PredictionsTopic, 6)
	now := harness.TopicID(t, addr, harness.PredictionsTopic)
	recreated := time.Now()
	if code := p.Wait(t, time.Minute); code != 1 {
		t.Fatalf("run exit %d after the topic was recreated, want 1:\n%s", code, p.Output())
	}
	t.Logf("run stopped %v after the topic was recreated", time.Since(recreated).Round(time.Millisecond))
	want := fmt.Sprintf("topic arrival_predictions was recreated: the stored offsets belong to topic ID %s, the broker's topic has ID %s", was, now)
	if !strings.Contains(p.Output(), want) {
		t.Fatalf("run output does not say %q:\n%s", want, p.Output())
	}
}

// Retention deletes records run has not read yet (it lags behind): its
// partition reader gets OffsetOutOfRange, and run stops with exit 1 naming
// the offset being read and the range left, instead of reading nothing more.
// The topic is the same (same topic ID): only the reader tells.
func TestRecordsDeletedBeforeRead(t *testing.T) {
	addr, db := harness.StartBroker(t), harness.FreshDB(t)
	harness.ProduceRecords(t, addr, harness.Events(0, 10, time.Date(2016, 5, 18, 20, 0, 0, 0, time.UTC))...)
	p := harness.StartOvstream(t, nil, harness.RunArgs(db, addr)...)
	harness.WaitFor(t, time.Minute, "run to consume the first 10 records", func() bool {
		return harness.StoredConsumedOf(t, db, "ovstream")["arrival_predictions/0"] == 10
	})
	// Stopped, run sends no fetch; the one it had sent returns empty after
	// the fetch wait (500 ms), so the records below are not fetched before
	// retention deletes them.
	if err := p.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	harness.WaitStopped(t, p)
	time.Sleep(time.Second)
	harness.ProduceRecords(t, addr, harness.Events(10, 20, time.Date(2016, 5, 18, 20, 10, 0, 0, time.UTC))...)
	if err := harness.AdminClient(t, addr).DeleteRecords(harness.PredictionsTopic, map[int32]int64{0: 25}); err != nil {
		t.Fatal(err)
	}
	if err := p.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if code := p.Wait(t, time.Minute); code != 1 {
		t.Fatalf("run exit %d after the records it was to read were deleted, want 1:\n%s", code, p.Output())
	}
	want := "arrival_predictions/0: offset 10 being read is no longer in the log: available range [25, 30]"
	if !strings.Contains(p.Output(), want) {
		t.Fatalf("run output does not say %q:\n%s", want, p.Output())
	}
}
