package dashboard

import (
	"cmp"
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/store/rollup"
	"github.com/ovstream/ovstream/store/visitstats"
)

// OnTimeCounts are the stop visits of a group counted early, on time and
// late, and the share on time (null when there is none).
type OnTimeCounts struct {
	Visits      int64    `json:"visits"`
	Early       int64    `json:"early"`
	OnTime      int64    `json:"on_time"`
	Late        int64    `json:"late"`
	OnTimeShare *float64 `json:"on_time_share"`
}

// onTimeOf reads the values of an ovs_on_time row (visitstats.Columns).
func onTimeOf(vs []any) OnTimeCounts {
	return OnTimeCounts{Visits: count(vs[0]), Early: count(vs[1]), OnTime: count(vs[2]), Late: count(vs[3]), OnTimeShare: share(vs[4])}
}

// OnTimeLine is one line of the on-time ranking, with its names.
type OnTimeLine struct {
	ID string `json:"id"`
	Named
	OnTimeCounts
}

// OnTimeHour is one hour of the day (of the visits' arrival_time in the
// page's time zone).
type OnTimeHour struct {
	Hour int `json:"hour"`
	OnTimeCounts
}

// OnTimeDay is one service day (start_date).
type OnTimeDay struct {
	Day string `json:"day"` // YYYY-MM-DD
	OnTimeCounts
}

// OnTimeQuery is what the on-time page asked for, with the defaults.
type OnTimeQuery struct {
	Pipeline   string  `json:"pipeline"`
	TZ         string  `json:"tz"`
	From       string  `json:"from"`
	To         string  `json:"to"`
	Definition string  `json:"definition"` // na, crow, or EARLY,LATE
	EarlyS     float64 `json:"early_s"`
	LateS      float64 `json:"late_s"`
	MinVisits  int64   `json:"min_visits"`
	Top        int64   `json:"top"`
}

// OnTime is GET api/ontime?pipeline&tz&from&to&definition&min_visits&top:
// the stop visits whose arrival_time is in the range, counted on time when
// -early_s <= delay_s <= late_s (definition na: 60 s early to 300 s late,
// the default; crow: 30 s to 180 s; or EARLY,LATE in seconds): for the
// whole network; per line, the top lines with at least min_visits visits,
// the least on time first (ties: more visits, then id); per hour of day
// (the hourly buckets of ovs_on_time, summed by their hour in tz); per
// service day. Every count comes from ovs_on_time through store/visitstats.
type OnTime struct {
	Query       OnTimeQuery  `json:"query"`
	ServiceDays ServiceDays  `json:"service_days"`
	Total       OnTimeCounts `json:"total"`
	Lines       []OnTimeLine `json:"lines"`
	Hours       []OnTimeHour `json:"hours"`
	Days        []OnTimeDay  `json:"days"`
}

func (h *Handler) onTime(ctx context.Context, r *http.Request) (any, error) {
	v := r.URL.Query()
	def := visitstats.NorthAmerica
	if s := strings.TrimSpace(v.Get("definition")); s != "" {
		var err error
		if def, err = visitstats.ParseOnTime(s); err != nil {
			return nil, badParam("definition", "%v", err)
		}
	}
	minVisits, err := intParam(v, "min_visits", 20, 1, 1<<40)
	if err != nil {
		return nil, err
	}
	top, err := intParam(v, "top", 25, 1, 500)
	if err != nil {
		return nil, err
	}
	out := &OnTime{Lines: []OnTimeLine{}, Hours: []OnTimeHour{}, Days: []OnTimeDay{}}
	err = h.withVisits(ctx, r, func(c *pgx.Conn, p visitsPage) error {
		out.Query = OnTimeQuery{Pipeline: p.pipeline, TZ: p.loc.String(), From: p.from.Format(time.RFC3339), To: p.to.Format(time.RFC3339),
			Definition: def.String(), EarlyS: def.Early, LateS: def.Late, MinVisits: minVisits, Top: top}
		out.ServiceDays = p.days
		if p.pipeline == "" {
			return nil
		}
		q := visitstats.Query{Metric: visitstats.OnTime, OnTime: def}
		network, lines, err := networkAndIDs(ctx, c, p, q, aggregate.DimLine)
		if err != nil {
			return err
		}
		if network != nil {
			out.Total = onTimeOf(network)
		}
		out.Lines = rankOnTime(lines, minVisits, int(top))
		if err := nameEach(ctx, c, p.pipeline, aggregate.DimLine, len(out.Lines), func(i int) string { return out.Lines[i].ID },
			func(i int, nm Named) { out.Lines[i].Named = nm }); err != nil {
			return err
		}
		q.Dimension, q.Bucket = aggregate.DimNetwork, rollup.Hour
		hours, err := visitRows(ctx, c, p, q)
		if err != nil {
			return err
		}
		out.Hours = byHourOfDay(hours, p.loc)
		q.Bucket, q.ServiceDay = rollup.All, true
		days, err := visitRows(ctx, c, p, q)
		if err != nil {
			return err
		}
		for _, row := range days {
			out.Days = append(out.Days, OnTimeDay{Day: row.Bucket.In(p.loc).Format(time.DateOnly), OnTimeCounts: onTimeOf(row.Values)})
		}
		return nil
	})
	return out, err
}

// rankOnTime keeps the lines with at least minVisits visits, the least on
// time first (ties: more visits first, then id), at most top.
func rankOnTime(rows []visitstats.Row, minVisits int64, top int) []OnTimeLine {
	lines := make([]OnTimeLine, len(rows))
	for i, row := range rows {
		lines[i] = OnTimeLine{ID: row.ID, OnTimeCounts: onTimeOf(row.Values)}
	}
	return ranked(lines, func(l OnTimeLine) bool { return l.Visits >= minVisits }, func(a, b OnTimeLine) int {
		return cmp.Or(cmp.Compare(*a.OnTimeShare, *b.OnTimeShare), cmp.Compare(b.Visits, a.Visits), strings.Compare(a.ID, b.ID))
	}, top)
}

// byHourOfDay sums hourly buckets by their hour of day in loc: counts add
// up, and the share is on time / visits as ovs_on_time divides them.
func byHourOfDay(rows []visitstats.Row, loc *time.Location) []OnTimeHour {
	var sums [24]OnTimeCounts
	for _, row := range rows {
		c, hr := onTimeOf(row.Values), row.Bucket.In(loc).Hour()
		s := &sums[hr]
		s.Visits, s.Early, s.OnTime, s.Late = s.Visits+c.Visits, s.Early+c.Early, s.OnTime+c.OnTime, s.Late+c.Late
	}
	out := []OnTimeHour{}
	for hr, s := range sums {
		if s.Visits > 0 {
			sh := float64(s.OnTime) / float64(s.Visits)
			s.OnTimeShare = &sh
			out = append(out, OnTimeHour{Hour: hr, OnTimeCounts: s})
		}
	}
	return out
}
