//go:build integration

package split

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ovstream/ovstream/integration/harness"
)

// minutePreds returns one prediction per minute of [from, to) minutes after
// 20:00 on 2016-05-18, into partition part of the predictions topic, with
// delays that differ per partition and minute.
func minutePreds(part int32, from, to int) []harness.Rec {
	var out []harness.Rec
	for i := from; i < to; i++ {
		at := time.Date(2016, 5, 18, 20, i, 0, 0, time.UTC).Format(time.RFC3339)
		trip := fmt.Sprintf("T%d-%d", part, i)
		out = append(out, harness.Rec{Topic: harness.PredictionsTopic, Partition: part, Key: trip,
			Value: harness.Pred(trip, fmt.Sprintf("L%d", i%3), fmt.Sprintf("S%d", i%7), "AT", int(part)*100+i, at)})
	}
	return out
}

// exactAgainstOracle fails unless db holds no late dead letter and
// delay_aggregates equals the SQL oracle over every record of the topic.
func exactAgainstOracle(t *testing.T, db, addr string) {
	t.Helper()
	if late := harness.Dump(t, db, `SELECT topic, partition, "offset" FROM dead_letters WHERE reason = 'late'`); len(late) != 0 {
		t.Errorf("%d records dead-lettered late, want none: %v", len(late), late)
	}
	harness.LoadOracleInput(t, db, addr, harness.PredictionsTopic)
	harness.SameRows(t, "delay_aggregates vs SQL oracle", harness.Dump(t, db, harness.DumpAggregates), harness.Dump(t, db, harness.OracleAggregates))
}

// A partition that never committed holds the start-up watermark: an instance
// that takes it over together with a partition that committed must not seed
// its watermark from the committed one alone (its events would be late).
func TestSplitSeedWaitsForUncommittedPartitions(t *testing.T) {
	t.Parallel()
	addr := harness.StartBroker(t)
	db := harness.FreshDB(t)
	harness.ProduceRecords(t, addr, append(minutePreds(0, 0, 40), minutePreds(1, 0, 40)...)...)
	a := harness.StartOvstream(t, nil, harness.RunArgs(db, addr, "--pipeline", "p", "--topics", harness.PredictionsTopic+",",
		"--partitions", harness.PredictionsTopic+":0", "--idle-timeout", "1s")...)
	harness.WaitFor(t, time.Minute, "partition 0's watermark stored", func() bool {
		return harness.Dump(t, db, `SELECT count(*) FROM stream_positions WHERE partition = 0 AND watermark >= '2016-05-18T20:29:00Z'`)[0] == "[1]"
	})
	_ = a.Cmd.Process.Signal(syscall.SIGTERM)
	if code := a.Wait(t, time.Minute); code != 0 {
		t.Fatalf("split instance: exit %d\n%s", code, harness.Tail(a.Output(), 20))
	}
	out := harness.Drain(t, db, addr, "--pipeline", "p", "--topics", harness.PredictionsTopic+",")
	if !strings.Contains(out, "watermark seeded") {
		t.Fatalf("no seed logged:\n%s", harness.Tail(out, 20))
	}
	exactAgainstOracle(t, db, addr)
}

// A split drain stopped while it waits for the merge leaves its partitions
// marked drained; they must hold the merge again (records that arrive on
// them afterwards are not written off as late).
func TestSplitStoppedDrainHoldsTheMerge(t *testing.T) {
	t.Parallel()
	addr := harness.StartBroker(t)
	db := harness.FreshDB(t)
	harness.ProduceRecords(t, addr, append(minutePreds(0, 0, 20), minutePreds(1, 0, 40)...)...)
	others := "arrival_predictions:1,arrival_predictions:2,arrival_predictions:3,arrival_predictions:4,arrival_predictions:5"
	a := harness.StartOvstream(t, nil, harness.RunArgs(db, addr, "--drain", "--pipeline", "p", "--topics", harness.PredictionsTopic+",",
		"--partitions", harness.PredictionsTopic+":0")...)
	harness.WaitFor(t, time.Minute, "the drain of partition 0 waiting for the merge", func() bool {
		return strings.Contains(a.Output(), "drained: waiting for the other instances")
	})
	_ = a.Cmd.Process.Signal(syscall.SIGTERM)
	a.Wait(t, time.Minute)
	harness.ProduceRecords(t, addr, minutePreds(0, 20, 40)...) // partition 0 goes on; nobody reads it yet
	b := harness.StartOvstream(t, nil, harness.RunArgs(db, addr, "--pipeline", "p", "--topics", harness.PredictionsTopic+",",
		"--partitions", others, "--idle-timeout", "1s")...)
	harness.WaitFor(t, time.Minute, "the other partitions' watermark stored", func() bool {
		return harness.Dump(t, db, `SELECT count(*) FROM stream_positions WHERE partition = 1 AND watermark >= '2016-05-18T20:29:00Z'`)[0] == "[1]"
	})
	time.Sleep(time.Second) // a few more commits of b, each deciding the merge
	if got := harness.Dump(t, db, `SELECT merged_until > '2016-05-18T20:20:00Z' FROM pipelines WHERE name = 'p'`)[0]; got == "[true]" {
		t.Errorf("the merge passed partition 0's stored watermark (20:20) although nobody drains or reads it")
	}
	_ = b.Cmd.Process.Signal(syscall.SIGTERM)
	if code := b.Wait(t, time.Minute); code != 0 {
		t.Fatalf("b: exit %d\n%s", code, harness.Tail(b.Output(), 20))
	}
	harness.Drain(t, db, addr, "--pipeline", "p", "--topics", harness.PredictionsTopic+",")
	exactAgainstOracle(t, db, addr)
}
