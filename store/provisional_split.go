package store

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/aggregate"
)

// Provisional rows of a split pipeline (docs/windows.md "Provisional rows").
// Each instance writes, per window the pipeline has not merged and source
// partition of its own, the partial aggregate of that partition's records
// below its provisional_positions.consumed_offset
// (delay_partial_provisional): of its open windows that changed, and of the
// windows it finalized (their partials in delay_partial_windows, copied
// when newer than the provisional one: the whole of the partition's share,
// as the records after them are late). In the same transaction it replaces
// the delay_aggregates_provisional rows of every window it changed with the
// merge of every instance's provisional partials of that window
// (aggregate.MergeCursor, as the merge builds the final rows). It does so
// holding the pipeline's row lock (mergeSplit takes it for a commit with
// provisional rows), as every merge does, so that
//
//	the delay_aggregates_provisional rows of a window not merged are the
//	merge of the delay_partial_provisional rows of that window
//
// holds at every commit: an instance never merges on another's older
// partials, and the commit that merges a window deletes both in the
// transaction that writes its final rows (clearMergedProvisional).

// writeSplitProvisional writes b.Provisional of a split commit after its
// merge, under the pipeline's row lock; until is the end of the last merged
// window (zero: none): windows ending at or before it are final.
func writeSplitProvisional(ctx context.Context, tx pgx.Tx, b *Batch, until time.Time) error {
	p := b.Provisional
	if p == nil {
		return nil
	}
	var mine []int32 // this instance's partitions of the predictions topic
	for _, pos := range b.Positions {
		if pos.Topic == b.Split.Topic {
			mine = append(mine, pos.Partition)
		}
	}
	var qs []string // each with $1 pipeline, $2 topic, $3 partitions; rows: window starts
	if p.All {
		// The instance's first write: what it finds of its partitions may
		// count records it has not read again; rows without partials (a
		// single instance's, before the pipeline was split) are stale.
		qs = append(qs, `DELETE FROM delay_partial_provisional WHERE pipeline = $1 AND topic = $2 AND partition = ANY($3)
RETURNING window_start`)
	}
	if !p.Off {
		// The partials its partitions finalized since (by this instance or
		// one before it): the loop reads none of their records again.
		qs = append(qs, `INSERT INTO delay_partial_provisional (`+partialColumns+`)
SELECT `+partialColumns+` FROM delay_partial_windows w WHERE w.pipeline = $1 AND w.topic = $2 AND w.partition = ANY($3)
    AND NOT EXISTS (SELECT 1 FROM delay_partial_provisional p WHERE p.pipeline = w.pipeline AND p.window_start = w.window_start
        AND p.topic = w.topic AND p.partition = w.partition AND p.updated_at >= w.updated_at)
ON CONFLICT (pipeline, window_start, topic, partition) DO UPDATE SET window_end = EXCLUDED.window_end,
    row_count = EXCLUDED.row_count, data = EXCLUDED.data, updated_at = now()
RETURNING window_start`)
	}
	var affected []time.Time
	for _, q := range qs {
		starts, err := queryStarts(ctx, tx, q, b.Pipeline, b.Split.Topic, mine)
		if err != nil {
			return fmt.Errorf("provisional partials of the partitions: %w", err)
		}
		affected = append(affected, starts...)
	}
	if p.All {
		starts, err := queryStarts(ctx, tx, `SELECT DISTINCT window_start FROM delay_aggregates_provisional WHERE pipeline = $1`, b.Pipeline)
		if err != nil {
			return fmt.Errorf("provisional windows: %w", err)
		}
		affected = append(affected, starts...)
		topics, nums := partitionArrays(positionIDs(b.Positions))
		if _, err := tx.Exec(ctx, `DELETE FROM provisional_positions d USING unnest($2::text[], $3::integer[]) AS u(topic, partition)
WHERE d.pipeline = $1 AND d.topic = u.topic AND d.partition = u.partition`, b.Pipeline, topics, nums); err != nil {
			return fmt.Errorf("delete provisional positions: %w", err)
		}
	}
	var ws []aggregate.PartialWindow
	for _, w := range p.Partials {
		if until.IsZero() || w.WindowEnd.After(until) {
			ws = append(ws, w)
			affected = append(affected, w.WindowStart)
		}
	}
	if err := replaceProvisionalPartials(ctx, tx, b.Pipeline, b.Split.Topic, ws); err != nil {
		return err
	}
	if err := remergeProvisional(ctx, tx, b.Pipeline, affected); err != nil {
		return err
	}
	if p.Off {
		return nil
	}
	return storeProvisionalPositions(ctx, tx, b.Pipeline, b.Positions)
}

// replaceProvisionalPartials replaces the provisional partials of ws's
// windows and partitions with ws.
func replaceProvisionalPartials(ctx context.Context, tx pgx.Tx, pipeline, topic string, ws []aggregate.PartialWindow) error {
	if len(ws) == 0 {
		return nil
	}
	starts, parts := make([]time.Time, len(ws)), make([]int32, len(ws))
	for i, w := range ws {
		starts[i], parts[i] = w.WindowStart.UTC(), w.Partition
	}
	if _, err := tx.Exec(ctx, `
DELETE FROM delay_partial_provisional d USING unnest($3::timestamptz[], $4::integer[]) AS u(window_start, partition)
WHERE d.pipeline = $1 AND d.topic = $2 AND d.window_start = u.window_start AND d.partition = u.partition`,
		pipeline, topic, starts, parts); err != nil {
		return fmt.Errorf("delete provisional partials: %w", err)
	}
	srcErr, err := copyBinary(ctx, tx.Conn().PgConn(), "COPY delay_partial_provisional ("+partialColumns+") FROM STDIN (FORMAT binary)",
		indexed(len(ws), appendPartialWindow(pipeline, topic, ws)))
	if srcErr != nil {
		return srcErr
	}
	if err != nil {
		return fmt.Errorf("copy provisional partials: %w", err)
	}
	return nil
}

// remergeProvisional replaces the delay_aggregates_provisional rows of the
// windows starting at starts with the merge of their provisional partials.
func remergeProvisional(ctx context.Context, tx pgx.Tx, pipeline string, starts []time.Time) error {
	if len(starts) == 0 {
		return nil
	}
	for i := range starts {
		starts[i] = starts[i].UTC()
	}
	slices.SortFunc(starts, time.Time.Compare)
	starts = slices.CompactFunc(starts, time.Time.Equal)
	if _, err := tx.Exec(ctx, `DELETE FROM delay_aggregates_provisional WHERE pipeline = $1 AND window_start = ANY($2)`,
		pipeline, starts); err != nil {
		return fmt.Errorf("delete merged provisional rows: %w", err)
	}
	rows, err := tx.Query(ctx, `SELECT window_start, window_end, partition, row_count, data FROM delay_partial_provisional
WHERE pipeline = $1 AND window_start = ANY($2)`, pipeline, starts)
	if err != nil {
		return fmt.Errorf("read provisional partials: %w", err)
	}
	ws, err := scanPartials(rows)
	if err != nil {
		return fmt.Errorf("read provisional partials: %w", err)
	}
	if len(ws) == 0 {
		return nil
	}
	cur, err := aggregate.NewMergeCursor(ws)
	if err != nil {
		return fmt.Errorf("merge provisional partials of pipeline %q: %w", pipeline, err)
	}
	srcErr, err := copyBinary(ctx, tx.Conn().PgConn(), "COPY delay_aggregates_provisional ("+windowColumns+") FROM STDIN (FORMAT binary)",
		rowTuples(pipeline, cur.Next, cur.Err))
	if srcErr != nil {
		return fmt.Errorf("merge provisional partials of pipeline %q: %w", pipeline, srcErr)
	}
	if err != nil {
		return fmt.Errorf("copy merged provisional rows: %w", err)
	}
	return nil
}

// clearMergedProvisional deletes the provisional rows and partials of the
// pipeline's windows ending at or before until: the merge made them final
// in this transaction.
func clearMergedProvisional(ctx context.Context, tx pgx.Tx, pipeline string, until time.Time) error {
	_, err := tx.Exec(ctx, `WITH p AS (DELETE FROM delay_partial_provisional WHERE pipeline = $1 AND window_end <= $2)
DELETE FROM delay_aggregates_provisional WHERE pipeline = $1 AND window_end <= $2`, pipeline, until.UTC())
	if err != nil {
		return fmt.Errorf("delete the merged windows' provisional rows: %w", err)
	}
	return nil
}

// queryStarts runs q, whose rows are window starts, and returns them.
func queryStarts(ctx context.Context, tx pgx.Tx, q string, args ...any) ([]time.Time, error) {
	rows, err := tx.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[time.Time])
}

func positionIDs(ps []Position) []aggregate.PartitionID {
	ids := make([]aggregate.PartitionID, len(ps))
	for i, p := range ps {
		ids[i] = p.PartitionID
	}
	return ids
}
