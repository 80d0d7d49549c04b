package dashboard

import (
	"cmp"
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/store/visitstats"
)

// HeadwayStats are the gaps of a group (ovs_headways): seconds, null where
// nothing is counted.
type HeadwayStats struct {
	Gaps                  int64    `json:"gaps"`
	MeanHeadwayS          *float64 `json:"mean_headway_s"`
	AWTS                  *float64 `json:"awt_s"` // average wait, sum(h^2) / (2 sum(h))
	ScheduledGaps         int64    `json:"scheduled_gaps"`
	ScheduledMeanHeadwayS *float64 `json:"scheduled_mean_headway_s"`
	SWTS                  *float64 `json:"swt_s"`
	ExcessWaitS           *float64 `json:"excess_wait_s"` // awt_s - swt_s
	Assessed              int64    `json:"assessed"`
	WithinTolerance       int64    `json:"within_tolerance"`
	WaitAssessment        *float64 `json:"wait_assessment"` // within_tolerance / assessed
}

// headwayOf reads the values of an ovs_headways row (visitstats.Columns).
func headwayOf(vs []any) HeadwayStats {
	return HeadwayStats{Gaps: count(vs[0]), MeanHeadwayS: share(vs[1]), AWTS: share(vs[2]), ScheduledGaps: count(vs[3]),
		ScheduledMeanHeadwayS: share(vs[4]), SWTS: share(vs[5]), ExcessWaitS: share(vs[6]), Assessed: count(vs[7]),
		WithinTolerance: count(vs[8]), WaitAssessment: share(vs[9])}
}

// HeadwayRow is one line or station of the headway ranking, with its names.
type HeadwayRow struct {
	ID string `json:"id"`
	Named
	HeadwayStats
}

// HeadwayQuery is what the headway page asked for, with the defaults.
type HeadwayQuery struct {
	Pipeline      string  `json:"pipeline"`
	TZ            string  `json:"tz"`
	From          string  `json:"from"`
	To            string  `json:"to"`
	Dimension     string  `json:"dimension"`
	WaitTolerance float64 `json:"wait_tolerance"`
	MinGaps       int64   `json:"min_gaps"`
	Top           int64   `json:"top"`
}

// Headway is GET
// api/headway?pipeline&tz&from&to&dimension&wait_tolerance&min_gaps&top:
// the gaps between consecutive visits of a line at a stop on a service day
// (ovs_headways through store/visitstats), of the visits whose arrival_time
// is in the range, for the network and per line (dimension line, the
// default: over its stops) or per station (over its lines): observed gaps,
// the average and the scheduled wait, the excess wait, and the wait
// assessment (the gaps within the scheduled gap times 1 + wait_tolerance,
// default 0.25, among those whose scheduled gap is known). Rows: the ids
// with at least min_gaps gaps (default 10), the greatest excess wait first
// (null last; ties: more gaps, then id), at most top (default 25).
type Headway struct {
	Query       HeadwayQuery `json:"query"`
	ServiceDays ServiceDays  `json:"service_days"`
	Total       HeadwayStats `json:"total"`
	Rows        []HeadwayRow `json:"rows"`
}

func (h *Handler) headway(ctx context.Context, r *http.Request) (any, error) {
	v := r.URL.Query()
	dim := strings.TrimSpace(v.Get("dimension"))
	switch dim {
	case "":
		dim = aggregate.DimLine
	case aggregate.DimLine, aggregate.DimStation:
	default:
		return nil, badParam("dimension", "%q: want line or station", dim)
	}
	tol, err := floatParam(v, "wait_tolerance", 0.25, 0, visitstats.MaxWaitTolerance)
	if err != nil {
		return nil, err
	}
	minGaps, err := intParam(v, "min_gaps", 10, 1, 1<<40)
	if err != nil {
		return nil, err
	}
	top, err := intParam(v, "top", 25, 1, 500)
	if err != nil {
		return nil, err
	}
	out := &Headway{Rows: []HeadwayRow{}}
	err = h.withVisits(ctx, r, func(c *pgx.Conn, p visitsPage) error {
		out.Query = HeadwayQuery{Pipeline: p.pipeline, TZ: p.loc.String(), From: p.from.Format(time.RFC3339), To: p.to.Format(time.RFC3339),
			Dimension: dim, WaitTolerance: tol, MinGaps: minGaps, Top: top}
		out.ServiceDays = p.days
		if p.pipeline == "" {
			return nil
		}
		network, rows, err := networkAndIDs(ctx, c, p, visitstats.Query{Metric: visitstats.Headway, WaitTolerance: tol}, dim)
		if err != nil {
			return err
		}
		if network != nil {
			out.Total = headwayOf(network)
		}
		out.Rows = rankHeadways(rows, minGaps, int(top))
		return nameEach(ctx, c, p.pipeline, dim, len(out.Rows), func(i int) string { return out.Rows[i].ID },
			func(i int, nm Named) { out.Rows[i].Named = nm })
	})
	return out, err
}

// rankHeadways keeps the ids with at least minGaps gaps, the greatest excess
// wait first (null last; ties: more gaps first, then id), at most top.
func rankHeadways(rows []visitstats.Row, minGaps int64, top int) []HeadwayRow {
	out := make([]HeadwayRow, len(rows))
	for i, row := range rows {
		out[i] = HeadwayRow{ID: row.ID, HeadwayStats: headwayOf(row.Values)}
	}
	return ranked(out, func(r HeadwayRow) bool { return r.Gaps >= minGaps }, func(a, b HeadwayRow) int {
		ea, eb := a.ExcessWaitS, b.ExcessWaitS
		var byExcess int
		switch {
		case ea == nil && eb == nil:
		case ea == nil:
			byExcess = 1
		case eb == nil:
			byExcess = -1
		default:
			byExcess = cmp.Compare(*eb, *ea)
		}
		return cmp.Or(byExcess, cmp.Compare(b.Gaps, a.Gaps), strings.Compare(a.ID, b.ID))
	}, top)
}
