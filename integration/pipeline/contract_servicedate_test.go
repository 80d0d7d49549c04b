//go:build integration

package pipeline

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ovstream/ovstream/integration/harness"
)

// serviceDateLines are predictions with the optional start_date and
// arrival_time: the first two valid, the rest each a dead letter decode
// with the error given.
var serviceDateLines = []struct{ line, err string }{
	{`{"trip_id":"sd-1","line":"L","stop_id":"S","operator":"HFX","delay_s":5,"event_time":"2025-11-06T21:01:00Z","start_date":"20251106","arrival_time":"2025-11-06T21:09:05-04:00"}`, ""},
	{`{"trip_id":"sd-2","line":"L","stop_id":"S","operator":"HFX","delay_s":7,"event_time":"2025-11-06T21:01:00Z","start_date":null,"arrival_time":null}`, ""},
	{`{"trip_id":"sd-3","line":"L","stop_id":"S","operator":"HFX","delay_s":5,"event_time":"2025-11-06T21:01:00Z","start_date":"2025-11-06"}`, "start_date: not a date YYYYMMDD"},
	{`{"trip_id":"sd-4","line":"L","stop_id":"S","operator":"HFX","delay_s":5,"event_time":"2025-11-06T21:01:00Z","start_date":"20251131"}`, "start_date: not a date YYYYMMDD"},
	{`{"trip_id":"sd-5","line":"L","stop_id":"S","operator":"HFX","delay_s":5,"event_time":"2025-11-06T21:01:00Z","start_date":20251106}`, "start_date: not a date YYYYMMDD"},
	{`{"trip_id":"sd-6","line":"L","stop_id":"S","operator":"HFX","delay_s":5,"event_time":"2025-11-06T21:01:00Z","start_date":""}`, "start_date: not a date YYYYMMDD"},
	{`{"trip_id":"sd-7","line":"L","stop_id":"S","operator":"HFX","delay_s":5,"event_time":"2025-11-06T21:01:00Z","arrival_time":"2025-11-06T21:09:05"}`, "arrival_time: not RFC 3339 with offset"},
	{`{"trip_id":"sd-8","line":"L","stop_id":"S","operator":"HFX","delay_s":5,"event_time":"2025-11-06T21:01:00Z","arrival_time":1762463345}`, "arrival_time: not RFC 3339 with offset"},
	{`{"trip_id":"sd-9","line":"L","stop_id":"S","operator":"HFX","delay_s":5,"event_time":"2025-11-06T21:01:00Z","arrival_time":""}`, "arrival_time: not RFC 3339 with offset"},
}

// `ovstream produce --gtfs-static` writes start_date and arrival_time into
// every Halifax prediction (the realtime feed gives a start_date and a time
// for every update it emits): the records in the topic, read back by
// sarama, carry them. Mixed with hand-written records, the valid ones and
// records without the fields count, each malformed one is a dead letter
// decode with its exact reason, and delay_aggregates equals the SQL oracle
// over the records not dead-lettered.
func TestServiceDateAndArrivalTimeContract(t *testing.T) {
	addr, _ := harness.StartBrokerProcess(t, "127.0.0.1:0", "")
	db := harness.FreshDB(t)
	harness.ProduceCLI(t, addr, "--operator", "HFX", "--gtfs-static", "../../testdata/halifax-20251106/google_transit_trimmed.zip",
		"--gtfs-rt", "../../testdata/halifax-20251106")
	var lines []string
	for _, l := range serviceDateLines {
		lines = append(lines, l.line)
	}
	path := filepath.Join(t.TempDir(), "sd.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	harness.ProduceCLI(t, addr, "--jsonl", path, "--topic", harness.PredictionsTopic)
	out := harness.Drain(t, db, addr, "--allowed-lateness", "1h")
	if n := harness.LoadOracleInput(t, db, addr, harness.PredictionsTopic); n != 16574+len(serviceDateLines) {
		t.Fatalf("topic holds %d records, want %d", n, 16574+len(serviceDateLines))
	}
	// What produce wrote: every Halifax record has both fields, and its
	// start_date is the service day of 2025-11-06 (the pair is of that evening).
	fields := harness.Dump(t, db, `SELECT j ? 'start_date', j ? 'arrival_time', j->>'start_date', count(*)
		FROM (SELECT convert_from(value, 'UTF8')::jsonb AS j FROM oracle_msgs) m
		WHERE j->>'trip_id' NOT LIKE 'sd-%' GROUP BY 1, 2, 3`)
	if strings.Join(fields, " ") != "[true true 20251106 16574]" {
		t.Fatalf("produce wrote start_date, arrival_time: %v; want all 16574 with both, start_date 20251106", fields)
	}
	harness.SameRows(t, "delay_aggregates vs SQL oracle", harness.Dump(t, db, harness.DumpAggregates), harness.Dump(t, db, harness.OracleAggregates))
	var want []string
	for _, l := range serviceDateLines {
		if l.err != "" {
			want = append(want, fmt.Sprintf("[%s decode %s]", strings.TrimPrefix(strings.SplitN(l.line, `"`, 5)[3], ""), l.err))
		}
	}
	got := harness.Dump(t, db, `SELECT convert_from(value, 'UTF8')::jsonb->>'trip_id', reason, error FROM dead_letters`)
	harness.SameRows(t, "dead letters", got, want)
	if c := harness.Dump(t, db, `SELECT sum(event_count)::bigint FROM delay_aggregates WHERE dimension = 'network'`); c[0] != "[16576]" {
		t.Fatalf("network rows count %v, want 16576 (16574 + sd-1 + sd-2); run output:\n%s", c, out)
	}
}
