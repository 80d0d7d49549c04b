package aggregate

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func statsOf(op string, vs ...float64) *Stats {
	var s Stats
	for _, v := range vs {
		s.Add(v, op)
	}
	return &s
}

func TestStatsHandComputed(t *testing.T) {
	tests := []struct {
		name                     string
		in                       []float64
		count                    int64
		mean, p90, p50, min, max float64
		distinct                 int
	}{
		// n=1: every quantile is the value.
		{"n=1", []float64{42}, 1, 42, 42, 42, 42, 42, 1},
		// n=2: pos = 0.9 -> 10 + 0.9*(20-10) = 19.
		{"n=2", []float64{20, 10}, 2, 15, 19, 15, 10, 20, 2},
		// ties: sorted 5,5,5,5,7; pos = 3.6 -> 5 + 0.6*2 = 6.2.
		{"ties", []float64{5, 7, 5, 5, 5}, 5, 5.4, 6.2, 5, 5, 7, 2},
		// all equal.
		{"all equal", []float64{3, 3, 3}, 3, 3, 3, 3, 3, 3, 1},
		// negatives: sorted -120,-60,-30,0; pos = 0.9*3 = 2.7000000000000002 in
		// float64 -> -30 + 0.7000000000000002*30, which PostgreSQL 15 also
		// prints as -8.999999999999993 (not -9).
		{"negatives", []float64{-30, 0, -120, -60}, 4, -52.5, -8.999999999999993, -45, -120, 0, 4},
		// n=11, 0..100 step 10: pos = 9 exactly -> 90.
		{"exact rank", []float64{100, 0, 10, 20, 30, 40, 50, 60, 70, 80, 90}, 11, 50, 90, 50, 0, 100, 11},
		// -0 and 0 are one value.
		{"signed zero", []float64{math.Copysign(0, -1), 0}, 2, 0, 0, 0, 0, 0, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := statsOf("OP", tc.in...)
			if s.Count() != tc.count || s.Mean() != tc.mean || s.P90() != tc.p90 ||
				s.Quantile(0.5) != tc.p50 || s.Min() != tc.min || s.Max() != tc.max || s.Distinct() != tc.distinct {
				t.Fatalf("got count %d mean %v p90 %v p50 %v min %v max %v distinct %d",
					s.Count(), s.Mean(), s.P90(), s.Quantile(0.5), s.Min(), s.Max(), s.Distinct())
			}
			if s.Quantile(0) != tc.min || s.Quantile(1) != tc.max {
				t.Fatalf("q0 %v q1 %v", s.Quantile(0), s.Quantile(1))
			}
		})
	}
}

func TestStatsEmptyAndBadP(t *testing.T) {
	var s Stats
	if s.Count() != 0 || !math.IsNaN(s.Mean()) || !math.IsNaN(s.P90()) || !math.IsNaN(s.Min()) ||
		!math.IsNaN(s.Max()) || s.Operator() != "" || s.Distinct() != 0 {
		t.Fatal("empty Stats")
	}
	s.Add(1, "a")
	for _, p := range []float64{-0.1, 1.1, math.NaN()} {
		if !math.IsNaN(s.Quantile(p)) {
			t.Errorf("Quantile(%v) = %v, want NaN", p, s.Quantile(p))
		}
	}
}

func TestStatsOperator(t *testing.T) {
	s := statsOf("GVB", 1, 2, 3)
	if s.Operator() != "GVB" {
		t.Fatalf("one operator: %q", s.Operator())
	}
	s.Add(4, "RET")
	if s.Operator() != "" {
		t.Fatalf("two operators: %q", s.Operator())
	}
	s.Add(5, "GVB")
	if s.Operator() != "" {
		t.Fatalf("back to the first operator: %q", s.Operator())
	}
}

// TestStatsMemory: memory follows distinct values, not events.
func TestStatsMemory(t *testing.T) {
	var s Stats
	for i := range 100000 {
		s.Add(float64(i%60-30), "OP")
	}
	if s.Count() != 100000 || s.Distinct() != 60 {
		t.Fatalf("count %d distinct %d", s.Count(), s.Distinct())
	}
}

// naiveQuantile is percentile_cont over an explicit sorted slice.
func naiveQuantile(vs []float64, p float64) float64 {
	v := slices.Clone(vs)
	slices.Sort(v)
	pos := p * float64(len(v)-1)
	lo := math.Floor(pos)
	hi := math.Ceil(pos)
	if lo == hi {
		return v[int(lo)]
	}
	return v[int(lo)] + (pos-lo)*(v[int(hi)]-v[int(lo)])
}

func TestStatsQuantileVsNaive(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		n := 1 + r.IntN(200)
		vs := make([]float64, n)
		for i := range vs {
			vs[i] = float64(r.IntN(301) - 100)
			if r.IntN(4) == 0 {
				vs[i] += r.Float64()
			}
		}
		s := statsOf("OP", vs...)
		for _, p := range []float64{0, 0.1, 0.5, 0.9, 0.99, 1} {
			if got, want := s.Quantile(p), naiveQuantile(vs, p); got != want {
				t.Fatalf("Quantile(%v) of %v = %v, want %v", p, vs, got, want)
			}
		}
		if s.Min() != slices.Min(vs) || s.Max() != slices.Max(vs) {
			t.Fatalf("min/max of %v", vs)
		}
	}
}

// TestSortValues checks the packed integer sort of distributions against a
// sort by comparison: whole values at the ends of the int32 range and counts
// up to 2^32-1 (packed), and sets with a fractional value, a value outside
// int32 or a count of 2^32 (sorted by comparison), with and without scratch.
func TestSortValues(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	sets := [][]valueCount{
		{{math.MaxInt32, 1<<32 - 1}, {math.MinInt32, 1}, {0, 7}, {-1, 2}, {1, 3}},
		{{5, 1}, {-86400, 2}, {86400, 3}, {-0.5, 1}},       // fractional
		{{5, 1}, {math.MaxInt32 + 1, 2}, {-3, 1}},          // beyond int32
		{{5, 1}, {-3, 1 << 32}, {2, 1}},                    // count of 2^32
		{{3, 1}, {2, 1}, {1, 1}, {1e300, 1}, {-1e-300, 1}}, // far beyond
	}
	for range 200 {
		seen := map[float64]bool{}
		var vcs []valueCount
		for range 1 + rng.IntN(3000) {
			v := float64(rng.IntN(20000) - 10000)
			if !seen[v] {
				seen[v] = true
				vcs = append(vcs, valueCount{v, 1 + rng.Int64N(1<<20)})
			}
		}
		sets = append(sets, vcs)
	}
	var keys []uint64
	for i, vcs := range sets {
		want := slices.Clone(vcs)
		slices.SortFunc(want, func(a, b valueCount) int { return cmpFloat(a.v, b.v) })
		for _, scratch := range []*[]uint64{nil, &keys} {
			got := slices.Clone(vcs)
			sortValues(got, scratch)
			if !slices.Equal(got, want) {
				t.Fatalf("set %d: sortValues = %v, want %v", i, got, want)
			}
		}
	}
}
