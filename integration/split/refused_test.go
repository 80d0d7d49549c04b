//go:build integration

package split

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ovstream/ovstream/integration/harness"
)

// G10 for split pipelines, the merged rows: with a CHECK on
// delay_aggregates that one real station violates, two split --drain
// instances over the Auckland peak sample used to fail for good: the merging
// instance exited 1 (`merge: write merged windows: copy: ... violates check
// constraint (SQLSTATE 23514)`), the other waited for ever, nothing was
// written, the same at every restart. Now the merge writes every other row
// and keeps each refused one in refused_windows with the database's message,
// its statistics and exact distribution; both drains exit 0. The records of
// a merged row were read by other instances, so they cannot be named as dead
// letters (a single instance rejects them instead, TestRejectedRowsAreDeadLettered):
// delay_aggregates equals the SQL oracle without the station's rows,
// refused_windows holds exactly those rows, and re-applying them after the
// constraint is fixed (the runbook's SQL) gives the whole oracle.
func TestSplitRefusedMergedRowKept(t *testing.T) {
	t.Parallel()
	addr, db := harness.StartBroker(t), harness.FreshDB(t)
	harness.ProduceFeeds(t, addr, harness.LoadFeeds(t, "AT", "../../testdata/auckland-20160519-peak10min"))
	harness.ExecSQL(t, db, `ALTER TABLE delay_aggregates ADD CONSTRAINT no_station_7151 CHECK (dimension <> 'station' OR dimension_id <> '`+harness.RefusedStation+`')`)
	ps := harness.StartSplit(t, db, addr, harness.Split2, "--drain", "--allowed-lateness", "10m")
	harness.WaitAll(t, ps, "split drains with a refused merged row")
	merged := false
	for _, p := range ps {
		merged = merged || strings.Contains(p.Output(), "PostgreSQL refused a merged row")
	}
	if !merged {
		t.Errorf("no instance logged the refused merged row")
	}
	harness.LoadOracleInput(t, db, addr, harness.PredictionsTopic)
	oracle := harness.Dump(t, db, harness.OracleAggregates)
	station := harness.Dump(t, db, `SELECT * FROM (`+harness.OracleAggregates+`) o(ws, we, dim, id, op, n, mean, p90, lo, hi) WHERE dim = 'station' AND id = '`+harness.RefusedStation+`'`)
	if len(station) != 3 {
		t.Fatalf("the oracle has %d rows of station %s, want 3 (one per window of the sample)", len(station), harness.RefusedStation)
	}
	// refused_windows has delay_aggregates' columns: dumpAggregates reads it too.
	refusedRows := strings.Replace(harness.DumpAggregates, "FROM delay_aggregates", "FROM refused_windows", 1)
	harness.SameRows(t, "refused_windows vs the oracle's rows of the refused station", harness.Dump(t, db, refusedRows), station)
	without := harness.Dump(t, db, `SELECT * FROM (`+harness.OracleAggregates+`) o(ws, we, dim, id, op, n, mean, p90, lo, hi) WHERE NOT (dim = 'station' AND id = '`+harness.RefusedStation+`')`)
	harness.SameRows(t, "delay_aggregates vs the SQL oracle without the refused station", harness.Dump(t, db, harness.DumpAggregates), without)
	if e := harness.Dump(t, db, `SELECT DISTINCT error FROM refused_windows`); len(e) != 3 || !strings.Contains(e[0], `violates check constraint "no_station_7151" (SQLSTATE 23514)`) {
		t.Errorf("refused_windows errors: %v", e)
	}
	if n := harness.Dump(t, db, `SELECT count(*) FROM delay_partial_windows`); n[0] != "[0]" {
		t.Errorf("%s partials left after the drains", n[0])
	}
	// status says so (it did not before: only the log did), then, re-applied, no more.
	refusedStatus := func(want int) {
		t.Helper()
		text, errOut, code := harness.RunCLI(t, nil, "status", "--database-url", db, "--brokers", addr)
		js, _, _ := harness.RunCLI(t, nil, "status", "--json", "--database-url", db, "--brokers", addr)
		line := fmt.Sprintf("refused merged rows: %d in table refused_windows", want)
		if code != 0 || strings.Contains(text, "refused merged rows") != (want > 0) || want > 0 && !strings.Contains(text, line) ||
			!strings.Contains(js, fmt.Sprintf(`"refused_windows": %d`, want)) {
			t.Errorf("status with %d refused rows: exit %d, want the line %q\n%s%s\n%s", want, code, line, text, errOut, js)
		}
	}
	refusedStatus(3)
	// The runbook: fix the cause, re-apply, delete.
	harness.ExecSQL(t, db, `ALTER TABLE delay_aggregates DROP CONSTRAINT no_station_7151;
INSERT INTO delay_aggregates (pipeline, window_start, window_end, dimension, dimension_id, operator, event_count,
    mean_delay_s, p90_delay_s, min_delay_s, max_delay_s, delay_values, delay_counts)
SELECT pipeline, window_start, window_end, dimension, dimension_id, operator, event_count,
    mean_delay_s, p90_delay_s, min_delay_s, max_delay_s, delay_values, delay_counts FROM refused_windows WHERE pipeline = 'ovstream';
DELETE FROM refused_windows WHERE pipeline = 'ovstream';`)
	harness.SameRows(t, "delay_aggregates after re-applying the refused rows vs the SQL oracle", harness.Dump(t, db, harness.DumpAggregates), oracle)
	harness.SameRows(t, "distributions after re-applying vs SQL oracle", harness.Dump(t, db, harness.DumpDistributions), harness.Dump(t, db, harness.OracleDistributions))
	refusedStatus(0)
}
