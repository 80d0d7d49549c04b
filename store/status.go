package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// PipelineRow is one pipelines row.
type PipelineRow struct {
	Name        string
	Epoch       int64     // fencing epoch: one more at each claim
	Owner       string    // host:pid of the instance that claimed it last
	HeartbeatAt time.Time // UTC; the last commit (or claim); zero if none
	Watermark   time.Time // UTC; the watermark of the last commit; zero if none
}

// ReasonCount counts the dead letters of one reason.
type ReasonCount struct {
	Total    int64 `json:"total"`
	Replayed int64 `json:"replayed"` // re-produced by `ovstream dlq replay`
}

// Status is what `ovstream status` shows from the database.
type Status struct {
	Pipeline        *PipelineRow     // nil when the pipeline was never claimed
	Positions       []StoredPosition // the pipeline's stream_positions, by topic and partition
	NewestWindowEnd time.Time        // max(window_end) of delay_aggregates, UTC; zero if none
	DeadLetters     map[string]ReasonCount
}

// Status reads pipeline's row and positions, the newest finalized window
// and the dead letters per reason (dead_letters and delay_aggregates are
// shared by every pipeline of the database).
func (s *Store) Status(ctx context.Context, pipeline string) (*Status, error) {
	st := &Status{}
	err := s.do(ctx, func(c *pgx.Conn) error {
		*st = Status{DeadLetters: map[string]ReasonCount{}}
		var p PipelineRow
		var owner *string
		var hb, wm *time.Time
		err := c.QueryRow(ctx, `SELECT name, epoch, owner, heartbeat_at, watermark FROM pipelines WHERE name = $1`,
			pipeline).Scan(&p.Name, &p.Epoch, &owner, &hb, &wm)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return err
		default:
			if owner != nil {
				p.Owner = *owner
			}
			if hb != nil {
				p.HeartbeatAt = hb.UTC()
			}
			if wm != nil {
				p.Watermark = wm.UTC()
			}
			st.Pipeline = &p
		}
		rows, err := c.Query(ctx, `SELECT topic, partition, next_offset, consumed_offset, updated_at
			FROM stream_positions WHERE pipeline = $1 ORDER BY topic, partition`, pipeline)
		if err != nil {
			return err
		}
		var sp StoredPosition
		if _, err := pgx.ForEachRow(rows, []any{&sp.Topic, &sp.Partition, &sp.NextOffset, &sp.ConsumedOffset, &sp.UpdatedAt}, func() error {
			sp.UpdatedAt = sp.UpdatedAt.UTC()
			st.Positions = append(st.Positions, sp)
			return nil
		}); err != nil {
			return err
		}
		var newest *time.Time
		if err := c.QueryRow(ctx, `SELECT max(window_end) FROM delay_aggregates`).Scan(&newest); err != nil {
			return err
		}
		if newest != nil {
			st.NewestWindowEnd = newest.UTC()
		}
		rows, err = c.Query(ctx, `SELECT reason, count(*), count(replayed_at) FROM dead_letters GROUP BY reason`)
		if err != nil {
			return err
		}
		var reason string
		var rc ReasonCount
		_, err = pgx.ForEachRow(rows, []any{&reason, &rc.Total, &rc.Replayed}, func() error {
			st.DeadLetters[reason] = rc
			return nil
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: status of pipeline %q: %w", pipeline, err)
	}
	return st, nil
}
