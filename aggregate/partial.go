package aggregate

import "time"

// Partial is the partial aggregate of one delay_aggregates row over the
// events of ONE source partition of the predictions topic (DESIGN.md
// "Pipelines, instances and partitions", Split windows): what an instance
// that does not own every partition of its pipeline writes for a window its
// watermark finalized, so that the partials of every partition merge into
// the exact row (Merge). Delays in seconds, times UTC.
//
// A Partial is keyed by (window, dimension, dimension id, partition): a
// partition's partial of a window is written once its owner finalized the
// window, and later events of that window are late for that owner, so
// writing it again (after a restart or a takeover) replaces it with the same
// content and never adds.
type Partial struct {
	WindowStart time.Time
	WindowEnd   time.Time
	Dimension   string // DimLine, DimStation, DimOperator or DimNetwork
	DimensionID string
	Partition   int32  // the source partition of its events
	Operator    string // the one operator of its events; "" when they had several
	Count       int64  // > 0: the sum of Counts
	Sum         float64
	Min, Max    float64
	// Values are the distinct delays, ascending (-0 held as 0); Counts[i]
	// events had Values[i]. Every statistic of the row follows from them.
	Values []float64
	Counts []int64
}

// partialOf returns the Partial of st, an open row of partition part.
func partialOf(st *Stats, start, end time.Time, dim, id string, part int32) Partial {
	values, counts := st.Distribution()
	return Partial{WindowStart: start, WindowEnd: end, Dimension: dim, DimensionID: id, Partition: part,
		Operator: st.Operator(), Count: st.Count(), Sum: st.Sum(), Min: st.Min(), Max: st.Max(),
		Values: values, Counts: counts}
}

// Merge returns the row of the events of parts: the partials of ONE row
// (same window, dimension and dimension id) over disjoint sets of events,
// e.g. one per source partition, in any order. Count, Mean, P90, Min, Max,
// Operator and the distribution (Values, Counts) equal, bit for bit, those
// of the Row one Stats fed every one of those events gives
// (Windower.Closed): every statistic is computed from the merged
// distribution as Stats computes it. Parts' Sum, Min, Max and
// Count are not read; Values and Counts are. Merge of no parts, or of parts
// without events, returns a Row with Count 0.
func Merge(parts []Partial) Row {
	if len(parts) == 0 {
		return Row{}
	}
	first := &parts[0]
	row := Row{WindowStart: first.WindowStart, WindowEnd: first.WindowEnd, Dimension: first.Dimension,
		DimensionID: first.DimensionID}
	var vcs []valueCount
	several := false
	for i := range parts {
		p := &parts[i]
		had := row.Count
		for j, v := range p.Values {
			if p.Counts[j] <= 0 {
				continue
			}
			vcs = append(vcs, valueCount{v, p.Counts[j]})
			row.Count += p.Counts[j]
		}
		switch {
		case row.Count == had: // no events: no operator
		case had == 0:
			row.Operator = p.Operator
		case p.Operator != row.Operator:
			several = true
		}
	}
	if several {
		row.Operator = ""
	}
	if row.Count == 0 {
		return Row{}
	}
	merged := mergeValues(vcs)
	row.Min, row.Max = merged[0].v, merged[len(merged)-1].v
	row.Mean = exactSum(merged, row.Count) / float64(row.Count)
	row.P90 = sortedQuantile(merged, row.Count, 0.9)
	row.Values, row.Counts = make([]float64, len(merged)), make([]int64, len(merged))
	for i, vc := range merged {
		row.Values[i], row.Counts[i] = vc.v, vc.n
	}
	return row
}
