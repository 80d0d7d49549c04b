//go:build integration

package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/integration/harness"
	"github.com/ovstream/ovstream/store"
)

// Claims against the real PostgreSQL (docs/design.md "Pipelines, instances and
// partitions"): a live owner's partitions are held (*HeldError naming it),
// whether its liveness comes from pipeline_instances or, without an
// instance row, from stream_positions.heartbeat_at; a released or expired
// partition is taken, and so is a live one by the same owner or under
// Takeover. Every lease age is the database's (heartbeats are aged with SQL).
// A row lock held by a frozen owner's open transaction never blocks a
// claim: while the lease lives it returns *HeldError at once; after it, it
// terminates exactly that session. ClaimMore claims more partitions at the
// owner's epoch and refuses a partition whose epoch is newer.
func TestStoreClaimLeases(t *testing.T) {
	ctx := harness.TestCtx(t)
	url := harness.FreshDB(t)
	open := func() *store.Store {
		s, err := store.Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close(context.Background()) })
		return s
	}
	a, b := open(), open()
	p0 := aggregate.PartitionID{Topic: "t", Partition: 0}
	p1 := aggregate.PartitionID{Topic: "t", Partition: 1}
	p2 := aggregate.PartitionID{Topic: "t", Partition: 2}
	parts := []aggregate.PartitionID{p0, p1}
	opts := store.ClaimOptions{Lease: time.Minute}
	exec := func(sql string) {
		t.Helper()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	claim := func(s *store.Store, owner string, o store.ClaimOptions) (store.Claimed, error) {
		t.Helper()
		began := time.Now()
		c, err := s.Claim(ctx, "p", owner, parts, o)
		if took := time.Since(began); took > 10*time.Second {
			t.Fatalf("a claim by %s took %v: it waited on a lock", owner, took)
		}
		return c, err
	}
	held := func(err error, owner string) {
		t.Helper()
		var h *store.HeldError
		if !errors.As(err, &h) || len(h.Held) != 2 || h.Held[0].Owner != owner || h.Held[0].State != store.LeaseAlive {
			t.Fatalf("claim: %v; want *HeldError naming %s for both partitions", err, owner)
		}
	}
	from := func(c store.Claimed, owner, state string) {
		t.Helper()
		for _, p := range c.Previous {
			if p.Owner != owner || p.State != state {
				t.Fatalf("claimed from %+v; want %q %s", c.Previous, owner, state)
			}
		}
	}

	// A claims two new partitions and heartbeats.
	c, err := claim(a, "A", opts)
	if err != nil || c.Epoch != 1 || len(c.Previous) != 2 || c.Previous[0].Owner != "" {
		t.Fatalf("first claim: %+v, %v", c, err)
	}
	if _, err := a.Heartbeat(ctx, "p", "A", store.RoleActive, parts, true, time.Time{}); err != nil {
		t.Fatal(err)
	}
	_, err = claim(b, "B", opts)
	held(err, "A")
	// The same owner string (a restarted container with the same host:pid) reclaims.
	if c, err = claim(a, "A", opts); err != nil || c.Epoch != 2 {
		t.Fatalf("reclaim by the owner: %+v, %v", c, err)
	}
	from(c, "A", store.LeaseAlive)
	// A's heartbeat ages past the lease (by the database's clock): B takes over.
	exec(`UPDATE pipeline_instances SET heartbeat_at = now() - interval '61 seconds' WHERE owner = 'A'`)
	if c, err = claim(b, "B", opts); err != nil || c.Epoch != 3 {
		t.Fatalf("claim after A's lease expired: %+v, %v", c, err)
	}
	from(c, "A", store.LeaseExpired)
	// No instance row for B (an older binary): its claim's heartbeat_at counts.
	_, err = claim(a, "A", opts)
	held(err, "B")
	exec(`UPDATE stream_positions SET heartbeat_at = now() - interval '61 seconds'`)
	if c, err = claim(a, "A", opts); err != nil || c.Epoch != 4 {
		t.Fatalf("claim after B's fallback heartbeat expired: %+v, %v", c, err)
	}
	from(c, "B", store.LeaseExpired)
	// Takeover of a live owner.
	if _, err := a.Heartbeat(ctx, "p", "A", store.RoleActive, parts, false, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if c, err = claim(b, "B", store.ClaimOptions{Lease: time.Minute, Takeover: true}); err != nil || c.Epoch != 5 {
		t.Fatalf("takeover: %+v, %v", c, err)
	}
	from(c, "A", store.LeaseAlive)
	// A release by someone else's epoch does nothing; B's own releases both.
	if n, err := b.Release(ctx, "p", "B", 4, parts); err != nil || n != 0 {
		t.Fatalf("release at an old epoch: %d, %v", n, err)
	}
	if n, err := b.Release(ctx, "p", "B", 5, parts); err != nil || n != 2 {
		t.Fatalf("release: %d, %v", n, err)
	}
	if c, err = claim(a, "A", opts); err != nil || c.Epoch != 6 {
		t.Fatalf("claim of released partitions: %+v, %v", c, err)
	}
	from(c, "", store.LeaseReleased)
	if _, err := a.Heartbeat(ctx, "p", "A", store.RoleActive, parts, false, time.Time{}); err != nil {
		t.Fatal(err)
	}

	// A frozen owner: a transaction of A's updates (locks) p0's row, as a
	// commit's fencing does, and never ends.
	frozen, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer frozen.Close(context.Background())
	var frozenPID int32
	if err := frozen.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&frozenPID); err != nil {
		t.Fatal(err)
	}
	if _, err := frozen.Exec(ctx, `BEGIN; UPDATE stream_positions SET heartbeat_at = now() WHERE partition = 0 AND epoch = 6`); err != nil {
		t.Fatal(err)
	}
	_, err = claim(b, "B", opts) // A's lease lives: held, at once
	held(err, "A")
	exec(`UPDATE pipeline_instances SET heartbeat_at = now() - interval '61 seconds' WHERE owner = 'A'`)
	c, err = claim(b, "B", opts)
	if err != nil || c.Epoch != 7 || len(c.Terminated) != 1 || c.Terminated[0].PID != frozenPID ||
		c.Terminated[0].Owner != "A" || c.Terminated[0].State != store.LeaseExpired || c.Terminated[0].Partition != p0 {
		t.Fatalf("claim over A's frozen transaction after its lease: %+v, %v; want pid %d terminated", c, err, frozenPID)
	}
	if err := frozen.Ping(ctx); err == nil {
		t.Fatal("the frozen transaction's session is still alive")
	}
	t.Logf("terminated the frozen owner's session (pid %d), claimed at epoch %d", frozenPID, c.Epoch)

	// ClaimMore: B adds p2 at its epoch; a newer epoch on a partition refuses it.
	if _, err := b.Heartbeat(ctx, "p", "B", store.RoleActive, parts, true, time.Time{}); err != nil {
		t.Fatal(err)
	}
	more := []aggregate.PartitionID{p2}
	if c, err = b.ClaimMore(ctx, "p", "B", 7, more, opts); err != nil || c.Epoch != 7 {
		t.Fatalf("ClaimMore: %+v, %v", c, err)
	}
	if c, err = b.ClaimMore(ctx, "p", "B", 7, more, opts); err != nil { // repeated
		t.Fatalf("ClaimMore again: %+v, %v", c, err)
	}
	if got := harness.Query[int64](t, url, `SELECT epoch FROM stream_positions WHERE partition = 2`); got != 7 {
		t.Fatalf("p2 epoch %d, want 7", got)
	}
	var h *store.HeldError
	if _, err = a.ClaimMore(ctx, "p", "A", 8, more, opts); !errors.As(err, &h) || h.Held[0].Owner != "B" {
		t.Fatalf("ClaimMore of a live owner's partition: %v; want *HeldError naming B", err)
	}
	if _, err = a.ClaimMore(ctx, "p", "A", 7, more, store.ClaimOptions{Lease: time.Minute, Takeover: true}); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("ClaimMore at an epoch not above the partition's: %v; want ErrFenced", err)
	}
	leases, err := a.Leases(ctx, "p", time.Minute)
	if err != nil || len(leases) != 3 {
		t.Fatalf("leases: %+v, %v", leases, err)
	}
	for _, l := range leases {
		if l.Owner != "B" || l.Epoch != 7 || l.State != store.LeaseAlive || l.HeartbeatAge < 0 || l.HeartbeatAge > 10*time.Second {
			t.Errorf("lease %+v; want B, epoch 7, alive", l)
		}
	}
	ins, err := a.Instances(ctx, "p", time.Minute)
	if err != nil || len(ins) != 2 || ins[0].Owner != "A" || ins[0].Alive || ins[1].Owner != "B" || !ins[1].Alive || len(ins[1].Partitions) != 2 {
		t.Fatalf("instances: %+v, %v; want A (expired) and B (alive)", ins, err)
	}
}
