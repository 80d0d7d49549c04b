package status

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ovstream/ovstream/store"
)

// Replica returns nil when pool's server is a primary, else what the standby
// replayed (store.Replica), read on one connection of pool within 15 s.
func Replica(ctx context.Context, pool *pgxpool.Pool) (*store.Replica, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: replica state: %w", err)
	}
	defer conn.Release()
	r, err := store.ReadReplica(ctx, conn.Conn())
	if err != nil {
		return nil, fmt.Errorf("store: replica state: %w", err)
	}
	return r, nil
}

// PrintReplica prints the replica line of `status` (nothing on a primary).
func PrintReplica(w io.Writer, r *store.Replica) {
	if r == nil {
		return
	}
	age := "no transaction replayed yet"
	if r.LastReplayAt != nil && r.ReplayAgeS != nil {
		age = fmt.Sprintf("last replayed transaction committed %s (%.1fs ago)", r.LastReplayAt.UTC().Format(time.RFC3339), *r.ReplayAgeS)
	}
	fmt.Fprintf(w, "replica: %s is a hot standby (read-only): %s; WAL received %s, replayed %s\n", r.Server, age, r.ReceivedLSN, r.ReplayedLSN)
}
