package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ovstream/ovstream/aggregate"
)

// ClaimOptions say when a claim may take a partition another instance owns
// (docs/design.md "Pipelines, instances and partitions": standby, not ping-pong).
type ClaimOptions struct {
	// Lease: a partition whose owner's heartbeat is younger than this is
	// held, and the claim returns *HeldError. Required, > 0. Every instance
	// of a pipeline should use the same lease (an owner renews every lease/3
	// of its own).
	Lease time.Duration
	// Takeover claims held partitions too (run --takeover): their owner is
	// fenced at its next commit.
	Takeover bool
	// InstanceID is the claiming process's instance id (run --instance-id;
	// OwnerInstance of its owner), "" for none. A partition held by an
	// earlier incarnation of the same id (another owner with that id, a
	// process that was restarted) is taken at once when that incarnation's
	// lease session is gone from pg_stat_activity (the process died, so its
	// connections closed), as Kafka's static membership lets a restarted
	// member with the same group.instance.id take its place (KIP-345). While
	// that session lives the partition is held as usual: two live processes
	// with one id do not fence each other in turn (HeldError.SharedID).
	InstanceID string
	// Topics are the pipeline's topics as the claiming instance is
	// configured (predictions, then positions; empty ones left out), and
	// Window its tumbling window size: settings every instance of a pipeline
	// must share, or their windows and merges disagree. The first claim that
	// names them records them (pipelines.topics, .window_size); a claim that
	// names others fails with *SettingsError and writes nothing (change them
	// with SetSettings). nil and 0 are not checked.
	Topics []string
	Window time.Duration
	// MaxDelay is the instance's bound on the plausible |delay_s|, a setting
	// every instance shares like Window (pipelines.max_delay): instances
	// with other bounds would dead-letter different records. 0 is not checked.
	MaxDelay time.Duration
}

// Claimed is what a successful claim did.
type Claimed struct {
	Epoch int64 // the fencing epoch the claimed partitions have now
	// Previous is the ownership of each claimed partition just before the
	// claim, by topic and partition (State says why it could be taken).
	Previous []PartitionLease
	// Terminated are the database sessions the claim ended because they
	// held a claimed partition's row lock for longer than claimLockTimeout
	// while its owner's lease had expired (or under Takeover): a frozen
	// owner inside its commit transaction.
	Terminated []Termination
	// Restarted are the owners whose partitions the claim took at once as
	// earlier incarnations of ClaimOptions.InstanceID whose lease session was
	// gone.
	Restarted []string
}

// Termination is one database session a claim terminated (pg_terminate_backend).
type Termination struct {
	PID       int32                 // backend process id
	Partition aggregate.PartitionID // a partition whose row lock it held
	Owner     string                // the partition's owner then
	State     string                // the owner's lease then: LeaseExpired, or LeaseAlive under Takeover
}

const (
	// claimLockTimeout bounds each row-lock wait of a claim (lock_timeout):
	// an owner's commit holds its partitions' rows for that long at most in
	// practice; longer, the holder is frozen or stuck (SQLSTATE 55P03).
	claimLockTimeout = time.Second
	// terminateAttempts is how many times a claim terminates lock holders
	// and tries again before it returns the 55P03 error (retryable).
	terminateAttempts = 3
	// staleInstanceLeases: a claim deletes pipeline_instances rows whose
	// heartbeat is older than this many leases (instances that crashed).
	staleInstanceLeases = 10
)

// Claim makes owner the owner of parts, partitions of pipeline, and returns
// their new fencing epoch: one more than the greatest epoch any of parts had
// (1 on the first claim). From then on every commit of an older epoch that
// covers one of parts fails with ErrFenced, so nothing an earlier owner
// writes becomes visible after Claim returns.
//
// A partition is taken when it is released (no owner), when its owner's
// lease has expired (see LeaseAlive), when owner is its owner already (the
// same process: a resync claims again), or under opts.Takeover.
// Otherwise nothing is claimed and the error is a *HeldError (errors.As)
// listing the live owners: wait as a standby and call Claim again.
//
// A claim never blocks on a frozen instance: it waits at most
// claimLockTimeout for a partition's row lock. When a session still holds it
// (a commit transaction of an owner whose lease expired, or any owner under
// Takeover), the claim terminates that session (its transaction id is the
// row's xmax; pg_locks gives its process) and tries again; Claimed.Terminated
// lists what it ended. This needs the right to signal the holder's backend
// (the same database role, or pg_signal_backend).
//
// A partition never claimed before gets a stream_positions row without
// offsets (LoadPositions leaves it out). The claim also deletes the
// pipeline_instances rows of instances silent for staleInstanceLeases leases
// and of dead earlier incarnations of opts.InstanceID (deadIncarnations).
func (s *Store) Claim(ctx context.Context, pipeline, owner string, parts []aggregate.PartitionID, opts ClaimOptions) (Claimed, error) {
	c, err := s.claim(ctx, pipeline, owner, 0, parts, opts)
	if err != nil {
		return c, fmt.Errorf("store: claim %d partitions of pipeline %q: %w", len(parts), pipeline, err)
	}
	return c, nil
}

// ClaimMore makes owner the owner of parts, more partitions of pipeline
// (e.g. partitions added to a topic while running), at the fencing epoch
// owner holds already, so one epoch keeps fencing all of its partitions.
// The rules of Claim apply: a *HeldError when a live instance holds one of
// parts. A partition whose epoch is epoch or more (another instance claimed
// it after owner's claim; fencing epochs never go down) fails the claim
// with ErrFenced (errors.Is), unless owner holds it at epoch already (a
// repeated ClaimMore). Nothing is claimed on error.
func (s *Store) ClaimMore(ctx context.Context, pipeline, owner string, epoch int64, parts []aggregate.PartitionID, opts ClaimOptions) (Claimed, error) {
	if epoch <= 0 {
		return Claimed{}, fmt.Errorf("store: claim more partitions of pipeline %q: epoch %d: want the positive epoch of a claim", pipeline, epoch)
	}
	c, err := s.claim(ctx, pipeline, owner, epoch, parts, opts)
	if err != nil {
		return c, fmt.Errorf("store: claim %d more partitions of pipeline %q at epoch %d: %w", len(parts), pipeline, epoch, err)
	}
	return c, nil
}

// Release gives up owner's partitions parts of pipeline claimed at epoch (a
// clean shutdown, the end of a drain): their owner becomes NULL, their epoch
// stays, so a standby claims them at once. Partitions another instance
// claimed since are left alone. It returns how many were released.
func (s *Store) Release(ctx context.Context, pipeline, owner string, epoch int64, parts []aggregate.PartitionID) (int, error) {
	topics, nums := partitionArrays(parts)
	var n int
	err := s.do(ctx, func(conn *pgx.Conn) error {
		tag, err := conn.Exec(ctx, `
UPDATE stream_positions s SET owner = NULL
FROM unnest($2::text[], $3::integer[]) AS u(topic, partition)
WHERE s.pipeline = $1 AND s.topic = u.topic AND s.partition = u.partition AND s.epoch = $4 AND s.owner = $5`,
			pipeline, topics, nums, epoch, owner)
		n = int(tag.RowsAffected())
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("store: release %d partitions of pipeline %q: %w", len(parts), pipeline, err)
	}
	return n, nil
}

// claim claims parts at epoch (0: a new epoch), terminating the sessions
// that hold their row locks when it may take them.
func (s *Store) claim(ctx context.Context, pipeline, owner string, epoch int64, parts []aggregate.PartitionID, opts ClaimOptions) (Claimed, error) {
	var c Claimed
	if opts.Lease <= 0 {
		return c, fmt.Errorf("lease %v: want a positive duration", opts.Lease)
	}
	if len(parts) == 0 {
		return c, errors.New("no partitions to claim")
	}
	for attempt := 1; ; attempt++ {
		err := s.tryClaim(ctx, pipeline, owner, epoch, parts, opts, &c)
		if err == nil || !lockNotAvailable(err) || attempt > terminateAttempts {
			return c, err
		}
		ts, err := s.terminateHolders(ctx, pipeline, owner, parts, opts, c.Restarted)
		if err != nil {
			return c, fmt.Errorf("terminate the sessions holding the partitions' row locks: %w", err)
		}
		c.Terminated = append(c.Terminated, ts...)
	}
}

// errHeld rolls back a claim transaction that found live owners.
var errHeld = errors.New("held")

// tryClaim is one claim transaction. Every lock wait in it is bounded by
// claimLockTimeout (SQLSTATE 55P03 after that).
func (s *Store) tryClaim(ctx context.Context, pipeline, owner string, epoch int64, parts []aggregate.PartitionID, opts ClaimOptions, c *Claimed) error {
	conn, err := s.connection(ctx)
	if err != nil {
		return err
	}
	topics, nums := partitionArrays(parts)
	var held []PartitionLease
	var gone map[string]bool
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", claimLockTimeout.Milliseconds())); err != nil {
			return err
		}
		// Insert only what is missing: an insert that meets an existing row
		// would wait for the transaction updating it (a frozen commit).
		if _, err := tx.Exec(ctx, `INSERT INTO pipelines (name) SELECT $1
			WHERE NOT EXISTS (SELECT 1 FROM pipelines WHERE name = $1) ON CONFLICT DO NOTHING`, pipeline); err != nil {
			return err
		}
		if err := checkSettings(ctx, tx, pipeline, opts); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `
INSERT INTO stream_positions (pipeline, topic, partition)
SELECT $1, u.topic, u.partition FROM unnest($2::text[], $3::integer[]) AS u(topic, partition)
WHERE NOT EXISTS (SELECT 1 FROM stream_positions s WHERE s.pipeline = $1 AND s.topic = u.topic AND s.partition = u.partition)
ORDER BY 2, 3
ON CONFLICT DO NOTHING`, pipeline, topics, nums); err != nil {
			return err
		}
		// Without locks first: a standby polls here and never waits.
		states, err := leaseStates(ctx, tx, pipeline, parts, opts.Lease)
		if err != nil {
			return err
		}
		if gone, err = restartedOwners(ctx, tx, pipeline, owner, opts.InstanceID, states); err != nil {
			return err
		}
		if held = heldBy(states, owner, opts.Takeover, gone); held != nil {
			return errHeld
		}
		if _, err := tx.Exec(ctx, `
SELECT 1 FROM stream_positions s JOIN unnest($2::text[], $3::integer[]) AS u(topic, partition)
    ON s.topic = u.topic AND s.partition = u.partition
WHERE s.pipeline = $1 ORDER BY s.topic, s.partition FOR UPDATE OF s`, pipeline, topics, nums); err != nil {
			return err
		}
		// Under the locks: what another claim may have changed meanwhile.
		if states, err = leaseStates(ctx, tx, pipeline, parts, opts.Lease); err != nil {
			return err
		}
		if held = heldBy(states, owner, opts.Takeover, gone); held != nil {
			return errHeld
		}
		next := epoch
		if epoch == 0 {
			for _, p := range states {
				next = max(next, p.Epoch)
			}
			next++
		} else {
			for _, p := range states {
				if p.Epoch > epoch || (p.Epoch == epoch && p.Owner != owner) {
					return fmt.Errorf("partition %s has epoch %d, owner %q: %w", p.PartitionID, p.Epoch, p.Owner, ErrFenced)
				}
			}
		}
		if _, err := tx.Exec(ctx, `
UPDATE stream_positions s SET epoch = $4, owner = $5, heartbeat_at = now(),
    drained = false -- a new owner has drained nothing yet (a drain that stopped left it)
FROM unnest($2::text[], $3::integer[]) AS u(topic, partition)
WHERE s.pipeline = $1 AND s.topic = u.topic AND s.partition = u.partition`, pipeline, topics, nums, next, owner); err != nil {
			return err
		}
		// Earlier incarnations of this instance id are dead: `status` lists
		// the instances that run.
		dead, err := deadIncarnations(ctx, tx, pipeline, owner, opts.InstanceID)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM pipeline_instances WHERE pipeline = $1 AND owner <> $2
			AND (heartbeat_at < now() - $3 * interval '1 microsecond' OR owner = ANY($4))`,
			pipeline, owner, micros(staleInstanceLeases*opts.Lease), dead); err != nil {
			return err
		}
		c.Epoch, c.Previous = next, states
		return nil
	})
	c.Restarted = c.Restarted[:0]
	for o := range gone {
		c.Restarted = append(c.Restarted, o)
	}
	switch {
	case errors.Is(err, errHeld): // rolled back; the connection is fine
		return newHeldError(held, opts)
	case err != nil && !errors.Is(err, ErrFenced):
		s.discard()
	}
	return err
}

// newHeldError is the *HeldError of a claim under opts that found held.
func newHeldError(held []PartitionLease, opts ClaimOptions) *HeldError {
	h := &HeldError{Held: held}
	for _, p := range held {
		if opts.InstanceID != "" && OwnerInstance(p.Owner) == opts.InstanceID && !slices.Contains(h.SharedID, p.Owner) {
			h.SharedID = append(h.SharedID, p.Owner)
		}
	}
	return h
}

// Held tells, read-only and without locks, whether a claim of parts of
// pipeline by owner under opts would find live holders: the *HeldError the
// claim would return, or nil when it may take them (released, expired, an
// earlier incarnation of the same instance id, --takeover, or no row yet).
// A standby polls it on its lease connection, so that it holds no commit
// connection while it waits (docs/design.md "Standby, not ping-pong"); a nil
// answer is no promise: the claim decides again under the row locks.
func (s *Store) Held(ctx context.Context, pipeline, owner string, parts []aggregate.PartitionID, opts ClaimOptions) (*HeldError, error) {
	var held []PartitionLease
	err := s.do(ctx, func(conn *pgx.Conn) error {
		return pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
			states, err := leaseStates(ctx, tx, pipeline, parts, opts.Lease)
			if err != nil {
				return err
			}
			gone, err := restartedOwners(ctx, tx, pipeline, owner, opts.InstanceID, states)
			if err != nil {
				return err
			}
			held = heldBy(states, owner, opts.Takeover, gone)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("store: lease states of %d partitions of pipeline %q: %w", len(parts), pipeline, err)
	}
	if held == nil {
		return nil, nil
	}
	return newHeldError(held, opts), nil
}

// heldBy returns the partitions of states a claim by owner may not take:
// another owner's lease is alive, this is no takeover, and the owner is not
// an earlier incarnation of the claimer's instance id whose session is gone.
func heldBy(states []PartitionLease, owner string, takeover bool, gone map[string]bool) []PartitionLease {
	if takeover {
		return nil
	}
	var held []PartitionLease
	for _, p := range states {
		if p.State == LeaseAlive && p.Owner != owner && !gone[p.Owner] {
			held = append(held, p)
		}
	}
	return held
}

// instanceSep separates an instance id from the rest of an owner
// (OwnerInstance); the rest, host:pid-nonce, never holds it.
const instanceSep = "@"

// InstanceOwner returns the owner string of a process with instance id id
// (run --instance-id) and process-unique part proc (host:pid-nonce): id,
// "@", proc; proc alone when id is "".
func InstanceOwner(id, proc string) string {
	if id == "" {
		return proc
	}
	return id + instanceSep + proc
}

// OwnerInstance returns the instance id of owner (InstanceOwner), "" when
// it has none.
func OwnerInstance(owner string) string {
	if i := strings.LastIndex(owner, instanceSep); i > 0 {
		return owner[:i]
	}
	return ""
}

// restartedOwners returns the owners of states, other than owner, that are
// earlier incarnations of instance id (OwnerInstance) with a live lease
// whose process died (deadIncarnations): their partitions may be taken at
// once. nil when id is "".
func restartedOwners(ctx context.Context, tx pgx.Tx, pipeline, owner, id string, states []PartitionLease) (map[string]bool, error) {
	var same []string
	for _, p := range states {
		if id != "" && p.State == LeaseAlive && p.Owner != owner && OwnerInstance(p.Owner) == id && !slices.Contains(same, p.Owner) {
			same = append(same, p.Owner)
		}
	}
	if len(same) == 0 {
		return nil, nil
	}
	dead, err := deadIncarnations(ctx, tx, pipeline, owner, id)
	if err != nil {
		return nil, err
	}
	gone := map[string]bool{}
	for _, o := range dead {
		if slices.Contains(same, o) {
			gone[o] = true
		}
	}
	return gone, nil
}

// deadIncarnations returns the owners of pipeline's pipeline_instances rows,
// other than owner, of instance id id (OwnerInstance) whose lease session
// (backend_pid, backend_start) is no longer in pg_stat_activity, or whose
// owner lock (Heartbeat) no session holds: their process died. The lock
// tells through a session pooler, which keeps the dead process's server
// session and releases its locks. A session whose start this role may not
// see (another role without pg_read_all_stats: backend_start is NULL) and
// holds the lock counts as alive. nil when id is "".
func deadIncarnations(ctx context.Context, tx pgx.Tx, pipeline, owner, id string) ([]string, error) {
	if id == "" {
		return nil, nil
	}
	rows, err := tx.Query(ctx, `
SELECT i.owner FROM pipeline_instances i
WHERE i.pipeline = $1 AND i.owner <> $2 AND starts_with(i.owner, $3 || '`+instanceSep+`')
  AND strpos(substr(i.owner, length($3) + 2), '`+instanceSep+`') = 0 AND i.backend_pid IS NOT NULL
  AND (NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = i.backend_pid
      AND (a.backend_start = i.backend_start OR a.backend_start IS NULL))
    OR NOT EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND l.classid = $4::int4::oid AND l.objid = `+ownerLockKey("i.pipeline", "i.owner")+`::oid AND l.objsubid = 2))`,
		pipeline, owner, id, ownerLockSpace)
	if err != nil {
		return nil, fmt.Errorf("look up the lease sessions of instance %q: %w", id, err)
	}
	owners, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("look up the lease sessions of instance %q: %w", id, err)
	}
	return owners, nil
}

// lockNotAvailable tells whether err is SQLSTATE 55P03 (lock_timeout).
func lockNotAvailable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}

// terminateHolders terminates the sessions whose transactions hold the row
// locks of parts (the transaction id is the row's xmax; pg_locks names its
// process), unless the partition's owner is another live instance and this
// is no takeover (then its commit is waited for: the claim returns 55P03).
func (s *Store) terminateHolders(ctx context.Context, pipeline, owner string, parts []aggregate.PartitionID, opts ClaimOptions,
	restarted []string) ([]Termination, error) {
	topics, nums := partitionArrays(parts)
	var out []Termination
	err := s.do(ctx, func(conn *pgx.Conn) error {
		out = out[:0]
		rows, err := conn.Query(ctx, `
SELECT DISTINCT ON (l.pid) l.pid, s.topic, s.partition, coalesce(s.owner, ''),
    CASE WHEN s.owner IS NULL THEN 'released'
         WHEN coalesce(i.heartbeat_at, s.heartbeat_at) > now() - $4 * interval '1 microsecond' THEN 'alive'
         ELSE 'expired' END
FROM stream_positions s
JOIN pg_locks l ON l.locktype = 'transactionid' AND l.granted AND l.transactionid = s.xmax
LEFT JOIN pipeline_instances i ON i.pipeline = s.pipeline AND i.owner = s.owner
WHERE s.pipeline = $1 AND (s.topic, s.partition) IN (SELECT * FROM unnest($2::text[], $3::integer[]))
  AND l.pid <> pg_backend_pid()
ORDER BY l.pid, s.topic, s.partition`, pipeline, topics, nums, micros(opts.Lease))
		if err != nil {
			return err
		}
		var found []Termination
		var t Termination
		if _, err := pgx.ForEachRow(rows, []any{&t.PID, &t.Partition.Topic, &t.Partition.Partition, &t.Owner, &t.State}, func() error {
			if t.State != LeaseAlive || t.Owner == owner || opts.Takeover || slices.Contains(restarted, t.Owner) {
				found = append(found, t)
			}
			return nil
		}); err != nil {
			return err
		}
		for _, t := range found {
			var ok bool
			// Wait up to 5 s for the backend to exit, so its locks are gone.
			if err := conn.QueryRow(ctx, `SELECT pg_terminate_backend($1, 5000)`, t.PID).Scan(&ok); err != nil {
				return fmt.Errorf("pg_terminate_backend(%d): %w", t.PID, err)
			}
			if ok {
				out = append(out, t)
			}
		}
		return nil
	})
	return out, err
}

// partitionArrays returns parts as two parallel arrays, for unnest.
func partitionArrays(parts []aggregate.PartitionID) (topics []string, nums []int32) {
	topics, nums = make([]string, len(parts)), make([]int32, len(parts))
	for i, p := range parts {
		topics[i], nums[i] = p.Topic, p.Partition
	}
	return topics, nums
}
