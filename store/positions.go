package store

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/aggregate"
)

// LoadPositions returns the stored progress of every partition of pipeline;
// a partition without a row is absent from the map.
func (s *Store) LoadPositions(ctx context.Context, pipeline string) (map[aggregate.PartitionID]Position, error) {
	positions := map[aggregate.PartitionID]Position{}
	err := s.do(ctx, func(conn *pgx.Conn) error {
		clear(positions)
		rows, err := conn.Query(ctx,
			`SELECT topic, partition, next_offset, consumed_offset FROM stream_positions WHERE pipeline = $1`, pipeline)
		if err != nil {
			return err
		}
		var p Position
		_, err = pgx.ForEachRow(rows, []any{&p.Topic, &p.Partition, &p.NextOffset, &p.ConsumedOffset}, func() error {
			positions[p.PartitionID] = p
			return nil
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: load positions of pipeline %q: %w", pipeline, err)
	}
	return positions, nil
}

// SeedWatermark returns the watermark to start from, in UTC: the later of the
// watermark pipeline last committed and max(window_end) of delay_aggregates;
// the zero time when neither exists.
func (s *Store) SeedWatermark(ctx context.Context, pipeline string) (time.Time, error) {
	var wm *time.Time
	err := s.do(ctx, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `
SELECT GREATEST((SELECT watermark FROM pipelines WHERE name = $1),
                (SELECT max(window_end) FROM delay_aggregates))`, pipeline).Scan(&wm)
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("store: seed watermark of pipeline %q: %w", pipeline, err)
	}
	if wm == nil {
		return time.Time{}, nil
	}
	return wm.UTC(), nil
}

func upsertPositions(ctx context.Context, tx pgx.Tx, pipeline string, ps []Position) error {
	if len(ps) == 0 {
		return nil
	}
	// One row per partition (two would fail the statement with 21000): keep the
	// greatest of each offset, as the upsert itself does.
	merged := map[aggregate.PartitionID]Position{}
	for _, p := range ps {
		if m, ok := merged[p.PartitionID]; ok {
			p.NextOffset = max(p.NextOffset, m.NextOffset)
			p.ConsumedOffset = max(p.ConsumedOffset, m.ConsumedOffset)
		}
		merged[p.PartitionID] = p
	}
	keys := make([]aggregate.PartitionID, 0, len(merged))
	for k := range merged {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { // a fixed lock order
		if keys[i].Topic != keys[j].Topic {
			return keys[i].Topic < keys[j].Topic
		}
		return keys[i].Partition < keys[j].Partition
	})
	topics, parts := make([]string, len(keys)), make([]int32, len(keys))
	next, consumed := make([]int64, len(keys)), make([]int64, len(keys))
	for i, k := range keys {
		p := merged[k]
		topics[i], parts[i], next[i], consumed[i] = k.Topic, k.Partition, p.NextOffset, p.ConsumedOffset
	}
	_, err := tx.Exec(ctx, `
INSERT INTO stream_positions AS t (pipeline, topic, partition, next_offset, consumed_offset, updated_at)
SELECT $1, u.topic, u.partition, u.next_offset, u.consumed_offset, now()
FROM unnest($2::text[], $3::integer[], $4::bigint[], $5::bigint[]) AS u(topic, partition, next_offset, consumed_offset)
ON CONFLICT (pipeline, topic, partition) DO UPDATE SET
    next_offset = GREATEST(t.next_offset, EXCLUDED.next_offset),
    consumed_offset = GREATEST(t.consumed_offset, EXCLUDED.consumed_offset),
    updated_at = now()`, pipeline, topics, parts, next, consumed)
	return err
}
