//go:build integration

package pipeline

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ovstream/ovstream/integration/harness"
)

// The Halifax pair produced by `ovstream produce --gtfs-static` into a
// standalone broker, then `run --drain`: delay_aggregates equals the SQL
// oracle over the records in the topic, nothing is dead-lettered (the
// names the records carry meet the data contract), and the network
// rows count the 4,936 updates that gave only a time on top of the 11,638
// of a produce without the static feed, drained into a database of its own.
func TestDrainHalifaxStaticFeedEqualsSQLOracle(t *testing.T) {
	const static = "../../testdata/halifax-20251106/google_transit_trimmed.zip"
	counts := map[bool]int{}
	for _, withStatic := range []bool{false, true} {
		addr, _ := harness.StartBrokerProcess(t, "127.0.0.1:0", "")
		db := harness.FreshDB(t)
		args := []string{"--operator", "HFX", "--gtfs-rt", "../../testdata/halifax-20251106"}
		want := "produced 11638 predictions to arrival_predictions, 291 positions to vehicle_positions from 2 files; skipped: 5403 no delay"
		if withStatic {
			args = append([]string{"--gtfs-static", static}, args...)
			want = "produced 16574 predictions to arrival_predictions, 291 positions to vehicle_positions from 2 files; " +
				"skipped: 433 no delay, 34 time only: stop not in the trip's stop_times.txt"
		}
		out := harness.ProduceCLI(t, addr, args...)
		if !strings.Contains(out, want) {
			t.Fatalf("produce %v:\n%s\nwant it to say: %s", args, out, want)
		}
		if withStatic && !strings.Contains(out, "static GTFS "+static+": 504 trips, 20237 stop times,") {
			t.Fatalf("produce does not describe the static feed:\n%s", out)
		}

		out = harness.Drain(t, db, addr, "--allowed-lateness", "1h")
		n := harness.LoadOracleInput(t, db, addr, harness.PredictionsTopic)
		got := harness.Dump(t, db, harness.DumpAggregates)
		if len(got) == 0 {
			t.Fatalf("no delay_aggregates rows; run output:\n%s", out)
		}
		harness.SameRows(t, fmt.Sprintf("delay_aggregates vs SQL oracle (static feed: %v)", withStatic), got, harness.Dump(t, db, harness.OracleAggregates))
		if dead := harness.Dump(t, db, `SELECT count(*) FROM dead_letters`); dead[0] != "[0]" {
			t.Fatalf("dead letters: %v", dead)
		}
		counted := harness.Dump(t, db, `SELECT sum(event_count)::bigint FROM delay_aggregates WHERE dimension = 'network'`)
		if counted[0] != fmt.Sprintf("[%d]", n) {
			t.Fatalf("network rows count %v, the topic holds %d", counted, n)
		}
		counts[withStatic] = n
		if withStatic {
			named := harness.Dump(t, db, `SELECT count(*) FROM oracle_msgs WHERE convert_from(value, 'UTF8')::jsonb ? 'line_name'
				AND convert_from(value, 'UTF8')::jsonb ? 'stop_name'`)
			if named[0] == "[0]" {
				t.Fatal("no record carries line_name and stop_name")
			}
		}
	}
	if counts[false] != 11638 || counts[true] != 11638+4936 {
		t.Fatalf("predictions counted: %d without the static feed, %d with it; want 11638 and 16574", counts[false], counts[true])
	}
}
