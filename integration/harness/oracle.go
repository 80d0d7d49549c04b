//go:build integration

package harness

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5"
)

// BadLines are records that break the data contract: each must end as
// exactly one dead letter, and the rest must flow.
var BadLines = []string{
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

// OracleAggregates computes delay_aggregates from the raw records in table
// oracle_msgs with SQL alone (JSON operators, percentile_cont), leaving out
// the records that dead_letters holds. Window size: 300 s.
const OracleAggregates = oracleDims + `
SELECT ws, ws + interval '300 seconds', dim, id,
	CASE WHEN count(DISTINCT op) = 1 THEN min(op) END,
	count(*), avg(d), percentile_cont(0.9) WITHIN GROUP (ORDER BY d), min(d), max(d)
FROM dims GROUP BY ws, dim, id`

// OracleDistributions computes the stored distributions (DumpDistributions)
// from the same events: per window, dimension and id, each distinct delay
// (-0 as 0) with its rank in ascending order and its number of events.
const OracleDistributions = oracleDims + `
SELECT ws, dim, id, row_number() OVER (PARTITION BY ws, dim, id ORDER BY v), v, n
FROM (SELECT ws, dim, id, d + 0 AS v, count(*) AS n FROM dims GROUP BY ws, dim, id, d + 0) AS g`

// LoadOracleInput copies every record of topic into oracle_msgs of db.
func LoadOracleInput(t *testing.T, db, addr, topic string) int {
	t.Helper()
	return LoadOracleInputFrom(t, db, addr, topic, 0)
}

// LoadOracleInputFrom is LoadOracleInput of the records at offset from and
// above of each partition.
func LoadOracleInputFrom(t *testing.T, db, addr, topic string, from int64) int {
	t.Helper()
	msgs := slices.DeleteFunc(ReadTopic(t, addr, topic), func(m *sarama.ConsumerMessage) bool { return m.Offset < from })
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
