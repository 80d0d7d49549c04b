package aggregate

import (
	"math"
	"slices"
)

// Summary is what a rollup reports of a distribution of delays, in seconds:
// the same numbers as PostgreSQL's count(*), avg, min, max and
// percentile_cont over the events the distribution counts.
type Summary struct {
	Count    int64
	Mean     float64 // the exactly rounded sum divided by Count (avg for whole-second delays, bit for bit)
	Min, Max float64
	// Quantiles[i] is the ps[i]-quantile given to Summarize: linear
	// interpolation between closest ranks, percentile_cont(ps[i]) bit for bit.
	Quantiles []float64
}

// Summarize returns the Summary of the distribution values -> counts
// (values[i] occurred counts[i] times) for the quantiles ps. Values may come
// in any order and repeat (their counts add up); counts <= 0 are ignored;
// -0 counts as 0. A p outside [0, 1] gives NaN, as does every statistic of
// an empty distribution (Count 0). It panics if len(counts) != len(values).
//
// It merges the stored distributions of any set of rows exactly: the
// Summary of the union of their events.
func Summarize(values []float64, counts []int64, ps []float64) Summary {
	if len(values) != len(counts) {
		panic("aggregate: Summarize: values and counts differ in length")
	}
	vcs := make([]valueCount, 0, len(values))
	var n int64
	for i, v := range values {
		if counts[i] > 0 {
			vcs = append(vcs, valueCount{v, counts[i]})
			n += counts[i]
		}
	}
	s := Summary{Count: n, Quantiles: make([]float64, len(ps))}
	if n == 0 {
		s.Mean, s.Min, s.Max = math.NaN(), math.NaN(), math.NaN()
		for i := range ps {
			s.Quantiles[i] = math.NaN()
		}
		return s
	}
	vcs = mergeValues(vcs)
	s.Min, s.Max = vcs[0].v, vcs[len(vcs)-1].v
	s.Mean = exactSum(vcs, n) / float64(n)
	for i, p := range ps {
		s.Quantiles[i] = sortedQuantile(vcs, n, p)
	}
	return s
}

// mergeValues sorts vcs by value and adds up the counts of equal values (-0
// and 0 are one value, held as 0), in place.
func mergeValues(vcs []valueCount) []valueCount {
	for i := range vcs {
		if vcs[i].v == 0 {
			vcs[i].v = 0
		}
	}
	slices.SortFunc(vcs, func(a, b valueCount) int { return cmpFloat(a.v, b.v) })
	merged := vcs[:0]
	for _, vc := range vcs {
		if k := len(merged) - 1; k >= 0 && merged[k].v == vc.v {
			merged[k].n += vc.n
			continue
		}
		merged = append(merged, vc)
	}
	return merged
}

// sortedQuantile is the p-quantile (percentile_cont) of the n > 0 values vcs
// holds, sorted by value; NaN when p is outside [0, 1].
func sortedQuantile(vcs []valueCount, n int64, p float64) float64 {
	if !(p >= 0 && p <= 1) {
		return math.NaN()
	}
	pos, lo, hi := quantileRanks(n, p)
	loV, hiV := sortedRanks(vcs, lo, hi)
	return lerp(loV, hiV, pos)
}
