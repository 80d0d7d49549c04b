package aggregate

import (
	"math/rand/v2"
	"testing"
)

// Many distinct values: the value table grows many times and keeps every
// count; quantiles equal percentile_cont over the raw values.
func TestStatsManyDistinctValues(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	var s Stats
	var vs []float64
	distinct := map[float64]bool{}
	for range 20000 {
		v := float64(r.IntN(6001)-3000) + float64(r.IntN(4))*0.25
		if r.IntN(10) == 0 {
			v = 0 // one key with +0
		}
		s.Add(v, "OP")
		if v == 0 {
			v = 0
		}
		vs = append(vs, v)
		distinct[v] = true
	}
	if s.Distinct() != len(distinct) || s.Count() != int64(len(vs)) {
		t.Fatalf("distinct %d count %d, want %d %d", s.Distinct(), s.Count(), len(distinct), len(vs))
	}
	for _, p := range []float64{0, 0.01, 0.5, 0.9, 0.999, 1} {
		if got, want := s.Quantile(p), naiveQuantile(vs, p); got != want {
			t.Fatalf("Quantile(%v) = %v, want %v", p, got, want)
		}
	}
}

// Heavy duplicates around every rank boundary, through the value table
// (more than smallValues distinct values): every quantile step of 0.01.
func TestStatsTableRanksExhaustive(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	for range 300 {
		n := 6 + r.IntN(60)
		var s Stats
		vs := make([]float64, n)
		for i := range vs {
			vs[i] = float64(r.IntN(8) - 3)
			s.Add(vs[i], "OP")
		}
		for k := 0; k <= 100; k++ {
			p := float64(k) / 100
			if got, want := s.Quantile(p), naiveQuantile(vs, p); got != want {
				t.Fatalf("Quantile(%v) of %v = %v, want %v", p, vs, got, want)
			}
		}
	}
}
