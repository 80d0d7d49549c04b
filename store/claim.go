package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/aggregate"
)

// Claim makes owner the owner of parts, partitions of pipeline, and returns
// its new fencing epoch: one more than the greatest epoch any of parts had
// (1 on the first claim). From then on every commit of an older epoch that
// covers one of parts fails with ErrFenced. A claim waits for a commit in
// progress on those partitions (it holds their stream_positions rows), so
// nothing a fenced instance writes becomes visible after Claim returns.
// A partition never claimed before gets a stream_positions row without
// offsets (LoadPositions leaves it out).
func (s *Store) Claim(ctx context.Context, pipeline, owner string, parts []aggregate.PartitionID) (epoch int64, err error) {
	topics, nums := partitionArrays(parts)
	err = s.do(ctx, func(conn *pgx.Conn) error {
		return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO pipelines (name) VALUES ($1) ON CONFLICT DO NOTHING`, pipeline); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `
INSERT INTO stream_positions (pipeline, topic, partition)
SELECT $1, u.topic, u.partition FROM unnest($2::text[], $3::integer[]) AS u(topic, partition)
ORDER BY 2, 3
ON CONFLICT DO NOTHING`, pipeline, topics, nums); err != nil {
				return err
			}
			var current *int64
			if err := tx.QueryRow(ctx, `
SELECT max(epoch) FROM (
    SELECT s.epoch FROM stream_positions s JOIN unnest($2::text[], $3::integer[]) AS u(topic, partition)
        ON s.topic = u.topic AND s.partition = u.partition
    WHERE s.pipeline = $1 ORDER BY s.topic, s.partition FOR UPDATE OF s) AS locked`,
				pipeline, topics, nums).Scan(&current); err != nil {
				return err
			}
			epoch = 1
			if current != nil {
				epoch = *current + 1
			}
			_, err := tx.Exec(ctx, `
UPDATE stream_positions s SET epoch = $4, owner = $5, heartbeat_at = now()
FROM unnest($2::text[], $3::integer[]) AS u(topic, partition)
WHERE s.pipeline = $1 AND s.topic = u.topic AND s.partition = u.partition`, pipeline, topics, nums, epoch, owner)
			return err
		})
	})
	if err != nil {
		return 0, fmt.Errorf("store: claim %d partitions of pipeline %q: %w", len(parts), pipeline, err)
	}
	return epoch, nil
}

// partitionArrays returns parts as two parallel arrays, for unnest.
func partitionArrays(parts []aggregate.PartitionID) (topics []string, nums []int32) {
	topics, nums = make([]string, len(parts)), make([]int32, len(parts))
	for i, p := range parts {
		topics[i], nums[i] = p.Topic, p.Partition
	}
	return topics, nums
}
