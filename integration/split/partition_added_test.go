//go:build integration

package split

import (
	"strings"
	"testing"
	"time"

	"github.com/ovstream/ovstream/integration/harness"
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
	partitionAddedElsewhere(t, []string{"--metadata-refresh", "1s", "--partitions", every}, func(x *harness.Proc) {
		harness.WaitFor(t, time.Minute, "x to log the added partition", func() bool {
			return strings.Contains(x.Output(), "partition added to the topic, not assigned to this instance")
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
	partitionAddedElsewhere(t, []string{"--metadata-refresh", "60s"}, nil, func(x *harness.Proc) {
		if out := x.Output(); !strings.Contains(out, "another instance owns a partition of the pipeline") ||
			strings.Contains(out, "partition=arrival_predictions/6") {
			t.Errorf("x (no --partitions) did not start again as a split instance over its own partitions only:\n%s", harness.Tail(out, 40))
		}
	})
}

// partitionAddedElsewhere runs instance x (xArgs) over the 6 predictions
// partitions, adds a 7th (then calls added, when set), starts instance y
// assigned only the 7th, produces two more half hours on all 7, waits until
// both committed everything and the merge passed 20:40 (then calls after,
// when set), stops both, and compares the windows of 20:30-20:40 with the
// SQL oracle over the 7 partitions.
func partitionAddedElsewhere(t *testing.T, xArgs []string, added, after func(x *harness.Proc)) {
	t.Parallel() // its own broker and database
	addr, db := harness.StartBroker(t), harness.FreshDB(t)
	old := []int32{0, 1, 2, 3, 4, 5}
	harness.ProduceRecords(t, addr, harness.Spread(old, 10, time.Date(2016, 5, 18, 20, 0, 0, 0, time.UTC))...)
	x := harness.StartOvstream(t, nil, harness.RunArgs(db, addr, append([]string{"--allowed-lateness", "2m"}, xArgs...)...)...)
	harness.WaitFor(t, time.Minute, "x to consume the 6 partitions", func() bool {
		c := harness.StoredConsumedOf(t, db, "ovstream")
		return c["arrival_predictions/0"] == 10 && c["arrival_predictions/5"] == 10
	})
	if err := harness.AdminClient(t, addr).CreatePartitions(harness.PredictionsTopic, 7, nil, false); err != nil {
		t.Fatal(err)
	}
	if added != nil {
		added(x)
	}
	y := harness.StartOvstream(t, nil, harness.RunArgs(db, addr, "--metadata-refresh", "1s", "--allowed-lateness", "2m",
		"--partitions", "arrival_predictions:6")...)
	harness.WaitFor(t, time.Minute, "y to claim partition 6", func() bool {
		return len(harness.Dump(t, db, `SELECT 1 FROM stream_positions WHERE partition = 6 AND topic = 'arrival_predictions' AND owner IS NOT NULL`)) == 1
	})
	all := []int32{0, 1, 2, 3, 4, 5, 6}
	harness.ProduceRecords(t, addr, harness.Spread(all, 10, time.Date(2016, 5, 18, 20, 30, 0, 0, time.UTC))...)
	harness.ProduceRecords(t, addr, harness.Spread(all, 10, time.Date(2016, 5, 18, 21, 0, 0, 0, time.UTC))...)
	harness.WaitFor(t, 2*time.Minute, "both to commit every record and the merge to pass 20:40", func() bool {
		c := harness.StoredConsumedOf(t, db, "ovstream")
		m := harness.Dump(t, db, `SELECT 1 FROM pipelines WHERE merged_until >= '2016-05-18 20:40:00Z'`)
		return c["arrival_predictions/0"] == 30 && c["arrival_predictions/5"] == 30 && c["arrival_predictions/6"] == 20 && len(m) == 1
	})
	time.Sleep(time.Second) // a few more commits of x
	if after != nil {
		after(x)
	}
	for _, p := range []*harness.Proc{x, y} {
		_ = p.Cmd.Process.Signal(harness.Sigterm)
		if code := p.Wait(t, time.Minute); code != 0 {
			t.Fatalf("run exit %d after SIGTERM:\n%s", code, p.Output())
		}
	}
	harness.LoadOracleInput(t, db, addr, harness.PredictionsTopic)
	const span = ` window_start >= '2016-05-18 20:30:00Z' AND window_start < '2016-05-18 20:40:00Z'`
	got := harness.Dump(t, db, harness.DumpAggregates+` WHERE`+span)
	want := harness.Dump(t, db, `SELECT * FROM (`+harness.OracleAggregates+`) AS o WHERE ws >= '2016-05-18 20:30:00Z' AND ws < '2016-05-18 20:40:00Z'`)
	harness.SameRows(t, "delay_aggregates of 20:30-20:40 vs SQL oracle over 7 partitions", got, want)
	if t.Failed() {
		t.Logf("network rows: %v", harness.Dump(t, db, `SELECT window_start, event_count FROM delay_aggregates WHERE dimension = 'network' AND`+span))
		t.Logf("dead letters: %v", harness.Dump(t, db, `SELECT partition, "offset", reason FROM dead_letters`))
	}
}
