package aggregate

import (
	"errors"
	"fmt"
	"math"
)

// ErrNoDistribution is returned by MergeRows for a row without its
// distribution (Values and Counts empty: a delay_aggregates row written
// before schema 5 stored them). Such a row cannot take more events exactly.
var ErrNoDistribution = errors.New("aggregate: the row holds no distribution (delay_values, delay_counts)")

// MergeRows returns the row of the union of the events of stored and add,
// two rows of one key (window, dimension, id): every statistic follows from
// the merged distribution, as Summarize computes it, so the result is bit
// for bit the row one Windower fed both rows' events gives (the exactly
// rounded mean, percentile_cont(0.9), min, max; the operator when both rows
// have the same one, else ""). stored's window end is kept.
//
// Errors: ErrNoDistribution when either row lacks its distribution; a
// mismatch of the rows' keys, of Values and Counts' lengths, a count < 1, or
// counts adding up past 2^63-1.
func MergeRows(stored, add Row) (Row, error) {
	if !stored.WindowStart.Equal(add.WindowStart) || stored.Dimension != add.Dimension || stored.DimensionID != add.DimensionID {
		return Row{}, fmt.Errorf("aggregate: merge rows of different keys: (%s, %s, %s) and (%s, %s, %s)",
			stored.WindowStart.UTC(), stored.Dimension, stored.DimensionID, add.WindowStart.UTC(), add.Dimension, add.DimensionID)
	}
	vcs := make([]valueCount, 0, len(stored.Values)+len(add.Values))
	var n int64
	for _, r := range [2]*Row{&stored, &add} {
		if len(r.Values) == 0 {
			return Row{}, ErrNoDistribution
		}
		if len(r.Values) != len(r.Counts) {
			return Row{}, fmt.Errorf("aggregate: merge rows: %d values, %d counts", len(r.Values), len(r.Counts))
		}
		for i, v := range r.Values {
			c := r.Counts[i]
			if c < 1 || c > math.MaxInt64-n {
				return Row{}, fmt.Errorf("aggregate: merge rows (%s, %s): count %d out of range", r.Dimension, r.DimensionID, c)
			}
			n += c
			vcs = append(vcs, valueCount{v, c})
		}
	}
	vcs = mergeValues(vcs)
	out := Row{WindowStart: stored.WindowStart.UTC(), WindowEnd: stored.WindowEnd.UTC(), Dimension: stored.Dimension,
		DimensionID: stored.DimensionID, Count: n, Min: vcs[0].v, Max: vcs[len(vcs)-1].v}
	if stored.Operator == add.Operator {
		out.Operator = stored.Operator
	}
	out.Mean = exactSum(vcs, n) / float64(n)
	out.P90 = sortedQuantile(vcs, n, 0.9)
	out.Values, out.Counts = make([]float64, len(vcs)), make([]int64, len(vcs))
	for i, vc := range vcs {
		out.Values[i], out.Counts[i] = vc.v, vc.n
	}
	return out, nil
}
