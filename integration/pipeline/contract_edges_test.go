//go:build integration

package pipeline

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ovstream/ovstream/integration/harness"
)

// The data contract at its edges, through run into PostgreSQL: an id
// longer than 256 bytes (257, 1,000 and 5,000 bytes: the last one used to
// reach PostgreSQL, too large for its index) and an event_time offset RFC
// 3339 does not have (+24:00, which Go's parser took and counted a day early;
// -24:00; minute 60) are dead letters decode with the decoder's reason, byte
// for byte; ids of exactly 256 bytes count; and delay_aggregates equals the
// SQL oracle over the rest.
func TestContractEdgesAreDecodeDeadLetters(t *testing.T) {
	addr, db := harness.StartBroker(t), harness.FreshDB(t)
	base := time.Date(2016, 5, 18, 20, 0, 0, 0, time.UTC)
	id := func(c string, n int) string { return strings.Repeat(c, n) }
	at := func(i int) string { return base.Add(time.Duration(i) * time.Minute).Format(time.RFC3339) }
	type bad struct{ value, err string }
	bads := []bad{
		{string(harness.Pred(id("t", 257), "L", "S", "AT", 5, at(1))), "trip_id: too long: more than 256 bytes"},
		{string(harness.Pred("T", id("l", 1000), "S", "AT", 5, at(2))), "line: too long: more than 256 bytes"},
		{string(harness.Pred("T", "L", id("s", 5000), "AT", 5, at(3))), "stop_id: too long: more than 256 bytes"},
		{string(harness.Pred("T", "L", "S", id("€", 86), 5, at(4))), "operator: too long: more than 256 bytes"},
		{strings.Replace(string(harness.Pred("T", "L", "S", "AT", 5, at(5))), `"trip_id"`, `"vehicle_id":"`+id("v", 257)+`","trip_id"`, 1),
			"vehicle_id: too long: more than 256 bytes"},
		{string(harness.Pred("T", "L", "S", "AT", 7, "2016-05-19T20:03:00+24:00")), "event_time: not RFC 3339 with offset"},
		{string(harness.Pred("T", "L", "S", "AT", 7, "2016-05-17T20:03:00-24:00")), "event_time: not RFC 3339 with offset"},
		{string(harness.Pred("T", "L", "S", "AT", 7, "2016-05-18T21:03:00+00:60")), "event_time: not RFC 3339 with offset"},
	}
	var recs []harness.Rec
	for i := range 20 { // good ones on both sides of every bad one, ids of 256 bytes among them
		line, stop := "L", fmt.Sprintf("S%d", i%3)
		if i%5 == 0 {
			line, stop = id("€", 85)+"x", id("s", 256)
		}
		recs = append(recs, harness.Rec{Topic: harness.PredictionsTopic, Partition: 0, Key: fmt.Sprintf("T%d", i), Value: harness.Pred(fmt.Sprintf("T%d", i), line, stop, "AT", 10*i, at(i))})
		if i < len(bads) {
			recs = append(recs, harness.Rec{Topic: harness.PredictionsTopic, Partition: 0, Key: "bad", Value: []byte(bads[i].value)})
		}
	}
	recs = append(recs, harness.Rec{Topic: harness.PositionsTopic, Partition: 0, Key: "v", Value: harness.Pos(id("v", 300), -36.8, at(3))}, harness.Rec{Topic: harness.PositionsTopic, Partition: 0, Key: "V1", Value: harness.Pos("V1", -36.8, at(3))})
	harness.ProduceRecords(t, addr, recs...)

	out := harness.Drain(t, db, addr, "--allowed-lateness", "2m")
	harness.LoadOracleInput(t, db, addr, harness.PredictionsTopic)
	var want []string
	for _, b := range bads {
		want = append(want, fmt.Sprintf("[arrival_predictions %s decode %s]", b.value, b.err))
	}
	want = append(want, fmt.Sprintf("[vehicle_positions %s decode vehicle_id: too long: more than 256 bytes]", harness.Pos(id("v", 300), -36.8, at(3))))
	harness.SameRows(t, "dead letters", harness.Dump(t, db, `SELECT topic, convert_from(value, 'UTF8'), reason, error FROM dead_letters`), want)

	got := harness.Dump(t, db, harness.DumpAggregates)
	harness.SameRows(t, "delay_aggregates vs SQL oracle", got, harness.Dump(t, db, harness.OracleAggregates))
	if n := harness.Dump(t, db, `SELECT sum(event_count)::int FROM delay_aggregates WHERE dimension = 'network'`); n[0] != "[20]" {
		t.Errorf("network rows count %v events, want the 20 good ones", n)
	}
	if days := harness.Dump(t, db, `SELECT DISTINCT window_start::date FROM delay_aggregates`); len(days) != 1 {
		t.Errorf("windows on days %v, want only 2016-05-18", days)
	}
	if v := harness.Dump(t, db, `SELECT vehicle_id FROM vehicle_latest`); strings.Join(v, "") != "[V1]" {
		t.Errorf("vehicle_latest %v, want only V1", v)
	}
	if t.Failed() {
		t.Logf("run output:\n%s", out)
	}
}
