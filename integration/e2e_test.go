//go:build integration

package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5"
)

// badLines are records that break the data contract: each must end as
// exactly one dead letter, and the rest must flow.
var badLines = []string{
	`{"trip_id":"bad-1","line":"L","stop_id":"S","operator":"AT","delay_s":"12","event_time":"2016-05-18T20:01:00Z"}`,
	`not json at all`,
	`{"trip_id":"bad-3","line":"L","stop_id":"S","operator":"AT","delay_s":1e309,"event_time":"2016-05-18T20:01:00Z"}`,
	`{"trip_id":"bad-4","line":"L","stop_id":"S","operator":"AT","delay_s":5,"event_time":"2016-05-18T20:01:00"}`,
}

// oracleDims is the events of the raw records in table oracle_msgs, minus
// the records that dead_letters holds, once per dimension: dims(ws, dim, id,
// d, op), ws the window start (window size 300 s).
const oracleDims = `
WITH ok AS (
	SELECT convert_from(m.value, 'UTF8')::jsonb AS j FROM oracle_msgs m
	WHERE NOT EXISTS (SELECT 1 FROM dead_letters d
		WHERE d.topic = m.topic AND d.partition = m.partition AND d."offset" = m."offset")
), ev AS (
	SELECT to_timestamp(floor(extract(epoch FROM (j->>'event_time')::timestamptz) / 300) * 300) AS ws,
		(j->>'delay_s')::float8 AS d, j->>'line' AS line, j->>'stop_id' AS stop, j->>'operator' AS op
	FROM ok
), dims AS (
	SELECT ws, 'line' AS dim, line AS id, d, op FROM ev
	UNION ALL SELECT ws, 'station', stop, d, op FROM ev
	UNION ALL SELECT ws, 'operator', op, d, op FROM ev
	UNION ALL SELECT ws, 'network', 'all', d, op FROM ev
)`

// oracleAggregates computes delay_aggregates from the raw records in table
// oracle_msgs with SQL alone (JSON operators, percentile_cont), leaving out
// the records that dead_letters holds. Window size: 300 s.
const oracleAggregates = oracleDims + `
SELECT ws, ws + interval '300 seconds', dim, id,
	CASE WHEN count(DISTINCT op) = 1 THEN min(op) END,
	count(*), avg(d), percentile_cont(0.9) WITHIN GROUP (ORDER BY d), min(d), max(d)
FROM dims GROUP BY ws, dim, id`

// oracleDistributions computes the stored distributions (dumpDistributions)
// from the same events: per window, dimension and id, each distinct delay
// (-0 as 0) with its rank in ascending order and its number of events.
const oracleDistributions = oracleDims + `
SELECT ws, dim, id, row_number() OVER (PARTITION BY ws, dim, id ORDER BY v), v, n
FROM (SELECT ws, dim, id, d + 0 AS v, count(*) AS n FROM dims GROUP BY ws, dim, id, d + 0) AS g`

// loadOracleInput copies every record of topic into oracle_msgs of db.
func loadOracleInput(t *testing.T, db, addr, topic string) int {
	t.Helper()
	return loadOracleInputFrom(t, db, addr, topic, 0)
}

// loadOracleInputFrom is loadOracleInput of the records at offset from and
// above of each partition.
func loadOracleInputFrom(t *testing.T, db, addr, topic string, from int64) int {
	t.Helper()
	msgs := slices.DeleteFunc(readTopic(t, addr, topic), func(m *sarama.ConsumerMessage) bool { return m.Offset < from })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS oracle_msgs (topic text, partition int, "offset" bigint, value bytea)`); err != nil {
		t.Fatal(err)
	}
	rows := make([][]any, len(msgs))
	for i, m := range msgs {
		rows[i] = []any{m.Topic, m.Partition, m.Offset, m.Value}
	}
	if _, err := conn.CopyFrom(ctx, pgx.Identifier{"oracle_msgs"}, []string{"topic", "partition", "offset", "value"},
		pgx.CopyFromRows(rows)); err != nil {
		t.Fatal(err)
	}
	return len(msgs)
}

// The Dutch and Auckland files, produced with `ovstream produce` into a
// standalone `ovstream broker`, then run --drain with the default allowed
// lateness: delay_aggregates, and the distributions stored with its rows,
// equal the SQL oracle over the records in the
// topic minus those recorded as dead letters, and every bad record has
// exactly one dead letter.
func TestDrainEqualsSQLOracle(t *testing.T) {
	addr, _ := startBrokerProcess(t, "127.0.0.1:0", "")
	db := freshDB(t)
	out := produceCLI(t, addr, "--gtfs-rt", "../testdata/nl-ovapi-20141130")
	if !strings.Contains(out, "59946") {
		t.Fatalf("produce of the OVapi snapshot does not report 59946 predictions:\n%s", out)
	}
	out = produceCLI(t, addr, "--operator", "AT", "--gtfs-rt", "../testdata/auckland-20160519-peak10min")
	if !strings.Contains(out, "4610") {
		t.Fatalf("produce of the Auckland peak does not report 4610 predictions:\n%s", out)
	}
	lines := filepath.Join(t.TempDir(), "bad.jsonl")
	if err := os.WriteFile(lines, []byte(strings.Join(badLines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	produceCLI(t, addr, "--jsonl", lines, "--topic", predictionsTopic)

	out = drain(t, db, addr, "--allowed-lateness", "2m")
	n := loadOracleInput(t, db, addr, predictionsTopic)
	if want := 59946 + 4610 + len(badLines); n != want {
		t.Fatalf("topic holds %d records, want %d", n, want)
	}

	got := dump(t, db, dumpAggregates)
	want := dump(t, db, oracleAggregates)
	if len(got) == 0 {
		t.Fatalf("no delay_aggregates rows; run output:\n%s", out)
	}
	sameRows(t, "delay_aggregates vs SQL oracle", got, want)
	sameRows(t, "stored distributions vs SQL oracle", dump(t, db, dumpDistributions), dump(t, db, oracleDistributions))

	decode := dump(t, db, `SELECT convert_from(value, 'UTF8'), error FROM dead_letters WHERE reason = 'decode'`)
	if len(decode) != len(badLines) {
		t.Fatalf("%d decode dead letters, want %d: %v", len(decode), len(badLines), decode)
	}
	for _, line := range badLines {
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
	counted := dump(t, db, `SELECT sum(event_count)::bigint FROM delay_aggregates WHERE dimension = 'network'`)
	dead := dump(t, db, `SELECT count(*) FROM dead_letters WHERE topic = 'arrival_predictions'`)
	if fmt.Sprint(counted) == "[[<nil>]]" || len(dead) != 1 {
		t.Fatalf("counted %v, dead %v", counted, dead)
	}
	var c, d int
	scan(t, counted[0], "[%d]", &c)
	scan(t, dead[0], "[%d]", &d)
	if c+d != n {
		t.Fatalf("counted %d + dead letters %d = %d, want every record once: %d", c, d, c+d, n)
	}
	// stream_positions holds each partition's high water mark.
	pos := dump(t, db, `SELECT sum(next_offset)::bigint FROM stream_positions WHERE topic = 'arrival_predictions'`)
	if pos[0] != fmt.Sprintf("[%d]", n) {
		t.Fatalf("stored offsets sum to %v, want %d (every partition at its high water mark)", pos, n)
	}
}

// One kill -9 of run mid-stream, after commits that wrote windows and
// positions, and a restart: the tables equal those of an uninterrupted run
// over the same topic, on real, slightly out-of-order data.
func TestKillMidStreamThenRestart(t *testing.T) {
	addr := startBroker(t)
	res := loadFeeds(t, "AT", extractTarGz(t, "../testdata/auckland-20160518-2h.tar.gz"))
	half := len(res.Predictions) / 2
	first, second := *res, *res
	first.Predictions = res.Predictions[:half]
	second.Predictions = res.Predictions[half:]

	killed := freshDB(t)
	produceFeeds(t, addr, &first)
	produceLines(t, addr, predictionsTopic, badLines[:2]...)
	p := startOvstream(t, nil, runArgs(killed, addr)...)
	// Wait until commits have written windows and moved the stored offsets.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		w := dump(t, killed, `SELECT count(*) > 0 FROM delay_aggregates`)
		s := dump(t, killed, `SELECT coalesce(sum(next_offset), 0) > 0 FROM stream_positions`)
		if w[0] == "[true]" && s[0] == "[true]" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no commit with windows within 2 minutes; output:\n%s", p.output())
		}
		time.Sleep(50 * time.Millisecond)
	}
	produceFeeds(t, addr, &second)
	produceLines(t, addr, predictionsTopic, badLines[2:]...)
	time.Sleep(150 * time.Millisecond) // mid-stream: part of the second half consumed
	p.kill()
	before := dump(t, killed, `SELECT sum(event_count)::bigint FROM delay_aggregates WHERE dimension = 'network'`)
	t.Logf("killed with %v events in written windows", before)
	drain(t, killed, addr, "--takeover") // at once: the killed instance's lease would run 15 s

	reference := freshDB(t)
	drain(t, reference, addr)

	for _, q := range []struct{ what, sql string }{
		{"delay_aggregates", dumpAggregates}, {"dead_letters", dumpDeadLetters},
		{"trip_delay_latest", dumpTrips}, {"vehicle_latest", dumpVehicles},
	} {
		sameRows(t, q.what+" (killed and restarted vs uninterrupted)", dump(t, killed, q.sql), dump(t, reference, q.sql))
	}
	if n := len(dump(t, reference, dumpDeadLetters)); n != len(badLines) {
		t.Fatalf("%d dead letters, want %d", n, len(badLines))
	}
	// And the uninterrupted run equals the SQL oracle.
	loadOracleInput(t, reference, addr, predictionsTopic)
	sameRows(t, "delay_aggregates vs SQL oracle", dump(t, reference, dumpAggregates), dump(t, reference, oracleAggregates))
}

// run refuses a schema that is behind, saying what to do; --migrate applies
// the migrations first and then runs.
func TestRunRefusesSchemaBehind(t *testing.T) {
	addr, db := startBroker(t), emptyDB(t)
	p := startOvstream(t, nil, runArgs(db, addr, "--drain")...)
	if code := p.wait(t, time.Minute); code != 1 {
		t.Fatalf("exit %d on an empty database, want 1:\n%s", code, p.output())
	}
	if want := "run `ovstream migrate up` or start `run` with --migrate"; !strings.Contains(p.output(), want) {
		t.Fatalf("the refusal does not say %q:\n%s", want, p.output())
	}
	produceRecords(t, addr, rec{predictionsTopic, 0, "T", pred("T", "L", "S", "AT", 7, "2016-05-18T20:01:00Z")})
	drain(t, db, addr, "--migrate")
	if got := dump(t, db, `SELECT event_count, mean_delay_s FROM delay_aggregates WHERE dimension = 'network'`); len(got) != 1 || got[0] != "[1 7]" {
		t.Fatalf("after run --migrate: network rows %v, want [1 7]", got)
	}
}
