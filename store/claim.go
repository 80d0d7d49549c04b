package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Claim makes owner the owner of pipeline and returns its new fencing epoch
// (1 on the first claim, then one more each time). Every commit with an older
// epoch fails with ErrFenced from then on. A claim waits for a commit in
// progress (it holds the pipelines row), so nothing a fenced instance writes
// becomes visible after Claim returns.
func (s *Store) Claim(ctx context.Context, pipeline, owner string) (epoch int64, err error) {
	err = s.do(ctx, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `
INSERT INTO pipelines AS p (name, epoch, owner, heartbeat_at) VALUES ($1, 1, $2, now())
ON CONFLICT (name) DO UPDATE SET epoch = p.epoch + 1, owner = EXCLUDED.owner, heartbeat_at = now()
RETURNING epoch`, pipeline, owner).Scan(&epoch)
	})
	if err != nil {
		return 0, fmt.Errorf("store: claim pipeline %q: %w", pipeline, err)
	}
	return epoch, nil
}
