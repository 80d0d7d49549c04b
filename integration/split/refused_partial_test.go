//go:build integration

package split

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ovstream/ovstream/integration/harness"
)

// G10 for split pipelines, the partial-windows table: with a CHECK on
// delay_partial_windows that refuses every partial of one partition, the
// instance that owns it used to exit 1 at every start (`write partials: copy:
// ... violates check constraint`, the refused-row search looked at no
// partials) and the other waited for ever. A partial is one instance's own
// (window, partition): its records are named and dead-lettered `rejected`
// with the database's message, like those of a refused delay_aggregates row
// of a single instance, and the rest merges. delay_aggregates equals the SQL
// oracle over the records minus the dead letters, which are exactly the
// records of that partition; both drains end.
func TestSplitRefusedPartialWindow(t *testing.T) {
	t.Parallel()
	addr, db := harness.StartBroker(t), harness.FreshDB(t)
	harness.ProduceFeeds(t, addr, harness.LoadFeeds(t, "AT", "../../testdata/auckland-20160519-peak10min"))
	harness.ExecSQL(t, db, `ALTER TABLE delay_partial_windows ADD CONSTRAINT no_partition_4 CHECK (partition <> 4)`)
	ps := harness.StartSplit(t, db, addr, harness.Split2, "--drain", "--allowed-lateness", "10m")
	harness.WaitAll(t, ps, "split drains with a refused partial window")
	n := harness.LoadOracleInput(t, db, addr, harness.PredictionsTopic)
	want := harness.Dump(t, db, fmt.Sprintf(`SELECT topic, partition, "offset", 'no_partition_4' FROM oracle_msgs
		WHERE topic = '%s' AND partition = 4`, harness.PredictionsTopic))
	if len(want) < 100 {
		t.Fatalf("partition 4 holds %d records, want at least 100", len(want))
	}
	got := harness.Dump(t, db, `SELECT topic, partition, "offset",
		CASE WHEN error LIKE 'PostgreSQL refused the delay_partial_windows row (%): new row for relation "delay_partial_windows" violates check constraint "no_partition_4" (SQLSTATE 23514)' THEN 'no_partition_4'
		ELSE error END FROM dead_letters WHERE reason = 'rejected'`)
	harness.SameRows(t, "rejected dead letters vs the records of partition 4", got, want)
	if other := harness.Dump(t, db, `SELECT reason, count(*) FROM dead_letters WHERE reason <> 'rejected' GROUP BY reason`); len(other) != 0 {
		t.Errorf("dead letters other than rejected: %v", other)
	}
	harness.CountedOnceOrDead(t, db, n)
	if left := harness.Dump(t, db, `SELECT count(*) FROM delay_partial_windows`); left[0] != "[0]" {
		t.Errorf("%s partials left after the drains", left[0])
	}
	logged := false
	for _, p := range ps {
		logged = logged || strings.Contains(p.Output(), "PostgreSQL refused rows")
	}
	if !logged {
		t.Errorf("no instance logged the refused partials")
	}
}
