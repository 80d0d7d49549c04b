package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ovstream/ovstream/aggregate"
)

// Commit writes b in ONE transaction (docs/design.md "The commit"): fencing and the
// watermark, windows (replace), latest state (newer wins), names (newer
// wins; writeNames), dead letters (once), stream positions (never
// backwards). It writes all of b or nothing (but a name PostgreSQL refuses,
// which is left out and reported to OnNameRefused). Before the transaction
// it creates the delay_aggregates partitions b's windows need
// (EnsurePartitions, partitions.go).
//
// b.Positions names the partitions the batch is fenced by (at least one): a
// commit writes only while b.Owner holds every one of them at b.Epoch.
//
// Errors: ErrFenced (errors.Is) when b.Owner no longer holds one of
// b.Positions' partitions at b.Epoch (another instance claimed it);
// *BehindError when the database lost commits or the claim (ClaimLost: an
// older epoch, or no row for a partition: claim again);
// *RejectedError (errors.As) when PostgreSQL refused rows for a value they
// hold, naming them; *CommitError when the COMMIT statement failed;
// otherwise the failing step, wrapped. After any error the connection is
// thrown away. Retry the whole batch, never a part of it, when Retryable
// says so.
func (s *Store) Commit(ctx context.Context, b Batch) error {
	starts := windowStarts(b.Windows)
	if b.Closed.Len() > 0 {
		starts = b.Closed.Starts()
	}
	if err := s.EnsurePartitions(ctx, append(starts, replayedStarts(b.Replayed)...)); err != nil {
		return err // not a refusal of the batch's rows: retried whole, or terminal
	}
	if err := s.commit(ctx, &b, nil); err != nil {
		s.discard()
		if noPartition(err) {
			s.parts.reset()
		}
		what := fmt.Sprintf("store: commit %d windows, %d vehicles, %d trips, %d dead letters, %d partitions",
			b.WindowRows(), len(b.Vehicles), len(b.Trips), len(b.DeadLetters), len(b.Positions))
		if errors.Is(err, ErrFenced) {
			return fmt.Errorf("%s: pipeline %q owner %q epoch %d: %w", what, b.Pipeline, b.Owner, b.Epoch, err)
		}
		err = fmt.Errorf("%s: %w", what, err)
		if Refused(err) {
			if b.Closed.Len() > 0 { // the search writes halves of them: rows it can index
				b.Windows, b.Closed = b.Closed.Rows(), aggregate.ClosedSet{}
			}
			return s.rejected(ctx, &b, err)
		}
		return err
	}
	return nil
}

// commit writes b in one transaction; with b.Split it writes b.Partials and
// merges (mergeSplit), reporting into m.
func (s *Store) commit(ctx context.Context, b *Batch, m *Merged) (err error) {
	if m == nil {
		m = &Merged{}
	}
	if len(b.Positions) == 0 {
		return errors.New("a batch is fenced by the owner and epoch of its partitions: it needs at least one Position")
	}
	conn, err := s.connection(ctx)
	if err != nil {
		return err
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			// Best effort and bounded: the connection is thrown away next,
			// which rolls back on the server anyway.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_ = tx.Rollback(rctx)
			cancel()
		}
	}()

	positions := mergePositions(b.Positions)
	parts := make([]aggregate.PartitionID, len(positions))
	for i, p := range positions {
		parts[i] = p.PartitionID
	}
	if err := fence(ctx, tx, b.Pipeline, b.Owner, b.Epoch, positions); err != nil {
		return fmt.Errorf("fencing: %w", err)
	}
	if b.Split == nil {
		if err := finalOnly(ctx, tx, b.Pipeline, b.Watermark, parts); err != nil {
			return err
		}
	}

	if err := upsertWindows(ctx, tx, b.Pipeline, b.Windows); err != nil {
		return fmt.Errorf("upsert windows: %w", err)
	}
	if err := upsertClosed(ctx, tx, b.Pipeline, b.Closed); err != nil {
		return fmt.Errorf("upsert windows: %w", err)
	}
	if err := writeProvisional(ctx, tx, b); err != nil {
		return fmt.Errorf("write provisional rows: %w", err)
	}
	if b.Split != nil {
		if err := writePartials(ctx, tx, b.Pipeline, b.Split.Topic, b.Partials); err != nil {
			return fmt.Errorf("write partials: %w", err)
		}
	}
	if err := upsertVehicles(ctx, tx, b.Pipeline, b.Vehicles); err != nil {
		return fmt.Errorf("upsert vehicle_latest: %w", err)
	}
	if err := upsertTrips(ctx, tx, b.Pipeline, b.Trips); err != nil {
		return fmt.Errorf("upsert trip_delay_latest: %w", err)
	}
	if err := s.writeNames(ctx, tx, b.Pipeline, b.Names); err != nil {
		return fmt.Errorf("upsert names: %w", err)
	}
	if h := s.hooks.AfterWindows; h != nil {
		h()
	}
	if err := insertDeadLetters(ctx, tx, b.Pipeline, b.DeadLetters); err != nil {
		return fmt.Errorf("insert dead letters: %w", err)
	}
	if err := upsertVisits(ctx, tx, b.Pipeline, b.Visits, b.NoStartDate); err != nil {
		return fmt.Errorf("upsert stop_visits: %w", err)
	}
	if err := storePositions(ctx, tx, b.Pipeline, b.Watermark, positions); err != nil {
		return fmt.Errorf("update stream_positions: %w", err)
	}
	if b.Split != nil {
		// A commit with provisional rows takes the pipeline's lock, as a
		// merge does (writeSplitProvisional).
		mayLeave := b.Split.Holding && !marksDrained(b) && b.Provisional == nil
		if err := mergeSplit(ctx, tx, b.Pipeline, b.Split, mayLeave, s.mergeChunkRows(), b.Watermark, parts, m); err != nil {
			return fmt.Errorf("merge: %w", err)
		}
		if err := writeSplitProvisional(ctx, tx, b, m.Until); err != nil {
			return fmt.Errorf("write provisional rows: %w", err)
		}
	}
	if len(b.Replayed) > 0 {
		out := b.ReplayOut
		if out == nil {
			out = &ReplayOutcome{}
		}
		if err := mergeReplayed(ctx, tx, b.Pipeline, b.Replayed, out); err != nil {
			return fmt.Errorf("count %d replayed dead letters: %w", len(b.Replayed), err)
		}
	}
	if h := s.hooks.BeforeCommit; h != nil {
		h()
	}
	committed = true // from here on Commit closes the transaction either way
	// pgconn.SafeToRetry cannot tell whether COMMIT was sent: when the
	// connection breaks while pgx waits for COMMIT's answer, pgx v5 returns
	// "conn closed" with SafeToRetry() true (STACK.md), although the server
	// may have committed. Only a connection closed before COMMIT is certain
	// to have sent nothing.
	closedBefore := conn.IsClosed()
	if err := tx.Commit(ctx); err != nil {
		var pgErr *pgconn.PgError
		definite := errors.As(err, &pgErr) || errors.Is(err, pgx.ErrTxCommitRollback) || closedBefore
		// A split drain's last commit must learn its outcome: from its
		// partitions' commit sequences on a new connection, never from
		// txid_status, which cannot tell across a failover (outcome.go).
		if !definite && marksDrained(b) {
			switch s.outcome(ctx, b.Pipeline, b.Owner, b.Epoch, positions) {
			case outcomeCommitted:
				return nil // m holds what its merge did
			case outcomeAborted:
				definite = true
			}
		}
		return &CommitError{Ambiguous: !definite, Err: err}
	}
	return nil
}

// Temporary tables, created once per connection (outside any transaction, so
// a rollback cannot drop them) and emptied by every commit or rollback.
// ovs_windows' distributions then take delay_aggregates' compression
// (matchTempCompression).
const createTempTables = `
CREATE TEMP TABLE IF NOT EXISTS ovs_windows (
    pipeline text, window_start timestamptz, window_end timestamptz, dimension text, dimension_id text, operator text,
    event_count bigint, mean_delay_s double precision, p90_delay_s double precision,
    min_delay_s double precision, max_delay_s double precision,
    delay_values double precision[], delay_counts bigint[]
) ON COMMIT DELETE ROWS;
CREATE TEMP TABLE IF NOT EXISTS ovs_vehicles (
    pipeline text, vehicle_id text, trip_id text, line text, operator text, lat double precision, lon double precision,
    bearing double precision, speed_mps double precision, observed_at timestamptz,
    kafka_partition integer, kafka_offset bigint
) ON COMMIT DELETE ROWS;
CREATE TEMP TABLE IF NOT EXISTS ovs_trips (
    pipeline text, trip_id text, line text, stop_id text, operator text, vehicle_id text, stop_sequence bigint,
    delay_s double precision, observed_at timestamptz, kafka_partition integer, kafka_offset bigint
) ON COMMIT DELETE ROWS;`

// matchTempCompression gives ovs_windows' distributions the compression of
// delay_aggregates.delay_values when that is lz4 (migration 14, where the
// server has it). INSERT ... SELECT keeps a compressed value as it is, in
// the method it was compressed with, so a row replayed through ovs_windows
// kept the server's default, pglz (TestMigration14ReplayedWindowKeepsLZ4
// found it so on PostgreSQL 15). Run on each new connection after createTempTables: an
// instance running while migration 14 is applied takes lz4 at its next
// connection. On a database without delay_aggregates yet (to_regclass is
// NULL) nothing changes. Plain SQL, no plpgsql: a hardened database may
// revoke its USAGE.
func matchTempCompression(ctx context.Context, conn *pgx.Conn) error {
	var method string
	err := conn.QueryRow(ctx, `SELECT coalesce((SELECT attcompression::text FROM pg_attribute
    WHERE attrelid = to_regclass('delay_aggregates') AND attname = 'delay_values'), '')`).Scan(&method)
	if err != nil || method != "l" {
		return err
	}
	_, err = conn.Exec(ctx, `ALTER TABLE pg_temp.ovs_windows ALTER COLUMN delay_values SET COMPRESSION lz4,
    ALTER COLUMN delay_counts SET COMPRESSION lz4`)
	return err
}

// windowColumns are the delay_aggregates columns a commit writes, in the
// order of appendWindow; updated_at takes its default, now().
const windowColumns = "pipeline, window_start, window_end, dimension, dimension_id, operator, " +
	"event_count, mean_delay_s, p90_delay_s, min_delay_s, max_delay_s, delay_values, delay_counts"

// appendWindow appends rows[i] as one binary COPY tuple of windowColumns
// (appendRow).
func appendWindow(pipeline string, rows []aggregate.Row) func(b []byte, i int) []byte {
	return func(b []byte, i int) []byte { return appendRow(b, pipeline, &rows[i]) }
}

// appendRow appends r as one binary COPY tuple of windowColumns. A row's
// distribution goes into delay_values and delay_counts; a Row without one
// (built by hand) is stored with NULL there.
func appendRow(b []byte, pipeline string, r *aggregate.Row) []byte {
	b = appendFieldCount(b, 13)
	b = appendText(b, pipeline)
	b = appendTimestamptz(b, r.WindowStart)
	b = appendTimestamptz(b, r.WindowEnd)
	b = appendText(b, r.Dimension)
	b = appendText(b, r.DimensionID)
	b = appendNullText(b, r.Operator)
	b = appendInt8(b, r.Count)
	b = appendFloat8(b, within(r.Mean, r.Min, r.Max))
	b = appendFloat8(b, within(r.P90, r.Min, r.Max))
	b = appendFloat8(b, r.Min)
	b = appendFloat8(b, r.Max)
	if len(r.Values) == 0 {
		return appendNull(appendNull(b))
	}
	b = appendFloat8Array(b, r.Values)
	return appendInt8Array(b, r.Counts)
}

// appendClosed returns the tuples of the rows of c, built one at a time in
// their order (aggregate.RowCursor).
func appendClosed(pipeline string, c aggregate.ClosedSet) tupleFunc {
	return rowTuples(pipeline, c.Cursor().Next, func() error { return nil })
}

// rowTuples returns the tuples of the rows next yields (appendRow); once next
// yields no more, end says whether that was an error.
func rowTuples(pipeline string, next func(*aggregate.Row) bool, end func() error) tupleFunc {
	var r aggregate.Row
	return func(b []byte) ([]byte, bool, error) {
		if !next(&r) {
			return b, false, end()
		}
		return appendRow(b, pipeline, &r), true, nil
	}
}

// upsertWindows writes the finalized windows, replacing rows that exist.
//
// A window is finalized once (its later events are late), so its rows are
// new in the normal case: they are COPied straight into delay_aggregates,
// inside a savepoint. When a row exists already (a replay after an ambiguous
// COMMIT, a batch committed twice) or the batch holds one key twice, the COPY
// fails with unique_violation (23505): the savepoint is rolled back and the
// rows go through a temporary table and INSERT ... ON CONFLICT DO UPDATE
// (replace, never add). Both paths store the same rows.
func upsertWindows(ctx context.Context, tx pgx.Tx, pipeline string, rows []aggregate.Row) error {
	if len(rows) == 0 {
		return nil
	}
	return copyWindows(ctx, tx, func() tupleFunc { return indexed(len(rows), appendWindow(pipeline, rows)) })
}

// upsertClosed is upsertWindows for the rows of c, built as the COPY sends
// them (Batch.Closed).
func upsertClosed(ctx context.Context, tx pgx.Tx, pipeline string, c aggregate.ClosedSet) error {
	if c.Len() == 0 {
		return nil
	}
	return copyWindows(ctx, tx, func() tupleFunc { return appendClosed(pipeline, c) })
}

// copyWindows is upsertWindows for the rows whose tuples tuples() writes
// (called once per COPY: again for the second path). An error of the
// tuples is returned as it is.
func copyWindows(ctx context.Context, tx pgx.Tx, tuples func() tupleFunc) error {
	sp, err := tx.Begin(ctx) // SAVEPOINT
	if err != nil {
		return fmt.Errorf("savepoint: %w", err)
	}
	srcErr, err := copyBinary(ctx, sp.Conn().PgConn(), "COPY delay_aggregates ("+windowColumns+") FROM STDIN (FORMAT binary)", tuples())
	if srcErr != nil {
		return srcErr
	}
	if err == nil {
		if err := sp.Commit(ctx); err != nil { // RELEASE SAVEPOINT
			return fmt.Errorf("release savepoint: %w", err)
		}
		return nil
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23505" {
		return fmt.Errorf("copy: %w", err)
	}
	if err := sp.Rollback(ctx); err != nil { // ROLLBACK TO SAVEPOINT
		return fmt.Errorf("rollback to savepoint: %w", err)
	}
	srcErr, err = copyBinary(ctx, tx.Conn().PgConn(), "COPY ovs_windows ("+windowColumns+") FROM STDIN (FORMAT binary)", tuples())
	if srcErr != nil {
		return srcErr
	}
	if err != nil {
		return fmt.Errorf("copy: %w", err)
	}
	// DISTINCT ON: two rows for one key would fail the whole statement (21000);
	// the caller sends one per key, this keeps the last one if not.
	_, err = tx.Exec(ctx, `
INSERT INTO delay_aggregates AS t (pipeline, window_start, window_end, dimension, dimension_id, operator,
    event_count, mean_delay_s, p90_delay_s, min_delay_s, max_delay_s, delay_values, delay_counts, updated_at)
SELECT DISTINCT ON (window_start, dimension, dimension_id)
    pipeline, window_start, window_end, dimension, dimension_id, operator,
    event_count, mean_delay_s, p90_delay_s, min_delay_s, max_delay_s, delay_values, delay_counts, now()
FROM ovs_windows
ORDER BY window_start, dimension, dimension_id, ctid DESC
ON CONFLICT (pipeline, window_start, dimension, dimension_id) DO UPDATE SET
    window_end = EXCLUDED.window_end, operator = EXCLUDED.operator, event_count = EXCLUDED.event_count,
    mean_delay_s = EXCLUDED.mean_delay_s, p90_delay_s = EXCLUDED.p90_delay_s,
    min_delay_s = EXCLUDED.min_delay_s, max_delay_s = EXCLUDED.max_delay_s,
    delay_values = EXCLUDED.delay_values, delay_counts = EXCLUDED.delay_counts, updated_at = now()`)
	return err
}

func upsertVehicles(ctx context.Context, tx pgx.Tx, pipeline string, rows []Vehicle) error {
	if len(rows) == 0 {
		return nil
	}
	_, err := tx.CopyFrom(ctx, pgx.Identifier{"ovs_vehicles"},
		[]string{"pipeline", "vehicle_id", "trip_id", "line", "operator", "lat", "lon", "bearing", "speed_mps",
			"observed_at", "kafka_partition", "kafka_offset"},
		pgx.CopyFromSlice(len(rows), func(i int) ([]any, error) {
			v := &rows[i]
			return []any{pipeline, v.VehicleID, nullString(v.TripID), nullString(v.Line), nullString(v.Operator),
				v.Lat, v.Lon, v.Bearing, v.SpeedMPS, v.EventTime.UTC(), v.Partition, v.Offset}, nil
		}))
	if err != nil {
		return fmt.Errorf("copy: %w", err)
	}
	_, err = tx.Exec(ctx, `
INSERT INTO vehicle_latest AS t (pipeline, vehicle_id, trip_id, line, operator, lat, lon, bearing, speed_mps,
    observed_at, kafka_partition, kafka_offset, updated_at)
SELECT DISTINCT ON (vehicle_id)
    pipeline, vehicle_id, trip_id, line, operator, lat, lon, bearing, speed_mps,
    observed_at, kafka_partition, kafka_offset, now()
FROM ovs_vehicles
ORDER BY vehicle_id, observed_at DESC, kafka_offset DESC
ON CONFLICT (pipeline, vehicle_id) DO UPDATE SET
    trip_id = EXCLUDED.trip_id, line = EXCLUDED.line, operator = EXCLUDED.operator,
    lat = EXCLUDED.lat, lon = EXCLUDED.lon, bearing = EXCLUDED.bearing, speed_mps = EXCLUDED.speed_mps,
    observed_at = EXCLUDED.observed_at, kafka_partition = EXCLUDED.kafka_partition,
    kafka_offset = EXCLUDED.kafka_offset, updated_at = now()
WHERE (EXCLUDED.observed_at, EXCLUDED.kafka_offset) >= (t.observed_at, t.kafka_offset)`)
	return err
}

func upsertTrips(ctx context.Context, tx pgx.Tx, pipeline string, rows []Trip) error {
	if len(rows) == 0 {
		return nil
	}
	_, err := tx.CopyFrom(ctx, pgx.Identifier{"ovs_trips"},
		[]string{"pipeline", "trip_id", "line", "stop_id", "operator", "vehicle_id", "stop_sequence", "delay_s",
			"observed_at", "kafka_partition", "kafka_offset"},
		pgx.CopyFromSlice(len(rows), func(i int) ([]any, error) {
			t := &rows[i]
			var seq any
			if t.HasStopSequence {
				seq = t.StopSequence
			}
			return []any{pipeline, t.TripID, t.Line, t.StopID, t.Operator, nullString(t.VehicleID), seq, t.DelayS,
				t.EventTime.UTC(), t.Partition, t.Offset}, nil
		}))
	if err != nil {
		return fmt.Errorf("copy: %w", err)
	}
	_, err = tx.Exec(ctx, `
INSERT INTO trip_delay_latest AS t (pipeline, trip_id, line, stop_id, operator, vehicle_id, stop_sequence, delay_s,
    observed_at, kafka_partition, kafka_offset, updated_at)
SELECT DISTINCT ON (trip_id)
    pipeline, trip_id, line, stop_id, operator, vehicle_id, stop_sequence, delay_s,
    observed_at, kafka_partition, kafka_offset, now()
FROM ovs_trips
ORDER BY trip_id, observed_at DESC, kafka_offset DESC
ON CONFLICT (pipeline, trip_id) DO UPDATE SET
    line = EXCLUDED.line, stop_id = EXCLUDED.stop_id, operator = EXCLUDED.operator,
    vehicle_id = EXCLUDED.vehicle_id, stop_sequence = EXCLUDED.stop_sequence, delay_s = EXCLUDED.delay_s,
    observed_at = EXCLUDED.observed_at, kafka_partition = EXCLUDED.kafka_partition,
    kafka_offset = EXCLUDED.kafka_offset, updated_at = now()
WHERE (EXCLUDED.observed_at, EXCLUDED.kafka_offset) >= (t.observed_at, t.kafka_offset)`)
	return err
}

func insertDeadLetters(ctx context.Context, tx pgx.Tx, pipeline string, dls []DeadLetter) error {
	if len(dls) == 0 {
		return nil
	}
	n := len(dls)
	topics, parts, offsets := make([]string, n), make([]int32, n), make([]int64, n)
	keys, values := make([][]byte, n), make([][]byte, n)
	reasons, errs := make([]string, n), make([]string, n)
	srcTopics, srcParts, srcOffsets := make([]*string, n), make([]*int32, n), make([]*int64, n)
	for i, d := range dls {
		topics[i], parts[i], offsets[i] = d.Topic, d.Partition, d.Offset
		keys[i], values[i] = d.Key, d.Value
		reasons[i], errs[i] = d.Reason, d.Error
		if !d.Source.IsZero() {
			srcTopics[i], srcParts[i], srcOffsets[i] = &d.Source.Topic, &d.Source.Partition, &d.Source.Offset
		}
	}
	_, err := tx.Exec(ctx, `
INSERT INTO dead_letters (pipeline, topic, partition, "offset", key, value, reason, error, source_topic, source_partition, source_offset)
SELECT $8, * FROM unnest($1::text[], $2::integer[], $3::bigint[], $4::bytea[], $5::bytea[], $6::text[], $7::text[],
    $9::text[], $10::integer[], $11::bigint[])
ON CONFLICT (pipeline, topic, partition, "offset") DO NOTHING`, topics, parts, offsets, keys, values, reasons, errs, pipeline,
		srcTopics, srcParts, srcOffsets)
	return err
}
