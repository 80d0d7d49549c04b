//go:build integration

package pipeline

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/store"

	"github.com/ovstream/ovstream/integration/harness"
)

// readTopicPy prints every record of a topic as a JSON line [partition,
// offset, value], as confluent-kafka (librdkafka) reads it: each partition
// assigned from its beginning, read up to its end (partition EOF).
// Arguments: bootstrap servers, topic, partitions.
const readTopicPy = `
import json, sys
from confluent_kafka import Consumer, TopicPartition, OFFSET_BEGINNING
servers, topic, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
c = Consumer({"bootstrap.servers": servers, "group.id": "oracle-reader", "enable.auto.commit": False,
              "enable.partition.eof": True, "isolation.level": "read_committed"})
c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(n)])
left = set(range(n))
while left:
    m = c.poll(20)
    if m is None:
        sys.exit("no record nor end of partition in 20 s")
    if m.error():
        if m.error().code() == -191:  # _PARTITION_EOF
            left.discard(m.partition())
            continue
        sys.exit(str(m.error()))
    print(json.dumps([m.partition(), m.offset(), m.value().decode("utf-8")]))
c.close()
`

// readTopicWithPy returns the predictions topic as readTopicPy prints it
// (6 partitions): JSON lines [partition, offset, value].
func readTopicWithPy(t *testing.T, addr string) []byte {
	t.Helper()
	py := harness.PythonWithConfluentKafka(t)
	out, err := exec.Command(py, "-c", readTopicPy, addr, harness.PredictionsTopic, "6").Output()
	if err != nil {
		t.Fatalf("confluent-kafka reader: %v", err)
	}
	return out
}

// loadPyOracle reads the predictions topic with confluent-kafka into table
// py_msgs(topic, partition, offset, value jsonb) of db and returns how many
// records it holds.
func loadPyOracle(t *testing.T, db, addr string) int {
	t.Helper()
	out := readTopicWithPy(t, addr)
	var rows [][]any
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 4<<20)
	for sc.Scan() {
		var rec [3]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, []any{harness.PredictionsTopic, int32(rec[0].(float64)), int64(rec[1].(float64)), rec[2].(string)})
	}
	ctx := harness.TestCtx(t)
	conn := harness.Connect(t, ctx, db)
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `DROP TABLE IF EXISTS py_msgs; CREATE TABLE py_msgs (topic text, partition int, "offset" bigint, value jsonb)`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.CopyFrom(ctx, pgx.Identifier{"py_msgs"}, []string{"topic", "partition", "offset", "value"}, pgx.CopyFromRows(rows)); err != nil {
		t.Fatal(err)
	}
	return len(rows)
}

// oracleVisits computes stop_visits from py_msgs with SQL alone: the
// records not dead-lettered that have a start_date, per (trip, service day,
// stop_sequence or else stop_id), the last by event time, then partition,
// then offset (whether it gave an arrival_time: arrival_predicted), how
// many there were, and every one's event time and delay in (event time,
// delay) order: the prediction history.
const oracleVisits = `
WITH ok AS (
	SELECT m.partition, m."offset", m.value AS j FROM py_msgs m
	WHERE m.value ? 'start_date' AND NOT EXISTS (SELECT 1 FROM dead_letters d
		WHERE d.topic = m.topic AND d.partition = m.partition AND d."offset" = m."offset")
), v AS (
	SELECT j->>'trip_id' AS trip, to_date(j->>'start_date', 'YYYYMMDD') AS day,
		coalesce(j->>'stop_sequence', 'stop_id:' || (j->>'stop_id')) AS stop_key,
		j->>'line' AS line, j->>'operator' AS op, j->>'stop_id' AS stop, (j->>'stop_sequence')::bigint AS seq,
		(j->>'event_time')::timestamptz AS et, (j->>'arrival_time')::timestamptz AS arrival,
		(j->>'delay_s')::float8 AS delay, partition, "offset"
	FROM ok
)
SELECT DISTINCT ON (trip, day, stop_key) trip, day, stop_key, line, op, stop, seq, coalesce(arrival, et), arrival IS NOT NULL,
	delay, count(*) OVER w, array_agg(et) OVER h, array_agg(delay) OVER h
FROM v
WINDOW w AS (PARTITION BY trip, day, stop_key),
	h AS (w ORDER BY et, delay ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)
ORDER BY trip, day, stop_key, et DESC, partition DESC, "offset" DESC`

// dumpVisits reads stop_visits with the prediction history of each visit.
const dumpVisits = `SELECT trip_id, start_date, stop_key, line, operator, stop_id, stop_sequence, arrival_time, arrival_predicted,
	delay_s, predictions, prediction_times, prediction_delays FROM stop_visits`

// oracleNoStartDate counts the records not dead-lettered without start_date.
const oracleNoStartDate = `SELECT count(*) FROM py_msgs m WHERE NOT m.value ? 'start_date' AND NOT EXISTS (SELECT 1 FROM dead_letters d
	WHERE d.topic = m.topic AND d.partition = m.partition AND d."offset" = m."offset")`

// visitRecords are hand-written predictions, written to the partitions
// they name after the Auckland sample: the same visit on two partitions at
// one event time (the greater partition is the later), twice on one
// partition at one event time (the greater offset), an older prediction
// after a newer one, a visit named by stop_id, and three without
// start_date.
func visitRecords() []harness.Rec {
	p := func(part int32, trip, seq string, delay int, at string, date bool) harness.Rec {
		v := `{"trip_id":"` + trip + `","line":"H","stop_id":"S9","operator":"HAND","delay_s":` + strconv.Itoa(delay) +
			`,"event_time":"2016-05-18T20:` + at + `Z"`
		if seq != "" {
			v += `,"stop_sequence":` + seq
		}
		if date {
			v += `,"start_date":"20160519","arrival_time":"2016-05-18T20:30:00+00:00"`
		}
		return harness.Rec{Topic: harness.PredictionsTopic, Partition: part, Key: trip, Value: []byte(v + "}")}
	}
	return []harness.Rec{
		p(3, "tie-p", "1", 30, "10:00", true), p(0, "tie-p", "1", 10, "10:00", true),
		p(1, "tie-o", "1", 5, "10:00", true), p(1, "tie-o", "1", 7, "10:00", true),
		p(2, "old", "1", 1, "10:00", true), p(2, "old", "1", 99, "09:00", true),
		p(4, "noseq", "", 3, "10:00", true), p(4, "noseq", "", 4, "10:30", true),
		p(5, "none", "1", 1, "10:00", false), p(5, "none", "2", 1, "10:00", false), p(0, "none", "3", 1, "10:00", false),
	}
}

// produceVisitFeeds produces, in ascending event time: the OVapi snapshot
// and (after the Auckland sample) the Halifax pair with its static feed
// with `ovstream produce` (both give start_date); the Auckland peak sample,
// ten snapshots with up to ten predictions per visit, with start_date
// 20160519 (the service day of that morning; its converted feed has none);
// visitRecords, then extra. 59,946 + 4,610 + 11 + len(extra) + 16,574
// predictions.
func produceVisitFeeds(t *testing.T, addr string, extra ...harness.Rec) {
	t.Helper()
	harness.ProduceCLI(t, addr, "--gtfs-rt", "../../testdata/nl-ovapi-20141130")
	res := harness.LoadFeeds(t, "AT", "../../testdata/auckland-20160519-peak10min")
	for i := range res.Predictions {
		res.Predictions[i].StartDate = 20160519
	}
	harness.ProduceFeeds(t, addr, res)
	harness.ProduceRecords(t, addr, append(visitRecords(), extra...)...)
	harness.ProduceCLI(t, addr, "--operator", "HFX", "--gtfs-static", "../../testdata/halifax-20251106/google_transit_trimmed.zip",
		"--gtfs-rt", "../../testdata/halifax-20251106")
}

const visitInput = 59946 + 4610 + 11 + 16574

// checkVisits compares stop_visits and the count of predictions without
// start_date of db with the SQL oracle over the topic as confluent-kafka
// reads it, row for row, and returns the visits.
func checkVisits(t *testing.T, db, addr, when string) []string {
	t.Helper()
	if n := loadPyOracle(t, db, addr); n != visitInput {
		t.Fatalf("%s: confluent-kafka read %d records, want %d", when, n, visitInput)
	}
	got, want := harness.Dump(t, db, dumpVisits), harness.Dump(t, db, oracleVisits)
	harness.SameRows(t, when+": stop_visits vs the SQL oracle over the topic", got, want)
	if none := harness.Dump(t, db, `SELECT coalesce(sum(without_start_date), 0)::bigint FROM stop_visit_counts`); strings.Join(none, "") != strings.Join(harness.Dump(t, db, oracleNoStartDate), "") {
		t.Errorf("%s: predictions without start_date %v, the oracle %v", when, none, harness.Dump(t, db, oracleNoStartDate))
	}
	return got
}

// Stop visits equal the SQL oracle over the topic as a client we did not
// write reads it (confluent-kafka): the last prediction of each (trip,
// start_date, stop), by event time then partition then offset, the
// number of predictions and the prediction history (every prediction's
// event time and delay, exactly once, in order), row for row; the predictions without start_date
// form no visit and are counted. Once after an uninterrupted drain; once in
// another database after a run SIGKILLed after reading 40,000 records (at
// most 10,000 of them not yet committed), one SIGKILLed in its second
// commit (windows upserted, offsets not yet written) and a last drain; once after the drains of two split instances
// (partitions 0-2 and 3-5: visit tie-p has predictions in both): 0 visits
// differ from the uninterrupted run.
func TestStopVisitsEqualSQLOracleSplitAndKilled(t *testing.T) {
	addr, _ := harness.StartBrokerProcess(t, "127.0.0.1:0", "")
	db := harness.FreshDB(t)
	produceVisitFeeds(t, addr)
	harness.Drain(t, db, addr)
	got := checkVisits(t, db, addr, "uninterrupted drain")
	for _, w := range []struct{ query, want string }{
		{`SELECT count(*), sum(predictions)::bigint, max(predictions) FROM stop_visits`, "[80401 81138 5]"},
		{`SELECT sum(without_start_date)::bigint FROM stop_visit_counts`, "[3]"},
		{`SELECT trip_id, stop_key, delay_s, predictions FROM stop_visits WHERE operator = 'HAND' ORDER BY 1`,
			"[noseq stop_id:S9 4 2] [old 1 1 2] [tie-o 1 7 2] [tie-p 1 30 2]"},
		{`SELECT trip_id, prediction_delays, to_char(prediction_times[1] AT TIME ZONE 'UTC', 'HH24:MI') FROM stop_visits
			WHERE operator = 'HAND' ORDER BY 1`, "[noseq [3 4] 20:10] [old [99 1] 20:09] [tie-o [5 7] 20:10] [tie-p [10 30] 20:10]"},
	} {
		if g := strings.Join(harness.Dump(t, db, w.query), " "); g != w.want {
			t.Errorf("%s: %s, want %s", w.query, g, w.want)
		}
	}

	stdout, stderr, code := harness.RunCLI(t, nil, "status", "--json", "--database-url", db, "--brokers", addr)
	var st struct {
		StopVisits  int64 `json:"stop_visits"`
		NoStartDate int64 `json:"predictions_without_start_date"`
	}
	if err := json.Unmarshal([]byte(stdout), &st); code != 0 || err != nil || st.StopVisits != 80401 || st.NoStartDate != 3 {
		t.Errorf("status --json: exit %d, %v, %+v, want 80401 visits and 3 without start_date\n%s", code, err, st, stderr)
	}
	if stdout, _, _ := harness.RunCLI(t, nil, "status", "--database-url", db, "--brokers", addr); !strings.Contains(stdout,
		"stop visits: 80401; predictions without start_date (in the windows, in no visit): 3\n") {
		t.Errorf("status does not count the visits:\n%s", stdout)
	}

	killed := harness.FreshDB(t)
	// At most 10,000 records wait for a commit, so the 40,000th is read
	// after commits that wrote visits, whatever the machine's speed.
	p := harness.StartOvstream(t, []string{"OVSTREAM_CRASHPOINT=after_consume:40000"},
		harness.RunArgs(killed, addr, "--drain", "--max-uncommitted-messages", "10000")...)
	wantSIGKILL(t, p, "after_consume", 40000)
	if n := harness.Dump(t, killed, `SELECT count(*) FROM stop_visits`); n[0] == "[0]" {
		t.Fatal("the first kill came before any commit wrote a visit: nothing was replayed")
	}
	p = harness.StartOvstream(t, []string{"OVSTREAM_CRASHPOINT=mid_commit:2"}, harness.RunArgs(killed, addr, "--drain")...)
	wantSIGKILL(t, p, "mid_commit", 2)
	harness.Drain(t, killed, addr)
	harness.SameRows(t, "stop_visits after the kills vs the uninterrupted drain", checkVisits(t, killed, addr, "after the kills"), got)

	split := harness.FreshDB(t)
	harness.WaitAll(t, harness.StartSplit(t, split, addr, harness.Split2, "--drain"), "split drains")
	harness.SameRows(t, "stop_visits of two split instances vs the uninterrupted drain", checkVisits(t, split, addr, "split drains"), got)
}

// Retention of stop visits, as of the windows: with the OVapi snapshot
// (2014) and the Halifax pair (2025) drained into one pipeline, a retention
// of one day before the lowest stored watermark deletes exactly the visits
// whose last prediction is older (every OVapi one: the SQL over the table
// before the delete names them), and keeps the Halifax ones.
func TestStopVisitsRetention(t *testing.T) {
	addr, _ := harness.StartBrokerProcess(t, "127.0.0.1:0", "")
	db := harness.FreshDB(t)
	harness.ProduceCLI(t, addr, "--gtfs-rt", "../../testdata/nl-ovapi-20141130")
	harness.ProduceCLI(t, addr, "--operator", "HFX", "--gtfs-static", "../../testdata/halifax-20251106/google_transit_trimmed.zip",
		"--gtfs-rt", "../../testdata/halifax-20251106")
	harness.Drain(t, db, addr)
	old := `SELECT trip_id, start_date, stop_key FROM stop_visits
		WHERE last_event_time < (SELECT min(watermark) FROM stream_positions) - interval '1 day'`
	want := harness.Dump(t, db, old)
	if len(want) != 59946 {
		t.Fatalf("%d visits older than the floor - 1 day, want the 59946 of OVapi", len(want))
	}
	keep := harness.Dump(t, db, `SELECT trip_id, start_date, stop_key FROM stop_visits EXCEPT `+old)
	ctx := harness.TestCtx(t)
	s, err := store.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	if n, err := s.DeleteOldVisits(ctx, "ovstream", 24*time.Hour); err != nil || n != 59946 {
		t.Fatalf("DeleteOldVisits = %d, %v; want 59946", n, err)
	}
	harness.SameRows(t, "stop visits kept", harness.Dump(t, db, `SELECT trip_id, start_date, stop_key FROM stop_visits`), keep)
	if len(keep) != 16574 {
		t.Fatalf("%d visits kept, want the 16574 of Halifax", len(keep))
	}
}
