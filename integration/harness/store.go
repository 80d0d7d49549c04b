//go:build integration

package harness

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/store"
)

// ExecSQL runs sql (one or more statements) on db.
func ExecSQL(t *testing.T, db, sql string) {
	t.Helper()
	ctx := TestCtx(t)
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// TestCtx is a context that ends after a minute or with the test.
func TestCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// Tp0 is the partition OpenStore claims, as owner0; at0 is a batch's position of it.
var Tp0 = aggregate.PartitionID{Topic: "t", Partition: 0}

// Owner0 is the owner OpenStore claims as.
const Owner0 = "test"

// At0 is a batch's position of Tp0: next and consumed offset both next.
func At0(next int64) []store.Position {
	return []store.Position{{PartitionID: Tp0, NextOffset: next, ConsumedOffset: next}}
}

// OpenStore opens a Store on a fresh database and claims partition tp0 of pipeline "p".
func OpenStore(t *testing.T, opts ...store.Option) (s *store.Store, url string, epoch int64) {
	t.Helper()
	ctx := TestCtx(t)
	url = FreshDB(t)
	s, err := store.Open(ctx, url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	c, err := s.Claim(ctx, "p", Owner0, []aggregate.PartitionID{Tp0}, store.ClaimOptions{Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return s, url, c.Epoch
}

// Query connects on its own and returns the single value of sql.
func Query[T any](t *testing.T, url, sql string, args ...any) T {
	t.Helper()
	ctx := TestCtx(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var v T
	if err := conn.QueryRow(ctx, sql, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

// T0 is the store tests' reference time, 2026-03-01 12:00 UTC.
var T0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// Row is a delay_aggregates row with a distribution whose ends are lo and
// hi: count-1 events at lo and one at hi (count at lo when lo = hi).
func Row(dim, id string, count int64, mean, p90, lo, hi float64) aggregate.Row {
	r := aggregate.Row{WindowStart: T0, WindowEnd: T0.Add(5 * time.Minute), Dimension: dim, DimensionID: id,
		Operator: "op1", Count: count, Mean: mean, P90: p90, Min: lo, Max: hi,
		Values: []float64{lo}, Counts: []int64{count}}
	if hi != lo {
		r.Values, r.Counts = []float64{lo, hi}, []int64{max(count-1, 1), 1}
	}
	return r
}
