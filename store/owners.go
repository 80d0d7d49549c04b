package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/aggregate"
)

// Owners returns the owner (host:pid) of every partition of pipeline that an
// instance claimed (stream_positions.owner); a partition never claimed, or
// released, is absent. `status` shows the partitions of a topic that are
// absent: no instance consumes them (DESIGN.md "Start-up").
func (s *Store) Owners(ctx context.Context, pipeline string) (map[aggregate.PartitionID]string, error) {
	owners := map[aggregate.PartitionID]string{}
	err := s.do(ctx, func(conn *pgx.Conn) error {
		clear(owners)
		rows, err := conn.Query(ctx, `SELECT topic, partition, owner FROM stream_positions
			WHERE pipeline = $1 AND owner IS NOT NULL`, pipeline)
		if err != nil {
			return err
		}
		var tp aggregate.PartitionID
		var owner string
		_, err = pgx.ForEachRow(rows, []any{&tp.Topic, &tp.Partition, &owner}, func() error {
			owners[tp] = owner
			return nil
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: owners of pipeline %q: %w", pipeline, err)
	}
	return owners, nil
}
