package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Retention (docs/operations.md "Retention"). delay_aggregates loses whole partitions,
// never rows one by one, and only partitions that can hold no window still
// to be written. Its age is event time, not wall clock: a partition may be
// dropped once its range ends at or before
//
//	floor - retention,  floor = min over EVERY row of stream_positions (all pipelines) of its watermark
//
// The partitions are shared by every pipeline of the database, so the
// slowest one sets the floor; a partition of any pipeline that was claimed
// but never committed (watermark NULL) blocks every drop, as does an empty
// stream_positions. A window still to be written ends after its writer's
// stored watermark (a commit writes the windows that its watermark
// finalized, and events of older windows are late), so it starts after
// floor - window >= floor - retention when retention >= the window size
// (consumer.Config checks it): its partition is never one that qualifies. A
// backfill of 2016 data written today is as old as its events, and kept as
// long as it is younger than the slowest watermark minus the retention; by
// the wall clock it would be dropped at once.
//
// Each drop is a transaction that takes the partition advisory lock (the one
// of ovs_create_delay_partition), then ACCESS EXCLUSIVE on delay_aggregates
// itself (LOCK TABLE ONLY; DROP TABLE of a partition needs it anyway, and
// taking it first keeps the lock order of every writer: parent, then
// partition), with lock_timeout 2 s, so it waits at most 2 s for commits in
// flight and holds off new ones only while it drops (milliseconds). Under
// that lock no commit writes delay_aggregates, so it reads the floor again
// and drops only what still qualifies. A pipeline that claims its partitions
// after that and writes an old window into a dropped range gets "no
// partition" at its next commit, which is retried once the partition is
// made again (partitions.go): nothing it writes is lost.

const (
	// dropBatch is how many partitions one drop transaction drops at most.
	dropBatch = 16
	// deadLetterBatch is how many dead letters one delete transaction deletes.
	deadLetterBatch = 5000
)

// retentionFloor is the floor above: NULL when stream_positions is empty or
// holds a partition never committed.
const retentionFloor = `SELECT CASE WHEN count(*) > 0 AND count(*) = count(watermark) THEN min(watermark) END FROM stream_positions`

// retentionFloorOf returns the event time retention counts back from (see
// above), UTC; ok is false when nothing may be dropped (no stored position,
// or a partition of some pipeline without a stored watermark).
func (s *Store) retentionFloorOf(ctx context.Context) (floor time.Time, ok bool, err error) {
	var f *time.Time
	err = s.do(ctx, func(conn *pgx.Conn) error { return conn.QueryRow(ctx, retentionFloor).Scan(&f) })
	if err != nil {
		return time.Time{}, false, fmt.Errorf("store: retention floor: %w", err)
	}
	if f == nil {
		return time.Time{}, false, nil
	}
	return f.UTC(), true, nil
}

// DropOldPartitions drops every partition of delay_aggregates whose range
// ends at or before the retention floor (above) minus retention (whole tables: DROP TABLE),
// oldest first, at most 16 per transaction. It returns what it dropped and
// the floor it measured against (zero when nothing may be dropped).
//
// Errors: a lock not granted within 2 s (SQLSTATE 55P03, Retryable: commits
// were in flight; try again later), a connection error; what was dropped
// before the error is returned with it.
func (s *Store) DropOldPartitions(ctx context.Context, retention time.Duration) (dropped []PartitionRange, floor time.Time, err error) {
	if retention <= 0 {
		return nil, time.Time{}, fmt.Errorf("store: retention %v is not positive", retention)
	}
	floor, ok, err := s.retentionFloorOf(ctx)
	if err != nil || !ok {
		return nil, time.Time{}, err
	}
	old, err := s.partitionsEndingBy(ctx, floor.Add(-retention))
	if err != nil || len(old) == 0 {
		return nil, floor, err
	}
	for {
		var batch []PartitionRange
		err := s.do(ctx, func(conn *pgx.Conn) error {
			batch = nil
			return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
				var err error
				batch, floor, err = dropOld(ctx, tx, retention, floor)
				return err
			})
		})
		if err != nil {
			return dropped, floor, fmt.Errorf("store: drop delay_aggregates partitions older than %v before the watermark floor: %w", retention, err)
		}
		dropped = append(dropped, batch...)
		if len(batch) < dropBatch {
			return dropped, floor, nil
		}
	}
}

// dropOld is one drop transaction (see above); floor is returned as read
// under the lock.
func dropOld(ctx context.Context, tx pgx.Tx, retention time.Duration, floor time.Time) ([]PartitionRange, time.Time, error) {
	for _, sql := range []string{
		fmt.Sprintf("SET LOCAL lock_timeout = %d", partitionLockTimeout.Milliseconds()),
		`SELECT pg_advisory_xact_lock(to_regclass('delay_aggregates')::oid::bigint)`,
		`LOCK TABLE ONLY delay_aggregates IN ACCESS EXCLUSIVE MODE`,
	} {
		if _, err := tx.Exec(ctx, sql); err != nil {
			return nil, floor, err
		}
	}
	var f *time.Time
	if err := tx.QueryRow(ctx, retentionFloor).Scan(&f); err != nil {
		return nil, floor, err
	}
	if f == nil {
		return nil, floor, nil // a pipeline started meanwhile: it blocks every drop
	}
	floor = f.UTC()
	old, err := readPartitions(ctx, tx, "$1", floor.Add(-retention))
	if err != nil {
		return nil, floor, err
	}
	old = old[:min(len(old), dropBatch)]
	for _, p := range old {
		// p.Name is regclass output: quoted by PostgreSQL where needed.
		if _, err := tx.Exec(ctx, "DROP TABLE "+p.Name); err != nil {
			return nil, floor, fmt.Errorf("drop %s: %w", p.Name, err)
		}
	}
	return old, floor, nil
}

// partitionsEndingBy returns the partitions whose range ends at or before t.
func (s *Store) partitionsEndingBy(ctx context.Context, t time.Time) ([]PartitionRange, error) {
	var out []PartitionRange
	err := s.do(ctx, func(conn *pgx.Conn) (err error) {
		out, err = readPartitions(ctx, conn, "$1", t)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: read the partitions of delay_aggregates: %w", err)
	}
	return out, nil
}

// DeleteOldDeadLetters deletes pipeline's dead letters whose created_at (the
// database's clock when the commit stored them) is more than age before the
// database's now(), replayed by `dlq replay` or not, oldest first, at most
// 5,000 per transaction (index dead_letters_created, migration 0006), so no
// transaction holds many row locks or runs long. Other pipelines' dead
// letters are left alone. It returns how many it deleted, also on error.
func (s *Store) DeleteOldDeadLetters(ctx context.Context, pipeline string, age time.Duration) (int64, error) {
	if age <= 0 {
		return 0, fmt.Errorf("store: dead-letter retention %v is not positive", age)
	}
	var cutoff time.Time
	err := s.do(ctx, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT now() - $1::bigint * interval '1 microsecond'`, age.Microseconds()).Scan(&cutoff)
	})
	var deleted int64
	for err == nil {
		var n int64
		err = s.do(ctx, func(conn *pgx.Conn) error {
			tag, err := conn.Exec(ctx, `
DELETE FROM dead_letters WHERE (pipeline, topic, partition, "offset") IN (
    SELECT pipeline, topic, partition, "offset" FROM dead_letters
    WHERE pipeline = $1 AND created_at < $2 ORDER BY created_at LIMIT $3)`, pipeline, cutoff, deadLetterBatch)
			n = tag.RowsAffected()
			return err
		})
		deleted += n
		if n < deadLetterBatch {
			break
		}
	}
	if err != nil {
		return deleted, fmt.Errorf("store: delete dead letters of pipeline %q older than %v: %w", pipeline, age, err)
	}
	return deleted, nil
}
