package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/aggregate"
)

// Lease states of a partition (docs/design.md "Pipelines, instances and
// partitions"). A partition's lease is alive while its owner's heartbeat is
// younger than the lease: the owner's pipeline_instances.heartbeat_at,
// renewed every lease/3 outside the commit transaction, or, for an owner
// without an instance row (an older binary), stream_positions.heartbeat_at
// (its last claim or commit). Every age is measured by PostgreSQL's now(),
// never by the local clock.
const (
	LeaseAlive    = "alive"    // the owner's heartbeat is younger than the lease: a claim waits
	LeaseExpired  = "expired"  // the owner's heartbeat is older: a claim takes the partition
	LeaseReleased = "released" // no owner (a clean shutdown released it): a claim takes it at once
)

// Instance roles (pipeline_instances.role).
const (
	RoleActive  = "active"  // owns its partitions and commits
	RoleStandby = "standby" // waits for partitions a live instance holds
)

// PartitionLease is the ownership of one partition of a pipeline.
type PartitionLease struct {
	aggregate.PartitionID
	Owner string // host:pid-nonce of the owner; "" when released or never claimed
	Epoch int64  // the fencing epoch of the last claim; kept when released
	State string // LeaseAlive, LeaseExpired or LeaseReleased
	// OwnerSince is when the owner instance started (its pipeline_instances
	// row), UTC; zero when it has no row.
	OwnerSince time.Time
	// HeartbeatAge is the age of the owner's heartbeat by the database's
	// clock; negative when there is none (released, or never renewed).
	HeartbeatAge time.Duration
}

// HeldError is returned by Claim and ClaimMore when live instances hold some
// of the partitions (their lease is alive and the claim is no takeover):
// nothing was claimed; a standby waits and claims again.
type HeldError struct {
	Held []PartitionLease // the partitions held, by topic and partition
	// SharedID are the holders with the claimer's instance id
	// (ClaimOptions.InstanceID) whose lease session lives: two live processes
	// share one id, or the earlier one's connection has not closed yet.
	SharedID []string
}

func (e *HeldError) Error() string {
	owners := map[string][]string{}
	var order []string
	for _, h := range e.Held {
		if owners[h.Owner] == nil {
			order = append(order, h.Owner)
		}
		owners[h.Owner] = append(owners[h.Owner], h.PartitionID.String())
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d partitions held by live instances:", len(e.Held))
	for _, o := range order {
		fmt.Fprintf(&b, " %s (%s)", o, strings.Join(owners[o], ", "))
	}
	return b.String()
}

// Owners returns the distinct owners of e.Held, in order of first appearance.
func (e *HeldError) Owners() []PartitionLease {
	seen := map[string]bool{}
	var out []PartitionLease
	for _, h := range e.Held {
		if !seen[h.Owner] {
			seen[h.Owner] = true
			out = append(out, h)
		}
	}
	return out
}

// micros is d in whole microseconds, for SQL `$n * interval '1 microsecond'`.
func micros(d time.Duration) int64 { return d.Microseconds() }

// leaseStatesSQL reads the ownership and lease state of pipeline $1's
// partitions ($2, $3: topics and numbers; NULL = all) under lease $4
// (microseconds), without locking, with each row's xmax (the transaction
// that updates or locks it now, if any).
const leaseStatesSQL = `
SELECT s.topic, s.partition, coalesce(s.owner, ''), s.epoch,
    CASE WHEN s.owner IS NULL THEN 'released'
         WHEN coalesce(i.heartbeat_at, s.heartbeat_at) > now() - $4 * interval '1 microsecond' THEN 'alive'
         ELSE 'expired' END,
    i.started_at,
    CASE WHEN s.owner IS NULL THEN -1
         ELSE coalesce((extract(epoch FROM now() - coalesce(i.heartbeat_at, s.heartbeat_at)) * 1e6)::bigint, -1) END
FROM stream_positions s
LEFT JOIN pipeline_instances i ON i.pipeline = s.pipeline AND i.owner = s.owner
WHERE s.pipeline = $1
  AND ($2::text[] IS NULL OR (s.topic, s.partition) IN (SELECT * FROM unnest($2::text[], $3::integer[])))
ORDER BY s.topic, s.partition`

// leaseStates runs leaseStatesSQL on q (a connection or a transaction).
func leaseStates(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, pipeline string, parts []aggregate.PartitionID, lease time.Duration) ([]PartitionLease, error) {
	var topics []string
	var nums []int32
	if parts != nil {
		topics, nums = partitionArrays(parts)
	}
	rows, err := q.Query(ctx, leaseStatesSQL, pipeline, topics, nums, micros(lease))
	if err != nil {
		return nil, err
	}
	var out []PartitionLease
	var p PartitionLease
	var since *time.Time
	var age int64
	_, err = pgx.ForEachRow(rows, []any{&p.Topic, &p.Partition, &p.Owner, &p.Epoch, &p.State, &since, &age}, func() error {
		p.OwnerSince = time.Time{}
		if since != nil {
			p.OwnerSince = since.UTC()
		}
		p.HeartbeatAge = -1
		if age >= 0 {
			p.HeartbeatAge = time.Duration(age) * time.Microsecond
		}
		out = append(out, p)
		return nil
	})
	return out, err
}

// ReadLeases returns, with db, the ownership and lease state under lease of
// every partition of pipeline that has a stream_positions row, by topic and
// partition. Errors name the pipeline.
func ReadLeases(ctx context.Context, db Querier, pipeline string, lease time.Duration) ([]PartitionLease, error) {
	out, err := leaseStates(ctx, db, pipeline, nil, lease)
	if err != nil {
		return nil, fmt.Errorf("store: leases of pipeline %q: %w", pipeline, err)
	}
	return out, nil
}

// Leases returns the ownership and lease state under lease of every
// partition of pipeline that has a stream_positions row, by topic and
// partition.
func (s *Store) Leases(ctx context.Context, pipeline string, lease time.Duration) ([]PartitionLease, error) {
	var out []PartitionLease
	err := s.do(ctx, func(conn *pgx.Conn) (err error) {
		out, err = leaseStates(ctx, conn, pipeline, nil, lease)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: leases of pipeline %q: %w", pipeline, err)
	}
	return out, nil
}

// Instance is one running instance of a pipeline (table pipeline_instances).
type Instance struct {
	Owner        string                  // host:pid-nonce
	Role         string                  // RoleActive or RoleStandby
	Partitions   []aggregate.PartitionID // owned (active) or waited for (standby)
	StartedAt    time.Time               // UTC
	HeartbeatAge time.Duration           // by the database's clock
	Alive        bool                    // HeartbeatAge < the lease asked for
	// ClosableSince is when the oldest window the instance holds that is
	// closable but not yet committed became closable (its records' Kafka
	// timestamps, consumer/freshness.go), as of its last heartbeat; zero
	// when it had none. ClosableAge is the database's now() minus it (0 when
	// zero).
	ClosableSince time.Time
	ClosableAge   time.Duration
}

// ownerLockSpace is the first key of the session advisory lock
// (pg_try_advisory_lock(int4, int4)) by which an owner's sessions mark it
// live; the second is hashtext(pipeline || newline || owner) (ownerLockKey).
const ownerLockSpace int32 = 0x6f767374 // "ovst"

// ownerLockKey is the SQL of the second key of the owner lock of the
// pipeline and owner expressions p and o.
func ownerLockKey(p, o string) string { return "hashtext(" + p + " || E'\\n' || " + o + ")" }

// Heartbeat records that owner, an instance of pipeline, is alive in role
// with parts (table pipeline_instances), by the database's clock, with the
// process id and start of its database session (pg_stat_activity), and
// takes on that session, unless a session holds it already, the owner's
// advisory lock (ownerLockSpace): a claim with the same instance id tells
// by both whether the owner still lives. The lock is what tells through a
// session pooler, which keeps a departed client's server session (same pid,
// same start) but releases its advisory locks (PgBouncer's
// server_reset_query, DISCARD ALL). first
// resets started_at (a new process that reuses an owner string). It is one
// statement outside any transaction: run it on a connection of its own (see
// Clone), so that a long commit does not delay it. closable is when the
// instance's oldest closable window not yet written became closable, the
// zero time for none (column closable_since, NULL). It returns the
// server's clock_timestamp() as the statement ran, UTC, for the skew of the
// instance's clock (consumer/clock.go).
func (s *Store) Heartbeat(ctx context.Context, pipeline, owner, role string, parts []aggregate.PartitionID, first bool, closable time.Time) (time.Time, error) {
	names := make([]string, len(parts))
	for i, p := range parts {
		names[i] = p.String()
	}
	var since *time.Time
	if !closable.IsZero() {
		since = &closable
	}
	var at time.Time
	err := s.do(ctx, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `
WITH lock AS (
  SELECT CASE WHEN EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()
      AND classid = $7::int4::oid AND objid = `+ownerLockKey("$1::text", "$2::text")+`::oid AND objsubid = 2)
    THEN true ELSE pg_try_advisory_lock($7::int4, `+ownerLockKey("$1::text", "$2::text")+`) END AS held)
INSERT INTO pipeline_instances AS i (pipeline, owner, role, partitions, backend_pid, backend_start, closable_since)
SELECT $1, $2, $3, $4, pid, backend_start, $6 FROM pg_stat_activity CROSS JOIN lock WHERE pid = pg_backend_pid()
ON CONFLICT (pipeline, owner) DO UPDATE SET role = EXCLUDED.role, partitions = EXCLUDED.partitions,
    heartbeat_at = now(), started_at = CASE WHEN $5 THEN now() ELSE i.started_at END,
    backend_pid = EXCLUDED.backend_pid, backend_start = EXCLUDED.backend_start, closable_since = EXCLUDED.closable_since
RETURNING clock_timestamp()`,
			pipeline, owner, role, names, first, since, ownerLockSpace).Scan(&at)
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("store: heartbeat of %s (%s) in pipeline %q: %w", owner, role, pipeline, err)
	}
	return at.UTC(), nil
}

// DeleteInstance removes owner's pipeline_instances row: the instance stops.
func (s *Store) DeleteInstance(ctx context.Context, pipeline, owner string) error {
	err := s.do(ctx, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, `DELETE FROM pipeline_instances WHERE pipeline = $1 AND owner = $2`, pipeline, owner)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: delete instance %s of pipeline %q: %w", owner, pipeline, err)
	}
	return nil
}

// Instances lists pipeline's instances (pipeline_instances), active first,
// then by start; Alive says whether each heartbeat is younger than lease
// (ReadInstances on the Store's connection).
func (s *Store) Instances(ctx context.Context, pipeline string, lease time.Duration) ([]Instance, error) {
	var out []Instance
	err := s.do(ctx, func(conn *pgx.Conn) (err error) {
		out, err = ReadInstances(ctx, conn, pipeline, lease)
		return err
	})
	return out, err
}

// ReadInstances lists, with db, pipeline's instances (pipeline_instances),
// active first, then by start; Alive says whether each heartbeat is younger
// than lease (by the database's clock). Errors name the pipeline.
func ReadInstances(ctx context.Context, db Querier, pipeline string, lease time.Duration) ([]Instance, error) {
	out, err := readInstances(ctx, db, pipeline, lease)
	if err != nil {
		return nil, fmt.Errorf("store: instances of pipeline %q: %w", pipeline, err)
	}
	return out, nil
}

func readInstances(ctx context.Context, conn Querier, pipeline string, lease time.Duration) ([]Instance, error) {
	var out []Instance
	rows, err := conn.Query(ctx, `
SELECT owner, role, partitions, started_at, (extract(epoch FROM now() - heartbeat_at) * 1e6)::bigint,
    heartbeat_at > now() - $2 * interval '1 microsecond', closable_since,
    coalesce((extract(epoch FROM now() - closable_since) * 1e6)::bigint, 0)
FROM pipeline_instances WHERE pipeline = $1 ORDER BY role, started_at, owner`, pipeline, micros(lease))
	if err != nil {
		return nil, err
	}
	var in Instance
	var names []string
	var age, closableAge int64
	var since *time.Time
	_, err = pgx.ForEachRow(rows, []any{&in.Owner, &in.Role, &names, &in.StartedAt, &age, &in.Alive, &since, &closableAge}, func() error {
		in.StartedAt = in.StartedAt.UTC()
		in.HeartbeatAge = time.Duration(age) * time.Microsecond
		in.ClosableSince, in.ClosableAge = time.Time{}, 0
		if since != nil {
			in.ClosableSince, in.ClosableAge = since.UTC(), max(0, time.Duration(closableAge)*time.Microsecond)
		}
		in.Partitions = nil
		for _, n := range names {
			if p, ok := parsePartition(n); ok {
				in.Partitions = append(in.Partitions, p)
			}
		}
		out = append(out, in)
		return nil
	})
	return out, err
}

// parsePartition reads "topic/partition" (aggregate.PartitionID.String).
func parsePartition(s string) (aggregate.PartitionID, bool) {
	i := strings.LastIndexByte(s, '/')
	if i < 0 {
		return aggregate.PartitionID{}, false
	}
	n, err := strconv.ParseInt(s[i+1:], 10, 32)
	if err != nil {
		return aggregate.PartitionID{}, false
	}
	return aggregate.PartitionID{Topic: s[:i], Partition: int32(n)}, true
}
