package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/aggregate"
)

// Phase (e), the peer: what users build instead of
// ovstream, "ELT" (a Kafka Connect JDBC sink plus scheduled SQL). It reads the
// predictions topic with sarama, decodes each message with the project's
// decoder (aggregate.DecodePrediction: the same validity rules as `run`, the
// |delay_s| <= 86400 rule included) and drops what `run` would dead-letter
// (decode errors; event times later than wall clock + 5 min, run's default
// max future skew; |delay_s| beyond (b)'s --max-delay, implausible),
// COPYs every valid prediction into a logged raw table
// with pgx CopyFrom, then computes the result with ONE
// INSERT ... SELECT ... GROUP BY (percentile_cont(0.9), avg, min, max over
// the four dimensions) into delay_aggregates under its own pipeline name.
//
// It does less than (b): it reads no positions, keeps no latest state and
// stores no distributions (delay_values and delay_counts stay NULL, and the
// comparison leaves them out), so elt_ratio = T_elt / T_ovstream is a lower
// bound of what ovstream saves.
const (
	eltPipeline = "elt"
	eltRawTable = "elt_raw_predictions"
	// eltWindow is (b)'s window size (run's default).
	eltWindow = 5 * time.Minute
	// eltFutureSkew is run's default --max-future-skew.
	eltFutureSkew = 5 * time.Minute
	// eltBatch is how many rows a partition reader hands to the COPY at once.
	eltBatch = 1024
)

// eltRawDDL makes the raw table: what a sink writes, one row per valid
// prediction, logged, without keys or indexes (the sink's insert mode).
const eltRawDDL = `CREATE TABLE ` + eltRawTable + ` (
	trip_id       text             NOT NULL,
	line          text             NOT NULL,
	stop_id       text             NOT NULL,
	operator      text             NOT NULL,
	delay_s       double precision NOT NULL,
	event_time    timestamptz      NOT NULL,
	vehicle_id    text             NULL,
	stop_sequence bigint           NULL)`

var eltRawColumns = []string{"trip_id", "line", "stop_id", "operator", "delay_s", "event_time", "vehicle_id", "stop_sequence"}

// eltTransformSQL is the one statement of the transform: each raw row counts
// in four rows of its epoch-aligned window (docs/design.md "Windows"), operator is
// the one operator of the row's events or NULL, p90 is percentile_cont(0.9).
var eltTransformSQL = fmt.Sprintf(`INSERT INTO delay_aggregates (pipeline, window_start, window_end,
	dimension, dimension_id, operator, event_count, mean_delay_s, p90_delay_s, min_delay_s, max_delay_s)
SELECT '%[1]s', w.start, w.start + interval '%[2]d seconds', d.dimension, d.id,
	CASE WHEN min(r.operator) = max(r.operator) THEN min(r.operator) END,
	count(*), avg(r.delay_s), percentile_cont(0.9) WITHIN GROUP (ORDER BY r.delay_s),
	min(r.delay_s), max(r.delay_s)
FROM %[3]s r
CROSS JOIN LATERAL (SELECT date_bin(interval '%[2]d seconds', r.event_time, timestamptz '1970-01-01 00:00:00+00')) w(start)
CROSS JOIN LATERAL (VALUES ('%[4]s', r.line), ('%[5]s', r.stop_id), ('%[6]s', r.operator), ('%[7]s', '%[8]s')) d(dimension, id)
GROUP BY w.start, d.dimension, d.id`,
	eltPipeline, int(eltWindow.Seconds()), eltRawTable,
	aggregate.DimLine, aggregate.DimStation, aggregate.DimOperator, aggregate.DimNetwork, aggregate.NetworkID)

// eltResult is what phase (e) measured.
type eltResult struct {
	elapsed   time.Duration // T_elt: connect, read + decode + COPY, then the INSERT ... SELECT, committed
	load      time.Duration // connect, read + decode + COPY, committed
	transform time.Duration // the INSERT ... SELECT ... GROUP BY, committed
	read      int64         // messages read
	copied    int64         // raw rows: the valid predictions
	invalid   int64         // predictions run would dead-letter (decode, future)
	rows      int64         // delay_aggregates rows, equal to (b)'s
	digest    string        // md5 over them in key order, equal to (b)'s
	cpu       time.Duration // the bench's own CPU time (reader, decoder, COPY client)
	rawBytes  int64         // pg_total_relation_size of the raw table
	busy      float64
}

// eltPhase is phase (e) on a fresh database (ovstream's schema plus the raw
// table), after a checkpoint, timed by clock; it requires the result to
// equal (b)'s, on runDB.
func eltPhase(ctx context.Context, b *broker, dbs *databases, runDB, tag string, maxDelay time.Duration, clock *phaseClock) (*eltResult, error) {
	db, err := dbs.fresh(ctx, "ovsbench_elt_"+tag)
	if err != nil {
		return nil, fmt.Errorf("fresh database: %w", err)
	}
	if err := execOn(ctx, db, eltRawDDL); err != nil {
		return nil, fmt.Errorf("raw table: %w", err)
	}
	if err := copyPartitions(ctx, runDB, db); err != nil {
		return nil, err
	}
	if err := dbs.checkpoint(ctx); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	if err := clock.start("(e) T_elt"); err != nil {
		return nil, err
	}
	c0, self0 := sampleCPU(), selfCPU()
	e, err := runELT(ctx, db, b.addr, maxDelay)
	clock.stop()
	if err != nil {
		return nil, fmt.Errorf("elt: %w", err)
	}
	e.busy, e.cpu = busy(c0, sampleCPU()), selfCPU()-self0
	logf("T_elt %v (load %v, transform %v; %d raw rows, %d invalid)", e.elapsed.Round(time.Millisecond),
		e.load.Round(time.Millisecond), e.transform.Round(time.Millisecond), e.copied, e.invalid)
	if e.rawBytes, err = relationSize(ctx, db, eltRawTable); err != nil {
		return nil, fmt.Errorf("size of %s: %w", eltRawTable, err)
	}
	single := aggSource{db: runDB, cols: eltCompareColumns}
	elt := aggSource{db: db, cols: eltCompareColumns}
	if e.rows, e.digest, err = sameAggregates(ctx, single, elt, "the ELT peer"); err != nil {
		return nil, err
	}
	return e, nil
}

// eltCompareColumns are the delay_aggregates columns (b) and the peer must
// agree on: all but pipeline (their names differ), the distributions (the
// peer stores none) and updated_at.
const eltCompareColumns = `window_start, window_end, dimension, dimension_id, operator,
	event_count, mean_delay_s, p90_delay_s, min_delay_s, max_delay_s`

// runELT is T_elt: from connecting to the COMMIT of the transform.
func runELT(ctx context.Context, dbURL, brokers string, maxDelay time.Duration) (*eltResult, error) {
	e := &eltResult{}
	began := time.Now()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// The partition readers decode and hand batches of rows to the COPY,
	// which runs on this goroutine; src.err, set before the channel closes,
	// fails the COPY (and so writes nothing) when a reader failed.
	batches := make(chan []aggregate.Prediction, 64)
	src := &eltSource{in: batches}
	limit := time.Now().Add(eltFutureSkew)
	var invalid atomic.Int64
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		e.read, src.readErr = eachPartition(brokers, []string{predTopic}, func(string, int32) visitor {
			return &eltVisitor{ctx: ctx, out: batches, limit: limit, maxDelayS: maxDelay.Seconds(), invalid: &invalid}
		})
		close(batches)
	}()
	e.copied, err = conn.CopyFrom(ctx, pgx.Identifier{eltRawTable}, eltRawColumns, src)
	if err != nil {
		cancel()
		for range batches { // let the readers end
		}
		<-readDone
		return nil, fmt.Errorf("copy into %s: %w", eltRawTable, err)
	}
	<-readDone
	e.invalid = invalid.Load()
	e.load = time.Since(began)

	t0 := time.Now()
	tag, err := conn.Exec(ctx, eltTransformSQL)
	if err != nil {
		return nil, fmt.Errorf("transform: %w", err)
	}
	e.transform = time.Since(t0)
	e.elapsed = time.Since(began)
	if tag.RowsAffected() == 0 {
		return nil, errors.New("transform: no rows")
	}
	return e, nil
}

// eltVisitor decodes the messages of one partition into batches of raw rows.
type eltVisitor struct {
	ctx   context.Context
	out   chan<- []aggregate.Prediction
	limit time.Time // event times after it are `future` dead letters in run
	// maxDelayS is (b)'s --max-delay in seconds: a larger |delay_s| is an
	// `implausible` dead letter in run.
	maxDelayS float64
	invalid   *atomic.Int64
	batch     []aggregate.Prediction
}

func (v *eltVisitor) Visit(m *sarama.ConsumerMessage) error {
	p, err := aggregate.DecodePrediction(m.Value)
	if err != nil || p.EventTime.After(v.limit) || math.Abs(p.DelayS) > v.maxDelayS {
		v.invalid.Add(1)
		return nil
	}
	if v.batch == nil {
		v.batch = make([]aggregate.Prediction, 0, eltBatch)
	}
	v.batch = append(v.batch, p)
	if len(v.batch) == eltBatch {
		return v.Done()
	}
	return nil
}

// Done hands over the rows of the batch.
func (v *eltVisitor) Done() error {
	if len(v.batch) == 0 {
		return nil
	}
	select {
	case v.out <- v.batch:
		v.batch = nil
		return nil
	case <-v.ctx.Done():
		return v.ctx.Err()
	}
}

// eltSource is the pgx.CopyFromSource of the raw rows.
type eltSource struct {
	in      <-chan []aggregate.Prediction
	batch   []aggregate.Prediction
	i       int
	values  [8]any
	readErr error // set by the readers before in closes
}

func (s *eltSource) Next() bool {
	s.i++
	for s.i >= len(s.batch) {
		b, ok := <-s.in
		if !ok {
			return false
		}
		s.batch, s.i = b, 0
	}
	return true
}

func (s *eltSource) Values() ([]any, error) {
	p := &s.batch[s.i]
	v := s.values[:]
	v[0], v[1], v[2], v[3], v[4], v[5] = p.TripID, p.Line, p.StopID, p.Operator, p.DelayS, p.EventTime
	v[6], v[7] = nil, nil
	if p.VehicleID != "" {
		v[6] = p.VehicleID
	}
	if p.HasStopSequence {
		v[7] = p.StopSequence
	}
	return v, nil
}

func (s *eltSource) Err() error { return s.readErr }

// copyPartitions makes in dbURL the daily partitions of delay_aggregates
// (migration 6) that (b)'s rows in runDB needed: before the clock, as T_write
// does, since the peer's INSERT does not make partitions and ovstream makes
// each one once per day ahead of its commit.
func copyPartitions(ctx context.Context, runDB, dbURL string) error {
	run, err := pgx.Connect(ctx, runDB)
	if err != nil {
		return err
	}
	defer run.Close(ctx)
	rows, err := run.Query(ctx, "SELECT DISTINCT date_trunc('day', window_start, 'UTC') FROM delay_aggregates")
	if err != nil {
		return fmt.Errorf("days of delay_aggregates: %w", err)
	}
	days, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	if err != nil {
		return fmt.Errorf("days of delay_aggregates: %w", err)
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	for _, d := range days {
		if _, err := conn.Exec(ctx, "SELECT ovs_create_delay_partition($1)", d); err != nil {
			return fmt.Errorf("create the partition of %s: %w", d.Format(time.DateOnly), err)
		}
	}
	return nil
}

// execOn runs one statement on dbURL.
func execOn(ctx context.Context, dbURL, sql string) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

func (e *eltResult) print(w io.Writer, run *runResult, load string) {
	fmt.Fprintf(w, "%-14s %8.2f %11.0f %11.0f %7.0f%% %-14s peer: load (read+decode+COPY) %.2fs, INSERT ... SELECT ... GROUP BY %.2fs; %d predictions read, %d raw rows (%.0f MB), %d invalid; client CPU %.1fs\n",
		"(e) T_elt", e.elapsed.Seconds(), rate(e.read, e.elapsed), rate(e.rows, e.elapsed), 100*e.busy, load,
		e.load.Seconds(), e.transform.Seconds(), e.read, e.copied, float64(e.rawBytes)/1e6, e.invalid, e.cpu.Seconds())
	fmt.Fprintf(w, "elt: delay_aggregates equal (b)'s over (%s): %d rows, md5 %s; T_elt / T_ovstream = %.2f\n",
		strings.Join(strings.Fields(eltCompareColumns), " "), e.rows, e.digest, e.elapsed.Seconds()/run.elapsed.Seconds())
}
