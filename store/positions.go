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
// a partition without committed offsets (never claimed, or claimed and never
// committed) is absent from the map.
func (s *Store) LoadPositions(ctx context.Context, pipeline string) (map[aggregate.PartitionID]Position, error) {
	positions := map[aggregate.PartitionID]Position{}
	err := s.do(ctx, func(conn *pgx.Conn) error {
		clear(positions)
		rows, err := conn.Query(ctx, `SELECT topic, partition, next_offset, consumed_offset, watermark
			FROM stream_positions WHERE pipeline = $1 AND next_offset IS NOT NULL`, pipeline)
		if err != nil {
			return err
		}
		var p Position
		var wm *time.Time
		_, err = pgx.ForEachRow(rows, []any{&p.Topic, &p.Partition, &p.NextOffset, &p.ConsumedOffset, &wm}, func() error {
			p.Watermark = time.Time{}
			if wm != nil {
				p.Watermark = wm.UTC()
			}
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

// SeedWatermark returns the watermark an instance owning parts starts from,
// in UTC (DESIGN.md "Watermark and lateness"): the latest of max(window_end)
// of pipeline's delay_aggregates rows, the lowest watermark stored for parts
// (a partition of parts without one, never committed, makes that part none:
// its events may be older than any other partition's watermark) and the end of the last window the pipeline merged from partials
// (pipelines.merged_until: events of a merged window are late); the zero
// time when none exists. Other pipelines' rows play no part.
func (s *Store) SeedWatermark(ctx context.Context, pipeline string, parts []aggregate.PartitionID) (time.Time, error) {
	topics, nums := partitionArrays(parts)
	var wm *time.Time
	err := s.do(ctx, func(conn *pgx.Conn) error {
		// max(window_start) through the primary key; the rows of that start
		// hold the greatest window_end (one window size per pipeline).
		return conn.QueryRow(ctx, `
SELECT GREATEST(
    (SELECT CASE WHEN count(s.watermark) = cardinality($2::text[]) THEN min(s.watermark) END
        FROM unnest($2::text[], $3::integer[]) AS u(topic, partition)
        LEFT JOIN stream_positions s ON s.pipeline = $1 AND s.topic = u.topic AND s.partition = u.partition),
    (SELECT max(window_end) FROM delay_aggregates WHERE pipeline = $1
        AND window_start = (SELECT max(window_start) FROM delay_aggregates WHERE pipeline = $1)),
    (SELECT merged_until FROM pipelines WHERE name = $1))`,
			pipeline, topics, nums).Scan(&wm)
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("store: seed watermark of pipeline %q: %w", pipeline, err)
	}
	if wm == nil {
		return time.Time{}, nil
	}
	return wm.UTC(), nil
}

// fence is a commit's first statement (DESIGN.md "The commit", step 2): it
// checks that owner holds every partition of ps at epoch (its owner is owner
// and its epoch is epoch) and renews the owner's lease (heartbeat_at),
// locking the partitions' rows in a fixed order. Epochs are per claim: two
// instances that claimed different partitions may hold the same epoch, so
// the epoch alone does not tell whose a partition is. ErrFenced when one of
// them has another owner or another epoch (an empty owner owns nothing): the
// caller rolls back.
func fence(ctx context.Context, tx pgx.Tx, pipeline, owner string, epoch int64, ps []aggregate.PartitionID) error {
	topics, parts := partitionArrays(ps)
	var n int
	err := tx.QueryRow(ctx, `
WITH fenced AS (
    UPDATE stream_positions AS t SET heartbeat_at = now()
    FROM (SELECT * FROM unnest($2::text[], $3::integer[]) AS u(topic, partition) ORDER BY 1, 2) AS u
    WHERE t.pipeline = $1 AND t.topic = u.topic AND t.partition = u.partition AND t.epoch = $4 AND t.owner = $5
    RETURNING 1)
SELECT count(*) FROM fenced`, pipeline, topics, parts, epoch, owner).Scan(&n)
	if err != nil {
		return err
	}
	if n != len(ps) {
		return ErrFenced
	}
	return nil
}

// mergePositions returns one Position per partition of ps, sorted by topic
// and partition (a fixed lock order), keeping the greatest of each offset:
// two rows of one partition would fail an upsert with 21000.
func mergePositions(ps []Position) []Position {
	merged := map[aggregate.PartitionID]Position{}
	for _, p := range ps {
		if m, ok := merged[p.PartitionID]; ok {
			p.NextOffset = max(p.NextOffset, m.NextOffset)
			p.ConsumedOffset = max(p.ConsumedOffset, m.ConsumedOffset)
		}
		merged[p.PartitionID] = p
	}
	out := make([]Position, 0, len(merged))
	for _, p := range merged {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	return out
}

// storePositions stores the offsets of ps (never backwards), the watermark
// wm (never backwards; zero keeps it) and the idle and drained flags in rows
// fence checked.
func storePositions(ctx context.Context, tx pgx.Tx, pipeline string, wm time.Time, ps []Position) error {
	topics, parts := make([]string, len(ps)), make([]int32, len(ps))
	next, consumed := make([]int64, len(ps)), make([]int64, len(ps))
	idle, drained := make([]bool, len(ps)), make([]bool, len(ps))
	for i, p := range ps {
		topics[i], parts[i], next[i], consumed[i] = p.Topic, p.Partition, p.NextOffset, p.ConsumedOffset
		idle[i], drained[i] = p.Idle, p.Drained
	}
	var w any // NULL keeps the stored watermark
	if !wm.IsZero() {
		w = wm.UTC()
	}
	_, err := tx.Exec(ctx, `
UPDATE stream_positions AS t SET
    next_offset = GREATEST(t.next_offset, u.next_offset),
    consumed_offset = GREATEST(t.consumed_offset, u.consumed_offset),
    watermark = GREATEST(t.watermark, $6),
    idle = u.idle, drained = u.drained,
    updated_at = now()
FROM unnest($2::text[], $3::integer[], $4::bigint[], $5::bigint[], $7::boolean[], $8::boolean[])
    AS u(topic, partition, next_offset, consumed_offset, idle, drained)
WHERE t.pipeline = $1 AND t.topic = u.topic AND t.partition = u.partition`,
		pipeline, topics, parts, next, consumed, w, idle, drained)
	return err
}
