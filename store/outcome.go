package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Resolving an ambiguous COMMIT. Replaying a batch is harmless (windows and
// partials are replaced, positions never move backwards), so a commit whose
// answer was lost is normally resolved by re-reading the stored positions.
// One commit cannot be resolved that way: a split drain's last commit, which
// marks its partitions drained and, when it finds every partition drained,
// merges everything and clears every flag. Re-read, "ended the drain" and
// "never committed while the other drains are still running" look the
// same, and a drain that guesses wrong waits for ever or leaves the others
// waiting. Such a commit asks PostgreSQL instead: txid_status "can be used to
// determine whether a transaction committed or aborted when the application
// and database server become disconnected while a COMMIT is in progress"
// (PostgreSQL docs, "Transaction ID and Snapshot Information Functions").

// marksDrained tells whether b is a split drain's last commit.
func marksDrained(b *Batch) bool {
	if b.Split == nil {
		return false
	}
	for _, p := range b.Positions {
		if p.Drained {
			return true
		}
	}
	return false
}

// outcome asks, on a new connection, what became of transaction xid
// (txid_current inside it): "committed" or "aborted". While the server does
// not answer, or still shows the transaction in progress (its session has
// not noticed the broken connection yet), it asks again until ctx ends;
// then, or when the transaction is too old to tell (NULL), it returns "".
func (s *Store) outcome(ctx context.Context, xid int64) string {
	s.discard()
	wait := 50 * time.Millisecond
	for {
		var status *string
		err := s.do(ctx, func(conn *pgx.Conn) error {
			return conn.QueryRow(ctx, `SELECT txid_status($1)`, xid).Scan(&status)
		})
		switch {
		case err == nil && status == nil:
			return ""
		case err == nil && *status != "in progress":
			return *status
		}
		select {
		case <-ctx.Done():
			return ""
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}
