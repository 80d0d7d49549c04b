//go:build integration

package integration

import (
	"fmt"
	"strings"
	"testing"
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
	addr, db := startBroker(t), freshDB(t)
	produceFeeds(t, addr, loadFeeds(t, "AT", "../testdata/auckland-20160519-peak10min"))
	execSQL(t, db, `ALTER TABLE delay_aggregates ADD CONSTRAINT no_station_7151 CHECK (dimension <> 'station' OR dimension_id <> '`+refusedStation+`')`)
	ps := startSplit(t, db, addr, split2, "--drain", "--allowed-lateness", "10m")
	waitAll(t, ps, "split drains with a refused merged row")
	merged := false
	for _, p := range ps {
		merged = merged || strings.Contains(p.output(), "PostgreSQL refused a merged row")
	}
	if !merged {
		t.Errorf("no instance logged the refused merged row")
	}
	loadOracleInput(t, db, addr, predictionsTopic)
	oracle := dump(t, db, oracleAggregates)
	station := dump(t, db, `SELECT * FROM (`+oracleAggregates+`) o(ws, we, dim, id, op, n, mean, p90, lo, hi) WHERE dim = 'station' AND id = '`+refusedStation+`'`)
	if len(station) != 3 {
		t.Fatalf("the oracle has %d rows of station %s, want 3 (one per window of the sample)", len(station), refusedStation)
	}
	// refused_windows has delay_aggregates' columns: dumpAggregates reads it too.
	refusedRows := strings.Replace(dumpAggregates, "FROM delay_aggregates", "FROM refused_windows", 1)
	sameRows(t, "refused_windows vs the oracle's rows of the refused station", dump(t, db, refusedRows), station)
	without := dump(t, db, `SELECT * FROM (`+oracleAggregates+`) o(ws, we, dim, id, op, n, mean, p90, lo, hi) WHERE NOT (dim = 'station' AND id = '`+refusedStation+`')`)
	sameRows(t, "delay_aggregates vs the SQL oracle without the refused station", dump(t, db, dumpAggregates), without)
	if e := dump(t, db, `SELECT DISTINCT error FROM refused_windows`); len(e) != 3 || !strings.Contains(e[0], `violates check constraint "no_station_7151" (SQLSTATE 23514)`) {
		t.Errorf("refused_windows errors: %v", e)
	}
	if n := dump(t, db, `SELECT count(*) FROM delay_partial_windows`); n[0] != "[0]" {
		t.Errorf("%s partials left after the drains", n[0])
	}
	// status says so (it did not before: only the log did), then, re-applied, no more.
	refusedStatus := func(want int) {
		t.Helper()
		text, errOut, code := runCLI(t, nil, "status", "--database-url", db, "--brokers", addr)
		js, _, _ := runCLI(t, nil, "status", "--json", "--database-url", db, "--brokers", addr)
		line := fmt.Sprintf("refused merged rows: %d in table refused_windows", want)
		if code != 0 || strings.Contains(text, "refused merged rows") != (want > 0) || want > 0 && !strings.Contains(text, line) ||
			!strings.Contains(js, fmt.Sprintf(`"refused_windows": %d`, want)) {
			t.Errorf("status with %d refused rows: exit %d, want the line %q\n%s%s\n%s", want, code, line, text, errOut, js)
		}
	}
	refusedStatus(3)
	// The runbook: fix the cause, re-apply, delete.
	execSQL(t, db, `ALTER TABLE delay_aggregates DROP CONSTRAINT no_station_7151;
INSERT INTO delay_aggregates (pipeline, window_start, window_end, dimension, dimension_id, operator, event_count,
    mean_delay_s, p90_delay_s, min_delay_s, max_delay_s, delay_values, delay_counts)
SELECT pipeline, window_start, window_end, dimension, dimension_id, operator, event_count,
    mean_delay_s, p90_delay_s, min_delay_s, max_delay_s, delay_values, delay_counts FROM refused_windows WHERE pipeline = 'ovstream';
DELETE FROM refused_windows WHERE pipeline = 'ovstream';`)
	sameRows(t, "delay_aggregates after re-applying the refused rows vs the SQL oracle", dump(t, db, dumpAggregates), oracle)
	sameRows(t, "distributions after re-applying vs SQL oracle", dump(t, db, dumpDistributions), dump(t, db, oracleDistributions))
	refusedStatus(0)
}
