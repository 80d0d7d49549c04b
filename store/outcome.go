package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/aggregate"
)

// Resolving an ambiguous COMMIT. Replaying a batch is harmless (windows and
// partials are replaced, positions never move backwards), so a commit whose
// answer was lost is normally resolved by re-reading the stored positions.
// One commit cannot be resolved that way: a split drain's last commit, which
// marks its partitions drained and, when it finds every partition drained,
// merges everything and clears every flag. Re-read, "ended the drain" and
// "never committed while the other drains are still running" look the
// same, and a drain that guesses wrong waits for ever or leaves the others
// waiting.
//
// Such a commit reads its own fencing instead: the commit's first statement
// (fence, positions.go) adds one to the commit sequence of each of its
// partitions where this owner holds it at this epoch, so the transaction
// committed exactly when each of them is at the batch's Seq+1 under this
// owner and epoch. The owner (host:pid-nonce) is this process's alone and
// it commits nothing while it waits for the answer, so no other transaction
// can have left that state; and the rows are read on whatever server the
// instance now writes to, so a failover that lost the commit says so.
//
// txid_status(txid_current()) is not used: a transaction ID names a
// transaction of one server's history only. After a failover to an
// asynchronous replica that never received the transaction, the new
// primary's counter is below its ID ("transaction ID ... is in the
// future"), and once the new primary has given that ID to a transaction of
// its own, txid_status answers "committed" for a commit that is lost: the
// drain would end believing its partitions drained and merged while the
// database holds none of it.

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

// Outcomes of a COMMIT whose answer was lost (outcome).
const (
	outcomeUnknown   = ""
	outcomeCommitted = "committed"
	outcomeAborted   = "aborted" // not committed: the database does not hold it
)

// outcome tells, on a new connection, what became of the transaction that
// committed ps (mergePositions of a batch of pipeline, owner and epoch):
// outcomeCommitted when every partition of ps is at commit sequence Seq+1
// under owner and epoch, outcomeAborted when one of them shows the
// transaction is not there (no row, an older epoch, or this owner and epoch
// at Seq or below: not fenced by it, or lost with it), outcomeUnknown when
// it cannot tell (another owner or a newer epoch took a partition since:
// this instance is fenced either way).
//
// The rows are read with FOR SHARE: while the transaction is still open on
// that server (its session has not noticed the broken connection yet, or
// COMMIT is still running) it holds their row locks, and a locking read
// "will wait for the first updating transaction to commit or roll back (if
// it is still in progress)", then reads "the updated version of the row"
// if it committed (PostgreSQL docs, "Read Committed Isolation Level", of
// UPDATE, DELETE, SELECT FOR UPDATE and SELECT FOR SHARE). A hot standby
// refuses SELECT ... FOR SHARE ("Hot Standby"), so a lagging replica is
// never read. While the server does not answer it asks again until ctx
// ends; then it returns outcomeUnknown.
func (s *Store) outcome(ctx context.Context, pipeline, owner string, epoch int64, ps []Position) string {
	s.discard()
	parts := make([]aggregate.PartitionID, len(ps))
	for i, p := range ps {
		parts[i] = p.PartitionID
	}
	topics, nums := partitionArrays(parts)
	wait := 50 * time.Millisecond
	for {
		type row struct {
			owner      *string
			epoch, seq int64
		}
		stored := map[aggregate.PartitionID]row{}
		err := s.do(ctx, func(conn *pgx.Conn) error {
			clear(stored)
			rows, err := conn.Query(ctx, `
SELECT t.topic, t.partition, t.owner, t.epoch, t.commit_seq
FROM stream_positions t JOIN unnest($2::text[], $3::integer[]) AS u(topic, partition)
    ON t.topic = u.topic AND t.partition = u.partition
WHERE t.pipeline = $1
ORDER BY t.topic, t.partition
FOR SHARE OF t`, pipeline, topics, nums)
			if err != nil {
				return err
			}
			var tp aggregate.PartitionID
			var r row
			_, err = pgx.ForEachRow(rows, []any{&tp.Topic, &tp.Partition, &r.owner, &r.epoch, &r.seq}, func() error {
				stored[tp] = r
				return nil
			})
			return err
		})
		if err == nil {
			committed := true
			for _, p := range ps {
				r, ok := stored[p.PartitionID]
				ours := ok && r.owner != nil && *r.owner == owner && r.epoch == epoch
				switch {
				case !ok || r.epoch < epoch || ours && r.seq <= p.Seq:
					return outcomeAborted
				case !ours || r.seq != p.Seq+1:
					committed = false
				}
			}
			if committed {
				return outcomeCommitted
			}
			return outcomeUnknown
		}
		select {
		case <-ctx.Done():
			return outcomeUnknown
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}
