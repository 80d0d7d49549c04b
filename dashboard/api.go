package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/store"
	"github.com/ovstream/ovstream/store/rollup"
)

// quantiles are the quantiles every page shows: P50 and P90.
var quantiles = []float64{0.5, 0.9}

// Stats are the statistics of one group, in seconds, exact: from
// rollup.Run or ovs_summary.
type Stats struct {
	Events int64   `json:"events"`
	Mean   float64 `json:"mean"`
	P50    float64 `json:"p50"`
	P90    float64 `json:"p90"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

func statsOf(s aggregate.Summary) Stats {
	return Stats{Events: s.Count, Mean: s.Mean, P50: s.Quantiles[0], P90: s.Quantiles[1], Min: s.Min, Max: s.Max}
}

// Query is what a page asked for, with the defaults filled in: the form
// shows it.
type Query struct {
	Pipeline  string  `json:"pipeline"`
	TZ        string  `json:"tz"`
	From      string  `json:"from,omitempty"` // RFC 3339 in TZ
	To        string  `json:"to,omitempty"`
	Day       string  `json:"day,omitempty"` // YYYY-MM-DD in TZ
	Bucket    string  `json:"bucket,omitempty"`
	BucketS   float64 `json:"bucket_s,omitempty"` // the bucket's length, seconds (calendar buckets: at most)
	Dimension string  `json:"dimension,omitempty"`
	Line      string  `json:"line,omitempty"`
	MinEvents int64   `json:"min_events,omitempty"`
	Top       int64   `json:"top,omitempty"`
	// IncludeOpen: the delay page's points include the windows not yet
	// final, provisional (api/delay include_open).
	IncludeOpen bool `json:"include_open,omitempty"`
}

// Extent is where a pipeline's finalized windows lie, in the page's time zone.
type Extent struct {
	First   *time.Time `json:"first_window"`    // window_start of the oldest row; null: none
	End     *time.Time `json:"last_window_end"` // window_end of the newest row
	WindowS float64    `json:"window_s"`
}

func (e extent) json(loc *time.Location) Extent {
	out := Extent{WindowS: e.Window.Seconds()}
	if !e.Empty() {
		first, end := e.First.In(loc), e.End().In(loc)
		out.First, out.End = &first, &end
	}
	return out
}

// Pipelines is GET api/pipelines.
type Pipelines struct {
	Default   string   `json:"default"` // the pipeline shown when none is chosen
	TZ        string   `json:"tz"`      // the time zone the pages start in
	Pipelines []string `json:"pipelines"`
}

func (h *Handler) pipelines(ctx context.Context, r *http.Request) (any, error) {
	out := &Pipelines{TZ: h.cfg.Location.String()}
	err := h.do(ctx, func(c *pgx.Conn) error {
		var err error
		if out.Pipelines, err = pipelineNames(ctx, c); err != nil {
			return err
		}
		out.Default, err = h.pipelineParam(ctx, c, nil)
		return err
	})
	if out.Pipelines == nil {
		out.Pipelines = []string{}
	}
	return out, err
}

// DelayPoint is one bucket of the network's delay over time.
type DelayPoint struct {
	T     int64  `json:"t"`     // the bucket's start, Unix seconds
	Start string `json:"start"` // the same, RFC 3339 in the page's time zone
	// Final, with include_open only, is false when a provisional row of a
	// window not yet final went into the bucket: its numbers still change.
	// Without include_open it is absent: every point is final.
	Final *bool `json:"final,omitempty"`
	Stats
}

// Delay is GET api/delay?pipeline&from&to&bucket&line&tz&include_open: the
// network's delay (dimension network) per bucket, or with line one line's
// (dimension line), exact (rollup.Run). With include_open=1 the buckets read
// view delay_aggregates_live, the provisional rows of the windows not yet
// final too (each point says whether it is final), and the default range
// ends at the newest of them; without it, final rows only. Lines are the lines with windows in the range,
// busiest first (at most 500), which the form offers; Line is the line
// shown, with its names and events in the range (null: the network). A
// line that is no line of the pipeline (checkLine) is a 400 naming line.
type Delay struct {
	Query               Query        `json:"query"`
	Extent              Extent       `json:"extent"`
	Line                *LineChoice  `json:"line"`
	Lines               []LineChoice `json:"lines"`
	Points              []DelayPoint `json:"points"`
	WithoutDistribution int64        `json:"without_distribution"` // rows written before migration 5, left out
}

// openExtent returns e widened to the windows of pipeline that are not yet
// final (their provisional rows in view delay_aggregates_live).
func openExtent(ctx context.Context, c *pgx.Conn, pipeline string, e extent) (extent, error) {
	var first, last *time.Time
	err := c.QueryRow(ctx, `SELECT min(window_start), max(window_start) FROM delay_aggregates_live
WHERE pipeline = $1 AND NOT final`, pipeline).Scan(&first, &last)
	if err != nil {
		return e, fmt.Errorf("dashboard: open windows of pipeline %q: %w", pipeline, err)
	}
	if first == nil || last == nil {
		return e, nil
	}
	if e.Empty() || first.Before(e.First) {
		e.First = first.UTC()
	}
	if last.After(e.Last) {
		e.Last = last.UTC()
	}
	return e, nil
}

// page is what every page's request starts from.
type page struct {
	v        url.Values
	loc      *time.Location // the tz parameter's, else Config.Location
	pipeline string         // "" when the database has none
	extent   extent         // where the pipeline's windows lie
}

// withPage reads r's time zone, then, on a connection of the pool, its
// pipeline and where that pipeline's windows lie, and runs f.
func (h *Handler) withPage(ctx context.Context, r *http.Request, f func(c *pgx.Conn, p page) error) error {
	p := page{v: r.URL.Query()}
	var err error
	if p.loc, err = h.location(p.v); err != nil {
		return err
	}
	return h.do(ctx, func(c *pgx.Conn) error {
		if p.pipeline, err = h.pipelineParam(ctx, c, p.v); err != nil {
			return err
		}
		if err := checkPipeline(ctx, c, p.pipeline); err != nil {
			return err
		}
		if p.extent, err = pipelineExtent(ctx, c, p.pipeline); err != nil {
			return err
		}
		return f(c, p)
	})
}

func (h *Handler) delay(ctx context.Context, r *http.Request) (any, error) {
	out := &Delay{Points: []DelayPoint{}, Lines: []LineChoice{}}
	err := h.withPage(ctx, r, func(c *pgx.Conn, p page) error {
		v, loc, pipeline, e := p.v, p.loc, p.pipeline, p.extent
		includeOpen, err := boolParam(v, "include_open")
		if err != nil {
			return err
		}
		rangeExtent := e
		if includeOpen && pipeline != "" {
			if rangeExtent, err = openExtent(ctx, c, pipeline, e); err != nil {
				return err
			}
		}
		from, to, err := timeRange(v, loc, rangeExtent, 24*time.Hour)
		if err != nil {
			return err
		}
		span, err := rangeSpan(from, to)
		if err != nil {
			return err
		}
		bucket, name, approx, err := chooseBucket(v.Get("bucket"), span, e.Window)
		if err != nil {
			return err
		}
		out.Query = Query{Pipeline: pipeline, TZ: loc.String(), From: from.Format(time.RFC3339), To: to.Format(time.RFC3339),
			Bucket: name, BucketS: approx.Seconds(), Line: strings.TrimSpace(v.Get("line")), IncludeOpen: includeOpen}
		out.Extent = e.json(loc)
		if pipeline == "" {
			return nil
		}
		rq := rollup.Query{Pipeline: pipeline, Dimension: aggregate.DimNetwork, From: from, To: to,
			Bucket: bucket, Location: loc, Quantiles: quantiles, IncludeOpen: includeOpen}
		if err := delayLines(ctx, c, pipeline, from, to, out); err != nil {
			return err
		}
		if out.Line != nil {
			rq.Dimension, rq.IDs = aggregate.DimLine, []string{out.Line.ID}
		}
		res, err := rollup.Run(ctx, c, rq)
		if err != nil {
			return err
		}
		out.WithoutDistribution = res.WithoutDistribution
		for _, row := range res.Rows {
			out.Points = append(out.Points, DelayPoint{T: row.Bucket.Unix(), Start: row.Bucket.Format(time.RFC3339), Stats: statsOf(row.Summary)})
			if includeOpen {
				out.Points[len(out.Points)-1].Final = &row.Final
			}
		}
		return nil
	})
	return out, err
}

// delayLines fills in out's lines with windows in [from, to) and, when the
// query names one (a line that is no line of the pipeline is a 400), the
// line shown.
func delayLines(ctx context.Context, c *pgx.Conn, pipeline string, from, to time.Time, out *Delay) error {
	var err error
	if out.Lines, err = linesIn(ctx, c, pipeline, from, to); err != nil {
		return err
	}
	if out.Query.Line == "" {
		_, err = nameLines(ctx, c, pipeline, "", out.Lines)
		return err
	}
	if err := checkLine(ctx, c, pipeline, out.Query.Line, from, to, out.Lines); err != nil {
		return err
	}
	l, err := nameLines(ctx, c, pipeline, out.Query.Line, out.Lines)
	out.Line = &l
	return err
}

// Ranked is one id of a ranking, with its names (lines and stations; null
// when it has none).
type Ranked struct {
	ID string `json:"id"`
	Named
	Stats
}

// Top is GET api/top?pipeline&day&dimension&min_events&top&tz: the ids of a
// dimension with the highest P90 over one day in tz, among those with at
// least min_events events, greatest first (ties by id), exact (rollup.Run
// with By p90). Each row carries its id's name (and a line's short name),
// read in one query for all rows.
type Top struct {
	Query               Query    `json:"query"`
	Extent              Extent   `json:"extent"`
	Rows                []Ranked `json:"rows"`
	WithoutDistribution int64    `json:"without_distribution"`
}

func (h *Handler) top(ctx context.Context, r *http.Request) (any, error) {
	v := r.URL.Query()
	dim := strings.TrimSpace(v.Get("dimension"))
	switch dim {
	case "":
		dim = aggregate.DimLine
	case aggregate.DimLine, aggregate.DimStation, aggregate.DimOperator:
	default:
		return nil, badParam("dimension", "%q: want line, station or operator", dim)
	}
	minEvents, err := intParam(v, "min_events", 20, 1, 1<<40)
	if err != nil {
		return nil, err
	}
	n, err := intParam(v, "top", 15, 1, 500)
	if err != nil {
		return nil, err
	}
	out := &Top{Rows: []Ranked{}}
	err = h.withPage(ctx, r, func(c *pgx.Conn, p page) error {
		loc, pipeline, e := p.loc, p.pipeline, p.extent
		day, err := dayParam(v.Get("day"), loc, e)
		if err != nil {
			return err
		}
		out.Query = Query{Pipeline: pipeline, TZ: loc.String(), Day: day.Format(time.DateOnly), Dimension: dim, MinEvents: minEvents, Top: n,
			From: day.Format(time.RFC3339), To: nextDay(day).Format(time.RFC3339)}
		out.Extent = e.json(loc)
		if pipeline == "" {
			return nil
		}
		res, err := rollup.Run(ctx, c, rollup.Query{Pipeline: pipeline, Dimension: dim, From: day, To: nextDay(day),
			Location: loc, Quantiles: quantiles, MinEvents: minEvents, By: "p90", Top: int(n)})
		if err != nil {
			return err
		}
		out.WithoutDistribution = res.WithoutDistribution
		for _, row := range res.Rows { // the rollup read their names (rollup.Row)
			out.Rows = append(out.Rows, Ranked{ID: row.ID, Named: namedOf(store.Name{Name: row.Name, ShortName: row.ShortName}),
				Stats: statsOf(row.Summary)})
		}
		return nil
	})
	return out, err
}

// dayParam reads a day (YYYY-MM-DD) and returns its first instant in loc;
// none: the day of the newest window's start (today when there is none).
func dayParam(s string, loc *time.Location, e extent) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		t := time.Now()
		if !e.Empty() {
			t = e.Last
		}
		t = t.In(loc)
		return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, loc), nil
	}
	d, err := time.ParseInLocation(time.DateOnly, s, loc)
	if err != nil {
		return d, badParam("day", "%q: want a date, YYYY-MM-DD", s)
	}
	return d, nil
}

// nextDay is the start of the next calendar day in day's zone (23 or 25
// hours later on a day of a DST change).
func nextDay(day time.Time) time.Time {
	return time.Date(day.Year(), day.Month(), day.Day()+1, 0, 0, 0, 0, day.Location())
}

// HourStats is one hour of the day.
type HourStats struct {
	Hour int `json:"hour"` // 0-23, of window_start in the page's time zone
	Stats
}

// LineChoice is a line the line page offers, with its names (null when
// none) and its events in the range.
type LineChoice struct {
	ID string `json:"id"`
	Named
	Events int64 `json:"events"`
}

// Line is GET api/line?pipeline&line&from&to&tz: one line's delay by hour
// of day over the range (its windows grouped by the hour of their
// window_start in tz), exact: ovs_summary over the merged distributions
// (docs/analysing.md "Analysing the numbers", example 2). Lines lists the lines with
// events in the range, busiest first (at most 500); the busiest is the
// default line. Line is the line shown (query.line) with its names and
// events in the range (0 when it is not among Lines); the names of all of
// them come from one query.
type Line struct {
	Query  Query        `json:"query"`
	Extent Extent       `json:"extent"`
	Line   LineChoice   `json:"line"`
	Lines  []LineChoice `json:"lines"`
	Hours  []HourStats  `json:"hours"`
}

// hourOfDaySQL merges a line's distributions per hour of day of its
// windows' starts in time zone $5, with ovs_summary (migration 5).
const hourOfDaySQL = `
SELECT h, (s).event_count, (s).mean_delay_s, (s).min_delay_s, (s).max_delay_s, (s).delay_quantiles
FROM (SELECT extract(hour FROM a.window_start AT TIME ZONE $5)::int AS h,
             ovs_summary(array_agg(u.v), array_agg(u.c), $6::float8[]) AS s
      FROM delay_aggregates AS a CROSS JOIN LATERAL unnest(a.delay_values, a.delay_counts) AS u(v, c)
      WHERE a.pipeline = $1 AND a.dimension = 'line' AND a.dimension_id = $2
        AND a.window_start >= $3 AND a.window_start < $4
      GROUP BY 1
      OFFSET 0) AS g
ORDER BY h`

func (h *Handler) line(ctx context.Context, r *http.Request) (any, error) {
	out := &Line{Lines: []LineChoice{}, Hours: []HourStats{}}
	err := h.withPage(ctx, r, func(c *pgx.Conn, p page) error {
		v, loc, pipeline, e := p.v, p.loc, p.pipeline, p.extent
		from, to, err := timeRange(v, loc, e, 7*24*time.Hour)
		if err != nil {
			return err
		}
		out.Query = Query{Pipeline: pipeline, TZ: loc.String(), From: from.Format(time.RFC3339), To: to.Format(time.RFC3339),
			Line: strings.TrimSpace(v.Get("line"))}
		out.Extent = e.json(loc)
		if out.Lines, err = linesIn(ctx, c, pipeline, from, to); err != nil {
			return err
		}
		if out.Query.Line == "" && len(out.Lines) > 0 {
			out.Query.Line = out.Lines[0].ID
		}
		if out.Query.Line == "" {
			return nil
		}
		if out.Line, err = nameLines(ctx, c, pipeline, out.Query.Line, out.Lines); err != nil {
			return err
		}
		if known, err := h.zoneKnown(ctx, c, loc); err != nil {
			return err
		} else if !known {
			return badParam("tz", "%q is a time zone PostgreSQL does not know: choose another name of it", loc.String())
		}
		rows, err := c.Query(ctx, hourOfDaySQL, pipeline, out.Query.Line, from, to, loc.String(), quantiles)
		if err != nil {
			return fmt.Errorf("dashboard: line %q by hour: %w", out.Query.Line, err)
		}
		var hs HourStats
		var qs []float64
		_, err = pgx.ForEachRow(rows, []any{&hs.Hour, &hs.Events, &hs.Mean, &hs.Min, &hs.Max, &qs}, func() error {
			hs.P50, hs.P90 = qs[0], qs[1]
			out.Hours = append(out.Hours, hs)
			return nil
		})
		if err != nil {
			return fmt.Errorf("dashboard: line %q by hour: %w", out.Query.Line, err)
		}
		return nil
	})
	return out, err
}
