package status

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/ovstream/ovstream/store"
)

// Replica returns nil when databaseURL leads to a primary, else what the
// standby replayed (store.Replica). It only reads, on a connection of its own.
func Replica(ctx context.Context, databaseURL string) (*store.Replica, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	st, err := store.Open(ctx, databaseURL)
	if err != nil {
		return nil, err
	}
	defer st.Close(context.WithoutCancel(ctx))
	return st.ReplicaState(ctx)
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
