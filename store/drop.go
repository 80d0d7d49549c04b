package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// PipelineTables are the tables that hold a pipeline's rows in a `pipeline`
// column (docs/design.md "Schema"), all of them, so that DropPipeline leaves
// nothing of a pipeline behind (a test compares this list with the schema).
var PipelineTables = []string{"delay_aggregates", "delay_partial_windows", "vehicle_latest", "trip_delay_latest",
	"dead_letters", "stream_positions", "pipeline_instances", "names", "refused_windows", "dead_letter_replays",
	"stop_visits", "stop_visit_counts",
	"delay_aggregates_provisional", "provisional_positions", "delay_partial_provisional"}

// ErrPipelineLive is returned by DropPipeline while an instance of the
// pipeline is alive.
var ErrPipelineLive = errors.New("an instance of the pipeline is alive")

// DropPipeline deletes every row of pipeline name in one transaction: its
// results, dead letters, stored positions, instances and its pipelines row,
// so that a later run of that pipeline starts as a new one (from
// --start-offset). It returns ErrPipelineLive, naming the instance, while one
// renewed its heartbeat within lease (pipelines.name is locked first, as a
// claim locks it, so no instance claims meanwhile).
func (s *Store) DropPipeline(ctx context.Context, name string, lease time.Duration) error {
	return s.do(ctx, func(conn *pgx.Conn) error {
		return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT 1 FROM pipelines WHERE name = $1 FOR UPDATE`, name); err != nil {
				return fmt.Errorf("store: drop pipeline %q: %w", name, err)
			}
			var owner string
			err := tx.QueryRow(ctx, `SELECT owner FROM pipeline_instances WHERE pipeline = $1
				AND heartbeat_at > now() - $2 * interval '1 microsecond' ORDER BY owner LIMIT 1`,
				name, lease.Microseconds()).Scan(&owner)
			if err == nil {
				return fmt.Errorf("store: drop pipeline %q: %w: %s", name, ErrPipelineLive, owner)
			}
			if !errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("store: drop pipeline %q: %w", name, err)
			}
			for _, t := range append(PipelineTables, "pipelines") {
				col := "pipeline"
				if t == "pipelines" {
					col = "name"
				}
				if _, err := tx.Exec(ctx, fmt.Sprintf(`DELETE FROM %s WHERE %s = $1`, t, col), name); err != nil {
					return fmt.Errorf("store: drop pipeline %q: %s: %w", name, t, err)
				}
			}
			return nil
		})
	})
}
