package dashboard

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/store/visitstats"
)

// The pages of the stop visits (on time, headways) read table stop_visits
// through store/visitstats, the code of `ovstream report --metric
// on-time|headway`: their range selects visits by arrival_time.

// ServiceDays are the first and last service day (start_date) of a
// pipeline's stop visits; null when it has none.
type ServiceDays struct {
	First *string `json:"first"` // YYYY-MM-DD
	Last  *string `json:"last"`
}

// visitsPage is what the request of a stop visits page starts from: its
// page, and its range of arrival times.
type visitsPage struct {
	page
	from, to time.Time
	days     ServiceDays
}

// withVisits is withPage for the pages of the stop visits: it reads the
// range (from, to; default: from the midnight, in the page's time zone, of
// the newest service day but 6, to the midnight 2 days after the newest,
// as a service day's trips run past midnight) and refuses a time zone
// PostgreSQL does not know, which the SQL functions are given.
func (h *Handler) withVisits(ctx context.Context, r *http.Request, f func(c *pgx.Conn, p visitsPage) error) error {
	return h.withPage(ctx, r, func(c *pgx.Conn, p page) error {
		vp := visitsPage{page: p}
		var first, last *time.Time
		// Both read the index stop_visits_day.
		if err := c.QueryRow(ctx, `SELECT min(start_date), max(start_date) FROM stop_visits WHERE pipeline = $1`,
			p.pipeline).Scan(&first, &last); err != nil {
			return fmt.Errorf("dashboard: service days of pipeline %q: %w", p.pipeline, err)
		}
		// The service days' span, as timeRange takes the windows' extent.
		e, span := extent{}, 7*24*time.Hour
		if first != nil && last != nil {
			f, l := first.Format(time.DateOnly), last.Format(time.DateOnly)
			vp.days = ServiceDays{First: &f, Last: &l}
			e.First = localMidnight(*first, p.loc)
			e.Last = localMidnight(last.AddDate(0, 0, 2), p.loc)
			span = e.Last.Sub(localMidnight(last.AddDate(0, 0, -6), p.loc))
		}
		var err error
		if vp.from, vp.to, err = timeRange(p.v, p.loc, e, span); err != nil {
			return err
		}
		if known, err := h.zoneKnown(ctx, c, p.loc); err != nil {
			return err
		} else if !known {
			return badParam("tz", "%q is a time zone PostgreSQL does not know: choose another name of it", p.loc.String())
		}
		return f(c, vp)
	})
}

// localMidnight is the start of date d's calendar day in loc.
func localMidnight(d time.Time, loc *time.Location) time.Time {
	return time.Date(d.Year(), d.Month(), d.Day(), 0, 0, 0, 0, loc)
}

// floatParam reads a number parameter in [lo, hi]; def when absent.
func floatParam(v map[string][]string, name string, def, lo, hi float64) (float64, error) {
	var s string
	if vs := v[name]; len(vs) > 0 {
		s = strings.TrimSpace(vs[0])
	}
	if s == "" {
		return def, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || f < lo || f > hi {
		return 0, badParam(name, "%q: want a number from %g to %g", s, lo, hi)
	}
	return f, nil
}

// count and share read a value of a visitstats.Row: a count (int64), and
// seconds or a share (float64; null when nothing is counted).
func count(v any) int64 {
	n, _ := v.(int64)
	return n
}

func share(v any) *float64 {
	f, ok := v.(float64)
	if !ok {
		return nil
	}
	return &f
}

// ranked keeps the rows keep accepts, in order, at most top: the rankings
// of the pages of the stop visits.
func ranked[T any](rows []T, keep func(T) bool, order func(a, b T) int, top int) []T {
	out := slices.DeleteFunc(rows, func(r T) bool { return !keep(r) })
	slices.SortFunc(out, order)
	return out[:min(top, len(out))]
}

// networkAndIDs reads q for the whole network (the values of its one row;
// nil when no visit counts) and per id of dimension.
func networkAndIDs(ctx context.Context, c *pgx.Conn, p visitsPage, q visitstats.Query, dimension string) ([]any, []visitstats.Row, error) {
	q.Dimension = aggregate.DimNetwork
	total, err := visitRows(ctx, c, p, q)
	if err != nil {
		return nil, nil, err
	}
	var network []any
	for _, row := range total {
		network = row.Values
	}
	q.Dimension = dimension
	rows, err := visitRows(ctx, c, p, q)
	return network, rows, err
}

// visitRows runs q on c with the page's range and time zone.
func visitRows(ctx context.Context, c *pgx.Conn, p visitsPage, q visitstats.Query) ([]visitstats.Row, error) {
	q.Pipeline, q.From, q.To, q.Location = p.pipeline, p.from, p.to, p.loc
	return visitstats.Run(ctx, c, q)
}
