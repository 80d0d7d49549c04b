package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ResetPosition moves p's stored position to p.NextOffset (= p.ConsumedOffset)
// even when that is lower: the one case where a position may move backwards,
// after the operator chose --on-offset-out-of-range=earliest|latest because
// the stored offset no longer exists (retention, or a recreated topic). The
// update is fenced like a commit: ErrFenced when epoch is no longer current.
func (s *Store) ResetPosition(ctx context.Context, pipeline string, epoch int64, p Position) error {
	err := s.do(ctx, func(conn *pgx.Conn) error {
		return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, `UPDATE pipelines SET heartbeat_at = now() WHERE name = $1 AND epoch = $2`, pipeline, epoch)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				return ErrFenced
			}
			_, err = tx.Exec(ctx, `
INSERT INTO stream_positions (pipeline, topic, partition, next_offset, consumed_offset, updated_at)
VALUES ($1, $2, $3, $4, $4, now())
ON CONFLICT (pipeline, topic, partition) DO UPDATE
SET next_offset = EXCLUDED.next_offset, consumed_offset = EXCLUDED.consumed_offset, updated_at = now()`,
				pipeline, p.Topic, p.Partition, p.NextOffset)
			return err
		})
	})
	if err != nil {
		return fmt.Errorf("store: reset position of %s to %d: %w", p.PartitionID, p.NextOffset, err)
	}
	return nil
}
