package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/aggregate"
)

// ErrNotSoleOwner means a commit of final rows (a batch without Split) found
// a partition of the pipeline's topics owned by another instance: a
// partition was added and assigned to another instance while this one
// believed it owned every partition. Nothing was written. The windows must
// now be written as partials and merged (docs/design.md "Split windows"): re-read
// the stored positions and start again, as a split instance.
var ErrNotSoleOwner = errors.New("store: another instance owns a partition of the pipeline")

// finalOnly is the step of a commit of final rows that keeps them final for
// the whole pipeline. It raises pipelines.merged_until to the batch's
// watermark (every window ending at or before it is final: a split instance
// that starts later treats events of those windows as late, and its first
// commit, which waits for this row's lock, refuses partials of them with
// ErrMergedPast), then, under that row lock, checks that no other instance
// owns a partition of the topics of ps. A claim committed before this check
// is seen by it; one committed after it is followed by that instance's first
// split commit, which waits for this commit and reads merged_until again.
func finalOnly(ctx context.Context, tx pgx.Tx, pipeline string, wm time.Time, ps []aggregate.PartitionID) error {
	var until *time.Time
	if !wm.IsZero() {
		until = &wm
	}
	if _, err := tx.Exec(ctx, `UPDATE pipelines SET merged_until = GREATEST(merged_until, $2) WHERE name = $1`,
		pipeline, until); err != nil {
		return fmt.Errorf("merged_until: %w", err)
	}
	topics, parts := partitionArrays(ps)
	var other string
	err := tx.QueryRow(ctx, `
SELECT s.topic || '/' || s.partition || ' (' || s.owner || ')' FROM stream_positions s
WHERE s.pipeline = $1 AND s.topic = ANY($2) AND s.owner IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM unnest($2::text[], $3::integer[]) AS u(topic, partition)
                  WHERE u.topic = s.topic AND u.partition = s.partition)
ORDER BY s.topic, s.partition LIMIT 1`, pipeline, topics, parts).Scan(&other)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil
	case err != nil:
		return fmt.Errorf("owners of the pipeline's partitions: %w", err)
	}
	return fmt.Errorf("partition %s: %w", other, ErrNotSoleOwner)
}
