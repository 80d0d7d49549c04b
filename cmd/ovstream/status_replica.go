package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"
)

// ReplicaStatus is what `status` says of the server it read when that server
// is a hot standby (issue 22, reads from a replica): what it shows is as old
// as its last replayed transaction.
type ReplicaStatus struct {
	Server string `json:"server"` // host:port read
	// LastReplayAt is the commit time of the last transaction the standby
	// replayed (pg_last_xact_replay_timestamp); null when none yet.
	LastReplayAt *time.Time `json:"last_replay_at"`
	// ReplayAgeS is the age of LastReplayAt on the standby's clock: how far
	// behind the primary it can be, at most, while the primary commits.
	ReplayAgeS *float64 `json:"replay_age_s"`
	// ReceivedLSN and ReplayedLSN are the WAL received and replayed.
	ReceivedLSN string `json:"received_lsn"`
	ReplayedLSN string `json:"replayed_lsn"`
}

// replicaStatus returns nil when databaseURL leads to a primary, else what the
// standby replayed. It only reads.
func replicaStatus(ctx context.Context, databaseURL string) (*ReplicaStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	cfg, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return nil, err
	}
	cfg.RuntimeParams["application_name"] = "ovstream-status"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var standby bool
	r := &ReplicaStatus{Server: conn.PgConn().Conn().RemoteAddr().String()}
	var received, replayed *string
	if err := conn.QueryRow(ctx, `SELECT pg_is_in_recovery(), pg_last_xact_replay_timestamp(),
		extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8,
		pg_last_wal_receive_lsn()::text, pg_last_wal_replay_lsn()::text`).Scan(
		&standby, &r.LastReplayAt, &r.ReplayAgeS, &received, &replayed); err != nil {
		return nil, fmt.Errorf("replica status: %w", err)
	}
	if !standby {
		return nil, nil
	}
	if received != nil {
		r.ReceivedLSN = *received
	}
	if replayed != nil {
		r.ReplayedLSN = *replayed
	}
	return r, nil
}

// printReplica prints the replica line of `status` (nothing on a primary).
func printReplica(w io.Writer, r *ReplicaStatus) {
	if r == nil {
		return
	}
	age := "no transaction replayed yet"
	if r.LastReplayAt != nil && r.ReplayAgeS != nil {
		age = fmt.Sprintf("last replayed transaction committed %s (%.1fs ago)", r.LastReplayAt.UTC().Format(time.RFC3339), *r.ReplayAgeS)
	}
	fmt.Fprintf(w, "replica: %s is a hot standby (read-only): %s; WAL received %s, replayed %s\n", r.Server, age, r.ReceivedLSN, r.ReplayedLSN)
}
