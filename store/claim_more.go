package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/aggregate"
)

// Added is the outcome of ClaimAdded for one partition.
type Added struct {
	aggregate.PartitionID
	Claimed bool // the partition is now owner's at the epoch
	// Stored: its row already holds offsets (an instance of the pipeline
	// consumed it before): the caller must load and check them.
	Stored bool
	Holder string // when not claimed: who holds it ("" = nobody, but a newer epoch)
}

// ClaimAdded makes owner, which already holds epoch for the other partitions
// of pipeline, the owner of parts: partitions added to a topic while it runs
// (docs/design.md "Start-up": an instance that owns every partition starts them).
// Unlike Claim it does not raise the epoch, so the owner's commits, fenced by
// one epoch, go on covering its other partitions. A partition is claimed when
// it has no row yet (the usual case), or its row is unowned or already
// owner's, with an older epoch (or owner's at epoch: claiming again is a
// no-op); a partition another instance holds, or one
// whose epoch is newer (claiming it would move its epoch backwards and let an
// older fenced instance write again), is left alone. topicIDs gives each
// topic's Kafka topic ID, recorded for partitions without offsets.
func (s *Store) ClaimAdded(ctx context.Context, pipeline, owner string, epoch int64, parts []aggregate.PartitionID,
	topicIDs map[string]string) ([]Added, error) {
	topics, nums := partitionArrays(parts)
	ids := make([]string, len(parts))
	for i, p := range parts {
		ids[i] = topicIDs[p.Topic]
	}
	var out []Added
	err := s.do(ctx, func(conn *pgx.Conn) error {
		out = out[:0]
		return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `
INSERT INTO stream_positions AS s (pipeline, topic, partition, owner, epoch, heartbeat_at, topic_id)
SELECT $1, u.topic, u.partition, $4, $5, now(), NULLIF(u.topic_id, '')
FROM unnest($2::text[], $3::integer[], $6::text[]) AS u(topic, partition, topic_id)
ORDER BY 2, 3
ON CONFLICT (pipeline, topic, partition) DO UPDATE SET owner = EXCLUDED.owner, epoch = EXCLUDED.epoch,
    heartbeat_at = now(), topic_id = CASE WHEN s.next_offset IS NULL THEN EXCLUDED.topic_id ELSE s.topic_id END
WHERE (s.owner IS NULL OR s.owner = EXCLUDED.owner)
    AND (s.epoch < EXCLUDED.epoch OR (s.epoch = EXCLUDED.epoch AND s.owner = EXCLUDED.owner))
RETURNING s.topic, s.partition, s.next_offset IS NOT NULL`, pipeline, topics, nums, owner, epoch, ids)
			if err != nil {
				return err
			}
			claimed := map[aggregate.PartitionID]bool{}
			var a Added
			if _, err := pgx.ForEachRow(rows, []any{&a.Topic, &a.Partition, &a.Stored}, func() error {
				claimed[a.PartitionID] = true
				a.Claimed = true
				out = append(out, a)
				return nil
			}); err != nil {
				return err
			}
			for _, p := range parts {
				if claimed[p] {
					continue
				}
				a := Added{PartitionID: p}
				var holder *string
				if err := tx.QueryRow(ctx, `SELECT owner FROM stream_positions WHERE pipeline = $1 AND topic = $2 AND partition = $3`,
					pipeline, p.Topic, p.Partition).Scan(&holder); err != nil {
					return err
				}
				if holder != nil {
					a.Holder = *holder
				}
				out = append(out, a)
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("store: claim %d added partitions of pipeline %q at epoch %d: %w", len(parts), pipeline, epoch, err)
	}
	return out, nil
}

// Owned returns the partitions of pipeline that owner holds at epoch, in
// (topic, partition) order: what an instance without --partitions claimed,
// at start-up and since (added partitions), when it starts again without
// claiming (a resync keeps its epoch).
func (s *Store) Owned(ctx context.Context, pipeline, owner string, epoch int64) ([]aggregate.PartitionID, error) {
	var parts []aggregate.PartitionID
	err := s.do(ctx, func(conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, `SELECT topic, partition FROM stream_positions
			WHERE pipeline = $1 AND owner = $2 AND epoch = $3 ORDER BY topic, partition`, pipeline, owner, epoch)
		if err != nil {
			return err
		}
		parts, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (aggregate.PartitionID, error) {
			var p aggregate.PartitionID
			err := r.Scan(&p.Topic, &p.Partition)
			return p, err
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: partitions of %s in pipeline %q: %w", owner, pipeline, err)
	}
	return parts, nil
}
