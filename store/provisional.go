package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/aggregate"
)

// Provisional is what a commit writes of the windows that are still open
// (docs/windows.md "Provisional rows"): the rows of the windows that changed
// since the instance's last provisional write, exact for the records below
// the batch's consumed offsets.
type Provisional struct {
	// Rows replace every provisional row of the windows Starts names.
	Rows []aggregate.Row
	// Starts are the window starts (UTC) whose provisional rows Rows
	// replace; a window of Starts without rows in Rows has none left.
	Starts []time.Time
	// Partials are a split instance's (Batch.Split) instead of Rows and
	// Starts: the partial aggregates of its open windows that changed and
	// of the windows it finalized since its last provisional write, per
	// source partition; the batch's own Partials are added to them.
	Partials []aggregate.PartialWindow
	// All says that Rows and Starts (or Partials) hold every open window:
	// the commit first deletes every provisional row of the pipeline (of
	// the instance's partitions, for a split instance) (an instance's first
	// provisional write, after a start or a resync, when the rows it finds
	// may count records it has not read again yet).
	All bool
	// Off says the instance writes none (with All): the commit removes what
	// an earlier run wrote and writes nothing.
	Off bool
}

// writeProvisional runs in every single-owner commit, after its final
// rows (a split commit writes its own after the merge:
// writeSplitProvisional). It deletes the provisional rows of the windows the
// batch's watermark finalized (window_end at or before it) and, when
// b.Provisional is set, replaces the rows of its windows and stores the
// batch's consumed offsets in provisional_positions: the records the
// provisional rows count. Its first write (All) also deletes what instances
// of the pipeline wrote while it was split.
func writeProvisional(ctx context.Context, tx pgx.Tx, b *Batch) error {
	p := b.Provisional
	if b.Split != nil {
		return nil
	}
	if p != nil && p.All {
		if _, err := tx.Exec(ctx, `DELETE FROM delay_partial_provisional WHERE pipeline = $1`, b.Pipeline); err != nil {
			return err
		}
	}
	if p != nil && p.All && len(p.Rows) == 0 && len(p.Starts) == 0 {
		// An instance that writes none removes those an earlier run wrote.
		_, err := tx.Exec(ctx, `WITH rows AS (DELETE FROM delay_aggregates_provisional WHERE pipeline = $1)
DELETE FROM provisional_positions WHERE pipeline = $1`, b.Pipeline)
		return err
	}
	if p == nil { // the other windows' rows stay exact for provisional_positions
		_, err := tx.Exec(ctx, `DELETE FROM delay_aggregates_provisional WHERE pipeline = $1 AND window_end <= $2`,
			b.Pipeline, b.Watermark.UTC())
		return err
	}
	starts := make([]time.Time, len(p.Starts))
	for i, s := range p.Starts {
		starts[i] = s.UTC()
	}
	if _, err := tx.Exec(ctx, `DELETE FROM delay_aggregates_provisional WHERE pipeline = $1
    AND ($4 OR window_end <= $2 OR window_start = ANY($3))`, b.Pipeline, b.Watermark.UTC(), starts, p.All); err != nil {
		return err
	}
	if len(p.Rows) > 0 {
		srcErr, err := copyBinary(ctx, tx.Conn().PgConn(),
			"COPY delay_aggregates_provisional ("+windowColumns+") FROM STDIN (FORMAT binary)",
			indexed(len(p.Rows), appendWindow(b.Pipeline, p.Rows)))
		if srcErr != nil {
			return srcErr
		}
		if err != nil {
			return fmt.Errorf("copy: %w", err)
		}
	}
	return storeProvisionalPositions(ctx, tx, b.Pipeline, b.Positions)
}

// storeProvisionalPositions stores the consumed offsets of positions in
// provisional_positions: the records the provisional rows count.
func storeProvisionalPositions(ctx context.Context, tx pgx.Tx, pipeline string, positions []Position) error {
	n := len(positions)
	topics, parts, offsets := make([]string, n), make([]int32, n), make([]int64, n)
	for i, pos := range positions {
		topics[i], parts[i], offsets[i] = pos.Topic, pos.Partition, pos.ConsumedOffset
	}
	_, err := tx.Exec(ctx, `
INSERT INTO provisional_positions (pipeline, topic, partition, consumed_offset, written_at)
SELECT $1, * , now() FROM unnest($2::text[], $3::integer[], $4::bigint[])
ON CONFLICT (pipeline, topic, partition) DO UPDATE SET consumed_offset = EXCLUDED.consumed_offset, written_at = now()`,
		pipeline, topics, parts, offsets)
	return err
}
