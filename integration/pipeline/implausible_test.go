//go:build integration

package pipeline

import (
	"strings"
	"testing"
	"time"

	"github.com/ovstream/ovstream/migrations"
	"github.com/ovstream/ovstream/store"

	"github.com/ovstream/ovstream/integration/harness"
)

// implausibleFixture is the first ten minutes of the 48 h Auckland archive
// (midnight in Auckland), whose feed computed most of its delays against
// the wrong service day (-86,400 s to -83,341 s; produce leaves out those
// beyond -86,400 s, which break the data contract).
const implausibleFixture = "../../testdata/auckland-20160518-midnight10min"

// The Auckland midnight snapshots, then the Auckland peak sample, through
// `ovstream produce` and `run
// --drain` with the default --max-delay (12h): every record whose |delay_s|
// is beyond 43,200 s (the SQL oracle over the topic picks them) is a dead
// letter implausible and nothing else is, and delay_aggregates equals the
// SQL oracle over the remaining records. The bound is a pipeline setting:
// after `pipeline set --max-delay 24h`, a run with the old bound is refused
// (exit 2) naming both values; `dlq replay --reason implausible` and a run
// with 24h then count every record once, merged into the final windows.
// Migrating down to version 14, which has no such reason, is refused.
func TestImplausibleDelaysAreDeadLettersReplayableAfterRaisingTheBound(t *testing.T) {
	addr, _ := harness.StartBrokerProcess(t, "127.0.0.1:0", "")
	db := harness.FreshDB(t)
	out := harness.ProduceCLI(t, addr, "--operator", "AT", "--gtfs-rt", implausibleFixture)
	if !strings.Contains(out, "produced 108 predictions") {
		t.Fatalf("produce:\n%s", out)
	}
	harness.ProduceCLI(t, addr, "--operator", "AT", "--gtfs-rt", "../../testdata/auckland-20160519-peak10min") // 4,610 more, 8 h later
	out = harness.Drain(t, db, addr)
	n := harness.LoadOracleInput(t, db, addr, harness.PredictionsTopic)
	if n != 108+4610 {
		t.Fatalf("topic holds %d records, want %d", n, 108+4610)
	}
	implausible := `SELECT partition, "offset" FROM (SELECT partition, "offset", convert_from(value, 'UTF8')::jsonb AS j FROM oracle_msgs) m
		WHERE abs((j->>'delay_s')::float8) > 43200`
	want := harness.Dump(t, db, implausible)
	if len(want) != 94 {
		t.Fatalf("the oracle finds %d records beyond 12 h, want 94", len(want))
	}
	got := harness.Dump(t, db, `SELECT partition, "offset" FROM dead_letters WHERE reason = 'implausible'`)
	harness.SameRows(t, "dead letters implausible vs the records beyond 12 h", got, want)
	if all := harness.Dump(t, db, `SELECT reason, count(*) FROM dead_letters GROUP BY reason`); strings.Join(all, " ") != "[implausible 94]" {
		t.Fatalf("dead letters by reason: %v, want 94 implausible only", all)
	}
	msg := harness.Dump(t, db, `SELECT error FROM dead_letters WHERE reason = 'implausible' ORDER BY "offset" LIMIT 1`)
	if !strings.Contains(msg[0], "|delay_s| > max delay 12h0m0s (43200 s), the pipeline's bound on a plausible delay") {
		t.Fatalf("dead letter error: %v", msg)
	}
	harness.SameRows(t, "delay_aggregates vs the SQL oracle over the records not set aside", harness.Dump(t, db, harness.DumpAggregates), harness.Dump(t, db, harness.OracleAggregates))
	if c := harness.Dump(t, db, `SELECT sum(event_count)::bigint FROM delay_aggregates WHERE dimension = 'network'`); c[0] != "[4624]" {
		t.Fatalf("network rows count %v, want 4624 (108 + 4610 - 94); run output:\n%s", c, out)
	}
	if !strings.Contains(out, "implausible") {
		t.Errorf("the drain's summary does not name the dead letters implausible:\n%s", out)
	}

	// Raise the bound: the pipeline's setting, refused to an instance with the old one.
	if stdout, stderr, code := harness.RunCLI(t, nil, "pipeline", "set", "--database-url", db, "--max-delay", "24h"); code != 0 ||
		!strings.Contains(stdout, `pipeline "ovstream": --max-delay 24h0m0s (was 12h0m0s)`) {
		t.Fatalf("pipeline set --max-delay 24h: exit %d\n%s%s", code, stdout, stderr)
	}
	p := harness.StartOvstream(t, nil, harness.RunArgs(db, addr, "--drain")...)
	if code := p.Wait(t, time.Minute); code != 2 || !strings.Contains(p.Output(), "--max-delay 24h0m0s (pipeline) vs 12h0m0s (this instance)") {
		t.Fatalf("run with the old bound: exit %d, want 2 naming both bounds:\n%s", code, p.Output())
	}
	p = harness.StartOvstream(t, nil, replayReason(db, addr, store.ReasonImplausible)...)
	if p.Wait(t, time.Minute) != 0 || !strings.Contains(p.Output(), "replayed 94 dead letters") {
		t.Fatalf("dlq replay --reason implausible:\n%s", p.Output())
	}
	harness.Drain(t, db, addr, "--max-delay", "24h")
	checkAllCounted(t, db, n, store.ReasonImplausible)

	// Version 14 cannot hold the reason: migrating down is refused, the schema left clean.
	err := migrations.DownTo(harness.TestCtx(t), db, 14)
	if err == nil || !strings.Contains(err.Error(), "94 dead letters have reason implausible, which version 14 cannot hold") {
		t.Fatalf("down to 14 with implausible dead letters: %v", err)
	}
	if err := migrations.Check(harness.TestCtx(t), db); err != nil {
		t.Fatalf("after the refused down: %v", err)
	}
}
