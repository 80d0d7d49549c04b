//go:build integration

package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// The data contract at its edges, through run into PostgreSQL: an id
// longer than 256 bytes (257, 1,000 and 5,000 bytes: the last one used to
// reach PostgreSQL, too large for its index) and an event_time offset RFC
// 3339 does not have (+24:00, which Go's parser took and counted a day early;
// -24:00; minute 60) are dead letters decode with the decoder's reason, byte
// for byte; ids of exactly 256 bytes count; and delay_aggregates equals the
// SQL oracle over the rest.
func TestContractEdgesAreDecodeDeadLetters(t *testing.T) {
	addr, db := startBroker(t), freshDB(t)
	base := time.Date(2016, 5, 18, 20, 0, 0, 0, time.UTC)
	id := func(c string, n int) string { return strings.Repeat(c, n) }
	at := func(i int) string { return base.Add(time.Duration(i) * time.Minute).Format(time.RFC3339) }
	type bad struct{ value, err string }
	bads := []bad{
		{string(pred(id("t", 257), "L", "S", "AT", 5, at(1))), "trip_id: too long: more than 256 bytes"},
		{string(pred("T", id("l", 1000), "S", "AT", 5, at(2))), "line: too long: more than 256 bytes"},
		{string(pred("T", "L", id("s", 5000), "AT", 5, at(3))), "stop_id: too long: more than 256 bytes"},
		{string(pred("T", "L", "S", id("€", 86), 5, at(4))), "operator: too long: more than 256 bytes"},
		{strings.Replace(string(pred("T", "L", "S", "AT", 5, at(5))), `"trip_id"`, `"vehicle_id":"`+id("v", 257)+`","trip_id"`, 1),
			"vehicle_id: too long: more than 256 bytes"},
		{string(pred("T", "L", "S", "AT", 7, "2016-05-19T20:03:00+24:00")), "event_time: not RFC 3339 with offset"},
		{string(pred("T", "L", "S", "AT", 7, "2016-05-17T20:03:00-24:00")), "event_time: not RFC 3339 with offset"},
		{string(pred("T", "L", "S", "AT", 7, "2016-05-18T21:03:00+00:60")), "event_time: not RFC 3339 with offset"},
	}
	var recs []rec
	for i := range 20 { // good ones on both sides of every bad one, ids of 256 bytes among them
		line, stop := "L", fmt.Sprintf("S%d", i%3)
		if i%5 == 0 {
			line, stop = id("€", 85)+"x", id("s", 256)
		}
		recs = append(recs, rec{predictionsTopic, 0, fmt.Sprintf("T%d", i), pred(fmt.Sprintf("T%d", i), line, stop, "AT", 10*i, at(i))})
		if i < len(bads) {
			recs = append(recs, rec{predictionsTopic, 0, "bad", []byte(bads[i].value)})
		}
	}
	recs = append(recs, rec{positionsTopic, 0, "v", pos(id("v", 300), -36.8, at(3))}, rec{positionsTopic, 0, "V1", pos("V1", -36.8, at(3))})
	produceRecords(t, addr, recs...)

	out := drain(t, db, addr, "--allowed-lateness", "2m")
	loadOracleInput(t, db, addr, predictionsTopic)
	var want []string
	for _, b := range bads {
		want = append(want, fmt.Sprintf("[arrival_predictions %s decode %s]", b.value, b.err))
	}
	want = append(want, fmt.Sprintf("[vehicle_positions %s decode vehicle_id: too long: more than 256 bytes]", pos(id("v", 300), -36.8, at(3))))
	sameRows(t, "dead letters", dump(t, db, `SELECT topic, convert_from(value, 'UTF8'), reason, error FROM dead_letters`), want)

	got := dump(t, db, dumpAggregates)
	sameRows(t, "delay_aggregates vs SQL oracle", got, dump(t, db, oracleAggregates))
	if n := dump(t, db, `SELECT sum(event_count)::int FROM delay_aggregates WHERE dimension = 'network'`); n[0] != "[20]" {
		t.Errorf("network rows count %v events, want the 20 good ones", n)
	}
	if days := dump(t, db, `SELECT DISTINCT window_start::date FROM delay_aggregates`); len(days) != 1 {
		t.Errorf("windows on days %v, want only 2016-05-18", days)
	}
	if v := dump(t, db, `SELECT vehicle_id FROM vehicle_latest`); strings.Join(v, "") != "[V1]" {
		t.Errorf("vehicle_latest %v, want only V1", v)
	}
	if t.Failed() {
		t.Logf("run output:\n%s", out)
	}
}
