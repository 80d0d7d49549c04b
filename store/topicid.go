package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/aggregate"
)

// TopicIDs returns, per partition of pipeline, the Kafka topic ID (KIP-516)
// its stored offsets belong to (stream_positions.topic_id), as Kafka prints it
// (URL-safe base64, 22 characters). A partition whose row has no topic ID (a
// broker without topic IDs, or offsets stored before schema 3) is absent.
func (s *Store) TopicIDs(ctx context.Context, pipeline string) (map[aggregate.PartitionID]string, error) {
	ids := map[aggregate.PartitionID]string{}
	err := s.do(ctx, func(conn *pgx.Conn) error {
		clear(ids)
		rows, err := conn.Query(ctx, `SELECT topic, partition, topic_id FROM stream_positions
			WHERE pipeline = $1 AND topic_id IS NOT NULL`, pipeline)
		if err != nil {
			return err
		}
		var tp aggregate.PartitionID
		var id string
		_, err = pgx.ForEachRow(rows, []any{&tp.Topic, &tp.Partition, &id}, func() error {
			ids[tp] = id
			return nil
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: load topic IDs of pipeline %q: %w", pipeline, err)
	}
	return ids, nil
}

// SetTopicIDs records, in ONE transaction fenced like a commit, that the
// offsets of each partition of ids belong to the Kafka topic with that ID,
// and moves the positions of resets to their NextOffset (= ConsumedOffset),
// even backwards: the operator chose --on-offset-out-of-range=earliest|latest
// for a topic that was deleted and recreated (docs/design.md "Start-up"). So a
// crash never leaves offsets of the new topic under the old topic's ID, nor
// the old offsets under the new ID. ErrFenced when owner no longer holds one
// of the partitions at epoch.
func (s *Store) SetTopicIDs(ctx context.Context, pipeline, owner string, epoch int64, ids map[aggregate.PartitionID]string, resets []Position) error {
	var topics, idv []string
	var parts []int32
	for tp, id := range ids {
		topics, parts, idv = append(topics, tp.Topic), append(parts, tp.Partition), append(idv, id)
	}
	rtopics, rparts := make([]string, len(resets)), make([]int32, len(resets))
	roffs := make([]int64, len(resets))
	for i, p := range resets {
		rtopics[i], rparts[i], roffs[i] = p.Topic, p.Partition, p.NextOffset
	}
	err := s.do(ctx, func(conn *pgx.Conn) error {
		return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, `
UPDATE stream_positions AS t SET topic_id = u.topic_id
FROM (SELECT * FROM unnest($2::text[], $3::integer[], $4::text[]) AS u(topic, partition, topic_id) ORDER BY 1, 2) AS u
WHERE t.pipeline = $1 AND t.topic = u.topic AND t.partition = u.partition AND t.epoch = $5 AND t.owner = $6`,
				pipeline, topics, parts, idv, epoch, owner)
			if err != nil {
				return err
			}
			if tag.RowsAffected() != int64(len(ids)) {
				return ErrFenced
			}
			tag, err = tx.Exec(ctx, `
UPDATE stream_positions AS t SET next_offset = u.next_offset, consumed_offset = u.next_offset, updated_at = now()
FROM unnest($2::text[], $3::integer[], $4::bigint[]) AS u(topic, partition, next_offset)
WHERE t.pipeline = $1 AND t.topic = u.topic AND t.partition = u.partition AND t.epoch = $5 AND t.owner = $6`,
				pipeline, rtopics, rparts, roffs, epoch, owner)
			if err != nil {
				return err
			}
			if tag.RowsAffected() != int64(len(resets)) {
				return ErrFenced
			}
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("store: record the topic IDs of %d partitions (%d reset) of pipeline %q: %w",
			len(ids), len(resets), pipeline, err)
	}
	return nil
}
