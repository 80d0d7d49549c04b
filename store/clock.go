package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// DatabaseTime returns the server's clock_timestamp(): PostgreSQL's wall
// clock as the statement runs (not now(), the start of the transaction),
// UTC. The run loop compares it with its own clock (consumer/clock.go).
func (s *Store) DatabaseTime(ctx context.Context) (time.Time, error) {
	var t time.Time
	err := s.do(ctx, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&t)
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("store: read the database's clock: %w", err)
	}
	return t.UTC(), nil
}
