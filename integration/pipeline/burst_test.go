//go:build integration

package pipeline

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ovstream/ovstream/integration/harness"
)

// A burst of new stations: the Auckland peak, then 50,000 predictions for
// 50,000 new station ids, each with a stop_name, all in ONE 5-minute window
// (every tenth station twice, with another delay), drained by one instance.
// delay_aggregates and its stored distributions equal the SQL oracle, the
// burst window holds every new station's row, and the names table holds
// every new station's name: the commit that streams a window's rows into
// its COPY (aggregate.RowCursor) and writes the names in statements of
// 8192 loses, repeats or reorders nothing. (The memory this saves is
// measured by the bench: go run ./integration/bench --burst-keys 400000.)
func TestBurstOfKeysEqualsSQLOracle(t *testing.T) {
	const stations = 50_000
	addr, _ := harness.StartBrokerProcess(t, "127.0.0.1:0", "")
	db := harness.FreshDB(t)
	harness.ProduceCLI(t, addr, "--operator", "AT", "--gtfs-rt", "../../testdata/auckland-20160519-peak10min")

	window := time.Date(2016, 5, 18, 20, 5, 0, 0, time.UTC) // inside the peak's 10 minutes
	var b strings.Builder
	burst := 0
	for i := range stations {
		twice := 1
		if i%10 == 0 {
			twice = 2
		}
		for k := range twice {
			at := window.Add(time.Duration(i)*4*time.Millisecond + time.Duration(k)*time.Minute)
			fmt.Fprintf(&b, `{"trip_id":"burst-trip-%d","line":"burst-line-%d","stop_id":"burst-%05d","operator":"AT","delay_s":%d,"event_time":%q,"stop_name":"Burst Road %d"}`+"\n",
				i%500, i%20, i, (i*7919+k*61)%1201-300, at.Format(time.RFC3339Nano), i)
			burst++
		}
	}
	lines := filepath.Join(t.TempDir(), "burst.jsonl")
	if err := os.WriteFile(lines, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	harness.ProduceCLI(t, addr, "--jsonl", lines, "--topic", harness.PredictionsTopic)

	out := harness.Drain(t, db, addr)
	if n := harness.LoadOracleInput(t, db, addr, harness.PredictionsTopic); n != 4610+burst {
		t.Fatalf("topic holds %d records, want %d", n, 4610+burst)
	}
	got := harness.Dump(t, db, harness.DumpAggregates)
	if len(got) < stations {
		t.Fatalf("%d delay_aggregates rows; run output:\n%s", len(got), out)
	}
	harness.SameRows(t, "delay_aggregates vs SQL oracle", got, harness.Dump(t, db, harness.OracleAggregates))
	harness.SameRows(t, "stored distributions vs SQL oracle", harness.Dump(t, db, harness.DumpDistributions), harness.Dump(t, db, harness.OracleDistributions))

	rows := harness.Dump(t, db, `SELECT count(*), sum(event_count)::bigint FROM delay_aggregates
		WHERE dimension = 'station' AND dimension_id LIKE 'burst-%' AND window_start = '2016-05-18T20:05:00Z'`)
	if want := fmt.Sprintf("[[%d %d]]", stations, burst); fmt.Sprint(rows) != want {
		t.Fatalf("burst window: station rows and events %v, want %s", rows, want)
	}
	if dead := harness.Dump(t, db, `SELECT count(*) FROM dead_letters`); fmt.Sprint(dead) != "[[0]]" {
		t.Fatalf("dead letters %v, want none", dead)
	}
	names := namesTable(t, db, "ovstream")["station"]
	for i := range stations {
		id := fmt.Sprintf("burst-%05d", i)
		if nr := names[id]; nr.Name != fmt.Sprint("Burst Road ", i) || nr.Short != "" {
			t.Fatalf("names table: %s is %+v, want %q", id, nr, fmt.Sprint("Burst Road ", i))
		}
	}
}
