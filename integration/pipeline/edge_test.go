//go:build integration

package pipeline

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ovstream/ovstream/integration/harness"
)

const okTail = `"trip_id":"t","line":"L","stop_id":"S","operator":"AT"`

// badRecord is a record that breaks the data contract and the dead letter it must give.
type badRecord struct {
	topic  string
	value  []byte
	reason string // dead_letters.reason
	err    string // dead_letters.error, exactly
}

func badRecords() []badRecord {
	p := func(v, reason, err string) badRecord {
		return badRecord{harness.PredictionsTopic, []byte(v), reason, err}
	}
	delay := func(d string) string {
		return `{` + okTail + `,"delay_s":` + d + `,"event_time":"2016-05-18T20:03:00Z"}`
	}
	when := func(t string) string { return `{` + okTail + `,"delay_s":5,"event_time":` + t + `}` }
	// 1 MB (10^6 bytes): Kafka's default limit is 1,048,588 bytes per batch.
	big := append([]byte(`{"trip_id":"big","x":"`), bytes.Repeat([]byte("a"), 1_000_000-24)...)
	big = append(big, `"}`...)
	return []badRecord{
		// Numbers that are not numbers.
		p(delay(`NaN`), "decode", "delay_s: not a finite number (NaN and Infinity are not JSON)"),
		p(delay(`Infinity`), "decode", "delay_s: not a finite number (NaN and Infinity are not JSON)"),
		p(delay(`-Infinity`), "decode", "delay_s: not a finite number (NaN and Infinity are not JSON)"),
		p(delay(`"NaN"`), "decode", "delay_s: not a number"),
		p(delay(`"Infinity"`), "decode", "delay_s: not a number"),
		p(delay(`1e309`), "decode", "delay_s: not a finite number"),
		p(delay(`null`), "decode", "delay_s: missing"),
		p(`{`+okTail+`,"event_time":"2016-05-18T20:03:00Z"}`, "decode", "delay_s: missing"),
		p(delay(`"12"`), "decode", "delay_s: not a number"),
		p(delay(`86401`), "decode", "delay_s: out of range: |delay_s| > 86400"),
		p(delay(`-86400.5`), "decode", "delay_s: out of range: |delay_s| > 86400"),
		p(`{"trip_id":"","line":"L","stop_id":"S","operator":"AT","delay_s":1,"event_time":"2016-05-18T20:03:00Z"}`, "decode", "trip_id: must be a non-empty string"),
		p(`{"trip_id":7,"line":"L","stop_id":"S","operator":"AT","delay_s":1,"event_time":"2016-05-18T20:03:00Z"}`, "decode", "trip_id: must be a non-empty string"),
		p(`{"trip_id":"t","line":"L\u0000","stop_id":"S","operator":"AT","delay_s":1,"event_time":"2016-05-18T20:03:00Z"}`, "decode", "line: contains NUL"),
		// Payloads that are not JSON objects.
		p(`not json`, "decode", "invalid JSON: invalid character 'o' in literal null (expecting 'u')"),
		p(`[1,2,3]`, "decode", "not a JSON object"),
		{harness.PredictionsTopic, []byte{}, "decode", "not a JSON object"},
		{harness.PredictionsTopic, []byte("{\"trip_id\":\"t\x00\xff\xfe\"}\x00"), "decode", "invalid UTF-8"},
		{harness.PredictionsTopic, big, "decode", "line: missing"},
		// Times.
		p(`{`+okTail+`,"delay_s":5}`, "decode", "event_time: missing"),
		p(when(`"2016-05-18T20:03:00"`), "decode", "event_time: not RFC 3339 with offset"),
		p(when(`"18/05/2016 20:03"`), "decode", "event_time: not RFC 3339 with offset"),
		p(when(`1463601780`), "decode", "event_time: not RFC 3339 with offset"),
		p(when(`"2099-01-01T00:00:00Z"`), "future", ""),
		// Positions.
		{harness.PositionsTopic, []byte(`{"vehicle_id":"v","lat":91,"lon":174,"event_time":"2016-05-18T20:03:00Z"}`), "decode", "lat: out of range: |lat| > 90"},
		{harness.PositionsTopic, []byte(`{"vehicle_id":"v","lat":-36.8,"lon":"x","event_time":"2016-05-18T20:03:00Z"}`), "decode", "lon: not a number"},
		{harness.PositionsTopic, []byte(`{"lat":-36.8,"lon":174,"event_time":"2016-05-18T20:03:00Z"}`), "decode", "vehicle_id: missing"},
	}
}

// A run over the Auckland peak snapshots with every kind of bad input mixed
// in gives the same delay_aggregates as a run without them, plus exactly one
// dead letter per bad record, holding it byte for byte with a reason a person
// can act on. Redelivery of everything (stored next_offset reset to 0) adds
// no dead letter and changes no window.
func TestBadInputMixMatchesCleanRun(t *testing.T) {
	res := harness.LoadFeeds(t, "AT", "../../testdata/auckland-20160519-peak10min")
	half := len(res.Predictions) / 2
	first, second := *res, *res
	first.Predictions, second.Predictions = res.Predictions[:half], res.Predictions[half:]

	cleanAddr, cleanDB := harness.StartBroker(t), harness.FreshDB(t)
	harness.ProduceFeeds(t, cleanAddr, res)
	harness.Drain(t, cleanDB, cleanAddr)

	addr, db := harness.StartBroker(t), harness.FreshDB(t)
	bad := badRecords()
	harness.ProduceFeeds(t, addr, &first)
	for i, b := range bad {
		harness.ProduceRecords(t, addr, harness.Rec{Topic: b.topic, Partition: int32(i % 3), Key: fmt.Sprint("bad-", i), Value: b.value})
	}
	harness.ProduceFeeds(t, addr, &second)
	harness.Drain(t, db, addr)

	harness.SameRows(t, "delay_aggregates with bad input vs without", harness.Dump(t, db, harness.DumpAggregates), harness.Dump(t, cleanDB, harness.DumpAggregates))
	checkDeadLetters := func(when string) {
		t.Helper()
		got := harness.Dump(t, db, `SELECT count(*) FROM dead_letters`)
		if got[0] != fmt.Sprintf("[%d]", len(bad)) {
			t.Fatalf("%s: %v dead letters, want %d (one per bad record)", when, got, len(bad))
		}
		for i, b := range bad {
			rows := harness.Dump(t, db, fmt.Sprintf(`SELECT reason, error FROM dead_letters
				WHERE topic = '%s' AND key = 'bad-%d'::bytea AND value = decode('%x', 'hex')`, b.topic, i, b.value))
			if len(rows) != 1 {
				t.Errorf("%s: bad record %d (%.60q): %d dead letters holding it byte for byte, want 1", when, i, b.value, len(rows))
				continue
			}
			if !strings.HasPrefix(rows[0], "["+b.reason+" "+b.err) {
				t.Errorf("%s: bad record %d (%.60q): dead letter %s, want reason %q error %q", when, i, b.value, rows[0], b.reason, b.err)
			}
		}
	}
	checkDeadLetters("first run")

	// Redelivery: forget the committable offsets, keep consumed_offset.
	harness.Dump(t, db, `UPDATE stream_positions SET next_offset = 0 RETURNING 1`)
	out := harness.Drain(t, db, addr)
	checkDeadLetters("after redelivery")
	harness.SameRows(t, "delay_aggregates after redelivery", harness.Dump(t, db, harness.DumpAggregates), harness.Dump(t, cleanDB, harness.DumpAggregates))
	if !strings.Contains(out, fmt.Sprintf("replayed and skipped    %d", len(res.Predictions))) {
		t.Fatalf("redelivery: want all %d predictions skipped as replayed; output:\n%s", len(res.Predictions), out)
	}
}

// Two rows for one key in one commit, and across commits: the commit
// succeeds (no SQLSTATE 21000) and the newest row wins; with equal
// event_time the later offset wins, whatever the flush boundaries.
func TestLatestStateSameKeyOneCommit(t *testing.T) {
	newest := func(db string) (string, string) {
		v := harness.Dump(t, db, `SELECT lat, kafka_offset FROM vehicle_latest WHERE vehicle_id = 'V1'`)
		p := harness.Dump(t, db, `SELECT delay_s, kafka_offset FROM trip_delay_latest WHERE trip_id = 'T1'`)
		return strings.Join(v, ";"), strings.Join(p, ";")
	}
	recs := []harness.Rec{
		{Topic: harness.PositionsTopic, Partition: 0, Key: "V1", Value: harness.Pos("V1", -36.1, "2016-05-18T20:01:00Z")},
		{Topic: harness.PositionsTopic, Partition: 0, Key: "V1", Value: harness.Pos("V1", -36.2, "2016-05-18T20:02:00Z")},
		{Topic: harness.PositionsTopic, Partition: 0, Key: "V1", Value: harness.Pos("V1", -36.3, "2016-05-18T20:02:00Z")}, // tie: later offset wins
		{Topic: harness.PositionsTopic, Partition: 0, Key: "V1", Value: harness.Pos("V1", -36.4, "2016-05-18T20:00:30Z")}, // older: ignored
		{Topic: harness.PredictionsTopic, Partition: 0, Key: "T1", Value: harness.Pred("T1", "L", "S1", "AT", 10, "2016-05-18T20:01:00Z")},
		{Topic: harness.PredictionsTopic, Partition: 0, Key: "T1", Value: harness.Pred("T1", "L", "S2", "AT", 20, "2016-05-18T20:02:00Z")},
		{Topic: harness.PredictionsTopic, Partition: 0, Key: "T1", Value: harness.Pred("T1", "L", "S3", "AT", 30, "2016-05-18T20:02:00Z")},
		{Topic: harness.PredictionsTopic, Partition: 0, Key: "T1", Value: harness.Pred("T1", "L", "S0", "AT", 40, "2016-05-18T20:00:30Z")},
	}
	// All in one flush.
	addr, db := harness.StartBroker(t), harness.FreshDB(t)
	harness.ProduceRecords(t, addr, recs...)
	harness.Drain(t, db, addr)
	v, p := newest(db)
	if v != "[-36.3 2]" || p != "[30 2]" {
		t.Fatalf("one commit: vehicle %s, trip %s; want [-36.3 2] and [30 2]", v, p)
	}
	// One record per commit: a drain after each record.
	addr2, db2 := harness.StartBroker(t), harness.FreshDB(t)
	for _, r := range recs {
		harness.ProduceRecords(t, addr2, r)
		harness.Drain(t, db2, addr2)
	}
	if v2, p2 := newest(db2); v2 != v || p2 != p {
		t.Fatalf("one record per commit: vehicle %s, trip %s; want %s and %s", v2, p2, v, p)
	}
}

// Event times 100 ns apart are one microsecond in PostgreSQL, so they tie and
// the later offset wins, in memory (both in one commit) as in the database
// (one commit each): the record at the earlier offset, with the later
// nanosecond, does not win in either (docs/design.md "Decoding rules").
func TestLatestStateSubMicrosecondTie(t *testing.T) {
	recs := []harness.Rec{
		{Topic: harness.PositionsTopic, Partition: 0, Key: "V1", Value: harness.Pos("V1", -36.1, "2016-05-18T20:02:00.0000001Z")},
		{Topic: harness.PositionsTopic, Partition: 0, Key: "V1", Value: harness.Pos("V1", -36.2, "2016-05-18T20:02:00Z")},
		{Topic: harness.PredictionsTopic, Partition: 0, Key: "T1", Value: harness.Pred("T1", "L", "S1", "AT", 10, "2016-05-18T20:02:00.0000001Z")},
		{Topic: harness.PredictionsTopic, Partition: 0, Key: "T1", Value: harness.Pred("T1", "L", "S2", "AT", 20, "2016-05-18T20:02:00Z")},
	}
	const want = "vehicle [-36.2 1], trip [20 1]"
	newest := func(db string) string {
		return fmt.Sprintf("vehicle %s, trip %s",
			strings.Join(harness.Dump(t, db, `SELECT lat, kafka_offset FROM vehicle_latest WHERE vehicle_id = 'V1'`), ";"),
			strings.Join(harness.Dump(t, db, `SELECT delay_s, kafka_offset FROM trip_delay_latest WHERE trip_id = 'T1'`), ";"))
	}
	addr, db := harness.StartBroker(t), harness.FreshDB(t)
	harness.ProduceRecords(t, addr, recs...)
	harness.Drain(t, db, addr)
	if got := newest(db); got != want {
		t.Errorf("one commit: %s; want %s", got, want)
	}
	addr2, db2 := harness.StartBroker(t), harness.FreshDB(t)
	for _, r := range []harness.Rec{recs[0], recs[2]} {
		harness.ProduceRecords(t, addr2, r)
	}
	harness.Drain(t, db2, addr2)
	for _, r := range []harness.Rec{recs[1], recs[3]} {
		harness.ProduceRecords(t, addr2, r)
	}
	harness.Drain(t, db2, addr2)
	if got := newest(db2); got != want {
		t.Errorf("one commit per record: %s; want %s", got, want)
	}
}

// Daylight saving: Europe/Amsterdam falls back on 2026-10-25, so 02:30+02:00
// and 02:30+01:00 are an hour apart and land in windows an hour apart. The
// result does not depend on the process's TZ or the database's TimeZone.
func TestDaylightSavingFallBack(t *testing.T) {
	addr := harness.StartBroker(t)
	harness.ProduceRecords(t, addr,
		harness.Rec{Topic: harness.PredictionsTopic, Partition: 0, Key: "A", Value: harness.Pred("A", "AMS:1", "S", "GVB", 60, "2026-10-25T02:30:00+02:00")},
		harness.Rec{Topic: harness.PredictionsTopic, Partition: 0, Key: "B", Value: harness.Pred("B", "AMS:1", "S", "GVB", 120, "2026-10-25T02:30:00+01:00")},
		harness.Rec{Topic: harness.PredictionsTopic, Partition: 0, Key: "C", Value: harness.Pred("C", "AMS:1", "S", "GVB", 180, "2026-10-25T02:34:59.999+01:00")},
	)
	var results [][]string
	for _, env := range [][]string{{"TZ=Pacific/Auckland", "PGTZ=America/New_York"}, {"TZ=UTC", "PGTZ=Asia/Kolkata"}} {
		db := harness.FreshDB(t)
		p := harness.StartOvstream(t, env, harness.RunArgs(db, addr, "--drain")...)
		if code := p.Wait(t, time.Minute); code != 0 {
			t.Fatalf("%v: exit %d\n%s", env, code, p.Output())
		}
		results = append(results, harness.Dump(t, db, `SELECT to_char(window_start AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI'),
			event_count, mean_delay_s FROM delay_aggregates WHERE dimension = 'line'`))
	}
	want := []string{"[2026-10-25T00:30 1 60]", "[2026-10-25T01:30 2 150]"}
	for i, r := range results {
		if strings.Join(r, ",") != strings.Join(want, ",") {
			t.Fatalf("run %d: line windows %v, want %v", i, r, want)
		}
	}
}

// Quiet and slow partitions: predictions partition 0 never receives data,
// partition 1 gets a few events and goes quiet, partition 2 has a large
// backlog of older events that takes longer to read. Windows close while the
// service runs (the idle partitions do not hold the watermark), and no event
// of the slow partition is dropped as late.
func TestQuietAndSlowPartitions(t *testing.T) {
	addr, db := harness.StartBroker(t), harness.FreshDB(t)
	var recs []harness.Rec
	base := time.Date(2016, 5, 18, 18, 0, 0, 0, time.UTC)
	for i := 0; i < 3; i++ { // partition 1: a few events, two hours later than the backlog's start
		recs = append(recs, harness.Rec{Topic: harness.PredictionsTopic, Partition: 1, Key: "Q", Value: harness.Pred("Q", "L9", "S9", "AT", i, base.Add(2*time.Hour+time.Duration(i)*time.Minute).Format(time.RFC3339))})
	}
	const backlog = 20000
	for i := 0; i < backlog; i++ { // partition 2: two hours of backlog, in event-time order
		at := base.Add(time.Duration(i) * 2 * time.Hour / backlog)
		recs = append(recs, harness.Rec{Topic: harness.PredictionsTopic, Partition: 2, Key: "B", Value: harness.Pred("B", fmt.Sprint("L", i%7), fmt.Sprint("S", i%50), "AT", i%600-100, at.Format(time.RFC3339Nano))})
	}
	harness.ProduceRecords(t, addr, recs...)

	p := harness.StartOvstream(t, nil, harness.RunArgs(db, addr, "--allowed-lateness", "0s", "--idle-timeout", "300ms")...)
	deadline := time.Now().Add(time.Minute)
	for {
		// The backlog's windows up to the quiet partition's time get written while running.
		n := harness.Dump(t, db, `SELECT count(*) FROM delay_aggregates WHERE dimension = 'network'`)
		if n[0] == "[24]" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("windows did not close while running (network rows %v); output:\n%s", n, p.Output())
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = p.Cmd.Process.Signal(harness.Sigterm)
	if code := p.Wait(t, time.Minute); code != 0 {
		t.Fatalf("SIGTERM: exit %d\n%s", code, p.Output())
	}
	harness.Drain(t, db, addr, "--allowed-lateness", "0s")
	if late := harness.Dump(t, db, `SELECT count(*) FROM dead_letters`); late[0] != "[0]" {
		t.Fatalf("%v dead letters: an event of the slow partition was dropped as late", late)
	}
	got := harness.Dump(t, db, `SELECT sum(event_count)::bigint FROM delay_aggregates WHERE dimension = 'network'`)
	if got[0] != fmt.Sprintf("[%d]", backlog+3) {
		t.Fatalf("network events %v, want %d", got, backlog+3)
	}
	harness.LoadOracleInput(t, db, addr, harness.PredictionsTopic)
	harness.SameRows(t, "delay_aggregates vs SQL oracle", harness.Dump(t, db, harness.DumpAggregates), harness.Dump(t, db, harness.OracleAggregates))
}

// A late event is recorded in dead_letters with reason late (and counted in
// no window), never silently dropped.
func TestLateEventIsRecorded(t *testing.T) {
	addr, db := harness.StartBroker(t), harness.FreshDB(t)
	var recs []harness.Rec
	for i := 0; i < 40; i++ {
		at := time.Date(2016, 5, 18, 20, i, 0, 0, time.UTC).Format(time.RFC3339)
		recs = append(recs, harness.Rec{Topic: harness.PredictionsTopic, Partition: 0, Key: "T", Value: harness.Pred("T", "L", "S", "AT", i, at)})
	}
	harness.ProduceRecords(t, addr, recs...)
	p := harness.StartOvstream(t, nil, harness.RunArgs(db, addr, "--allowed-lateness", "2m")...)
	deadline := time.Now().Add(time.Minute)
	for harness.Dump(t, db, `SELECT count(*) > 0 AND bool_and(watermark >= '2016-05-18T20:37:00Z') FROM stream_positions`)[0] != "[true]" {
		if time.Now().After(deadline) {
			t.Fatalf("watermark did not reach 20:37; output:\n%s", p.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
	late := harness.Pred("T", "L", "S", "AT", 999, "2016-05-18T20:01:00Z")
	harness.ProduceRecords(t, addr, harness.Rec{Topic: harness.PredictionsTopic, Partition: 0, Key: "T", Value: late})
	for harness.Dump(t, db, `SELECT count(*) FROM dead_letters`)[0] != "[1]" {
		if time.Now().After(deadline) {
			t.Fatalf("late event not recorded; output:\n%s", p.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = p.Cmd.Process.Signal(harness.Sigterm)
	p.Wait(t, time.Minute)
	got := harness.Dump(t, db, `SELECT "offset", reason, value = decode('`+fmt.Sprintf("%x", late)+`', 'hex') FROM dead_letters`)
	if len(got) != 1 || got[0] != "[40 late true]" {
		t.Fatalf("dead letters %v, want the late event at offset 40 with reason late", got)
	}
	if n := harness.Dump(t, db, `SELECT max(max_delay_s) FROM delay_aggregates`); n[0] == "[999]" {
		t.Fatalf("the late event was counted in a window")
	}
}
