package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/aggregate"
)

// OffsetRange is the offsets [From, To) of one partition.
type OffsetRange struct {
	aggregate.PartitionID
	From, To int64
}

// DeadLetterOffsets returns, per partition, the offsets of pipeline's dead
// letters (any reason) that lie in that partition's range, ascending; a
// partition without any is absent. A restart reads them for the range
// [next_offset, consumed_offset) it replays: those records were
// dead-lettered before and are skipped, whatever the wall clock says now
// (docs/design.md "Replay after a restart", G9). One query; each range is read
// through the primary key (pipeline, topic, partition, offset).
func (s *Store) DeadLetterOffsets(ctx context.Context, pipeline string, ranges []OffsetRange) (map[aggregate.PartitionID][]int64, error) {
	out := map[aggregate.PartitionID][]int64{}
	if len(ranges) == 0 {
		return out, nil
	}
	topics, parts := make([]string, len(ranges)), make([]int32, len(ranges))
	from, to := make([]int64, len(ranges)), make([]int64, len(ranges))
	for i, r := range ranges {
		topics[i], parts[i], from[i], to[i] = r.Topic, r.Partition, r.From, r.To
	}
	err := s.do(ctx, func(conn *pgx.Conn) error {
		clear(out)
		rows, err := conn.Query(ctx, `
SELECT u.topic, u.partition, d."offset"
FROM unnest($2::text[], $3::integer[], $4::bigint[], $5::bigint[]) AS u(topic, partition, lo, hi)
CROSS JOIN LATERAL (
    SELECT "offset" FROM dead_letters
    WHERE pipeline = $1 AND topic = u.topic AND partition = u.partition AND "offset" >= u.lo AND "offset" < u.hi
    ORDER BY "offset") AS d
ORDER BY 1, 2, 3`, pipeline, topics, parts, from, to)
		if err != nil {
			return err
		}
		var tp aggregate.PartitionID
		var off int64
		_, err = pgx.ForEachRow(rows, []any{&tp.Topic, &tp.Partition, &off}, func() error {
			out[tp] = append(out[tp], off)
			return nil
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: dead-letter offsets of %d partitions of pipeline %q: %w", len(ranges), pipeline, err)
	}
	return out, nil
}
