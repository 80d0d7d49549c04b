package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ovstream/ovstream/aggregate"
)

// delay_aggregates is partitioned by RANGE on window_start, one partition per
// day in UTC (migration 0006, which says why a day). A commit never creates a
// partition inside its transaction: before it begins, EnsurePartitions makes
// sure that every window it writes has its partition, plus the day after the
// newest (so no commit creates one at midnight), each created by the SQL
// function ovs_create_delay_partition in a statement of its own, outside any
// transaction block.
// That function ATTACHes a new empty table: SHARE UPDATE EXCLUSIVE on
// delay_aggregates, which does not conflict with the ROW EXCLUSIVE of a
// commit (a split merge included) or the ACCESS SHARE of a reader, so it
// never waits for them nor blocks them (PostgreSQL 15 docs, ALTER TABLE
// ATTACH PARTITION and "Table-Level Locks"); CREATE TABLE ... PARTITION OF
// would take ACCESS EXCLUSIVE. Two instances that need the same day are
// serialized by the function's advisory lock; the second finds the first's
// partition. The Store remembers the ranges it knows to exist, so a commit
// whose windows all have a known partition sends nothing more.

// PartitionSpan is the range of one delay_aggregates partition: a day, UTC.
const PartitionSpan = 24 * time.Hour

const (
	// partitionLockTimeout bounds a partition DDL's wait for a table lock
	// (lock_timeout): while it waits in the queue, later lock requests on
	// delay_aggregates wait behind it.
	partitionLockTimeout = 2 * time.Second
	// aheadRetry is how long a failed creation of the partition ahead (the
	// day after the newest window) is not tried again; the commit goes on.
	aheadRetry = time.Minute
)

// PartitionRange is the window_start range one partition of delay_aggregates
// holds: [Start, End), UTC.
type PartitionRange struct {
	Name       string // e.g. delay_aggregates_20160518
	Start, End time.Time
}

// partitionCache is what a Store knows of delay_aggregates' partitions.
type partitionCache struct {
	known       []PartitionRange // sorted by Start; each exists (or existed: see reset)
	loaded      bool             // known was read from the catalog since the last reset
	aheadNotYet time.Time        // no new try at the partition ahead before this (wall clock)
}

// covers tells whether a known partition holds window_start t.
func (c *partitionCache) covers(t time.Time) bool {
	i, _ := slices.BinarySearchFunc(c.known, t, func(r PartitionRange, t time.Time) int {
		if r.Start.After(t) {
			return 1
		}
		return -1
	})
	return i > 0 && t.Before(c.known[i-1].End)
}

func (c *partitionCache) add(r PartitionRange) {
	if c.covers(r.Start) {
		return
	}
	c.known = append(c.known, r)
	slices.SortFunc(c.known, func(a, b PartitionRange) int { return a.Start.Compare(b.Start) })
}

// reset forgets every partition: a commit found one missing (retention
// dropped it, or someone else did), so the next commit reads them again.
func (c *partitionCache) reset() { *c = partitionCache{} }

// dayOf returns the start of the UTC day that holds t: the start of t's
// partition.
func dayOf(t time.Time) time.Time {
	const day = int64(PartitionSpan / time.Second)
	s := t.Unix()
	d := s / day
	if s%day < 0 {
		d-- // floor, before 1970 too
	}
	return time.Unix(d*day, 0).UTC()
}

// missingDays returns the UTC days of starts that no known partition holds,
// ascending, and the latest of starts (zero if none).
func (c *partitionCache) missingDays(starts []time.Time) (missing []time.Time, latest time.Time) {
	var last time.Time
	for _, t := range starts {
		if t.After(latest) || latest.IsZero() {
			latest = t
		}
		if t.Equal(last) {
			continue // rows of one window come together
		}
		last = t
		if d := dayOf(t); !c.covers(t) && !slices.ContainsFunc(missing, d.Equal) {
			missing = append(missing, d)
		}
	}
	slices.SortFunc(missing, time.Time.Compare)
	return missing, latest
}

// windowStarts returns the window starts of rows, in their order.
func windowStarts(rows []aggregate.Row) []time.Time {
	starts := make([]time.Time, len(rows))
	for i := range rows {
		starts[i] = rows[i].WindowStart
	}
	return starts
}

// partialStarts returns the window starts of ps, in their order.
func partialStarts(ps []aggregate.PartialWindow) []time.Time {
	starts := make([]time.Time, len(ps))
	for i := range ps {
		starts[i] = ps[i].WindowStart
	}
	return starts
}

// EnsurePartitions makes sure delay_aggregates has a partition holding each
// of starts (window starts, any time zone), creating the missing days, each
// in a statement of its own outside any transaction (never inside a
// commit), and, best effort, the day after the latest of starts when that
// is the newest partition (a failure there is not an error; it is tried
// again a minute later at the earliest). The first call of a Store reads the catalog once;
// later calls send nothing while every day is known. Safe against other
// instances creating the same days at the same time. Commit and CommitSplit
// call it before their transaction; a caller writing delay_aggregates rows
// by other means calls it first.
//
// Errors: the creation of a needed partition that failed, naming the day: a
// lock not granted within 2 s (SQLSTATE 55P03, Retryable), or a range that
// overlaps a partition an operator made with other bounds (42P17, terminal).
func (s *Store) EnsurePartitions(ctx context.Context, starts []time.Time) error {
	missing, latest := s.parts.missingDays(starts)
	if len(missing) == 0 && s.parts.loaded && !s.parts.wantsAhead(latest) {
		return nil // the common case: nothing sent
	}
	if err := s.loadPartitions(ctx); err != nil {
		return fmt.Errorf("store: read the partitions of delay_aggregates: %w", err)
	}
	for _, d := range missing {
		if s.parts.covers(d) {
			continue // another instance made it
		}
		if err := s.createPartition(ctx, d); err != nil {
			return fmt.Errorf("store: create the delay_aggregates partition of %s (UTC): %w", d.Format(time.DateOnly), err)
		}
	}
	if s.parts.wantsAhead(latest) {
		if err := s.createPartition(ctx, dayOf(latest).Add(PartitionSpan)); err != nil {
			s.parts.aheadNotYet = time.Now().Add(aheadRetry)
		}
	}
	return nil
}

// wantsAhead tells whether the day after latest (the newest window of a
// commit) should be made now: latest is in the newest partition known (a
// backfill behind it makes none), the next day has none, and no failed try
// is recent.
func (c *partitionCache) wantsAhead(latest time.Time) bool {
	if latest.IsZero() || time.Now().Before(c.aheadNotYet) {
		return false
	}
	if n := len(c.known); n > 0 && c.known[n-1].Start.After(latest) {
		return false
	}
	return !c.covers(dayOf(latest).Add(PartitionSpan))
}

// readPartitions reads the partitions of delay_aggregates (ovs_delay_partitions)
// whose range ends at or before endsBy (a timestamptz expression such as
// "$1"; "" for all), by range.
func readPartitions(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, endsBy string, args ...any) ([]PartitionRange, error) {
	sql := `SELECT partition_name::text, range_start, range_end FROM ovs_delay_partitions()`
	if endsBy != "" {
		sql += ` WHERE range_end <= ` + endsBy
	}
	rows, err := q.Query(ctx, sql+` ORDER BY range_start`, args...)
	if err != nil {
		return nil, err
	}
	var out []PartitionRange
	var r PartitionRange
	_, err = pgx.ForEachRow(rows, []any{&r.Name, &r.Start, &r.End}, func() error {
		r.Start, r.End = r.Start.UTC(), r.End.UTC()
		out = append(out, r)
		return nil
	})
	return out, err
}

// loadPartitions replaces what the Store knows of the partitions with the catalog's.
func (s *Store) loadPartitions(ctx context.Context) error {
	return s.do(ctx, func(conn *pgx.Conn) error {
		known, err := readPartitions(ctx, conn, "")
		if err != nil {
			return err
		}
		aheadNotYet := s.parts.aheadNotYet
		s.parts = partitionCache{known: known, loaded: true, aheadNotYet: aheadNotYet}
		return nil
	})
}

// createPartition creates the partition of day (ovs_create_delay_partition)
// in a statement outside any BEGIN (its own transaction, with no COMMIT to
// lose), waiting at most partitionLockTimeout for a lock, and remembers it.
// When another session created that table at the same moment without the
// function's advisory lock (duplicate name or overlapping range), the
// partitions are read again and the day counts as made if one holds it.
func (s *Store) createPartition(ctx context.Context, day time.Time) error {
	var r PartitionRange
	err := s.do(ctx, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT partition_name::text, range_start, range_end
			FROM ovs_create_delay_partition($1, $2::bigint * interval '1 millisecond')`,
			day, partitionLockTimeout.Milliseconds()).Scan(&r.Name, &r.Start, &r.End)
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "42P07" || pgErr.Code == "23505" || pgErr.Code == "42P17") {
		if lerr := s.loadPartitions(ctx); lerr == nil && s.parts.covers(day) {
			return nil
		}
	}
	if err != nil {
		return err
	}
	r.Start, r.End = r.Start.UTC(), r.End.UTC()
	s.parts.add(r)
	return nil
}

// ensureForSplit is EnsurePartitions for a split commit: its partials'
// windows, and, when the Store knows no partition yet (its first commit, or
// after one was found missing), every window whose partials wait for the
// merge, which this commit may merge.
func (s *Store) ensureForSplit(ctx context.Context, b *Batch) error {
	starts := partialStarts(b.Partials)
	if !s.parts.loaded {
		err := s.do(ctx, func(conn *pgx.Conn) error {
			rows, err := conn.Query(ctx, `SELECT DISTINCT window_start FROM delay_partial_windows WHERE pipeline = $1`, b.Pipeline)
			if err != nil {
				return err
			}
			pending, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
			starts = append(starts, pending...)
			return err
		})
		if err != nil {
			return fmt.Errorf("store: windows waiting for the merge: %w", err)
		}
	}
	return s.EnsurePartitions(ctx, append(starts, replayedStarts(b.Replayed)...))
}

// noPartition tells whether err is PostgreSQL finding no partition of
// delay_aggregates for a row (SQLSTATE 23514 without a constraint, raised
// by ExecFindPartition): a partition the Store believed in was dropped
// meanwhile. Not a value PostgreSQL refuses (Refused is false): the commit is
// retried (Retryable is true) after EnsurePartitions creates it again.
func noPartition(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23514" && pgErr.ConstraintName == "" &&
		(pgErr.Routine == "ExecFindPartition" || strings.HasPrefix(pgErr.Message, "no partition of relation"))
}
