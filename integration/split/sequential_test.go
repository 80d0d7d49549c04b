//go:build integration

package split

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ovstream/ovstream/integration/harness"
)

// Split drains one after the other: half A drains and waits for half B; A
// is stopped (SIGTERM) while it waits, its partitions left marked drained;
// then half B drains. B's last commit finds every partition drained (A's by
// a drain that ended, its records stored as partials), merges every window
// and ends; a rerun of A, with nothing new to read, ends too (everything it
// read is merged). delay_aggregates equals the SQL oracle, no partial and no
// drained flag is left, and no record is late.
func TestSplitSequentialDrains(t *testing.T) {
	t.Parallel()
	addr := harness.StartBroker(t)
	db := harness.FreshDB(t)
	var recs []harness.Rec
	for p := range int32(6) {
		recs = append(recs, minutePreds(p, 0, 30+int(p)*2)...) // the halves end in different windows
	}
	harness.ProduceRecords(t, addr, recs...)
	half := map[string]string{
		"A": "arrival_predictions:0,arrival_predictions:1,arrival_predictions:2",
		"B": "arrival_predictions:3,arrival_predictions:4,arrival_predictions:5",
	}
	start := func(name string) *harness.Proc {
		return harness.StartOvstream(t, nil, harness.RunArgs(db, addr, "--drain", "--pipeline", "p", "--topics", harness.PredictionsTopic+",",
			"--partitions", half[name])...)
	}
	end := func(name string, p *harness.Proc) {
		t.Helper()
		if code := p.Wait(t, time.Minute); code != 0 {
			t.Fatalf("drain of half %s: exit %d\n%s", name, code, harness.Tail(p.Output(), 20))
		}
	}
	a := start("A")
	harness.WaitFor(t, time.Minute, "half A's drain waiting for the merge", func() bool {
		return strings.Contains(a.Output(), "drained: waiting for the other instances")
	})
	_ = a.Cmd.Process.Signal(syscall.SIGTERM)
	end("A stopped while waiting", a)
	began := time.Now()
	end("B", start("B"))
	t.Logf("B's drain took %v", time.Since(began))
	exactAgainstOracle(t, db, addr)
	merged := harness.Dump(t, db, harness.DumpAggregates)
	left := func() string {
		return harness.Dump(t, db, `SELECT (SELECT count(*) FROM delay_partial_windows), (SELECT count(*) FROM stream_positions WHERE drained)`)[0]
	}
	if got := left(); got != "[0 0]" {
		t.Errorf("after B's drain: partial windows, partitions marked drained %s, want [0 0]", got)
	}
	began = time.Now()
	end("A again", start("A"))
	t.Logf("A's rerun took %v", time.Since(began))
	harness.SameRows(t, "delay_aggregates after A's rerun vs after B's drain", harness.Dump(t, db, harness.DumpAggregates), merged)
	if got := left(); got != "[0 0]" {
		t.Errorf("after A's rerun: partial windows, partitions marked drained %s, want [0 0]", got)
	}
	t.Logf("%d delay_aggregates rows equal the SQL oracle after B's drain and after A's rerun", len(merged))
}
