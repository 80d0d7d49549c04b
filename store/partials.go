package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ovstream/ovstream/aggregate"
)

// Split pipelines (docs/design.md "Pipelines, instances and partitions", Split
// windows and Draining a split pipeline). An instance that does not own every
// partition of its pipeline writes partial windows (delay_partial_windows,
// one per window and source partition, aggregate.PartialWindow) with its positions; then, in the same
// transaction, it takes the pipeline's row lock (the merge decision is
// serialized, the rest of the commit is not), computes the merge frontier
// and merges every window ending at or before it:
//
//	frontier = min over the pipeline's partitions that hold the merge of their stored watermark
//
// A partition holds the merge unless it is drained while the drain that
// marked it is alive (its instance's heartbeat younger than
// Split.IdleLease, or it is this commit's), or idle while its owner's last
// commit is younger than Split.IdleLease. A partition whose watermark is
// NULL (registered or claimed, never committed) holds it back entirely. When
// no partition holds it, the frontier is the greatest stored watermark: every
// owner wrote every window it had. The merged windows' partials are read,
// merged in Go (aggregate.Merge) into delay_aggregates rows (replace) and
// deleted; pipelines.merged_until keeps the frontier.
//
// The commit that finds every partition drained (by drains alive or not:
// a drain stopped while it waited left every record it read as partials)
// merges every remaining window, stores the frontier as every partition's
// watermark (as one drain does) and clears the drained flags: the other
// drains wait for that, or for the pipeline to hold no partial left
// (DrainMerged).

// ErrMergedPast means the pipeline already merged a window this instance
// still held events of, when the batch was taken (they arrived on a partition
// whose owner had marked it idle): the commit wrote nothing. Re-read the
// stored positions and watermark and consume again: those events are then
// late, and dead-lettered as such.
var ErrMergedPast = errors.New("store: the pipeline merged a window this instance still holds events of")

// CommitSplit is Commit for an instance of a split pipeline (b.Split set):
// it writes b.Partials (partial windows) instead of b.Windows, and in the same transaction
// merges the windows every partition of the pipeline finalized. It returns
// what the merge did.
//
// Errors: those of Commit (a *RejectedError names refused latest-state rows
// only), and ErrMergedPast (errors.Is) when the pipeline merged a window the
// instance still held (nothing was written).
func (s *Store) CommitSplit(ctx context.Context, b Batch) (Merged, error) {
	if b.Split == nil {
		return Merged{}, errors.New("store: CommitSplit of a batch without Split")
	}
	var m Merged
	if err := s.ensureForSplit(ctx, &b); err != nil {
		return Merged{}, err // not a refusal of the batch's rows: retried whole, or terminal
	}
	if err := s.commit(ctx, &b, &m); err != nil {
		s.discard()
		if noPartition(err) {
			s.parts.reset()
		}
		err = fmt.Errorf("store: commit %d partials, %d vehicles, %d trips, %d dead letters, %d partitions: %w",
			len(b.Partials), len(b.Vehicles), len(b.Trips), len(b.DeadLetters), len(b.Positions), err)
		if Refused(err) {
			// Latest-state rows are named as Commit names them; a refused
			// partial or merged row is not traced to records (terminal).
			return Merged{}, s.rejected(ctx, &b, err)
		}
		return Merged{}, err
	}
	return m, nil
}

// partialColumns are the delay_partial_windows columns a commit writes, in
// the order of appendPartialWindow; updated_at takes its default, now().
const partialColumns = "pipeline, window_start, topic, partition, window_end, row_count, data"

func appendPartialWindow(pipeline, topic string, ws []aggregate.PartialWindow) func(b []byte, i int) []byte {
	return func(b []byte, i int) []byte {
		w := &ws[i]
		b = appendFieldCount(b, 7)
		b = appendText(b, pipeline)
		b = appendTimestamptz(b, w.WindowStart)
		b = appendText(b, topic)
		b = appendInt4(b, w.Partition)
		b = appendTimestamptz(b, w.WindowEnd)
		b = appendInt4(b, int32(w.Rows))
		return appendBytea(b, w.Data)
	}
}

// writePartials writes ws, partial windows of source partitions of topic
// (one delay_partial_windows row each). When one exists already (a replay
// after an ambiguous COMMIT: the same content) the COPY fails with
// unique_violation inside a savepoint, and those (window, partition) rows
// are deleted and written again: replace, never add.
func writePartials(ctx context.Context, tx pgx.Tx, pipeline, topic string, ws []aggregate.PartialWindow) error {
	if len(ws) == 0 {
		return nil
	}
	copyIn := func(conn *pgconn.PgConn) error {
		_, err := copyBinary(ctx, conn, "COPY delay_partial_windows ("+partialColumns+") FROM STDIN (FORMAT binary)",
			indexed(len(ws), appendPartialWindow(pipeline, topic, ws)))
		return err // indexed never fails
	}
	sp, err := tx.Begin(ctx) // SAVEPOINT
	if err != nil {
		return fmt.Errorf("savepoint: %w", err)
	}
	err = copyIn(sp.Conn().PgConn())
	if err == nil {
		return sp.Commit(ctx) // RELEASE SAVEPOINT
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23505" {
		return fmt.Errorf("copy: %w", err)
	}
	if err := sp.Rollback(ctx); err != nil { // ROLLBACK TO SAVEPOINT
		return fmt.Errorf("rollback to savepoint: %w", err)
	}
	starts, parts := make([]time.Time, len(ws)), make([]int32, len(ws))
	for i, w := range ws {
		starts[i], parts[i] = w.WindowStart, w.Partition
	}
	if _, err := tx.Exec(ctx, `
DELETE FROM delay_partial_windows d USING unnest($3::timestamptz[], $4::integer[]) AS u(window_start, partition)
WHERE d.pipeline = $1 AND d.topic = $2 AND d.window_start = u.window_start AND d.partition = u.partition`,
		pipeline, topic, starts, parts); err != nil {
		return fmt.Errorf("delete partials written before: %w", err)
	}
	if err := copyIn(tx.Conn().PgConn()); err != nil {
		return fmt.Errorf("copy: %w", err)
	}
	return nil
}

// frontier is what the merge reads from the pipeline's partitions.
type frontier struct {
	until      *time.Time // pipelines.merged_until before this commit
	allDrained bool
	at         *time.Time // the merge frontier; nil: nothing may be merged
	// ahead: a partition of another live instance (heartbeat fresh) holds
	// the merge at a watermark past this batch's: that instance commits
	// again soon (every flush interval at least).
	ahead bool
}

// mergeSplit is the merge step of a split commit, after its partials and
// positions are written (see the package comment above). With mayLeave (the
// batch is Split.Holding and does not end a drain) a commit that finds the
// pipeline's row locked by another one deciding a merge does not wait for
// it: that merge cannot pass this batch's windows (every partition of the
// batch holds it at its stored watermark, which this commit only raises),
// and the next commit of either merges what this one made final.
//
// A commit that may leave the merge also leaves it when its own partitions
// hold the frontier (the batch's watermark is the lowest) while another live
// instance is past it: that one's next commit merges. So the instance that
// runs behind only reads and writes partials, and the merging falls to the
// ones ahead, which flow control holds back (splitflow.go) and which have
// the time.
func mergeSplit(ctx context.Context, tx pgx.Tx, pipeline string, sp *Split, mayLeave bool, chunkRows int64,
	wm time.Time, parts []aggregate.PartitionID, m *Merged) error {
	var f frontier
	leave := func() bool { return mayLeave && f.ahead && f.at != nil && f.at.Equal(wm) }
	if mayLeave {
		// Leaving it as the instance behind takes no lock: a commit that
		// held the pipeline's row only to leave would make the others leave
		// the merge too.
		if err := readFrontier(ctx, tx, pipeline, sp, wm, parts, &f); err != nil {
			return err
		}
		m.Skipped = leave()
	}
	var err error
	if !m.Skipped {
		lock := `SELECT merged_until FROM pipelines WHERE name = $1 FOR UPDATE`
		if mayLeave {
			lock += ` SKIP LOCKED`
		}
		err = tx.QueryRow(ctx, lock, pipeline).Scan(&f.until)
		m.Skipped = mayLeave && errors.Is(err, pgx.ErrNoRows)
	}
	if m.Skipped {
		// merged_until as committed: the merge in flight cannot pass this
		// batch's windows, but one before may have, while a partition of
		// this instance was idle.
		err = tx.QueryRow(ctx, `SELECT merged_until FROM pipelines WHERE name = $1`, pipeline).Scan(&f.until)
	}
	if err != nil {
		return fmt.Errorf("lock pipeline: %w", err)
	}
	if f.until != nil && !sp.FirstOpen.IsZero() && !sp.FirstOpen.After(*f.until) {
		return fmt.Errorf("window ending %s, merged until %s: %w",
			sp.FirstOpen.UTC().Format(time.RFC3339), f.until.UTC().Format(time.RFC3339), ErrMergedPast)
	}
	if !m.Skipped { // under the lock: what the commits before this one stored
		if err := readFrontier(ctx, tx, pipeline, sp, wm, parts, &f); err != nil {
			return err
		}
		m.Skipped = leave()
	}
	if f.at != nil {
		m.Frontier = f.at.UTC()
	}
	if m.Skipped {
		return pendingWindows(ctx, tx, pipeline, f.until, m)
	}
	if f.at != nil && (f.until == nil || f.at.After(*f.until)) {
		if err := mergeWindows(ctx, tx, pipeline, f.at.Add(-sp.Window), chunkRows, m); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE pipelines SET merged_until = $2 WHERE name = $1`, pipeline, *f.at); err != nil {
			return fmt.Errorf("store merged_until: %w", err)
		}
		if err := clearMergedProvisional(ctx, tx, pipeline, *f.at); err != nil {
			return err
		}
		f.until = f.at
	}
	if f.allDrained {
		// Every owner wrote every window: everything was merged above. Each
		// partition gets the end of the last merged window as its watermark,
		// as one drain stores it, and the drains waiting for this merge end.
		if _, err := tx.Exec(ctx, `
UPDATE stream_positions SET watermark = GREATEST(watermark, $3), drained = false
WHERE pipeline = $1 AND topic = ANY($2)`, pipeline, sp.Topics, f.at); err != nil {
			return fmt.Errorf("end the drain: %w", err)
		}
		m.Drained = true
	}
	return pendingWindows(ctx, tx, pipeline, f.until, m)
}

// readFrontier fills f.at and f.allDrained from the pipeline's stored
// positions (see the package comment). Read without the pipeline's lock (a
// commit that left the merge) it is what the last committed positions say.
func readFrontier(ctx context.Context, tx pgx.Tx, pipeline string, sp *Split, wm time.Time, parts []aggregate.PartitionID,
	f *frontier) error {
	var allExcluded, heldByNull bool
	var minHeld, maxAll *time.Time
	topics, nums := partitionArrays(parts)
	err := tx.QueryRow(ctx, `
SELECT coalesce(bool_and(excluded), false), coalesce(bool_and(p_drained), false),
       coalesce(bool_or(NOT excluded AND watermark IS NULL), false),
       min(watermark) FILTER (WHERE NOT excluded), max(watermark),
       coalesce(bool_or(NOT excluded AND NOT mine AND alive AND watermark > $4), false)
FROM (SELECT p.drained AND (a.alive OR m.mine) OR (idle AND heartbeat_at >= now() - $3::bigint * interval '1 microsecond') AS excluded,
             p.drained AS p_drained, watermark, a.alive, m.mine
      FROM stream_positions p
      CROSS JOIN LATERAL (SELECT EXISTS (SELECT 1 FROM unnest($5::text[], $6::integer[]) AS u(topic, partition)
          WHERE u.topic = p.topic AND u.partition = p.partition)) AS m(mine)
      -- A drained partition stops holding the merge only while the drain
      -- that marked it is alive (its instance heartbeat is fresh): one that
      -- stopped or died before the merge holds it again. This commit's own
      -- partitions are alive whatever their heartbeat says: their instance
      -- is committing (a failover may have lost its pipeline_instances row,
      -- made again by its next heartbeat only; a drain's last commit that
      -- took its own partitions for a dead drain's would end no drain, and
      -- every drain would wait for ever). Every partition drained ends the
      -- drain, whether the drains that marked them are alive or not: one
      -- that stopped while it waited left every record it read as partials
      -- (its last commit marked it), so the drain that comes after it merges
      -- everything and ends (drains one after the other).
      CROSS JOIN LATERAL (SELECT EXISTS (SELECT 1 FROM pipeline_instances i
          WHERE i.pipeline = p.pipeline AND i.owner = p.owner
            AND i.heartbeat_at >= now() - $3::bigint * interval '1 microsecond')) AS a(alive)
      WHERE p.pipeline = $1 AND p.topic = ANY($2)) AS s`,
		pipeline, sp.Topics, sp.IdleLease.Microseconds(), wm, topics, nums).Scan(&allExcluded, &f.allDrained, &heldByNull,
		&minHeld, &maxAll, &f.ahead)
	if err != nil {
		return fmt.Errorf("merge frontier: %w", err)
	}
	switch {
	case allExcluded || f.allDrained:
		f.at = maxAll
	case !heldByNull:
		f.at = minHeld
	}
	return nil
}

// pendingWindows fills m.Until from until and m.Pending.
func pendingWindows(ctx context.Context, tx pgx.Tx, pipeline string, until *time.Time, m *Merged) error {
	if until != nil {
		m.Until = until.UTC()
	}
	if err := tx.QueryRow(ctx, `SELECT count(DISTINCT window_start) FROM delay_partial_windows WHERE pipeline = $1`,
		pipeline).Scan(&m.Pending); err != nil {
		return fmt.Errorf("count pending windows: %w", err)
	}
	return nil
}

func (s *Store) mergeChunkRows() int64 {
	if s.chunkRows > 0 {
		return int64(s.chunkRows)
	}
	return 100_000
}

// mergeWindows merges the partials of every window of pipeline starting at
// or before lastStart into delay_aggregates rows (replace) and deletes them.
// A merge of many windows (an instance that ran far ahead, a drain's end)
// takes, merges and writes them a chunk of whole windows of at most
// chunkRows rows at a time (one window when it alone has more), in the
// commit's one transaction, so its memory is bounded.
func mergeWindows(ctx context.Context, tx pgx.Tx, pipeline string, lastStart time.Time, chunkRows int64, m *Merged) error {
	rows, err := tx.Query(ctx, `SELECT window_start, sum(row_count) FROM delay_partial_windows
WHERE pipeline = $1 AND window_start <= $2 GROUP BY window_start ORDER BY window_start`, pipeline, lastStart)
	if err != nil {
		return fmt.Errorf("windows to merge: %w", err)
	}
	var starts []time.Time
	var counts []int64
	var start time.Time
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&start, &n}, func() error {
		starts, counts = append(starts, start), append(counts, n)
		return nil
	}); err != nil {
		return fmt.Errorf("windows to merge: %w", err)
	}
	for i := 0; i < len(starts); {
		j, sum := i, int64(0)
		for j < len(starts) && (j == i || sum+counts[j] <= chunkRows) {
			sum += counts[j]
			j++
		}
		if err := mergeChunk(ctx, tx, pipeline, starts[i], starts[j-1], m); err != nil {
			return err
		}
		i = j
	}
	return nil
}

// mergeChunk merges the partials of the windows of pipeline starting from
// first to last, both included.
func mergeChunk(ctx context.Context, tx pgx.Tx, pipeline string, first, last time.Time, m *Merged) error {
	rows, err := tx.Query(ctx, `
DELETE FROM delay_partial_windows WHERE pipeline = $1 AND window_start BETWEEN $2 AND $3
RETURNING window_start, window_end, partition, row_count, data`, pipeline, first, last)
	if err != nil {
		return fmt.Errorf("take partials: %w", err)
	}
	ws, err := scanPartials(rows)
	if err != nil {
		return fmt.Errorf("take partials: %w", err)
	}
	if len(ws) == 0 {
		return nil
	}
	// The merged rows stream into the COPY (aggregate.MergeCursor): merging
	// overlaps PostgreSQL's writing, and a chunk's rows are never all held.
	cur, err := aggregate.NewMergeCursor(ws)
	if err != nil {
		return fmt.Errorf("merge partials of pipeline %q: %w", pipeline, err)
	}
	if _, err := tx.Exec(ctx, "SAVEPOINT ovs_merge"); err != nil {
		return fmt.Errorf("savepoint: %w", err)
	}
	err = copyWindows(ctx, tx, func() tupleFunc {
		cur, _ = aggregate.NewMergeCursor(ws) // a fresh one per COPY: the second path sends the rows again
		return rowTuples(pipeline, cur.Next, cur.Err)
	})
	switch {
	case err != nil && cur.Err() != nil:
		return fmt.Errorf("merge partials of pipeline %q: %w", pipeline, err)
	case err != nil && Refused(err):
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT ovs_merge; RELEASE SAVEPOINT ovs_merge"); err != nil {
			return fmt.Errorf("rollback to savepoint: %w", err)
		}
		return mergeRefused(ctx, tx, pipeline, ws, m)
	case err != nil:
		return fmt.Errorf("write merged windows: %w", err)
	}
	if _, err := tx.Exec(ctx, "RELEASE SAVEPOINT ovs_merge"); err != nil {
		return fmt.Errorf("release savepoint: %w", err)
	}
	// Counted by the cursor, which sorts them: DELETE ... RETURNING gives
	// the partials in no particular order (a sequential scan: as they lie).
	m.Windows += cur.Windows()
	m.Rows += cur.Rows()
	return nil
}

// scanPartials reads rows of (window_start, window_end, partition,
// row_count, data) as partial windows.
func scanPartials(rows pgx.Rows) ([]aggregate.PartialWindow, error) {
	var ws []aggregate.PartialWindow
	var w aggregate.PartialWindow
	_, err := pgx.ForEachRow(rows, []any{&w.WindowStart, &w.WindowEnd, &w.Partition, &w.Rows, &w.Data}, func() error {
		ws = append(ws, w)
		w.Data = nil // scanned into a fresh slice next row
		return nil
	})
	return ws, err
}

// RegisterPartitions makes sure every partition of a split pipeline has a
// stream_positions row, so that a partition no instance claimed yet holds
// the merge back (its watermark is NULL) instead of being left out of it.
// Existing rows are left as they are.
func (s *Store) RegisterPartitions(ctx context.Context, pipeline string, parts []aggregate.PartitionID) error {
	topics, nums := partitionArrays(parts)
	err := s.do(ctx, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, `
INSERT INTO stream_positions (pipeline, topic, partition)
SELECT $1, u.topic, u.partition FROM unnest($2::text[], $3::integer[]) AS u(topic, partition)
ORDER BY 2, 3
ON CONFLICT DO NOTHING`, pipeline, topics, nums)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: register %d partitions of pipeline %q: %w", len(parts), pipeline, err)
	}
	return nil
}

// PendingPartials returns how many windows of pipeline have partials waiting
// for the merge.
func (s *Store) PendingPartials(ctx context.Context, pipeline string) (int, error) {
	var n int
	err := s.do(ctx, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT count(DISTINCT window_start) FROM delay_partial_windows WHERE pipeline = $1`, pipeline).Scan(&n)
	})
	if err != nil {
		return 0, fmt.Errorf("store: pending partials of pipeline %q: %w", pipeline, err)
	}
	return n, nil
}

// DrainMerged tells whether the drain of parts is over: none of them is
// still marked drained (the commit that found every partition of the
// pipeline drained merged everything and cleared the flags), or the
// pipeline holds no partial window any more while no other instance owning
// a partition of it is alive (heartbeat younger than lease): every record
// the drains read is merged and nobody is reading more, as for a drain
// rerun after the others ended with nothing new to merge. Then parts'
// drained flags are cleared, so that a later drain waits for them as for
// partitions not drained. waiting lists, when it is not over, the
// pipeline's partitions not drained yet, "topic/N".
func (s *Store) DrainMerged(ctx context.Context, pipeline string, parts []aggregate.PartitionID, lease time.Duration) (done bool, waiting []string, err error) {
	topics, nums := partitionArrays(parts)
	err = s.do(ctx, func(conn *pgx.Conn) error {
		var mine, merged bool
		if err := conn.QueryRow(ctx, `
SELECT coalesce(bool_or(s.drained), false),
    NOT EXISTS (SELECT 1 FROM delay_partial_windows WHERE pipeline = $1)
    AND NOT EXISTS (SELECT 1 FROM stream_positions o JOIN pipeline_instances i ON i.pipeline = o.pipeline AND i.owner = o.owner
        WHERE o.pipeline = $1 AND (o.topic, o.partition) NOT IN (SELECT * FROM unnest($2::text[], $3::integer[]))
          AND i.heartbeat_at >= now() - $4::bigint * interval '1 microsecond')
FROM stream_positions s JOIN unnest($2::text[], $3::integer[]) AS u(topic, partition)
    ON s.topic = u.topic AND s.partition = u.partition WHERE s.pipeline = $1`,
			pipeline, topics, nums, lease.Microseconds()).Scan(&mine, &merged); err != nil {
			return err
		}
		done, waiting = !mine || merged, nil
		if done && mine {
			_, err := conn.Exec(ctx, `UPDATE stream_positions s SET drained = false
FROM unnest($2::text[], $3::integer[]) AS u(topic, partition)
WHERE s.pipeline = $1 AND s.topic = u.topic AND s.partition = u.partition`, pipeline, topics, nums)
			return err
		}
		if done {
			return nil
		}
		rows, err := conn.Query(ctx, `SELECT topic || '/' || partition FROM stream_positions
			WHERE pipeline = $1 AND topic = ANY($2) AND NOT drained ORDER BY topic, partition`, pipeline, uniqueTopics(parts))
		if err != nil {
			return err
		}
		waiting, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		return false, nil, fmt.Errorf("store: drain of pipeline %q: %w", pipeline, err)
	}
	return done, waiting, nil
}

func uniqueTopics(parts []aggregate.PartitionID) []string {
	var topics []string
	for _, p := range parts {
		if !slices.Contains(topics, p.Topic) {
			topics = append(topics, p.Topic)
		}
	}
	return topics
}

// MergeLag is what `ovstream status` shows of a split pipeline's merge.
type MergeLag struct {
	Pending     int       // windows with partials waiting for the merge
	Oldest      time.Time // window_start of the oldest of them, UTC; zero if none
	MergedUntil time.Time // pipelines.merged_until, UTC: the end of the last window final for the whole pipeline (merged, or written final by an instance owning every partition); zero if none yet
	// Holding lists the partitions that hold the merge at the lowest stored
	// watermark (or with none), "topic/N"; empty when nothing is pending.
	Holding []string
}

// MergeLag reads the merge lag of pipeline (ReadMergeLag on the Store's
// connection).
func (s *Store) MergeLag(ctx context.Context, pipeline string) (*MergeLag, error) {
	var ml *MergeLag
	err := s.do(ctx, func(conn *pgx.Conn) (err error) {
		ml, err = ReadMergeLag(ctx, conn, pipeline)
		return err
	})
	return ml, err
}

// ReadMergeLag reads, with db, the merge lag of pipeline. Errors name the
// pipeline.
func ReadMergeLag(ctx context.Context, db Querier, pipeline string) (*MergeLag, error) {
	ml := &MergeLag{}
	if err := readMergeLag(ctx, db, pipeline, ml); err != nil {
		return nil, fmt.Errorf("store: merge lag of pipeline %q: %w", pipeline, err)
	}
	return ml, nil
}

func readMergeLag(ctx context.Context, conn Querier, pipeline string, ml *MergeLag) error {
	var oldest, until *time.Time
	if err := conn.QueryRow(ctx, `
SELECT (SELECT count(DISTINCT window_start) FROM delay_partial_windows WHERE pipeline = $1),
       (SELECT min(window_start) FROM delay_partial_windows WHERE pipeline = $1),
       (SELECT merged_until FROM pipelines WHERE name = $1)`, pipeline).Scan(&ml.Pending, &oldest, &until); err != nil {
		return err
	}
	if oldest != nil {
		ml.Oldest = oldest.UTC()
	}
	if until != nil {
		ml.MergedUntil = until.UTC()
	}
	if ml.Pending == 0 {
		return nil
	}
	rows, err := conn.Query(ctx, `
SELECT topic || '/' || partition FROM stream_positions
WHERE pipeline = $1 AND NOT drained AND NOT idle
  AND (watermark IS NULL OR watermark = (SELECT min(watermark) FROM stream_positions WHERE pipeline = $1 AND NOT drained AND NOT idle))
ORDER BY topic, partition`, pipeline)
	if err != nil {
		return err
	}
	ml.Holding, err = pgx.CollectRows(rows, pgx.RowTo[string])
	return err
}

// mergeRefused writes the merged rows of the partials ws after delay_aggregates
// refused some of them (Refused): it finds those rows (refusedRows), writes
// the others, and keeps each refused one in refused_windows with the
// database's message, its statistics and distribution (G10: the pipeline
// never stalls on a row; its records were read by other instances and cannot
// be named as dead letters). The rows of one chunk are held in memory here:
// at most chunkRows, as the merge's bound says.
func mergeRefused(ctx context.Context, tx pgx.Tx, pipeline string, ws []aggregate.PartialWindow, m *Merged) error {
	cur, err := aggregate.NewMergeCursor(ws)
	if err != nil {
		return fmt.Errorf("merge partials of pipeline %q: %w", pipeline, err)
	}
	var rows []aggregate.Row
	var r aggregate.Row
	for cur.Next(&r) { // the cursor reuses the distribution's slices: keep copies
		r.Values, r.Counts = slices.Clone(r.Values), slices.Clone(r.Counts)
		rows = append(rows, r)
	}
	if err := cur.Err(); err != nil {
		return fmt.Errorf("merge partials of pipeline %q: %w", pipeline, err)
	}
	refused := map[WindowKey]string{}
	write := func(tx pgx.Tx, rows []aggregate.Row) error {
		return writeThenClear(ctx, tx, "ovs_windows", upsertWindows(ctx, tx, pipeline, rows))
	}
	err = refusedRows(ctx, func() pgx.Tx { return tx }, rows, probeMode[aggregate.Row]{}, write, func(r aggregate.Row, e *pgconn.PgError) {
		k := WindowKey{WindowStart: r.WindowStart.UTC(), Dimension: r.Dimension, DimensionID: r.DimensionID}
		refused[k] = refusal("delay_aggregates", fmt.Sprintf("(%s, %s, %s)", k.WindowStart.Format(time.RFC3339), k.Dimension, k.DimensionID), e)
	})
	if err != nil {
		return fmt.Errorf("find the merged rows PostgreSQL refused: %w", err)
	}
	var keep, out []aggregate.Row
	for _, r := range rows {
		k := WindowKey{WindowStart: r.WindowStart.UTC(), Dimension: r.Dimension, DimensionID: r.DimensionID}
		if reason, ok := refused[k]; ok {
			out = append(out, r)
			m.Refused = append(m.Refused, RefusedWindow{WindowKey: k, Reason: reason})
		} else {
			keep = append(keep, r)
		}
	}
	if len(out) == 0 { // refused as a whole, no row alone: not a row's value
		return errors.New("write merged windows: PostgreSQL refused the rows together but none alone (a constraint across rows?)")
	}
	if err := upsertWindows(ctx, tx, pipeline, keep); err != nil {
		return fmt.Errorf("write merged windows: %w", err)
	}
	for i, r := range out {
		_, err := tx.Exec(ctx, `INSERT INTO refused_windows (pipeline, window_start, window_end, dimension, dimension_id, operator,
    event_count, mean_delay_s, p90_delay_s, min_delay_s, max_delay_s, delay_values, delay_counts, error)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`,
			pipeline, r.WindowStart.UTC(), r.WindowEnd.UTC(), r.Dimension, r.DimensionID, nullString(r.Operator), r.Count,
			within(r.Mean, r.Min, r.Max), within(r.P90, r.Min, r.Max), r.Min, r.Max, r.Values, r.Counts, m.Refused[len(m.Refused)-len(out)+i].Reason)
		if err != nil {
			return fmt.Errorf("keep a refused merged row in refused_windows: %w", err)
		}
	}
	m.Windows += cur.Windows()
	m.Rows += len(keep)
	return nil
}
