//go:build integration

package integration

import (
	"strings"
	"testing"
	"time"
)

// An instance assigned every partition by --partitions writes final rows (it
// owns every partition: no split). A partition is added to the predictions
// topic; the instance logs it and registers it, and a second instance is
// assigned it. That one is split: it writes partials of the added partition
// and merges a window once every stored watermark passed it. The first one
// goes on writing final rows of the same windows. G7: the windows both wrote
// must equal the SQL oracle over the 7 partitions, as one instance owning
// every partition (claiming the added one) gives.
func TestSplitPartitionAddedToAFullManualAssignment(t *testing.T) {
	every := "arrival_predictions:0,arrival_predictions:1,arrival_predictions:2,arrival_predictions:3," +
		"arrival_predictions:4,arrival_predictions:5,vehicle_positions:0,vehicle_positions:1,vehicle_positions:2"
	partitionAddedElsewhere(t, []string{"--metadata-refresh", "1s", "--partitions", every}, func(x *proc) {
		waitFor(t, time.Minute, "x to log the added partition", func() bool {
			return strings.Contains(x.output(), "partition added to the topic, not assigned to this instance")
		})
	}, nil)
}

// An instance without --partitions (it claims every partition, and the
// ones added later) writes final rows; a partition is added and a second
// instance, assigned it, claims it first. The first one's next commit finds
// the partition owned elsewhere (ErrNotSoleOwner) and it starts again as a
// split instance over the partitions it holds, never reading the added one
// (before the fix of start-up it assigned itself every partition of the
// topics again on that restart and read the other instance's partition).
// The windows both wrote equal the SQL oracle over the 7 partitions.
func TestSplitPartitionAddedClaimedElsewhere(t *testing.T) {
	partitionAddedElsewhere(t, []string{"--metadata-refresh", "60s"}, nil, func(x *proc) {
		if out := x.output(); !strings.Contains(out, "another instance owns a partition of the pipeline") ||
			strings.Contains(out, "partition=arrival_predictions/6") {
			t.Errorf("x (no --partitions) did not start again as a split instance over its own partitions only:\n%s", tail(out, 40))
		}
	})
}

// partitionAddedElsewhere runs instance x (xArgs) over the 6 predictions
// partitions, adds a 7th (then calls added, when set), starts instance y
// assigned only the 7th, produces two more half hours on all 7, waits until
// both committed everything and the merge passed 20:40 (then calls after,
// when set), stops both, and compares the windows of 20:30-20:40 with the
// SQL oracle over the 7 partitions.
func partitionAddedElsewhere(t *testing.T, xArgs []string, added, after func(x *proc)) {
	t.Parallel() // its own broker and database
	addr, db := startBroker(t), freshDB(t)
	old := []int32{0, 1, 2, 3, 4, 5}
	produceRecords(t, addr, spread(old, 10, time.Date(2016, 5, 18, 20, 0, 0, 0, time.UTC))...)
	x := startOvstream(t, nil, runArgs(db, addr, append([]string{"--allowed-lateness", "2m"}, xArgs...)...)...)
	waitFor(t, time.Minute, "x to consume the 6 partitions", func() bool {
		c := storedConsumedOf(t, db, "ovstream")
		return c["arrival_predictions/0"] == 10 && c["arrival_predictions/5"] == 10
	})
	if err := adminClient(t, addr).CreatePartitions(predictionsTopic, 7, nil, false); err != nil {
		t.Fatal(err)
	}
	if added != nil {
		added(x)
	}
	y := startOvstream(t, nil, runArgs(db, addr, "--metadata-refresh", "1s", "--allowed-lateness", "2m",
		"--partitions", "arrival_predictions:6")...)
	waitFor(t, time.Minute, "y to claim partition 6", func() bool {
		return len(dump(t, db, `SELECT 1 FROM stream_positions WHERE partition = 6 AND topic = 'arrival_predictions' AND owner IS NOT NULL`)) == 1
	})
	all := []int32{0, 1, 2, 3, 4, 5, 6}
	produceRecords(t, addr, spread(all, 10, time.Date(2016, 5, 18, 20, 30, 0, 0, time.UTC))...)
	produceRecords(t, addr, spread(all, 10, time.Date(2016, 5, 18, 21, 0, 0, 0, time.UTC))...)
	waitFor(t, 2*time.Minute, "both to commit every record and the merge to pass 20:40", func() bool {
		c := storedConsumedOf(t, db, "ovstream")
		m := dump(t, db, `SELECT 1 FROM pipelines WHERE merged_until >= '2016-05-18 20:40:00Z'`)
		return c["arrival_predictions/0"] == 30 && c["arrival_predictions/5"] == 30 && c["arrival_predictions/6"] == 20 && len(m) == 1
	})
	time.Sleep(time.Second) // a few more commits of x
	if after != nil {
		after(x)
	}
	for _, p := range []*proc{x, y} {
		_ = p.cmd.Process.Signal(sigterm)
		if code := p.wait(t, time.Minute); code != 0 {
			t.Fatalf("run exit %d after SIGTERM:\n%s", code, p.output())
		}
	}
	loadOracleInput(t, db, addr, predictionsTopic)
	const span = ` window_start >= '2016-05-18 20:30:00Z' AND window_start < '2016-05-18 20:40:00Z'`
	got := dump(t, db, dumpAggregates+` WHERE`+span)
	want := dump(t, db, `SELECT * FROM (`+oracleAggregates+`) AS o WHERE ws >= '2016-05-18 20:30:00Z' AND ws < '2016-05-18 20:40:00Z'`)
	sameRows(t, "delay_aggregates of 20:30-20:40 vs SQL oracle over 7 partitions", got, want)
	if t.Failed() {
		t.Logf("network rows: %v", dump(t, db, `SELECT window_start, event_count FROM delay_aggregates WHERE dimension = 'network' AND`+span))
		t.Logf("dead letters: %v", dump(t, db, `SELECT partition, "offset", reason FROM dead_letters`))
	}
}
