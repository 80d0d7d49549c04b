//go:build integration

package pipeline

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/integration/harness"
)

// statsQuantiles are the extra quantiles compared with percentile_cont, besides 0.9.
var statsQuantiles = []float64{0, 0.1, 0.25, 0.5, 0.75, 0.95, 0.99, 1}

// pgStats is what PostgreSQL computes over one set of delays.
type pgStats struct {
	count     int64
	mean, p90 float64
	min, max  float64
	quantiles []float64
}

const statsQuery = `
SELECT count(*), avg(v), percentile_cont(0.9) WITHIN GROUP (ORDER BY v), min(v), max(v),
       percentile_cont($2::float8[]) WITHIN GROUP (ORDER BY v)
FROM unnest($1::float8[]) AS t(v)`

// TestStatsMatchPostgres asserts that aggregate.Stats gives the numbers of the
// SQL oracle: count, avg, percentile_cont(0.9) WITHIN GROUP (ORDER BY v), min
// and max over the same float8 values. For whole-second delays, mean and P90
// must be equal to the bit; for fractional ones within 1e-9 relative.
func TestStatsMatchPostgres(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, harness.TestDatabaseURL())
	if err != nil {
		t.Fatalf("integration tests need PostgreSQL (DATABASE_URL or the local test database): %v", err)
	}
	defer conn.Close(context.Background())

	query := func(t *testing.T, vs []float64) pgStats {
		t.Helper()
		var s pgStats
		err := conn.QueryRow(ctx, statsQuery, vs, statsQuantiles).
			Scan(&s.count, &s.mean, &s.p90, &s.min, &s.max, &s.quantiles)
		if err != nil {
			t.Fatalf("oracle query over %d values: %v", len(vs), err)
		}
		return s
	}

	fixed := []struct {
		name string
		vs   []float64
	}{
		{"n=1", []float64{42}},
		{"n=1 negative", []float64{-17}},
		{"n=2", []float64{20, 10}},
		{"ties", []float64{5, 7, 5, 5, 5}},
		{"all equal", []float64{3, 3, 3, 3}},
		{"negatives", []float64{-30, 0, -120, -60}},
		{"all negative", []float64{-900, -1, -300, -300, -45}},
		{"extremes", []float64{-86400, 86400, 0, 1, -1}},
		{"fractional", []float64{0.1, 0.2, 0.3, -0.7, 12.345}},
	}
	for _, tc := range fixed {
		t.Run(tc.name, func(t *testing.T) {
			compareStats(t, tc.vs, query(t, tc.vs), isWhole(tc.vs))
		})
	}

	t.Run("random", func(t *testing.T) {
		r := rand.New(rand.NewPCG(2026, 5))
		for i := range 1000 {
			n := 1 + r.IntN(300)
			fractional := i%5 == 4
			vs := make([]float64, n)
			for j := range vs {
				// Integer delays -900..3600 s, with heavy ties for small ranges.
				span := []int{4501, 61, 7}[i%3]
				vs[j] = float64(r.IntN(span) - min(900, span/2))
				if fractional {
					vs[j] += math.Round(r.Float64()*1000) / 1000
				}
			}
			pg := query(t, vs)
			if !compareStats(t, vs, pg, !fractional) {
				t.Fatalf("set %d (n=%d, fractional=%v) differs: %v", i, n, fractional, vs)
			}
		}
	})
}

func isWhole(vs []float64) bool {
	for _, v := range vs {
		if v != math.Trunc(v) {
			return false
		}
	}
	return true
}

// compareStats reports mismatches between aggregate.Stats over vs and the
// oracle's pg, exact when whole, else within 1e-9 relative for mean and
// quantiles.
func compareStats(t *testing.T, vs []float64, pg pgStats, whole bool) bool {
	t.Helper()
	var s aggregate.Stats
	for _, v := range vs {
		s.Add(v, "OP")
	}
	ok := true
	check := func(what string, got, want float64, exact bool) {
		t.Helper()
		if got == want || !exact && math.Abs(got-want) <= 1e-9*math.Max(math.Abs(want), 1) {
			return
		}
		ok = false
		t.Errorf("%s: Stats %s, PostgreSQL %s", what, fmtFloat(got), fmtFloat(want))
	}
	if s.Count() != pg.count {
		ok = false
		t.Errorf("count: Stats %d, PostgreSQL %d", s.Count(), pg.count)
	}
	check("mean", s.Mean(), pg.mean, whole)
	check("p90", s.P90(), pg.p90, whole)
	check("min", s.Min(), pg.min, true)
	check("max", s.Max(), pg.max, true)
	if len(pg.quantiles) != len(statsQuantiles) {
		t.Fatalf("%d quantiles from PostgreSQL", len(pg.quantiles))
	}
	for i, p := range statsQuantiles {
		check(fmt.Sprintf("quantile %v", p), s.Quantile(p), pg.quantiles[i], whole)
	}
	return ok
}

func fmtFloat(f float64) string { return fmt.Sprintf("%v (%b)", f, f) }
