package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Replica is what a read from a hot standby is as old as: the standby's last replayed transaction and WAL.
type Replica struct {
	Server string `json:"server"` // host:port read
	// LastReplayAt is the commit time of the last transaction the standby
	// replayed (pg_last_xact_replay_timestamp), UTC; null when none yet.
	LastReplayAt *time.Time `json:"last_replay_at"`
	// ReplayAgeS is the age of LastReplayAt on the standby's clock, in
	// seconds: how far behind the primary it can be, at most, while the
	// primary commits.
	ReplayAgeS *float64 `json:"replay_age_s"`
	// ReceivedLSN and ReplayedLSN are the WAL received and replayed.
	ReceivedLSN string `json:"received_lsn"`
	ReplayedLSN string `json:"replayed_lsn"`
}

// ReplicaState returns nil when the Store's server is a primary, else what
// the hot standby replayed (PostgreSQL "Recovery Information Functions"). It
// only reads.
func (s *Store) ReplicaState(ctx context.Context) (*Replica, error) {
	var r *Replica
	err := s.do(ctx, func(conn *pgx.Conn) (err error) {
		r, err = ReadReplica(ctx, conn)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: replica state: %w", err)
	}
	return r, nil
}

// ReadReplica returns nil when conn's server is a primary, else what the hot
// standby replayed (PostgreSQL "Recovery Information Functions"). It only
// reads.
func ReadReplica(ctx context.Context, conn *pgx.Conn) (*Replica, error) {
	var standby bool
	r := &Replica{Server: conn.PgConn().Conn().RemoteAddr().String()}
	var received, replayed *string
	if err := conn.QueryRow(ctx, `SELECT pg_is_in_recovery(), pg_last_xact_replay_timestamp(),
		extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8,
		pg_last_wal_receive_lsn()::text, pg_last_wal_replay_lsn()::text`).Scan(
		&standby, &r.LastReplayAt, &r.ReplayAgeS, &received, &replayed); err != nil {
		return nil, err
	}
	if !standby {
		return nil, nil
	}
	if r.LastReplayAt != nil {
		t := r.LastReplayAt.UTC()
		r.LastReplayAt = &t
	}
	if received != nil {
		r.ReceivedLSN = *received
	}
	if replayed != nil {
		r.ReplayedLSN = *replayed
	}
	return r, nil
}
