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

// The Dutch and Auckland files, produced with `ovstream produce` into a
// standalone `ovstream broker`, then run --drain with the default allowed
// lateness: delay_aggregates, and the distributions stored with its rows,
// equal the SQL oracle over the records in the
// topic minus those recorded as dead letters, and every bad record has
// exactly one dead letter.
func TestDrainEqualsSQLOracle(t *testing.T) {
	addr, _ := harness.StartBrokerProcess(t, "127.0.0.1:0", "")
	db := harness.FreshDB(t)
	out := harness.ProduceCLI(t, addr, "--gtfs-rt", "../../testdata/nl-ovapi-20141130")
	if !strings.Contains(out, "59946") {
		t.Fatalf("produce of the OVapi snapshot does not report 59946 predictions:\n%s", out)
	}
	out = harness.ProduceCLI(t, addr, "--operator", "AT", "--gtfs-rt", "../../testdata/auckland-20160519-peak10min")
	if !strings.Contains(out, "4610") {
		t.Fatalf("produce of the Auckland peak does not report 4610 predictions:\n%s", out)
	}
	lines := filepath.Join(t.TempDir(), "bad.jsonl")
	if err := os.WriteFile(lines, []byte(strings.Join(harness.BadLines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	harness.ProduceCLI(t, addr, "--jsonl", lines, "--topic", harness.PredictionsTopic)

	out = harness.Drain(t, db, addr, "--allowed-lateness", "2m")
	n := harness.LoadOracleInput(t, db, addr, harness.PredictionsTopic)
	if want := 59946 + 4610 + len(harness.BadLines); n != want {
		t.Fatalf("topic holds %d records, want %d", n, want)
	}

	got := harness.Dump(t, db, harness.DumpAggregates)
	want := harness.Dump(t, db, harness.OracleAggregates)
	if len(got) == 0 {
		t.Fatalf("no delay_aggregates rows; run output:\n%s", out)
	}
	harness.SameRows(t, "delay_aggregates vs SQL oracle", got, want)
	harness.SameRows(t, "stored distributions vs SQL oracle", harness.Dump(t, db, harness.DumpDistributions), harness.Dump(t, db, harness.OracleDistributions))

	decode := harness.Dump(t, db, `SELECT convert_from(value, 'UTF8'), error FROM dead_letters WHERE reason = 'decode'`)
	if len(decode) != len(harness.BadLines) {
		t.Fatalf("%d decode dead letters, want %d: %v", len(decode), len(harness.BadLines), decode)
	}
	for _, line := range harness.BadLines {
		found := false
		for _, d := range decode {
			found = found || strings.HasPrefix(d, "["+line+" ")
		}
		if !found {
			t.Errorf("no dead letter holds %s; have %v", line, decode)
		}
	}
	// Every produced record is accounted for: counted once in the network
	// rows, or dead-lettered once.
	counted := harness.Dump(t, db, `SELECT sum(event_count)::bigint FROM delay_aggregates WHERE dimension = 'network'`)
	dead := harness.Dump(t, db, `SELECT count(*) FROM dead_letters WHERE topic = 'arrival_predictions'`)
	if fmt.Sprint(counted) == "[[<nil>]]" || len(dead) != 1 {
		t.Fatalf("counted %v, dead %v", counted, dead)
	}
	var c, d int
	harness.Scan(t, counted[0], "[%d]", &c)
	harness.Scan(t, dead[0], "[%d]", &d)
	if c+d != n {
		t.Fatalf("counted %d + dead letters %d = %d, want every record once: %d", c, d, c+d, n)
	}
	// stream_positions holds each partition's high water mark.
	pos := harness.Dump(t, db, `SELECT sum(next_offset)::bigint FROM stream_positions WHERE topic = 'arrival_predictions'`)
	if pos[0] != fmt.Sprintf("[%d]", n) {
		t.Fatalf("stored offsets sum to %v, want %d (every partition at its high water mark)", pos, n)
	}
}

// One kill -9 of run mid-stream, after commits that wrote windows and
// positions, and a restart: the tables equal those of an uninterrupted run
// over the same topic, on real, slightly out-of-order data.
func TestKillMidStreamThenRestart(t *testing.T) {
	addr := harness.StartBroker(t)
	res := harness.LoadFeeds(t, "AT", harness.ExtractTarGz(t, "../../testdata/auckland-20160518-2h.tar.gz"))
	half := len(res.Predictions) / 2
	first, second := *res, *res
	first.Predictions = res.Predictions[:half]
	second.Predictions = res.Predictions[half:]

	killed := harness.FreshDB(t)
	harness.ProduceFeeds(t, addr, &first)
	harness.ProduceLines(t, addr, harness.PredictionsTopic, harness.BadLines[:2]...)
	p := harness.StartOvstream(t, nil, harness.RunArgs(killed, addr)...)
	// Wait until commits have written windows and moved the stored offsets.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		w := harness.Dump(t, killed, `SELECT count(*) > 0 FROM delay_aggregates`)
		s := harness.Dump(t, killed, `SELECT coalesce(sum(next_offset), 0) > 0 FROM stream_positions`)
		if w[0] == "[true]" && s[0] == "[true]" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no commit with windows within 2 minutes; output:\n%s", p.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
	harness.ProduceFeeds(t, addr, &second)
	harness.ProduceLines(t, addr, harness.PredictionsTopic, harness.BadLines[2:]...)
	time.Sleep(150 * time.Millisecond) // mid-stream: part of the second half consumed
	p.Kill()
	before := harness.Dump(t, killed, `SELECT sum(event_count)::bigint FROM delay_aggregates WHERE dimension = 'network'`)
	t.Logf("killed with %v events in written windows", before)
	harness.Drain(t, killed, addr, "--takeover") // at once: the killed instance's lease would run 15 s

	reference := harness.FreshDB(t)
	harness.Drain(t, reference, addr)

	for _, q := range []struct{ what, sql string }{
		{"delay_aggregates", harness.DumpAggregates}, {"dead_letters", harness.DumpDeadLetters},
		{"trip_delay_latest", harness.DumpTrips}, {"vehicle_latest", harness.DumpVehicles},
	} {
		harness.SameRows(t, q.what+" (killed and restarted vs uninterrupted)", harness.Dump(t, killed, q.sql), harness.Dump(t, reference, q.sql))
	}
	if n := len(harness.Dump(t, reference, harness.DumpDeadLetters)); n != len(harness.BadLines) {
		t.Fatalf("%d dead letters, want %d", n, len(harness.BadLines))
	}
	// And the uninterrupted run equals the SQL oracle.
	harness.LoadOracleInput(t, reference, addr, harness.PredictionsTopic)
	harness.SameRows(t, "delay_aggregates vs SQL oracle", harness.Dump(t, reference, harness.DumpAggregates), harness.Dump(t, reference, harness.OracleAggregates))
}

// run refuses a schema that is behind, saying what to do; --migrate applies
// the migrations first and then runs.
func TestRunRefusesSchemaBehind(t *testing.T) {
	addr, db := harness.StartBroker(t), harness.EmptyDB(t)
	p := harness.StartOvstream(t, nil, harness.RunArgs(db, addr, "--drain")...)
	if code := p.Wait(t, time.Minute); code != 1 {
		t.Fatalf("exit %d on an empty database, want 1:\n%s", code, p.Output())
	}
	if want := "run `ovstream migrate up` or start `run` with --migrate"; !strings.Contains(p.Output(), want) {
		t.Fatalf("the refusal does not say %q:\n%s", want, p.Output())
	}
	harness.ProduceRecords(t, addr, harness.Rec{Topic: harness.PredictionsTopic, Partition: 0, Key: "T", Value: harness.Pred("T", "L", "S", "AT", 7, "2016-05-18T20:01:00Z")})
	harness.Drain(t, db, addr, "--migrate")
	if got := harness.Dump(t, db, `SELECT event_count, mean_delay_s FROM delay_aggregates WHERE dimension = 'network'`); len(got) != 1 || got[0] != "[1 7]" {
		t.Fatalf("after run --migrate: network rows %v, want [1 7]", got)
	}
}
