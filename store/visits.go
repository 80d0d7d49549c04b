package store

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/aggregate"
)

// Visit is what the predictions of one stop visit read since the last
// commit add to its stop_visits row: the visit (TripID, StartDate, and
// StopSequence when given, else StopID), its last prediction by (EventTime,
// Partition, Offset), and how many predictions were read. Commit upserts it
// in the commit's transaction (upsertVisits): the row keeps the later last
// prediction and adds the counts, so the rows do not depend on the order
// in which commits, instances or partitions bring them.
type Visit struct {
	TripID    string
	StartDate int32 // the service day, YYYYMMDD as a number (aggregate.Prediction.StartDate), never 0
	// StopSequence, when HasStopSequence, names the stop; else StopID.
	StopSequence    int64
	HasStopSequence bool
	StopID          string // the last prediction's stop_id
	Line, Operator  string // the last prediction's
	// ArrivalTime is the last prediction's arrival_time, else its event
	// time; ArrivalGiven tells which (stop_visits.arrival_predicted); DelayS
	// its delay_s (seconds).
	ArrivalTime  time.Time
	ArrivalGiven bool
	DelayS       float64
	// EventTime, Partition and Offset name the last prediction: event time
	// (UTC), then Kafka partition and offset break ties.
	EventTime   time.Time
	Partition   int32
	Offset      int64
	Predictions int64 // predictions read since the last commit, at least 1
	// History holds every one of those predictions (Predictions of them),
	// sorted by (EventTime, DelayS): the commit merges them into the row's
	// prediction history, which stays sorted the same way.
	History []Predicted
}

// Predicted is one prediction of a visit's history: when it was made
// (event time, UTC, whole microseconds as PostgreSQL keeps them) and the
// delay it predicted (delay_s, seconds).
type Predicted struct {
	EventTime time.Time
	DelayS    float64
}

// ComparePredicted orders predictions as the history keeps them: by event
// time, then delay.
func ComparePredicted(a, b Predicted) int {
	if c := a.EventTime.Compare(b.EventTime); c != 0 {
		return c
	}
	return cmp.Compare(a.DelayS, b.DelayS)
}

// StopKey returns the stop part of v's key in stop_visits.stop_key: the
// stop_sequence in decimal, else "stop_id:" and the stop_id.
func (v *Visit) StopKey() string {
	if v.HasStopSequence {
		return strconv.FormatInt(v.StopSequence, 10)
	}
	return "stop_id:" + v.StopID
}

// Later tells whether the prediction (t, partition, offset) comes after v's
// last one: a greater event time, ties by partition, then offset.
func (v *Visit) Later(t time.Time, partition int32, offset int64) bool {
	if !t.Equal(v.EventTime) {
		return t.After(v.EventTime)
	}
	if partition != v.Partition {
		return partition > v.Partition
	}
	return offset > v.Offset
}

// NoStartDate counts the predictions of one source partition, read since
// the last commit, that formed no visit because they have no start_date
// (stop_visit_counts).
type NoStartDate struct {
	aggregate.PartitionID
	N int64
}

// visitColumns are the columns upsertVisits writes, in the order of its
// arrays; every one but the key and predictions comes from the last
// prediction.
var visitColumns = []string{"line", "operator", "stop_id", "stop_sequence", "arrival_time", "delay_s",
	"last_event_time", "last_partition", "last_offset", "arrival_predicted"}

// upsertVisitsSQL adds the predictions and keeps the later last prediction.
// The history arrives as two flat arrays ($16, $17), visit i's predictions
// at [$18[i], $19[i]], each visit's sorted; a history that goes on after the
// stored one is appended (the usual case: a visit's predictions come in
// time order), otherwise the two are merged and sorted again.
var upsertVisitsSQL = func() string {
	later := `(EXCLUDED.last_event_time, EXCLUDED.last_partition, EXCLUDED.last_offset) > (v.last_event_time, v.last_partition, v.last_offset)`
	sets := []string{"predictions = v.predictions + EXCLUDED.predictions", "updated_at = now()"}
	for _, c := range visitColumns {
		sets = append(sets, fmt.Sprintf("%s = CASE WHEN %s THEN EXCLUDED.%s ELSE v.%s END", c, later, c, c))
	}
	after := `(EXCLUDED.prediction_times[1], EXCLUDED.prediction_delays[1]) >=
        (v.prediction_times[cardinality(v.prediction_times)], v.prediction_delays[cardinality(v.prediction_delays)])`
	for _, h := range []struct{ col, elem string }{{"prediction_times", "t"}, {"prediction_delays", "d"}} {
		sets = append(sets, fmt.Sprintf(`%s = CASE WHEN %s THEN v.%s || EXCLUDED.%s
        ELSE (SELECT array_agg(m.%s ORDER BY m.t, m.d) FROM unnest(v.prediction_times || EXCLUDED.prediction_times,
            v.prediction_delays || EXCLUDED.prediction_delays) AS m(t, d)) END`, h.col, after, h.col, h.col, h.elem))
	}
	return `
INSERT INTO stop_visits AS v (pipeline, trip_id, start_date, stop_key, predictions, ` + strings.Join(visitColumns, ", ") + `,
    prediction_times, prediction_delays)
SELECT $1, u.trip, to_date(u.day, 'YYYYMMDD'), u.stop_key, u.n, u.line, u.operator, u.stop_id, u.seq, u.arrival, u.delay,
    u.event_time, u.part, u.off, u.given, ($16::timestamptz[])[u.lo:u.hi], ($17::float8[])[u.lo:u.hi]
FROM unnest($2::text[], $3::text[], $4::text[], $5::bigint[], $6::text[], $7::text[], $8::text[], $9::bigint[],
    $10::timestamptz[], $11::float8[], $12::timestamptz[], $13::integer[], $14::bigint[], $15::boolean[], $18::integer[], $19::integer[])
    AS u(trip, day, stop_key, n, line, operator, stop_id, seq, arrival, delay, event_time, part, off, given, lo, hi)
ON CONFLICT (pipeline, trip_id, start_date, stop_key) DO UPDATE SET ` + strings.Join(sets, ",\n    ")
}()

// upsertVisits writes vs (one per key: the caller collapses them) and the
// counts of predictions without start_date, in the commit's transaction.
func upsertVisits(ctx context.Context, tx pgx.Tx, pipeline string, vs []Visit, none []NoStartDate) error {
	if len(vs) > 0 {
		n := len(vs)
		trips, days, keys := make([]string, n), make([]string, n), make([]string, n)
		counts, offs := make([]int64, n), make([]int64, n)
		lines, ops, stops := make([]string, n), make([]string, n), make([]string, n)
		seqs := make([]*int64, n)
		arrivals, events := make([]time.Time, n), make([]time.Time, n)
		delays := make([]float64, n)
		parts := make([]int32, n)
		given := make([]bool, n)
		var times []time.Time
		var hdelays []float64
		los, his := make([]int32, n), make([]int32, n)
		for i := range vs {
			v := &vs[i]
			trips[i], days[i], keys[i], counts[i] = v.TripID, aggregate.ServiceDateString(v.StartDate), v.StopKey(), v.Predictions
			lines[i], ops[i], stops[i] = v.Line, v.Operator, v.StopID
			if v.HasStopSequence {
				seqs[i] = &v.StopSequence
			}
			arrivals[i], delays[i], events[i], parts[i], offs[i] = v.ArrivalTime, v.DelayS, v.EventTime, v.Partition, v.Offset
			given[i] = v.ArrivalGiven
			los[i] = int32(len(times) + 1)
			for _, h := range v.History {
				times, hdelays = append(times, h.EventTime), append(hdelays, h.DelayS)
			}
			his[i] = int32(len(times))
		}
		if _, err := tx.Exec(ctx, upsertVisitsSQL, pipeline, trips, days, keys, counts, lines, ops, stops, seqs,
			arrivals, delays, events, parts, offs, given, times, hdelays, los, his); err != nil {
			return fmt.Errorf("%d stop visits: %w", n, err)
		}
	}
	if len(none) > 0 {
		topics, parts, ns := make([]string, len(none)), make([]int32, len(none)), make([]int64, len(none))
		for i, c := range none {
			topics[i], parts[i], ns[i] = c.Topic, c.Partition, c.N
		}
		if _, err := tx.Exec(ctx, `
INSERT INTO stop_visit_counts AS c (pipeline, topic, partition, without_start_date)
SELECT $1, * FROM unnest($2::text[], $3::integer[], $4::bigint[])
ON CONFLICT (pipeline, topic, partition) DO UPDATE SET without_start_date = c.without_start_date + EXCLUDED.without_start_date`,
			pipeline, topics, parts, ns); err != nil {
			return fmt.Errorf("count predictions without start_date: %w", err)
		}
	}
	return nil
}

// visitBatch is how many stop visits one delete transaction deletes (each
// reads the pipeline's visits: there is no index on last_event_time, which
// every commit's upsert changes).
const visitBatch = 20000

// DeleteOldVisits deletes the stop visits of pipeline whose last prediction
// is older than the retention floor (retention.go: the lowest stored
// watermark of every pipeline) minus retention, by event time, at most
// 20,000 per transaction, as delay_aggregates keeps its windows: a
// prediction still to come for such a visit is older than its partition's
// watermark, so late, and forms no visit. It returns how many it deleted,
// 0 when nothing may be deleted (a partition without a stored watermark).
func (s *Store) DeleteOldVisits(ctx context.Context, pipeline string, retention time.Duration) (int64, error) {
	if retention <= 0 {
		return 0, fmt.Errorf("store: retention %v is not positive", retention)
	}
	floor, ok, err := s.retentionFloorOf(ctx)
	if err != nil || !ok {
		return 0, err
	}
	cutoff := floor.Add(-retention)
	var deleted int64
	for {
		var n int64
		err := s.do(ctx, func(conn *pgx.Conn) error {
			tag, err := conn.Exec(ctx, `
DELETE FROM stop_visits WHERE ctid = ANY (ARRAY(
    SELECT ctid FROM stop_visits WHERE pipeline = $1 AND last_event_time < $2 LIMIT $3))
    AND last_event_time < $2`, pipeline, cutoff, visitBatch)
			n = tag.RowsAffected()
			return err
		})
		deleted += n
		if err != nil {
			return deleted, fmt.Errorf("store: delete the stop visits of pipeline %q older than %v before the watermark floor: %w",
				pipeline, retention, err)
		}
		if n < visitBatch {
			return deleted, nil
		}
	}
}
