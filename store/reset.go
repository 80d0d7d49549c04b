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
// update is fenced like a commit: ErrFenced when owner no longer holds the
// partition at epoch. p.LeaderEpoch is stored with the offset (-1: NULL,
// unknown).
func (s *Store) ResetPosition(ctx context.Context, pipeline, owner string, epoch int64, p Position) error {
	err := s.do(ctx, func(conn *pgx.Conn) error {
		return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, `
UPDATE stream_positions SET next_offset = $4, consumed_offset = $4, leader_epoch = $7, leader_epoch_offset = $4,
    heartbeat_at = now(), updated_at = now()
WHERE pipeline = $1 AND topic = $2 AND partition = $3 AND epoch = $5 AND owner = $6`,
				pipeline, p.Topic, p.Partition, p.NextOffset, epoch, owner, nullEpoch(p.LeaderEpoch))
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				return ErrFenced
			}
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("store: reset position of %s to %d: %w", p.PartitionID, p.NextOffset, err)
	}
	return nil
}

// nullEpoch is a leader epoch as a query argument: NULL when unknown (-1).
func nullEpoch(e int32) any {
	if e < 0 {
		return nil
	}
	return e
}
