package dashboard

import (
	"context"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/store"
	"github.com/ovstream/ovstream/store/rollup"
)

// maxPoints bounds the buckets of one delay-over-time request.
const maxPoints = 5000

// autoPoints is the most buckets the automatic bucket gives.
const autoPoints = 400

// checkParams refuses, before anything reaches the database, a request
// whose parameters no page could mean: a value that is not valid UTF-8 or
// holds a NUL (PostgreSQL's text refuses both: SQLSTATE 22021), a pipeline
// that breaks the rule of pipeline names (store.CheckPipelineName: no
// pipeline can have it), a tz that is no zone. The error is a 400 naming
// the parameter; the other parameters are checked where they are read.
func (h *Handler) checkParams(v url.Values) error {
	for _, name := range slices.Sorted(maps.Keys(v)) {
		for _, s := range v[name] {
			switch {
			case !utf8.ValidString(s):
				return badParam(name, "%q is not valid UTF-8", s)
			case strings.ContainsRune(s, 0):
				return badParam(name, "%q holds a NUL character", s)
			}
		}
	}
	if p := strings.TrimSpace(v.Get("pipeline")); p != "" {
		if err := store.CheckPipelineName(p); err != nil {
			return badParam("pipeline", "%q: %v", p, err)
		}
	}
	_, err := h.location(v)
	return err
}

// location returns the tz parameter's time zone, else the configured one.
// Local (the server's own zone, whatever that is) is no zone a page can
// name: PostgreSQL does not know it either.
func (h *Handler) location(v url.Values) (*time.Location, error) {
	name := strings.TrimSpace(v.Get("tz"))
	if name == "" {
		return h.cfg.Location, nil
	}
	loc, err := LoadZone(name)
	if err != nil {
		return nil, badParam("tz", "%v", err)
	}
	return loc, nil
}

// LoadZone is time.LoadLocation for a zone a user names: an IANA zone, not
// "Local" (the server's own zone, which PostgreSQL does not know by that
// name) and not a path.
func LoadZone(name string) (*time.Location, error) {
	loc, err := time.LoadLocation(name)
	if err != nil || strings.EqualFold(name, "local") || strings.HasPrefix(name, "/") {
		return nil, fmt.Errorf("%q is no IANA time zone (e.g. UTC, Europe/Amsterdam, Pacific/Auckland)", name)
	}
	return loc, nil
}

// zoneKnown reports whether PostgreSQL knows the time zone loc by its name
// (pg_timezone_names), for the queries that hand it over (the line page's
// hour of day). Each name is asked once: the answers are kept, and only
// for names LoadZone accepted, so there are at most as many as zones.
func (h *Handler) zoneKnown(ctx context.Context, c *pgx.Conn, loc *time.Location) (bool, error) {
	name := loc.String()
	if known, ok := h.zones.Load(name); ok {
		return known.(bool), nil
	}
	var known bool
	if err := c.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_timezone_names WHERE name = $1)`, name).Scan(&known); err != nil {
		return false, fmt.Errorf("dashboard: time zone %q: %w", name, err)
	}
	h.zones.Store(name, known)
	return known, nil
}

// pipelineParam returns the pipeline parameter, else the configured one,
// else the first pipeline in the database ("" when there is none).
func (h *Handler) pipelineParam(ctx context.Context, c *pgx.Conn, v url.Values) (string, error) {
	if p := strings.TrimSpace(v.Get("pipeline")); p != "" {
		return p, nil
	}
	if h.cfg.Pipeline != "" {
		return h.cfg.Pipeline, nil
	}
	names, err := pipelineNames(ctx, c)
	if err != nil || len(names) == 0 {
		return "", err
	}
	return names[0], nil
}

// checkPipeline returns nil for "" (the database has no pipeline yet) and
// for a pipeline the database knows, else the *store.UnknownPipelineError
// naming the known ones (api answers it with 404).
func checkPipeline(ctx context.Context, c *pgx.Conn, pipeline string) error {
	if pipeline == "" {
		return nil
	}
	return store.CheckPipelineKnown(ctx, c, pipeline)
}

func pipelineNames(ctx context.Context, c *pgx.Conn) ([]string, error) {
	rows, err := c.Query(ctx, `SELECT name FROM pipelines ORDER BY name`)
	var names []string
	if err == nil {
		names, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		return nil, fmt.Errorf("dashboard: pipelines: %w", err)
	}
	return names, nil
}

// extent is where a pipeline's finalized windows lie.
type extent struct {
	First, Last time.Time     // window_start of the oldest and the newest row, UTC; zero: no rows
	Window      time.Duration // the window size
}

// End is the end of the newest window.
func (e extent) End() time.Time { return e.Last.Add(e.Window) }

// Empty tells whether the pipeline has no finalized window.
func (e extent) Empty() bool { return e.Last.IsZero() }

func pipelineExtent(ctx context.Context, c *pgx.Conn, pipeline string) (extent, error) {
	var e extent
	var first, last *time.Time
	var windowS *float64
	// min and max of window_start read the primary key's index; the
	// window size is the pipeline's, else that of its newest row.
	err := c.QueryRow(ctx, `
SELECT min(window_start), max(window_start),
       coalesce((SELECT extract(epoch FROM window_size)::float8 FROM pipelines WHERE name = $1),
                (SELECT extract(epoch FROM window_end - window_start)::float8 FROM delay_aggregates
                 WHERE pipeline = $1 ORDER BY window_start DESC LIMIT 1))
FROM delay_aggregates WHERE pipeline = $1`, pipeline).Scan(&first, &last, &windowS)
	if err != nil {
		return e, fmt.Errorf("dashboard: windows of pipeline %q: %w", pipeline, err)
	}
	if first != nil && last != nil {
		e.First, e.Last = first.UTC(), last.UTC()
	}
	e.Window = 5 * time.Minute
	if windowS != nil && *windowS > 0 {
		e.Window = time.Duration(*windowS * float64(time.Second))
	}
	return e, nil
}

// timeRange reads the from and to parameters (RFC 3339, or a local date
// and time in loc); a missing one defaults to the span of the newest
// windows: to = the end of the newest window, from = to - span, but not
// before the oldest window.
func timeRange(v url.Values, loc *time.Location, e extent, span time.Duration) (from, to time.Time, err error) {
	if s := strings.TrimSpace(v.Get("to")); s != "" {
		if to, err = rollup.ParseTime(s, loc); err != nil {
			return from, to, badParam("to", "%v", err)
		}
	} else if !e.Empty() {
		to = e.End()
	} else {
		to = time.Now().Truncate(time.Hour).Add(time.Hour)
	}
	if s := strings.TrimSpace(v.Get("from")); s != "" {
		if from, err = rollup.ParseTime(s, loc); err != nil {
			return from, to, badParam("from", "%v", err)
		}
	} else {
		from = to.Add(-span)
		if !e.Empty() && from.Before(e.First) && e.First.Before(to) {
			from = e.First
		}
	}
	if !from.Before(to) {
		return from, to, badParam("from", "%s is not before to %s", from.In(loc).Format(time.RFC3339), to.In(loc).Format(time.RFC3339))
	}
	return from.In(loc), to.In(loc), nil
}

// rangeSpan returns to - from, the length of a delay page's range. Error (a
// 400 naming from): a range longer than a time.Duration holds (about 292
// years), whose count of buckets would not be right.
func rangeSpan(from, to time.Time) (time.Duration, error) {
	span := to.Sub(from)
	if !from.Add(span).Equal(to) {
		return 0, badParam("from", "%s to %s is longer than 292 years: choose a shorter range",
			from.Format(time.RFC3339), to.Format(time.RFC3339))
	}
	return span, nil
}

// boolParam reads a yes/no parameter: 1 or true, 0 or false; absent: false.
func boolParam(v url.Values, name string) (bool, error) {
	switch s := strings.TrimSpace(v.Get(name)); s {
	case "", "0", "false":
		return false, nil
	case "1", "true":
		return true, nil
	default:
		return false, badParam(name, "%q: want 1 or 0", s)
	}
}

// intParam reads a whole number parameter in [lo, hi]; def when absent.
func intParam(v url.Values, name string, def, lo, hi int64) (int64, error) {
	s := strings.TrimSpace(v.Get(name))
	if s == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, badParam(name, "%q: want a whole number from %d to %d", s, lo, hi)
	}
	return n, nil
}

// bucketChoice is a bucket the delay page offers, with its approximate
// length (calendar buckets vary) to count points.
type bucketChoice struct {
	name   string
	approx time.Duration
}

// bucketChoices are the buckets after the window size, in order.
var bucketChoices = []bucketChoice{
	{"15m", 15 * time.Minute}, {"30m", 30 * time.Minute}, {"hour", time.Hour}, {"3h", 3 * time.Hour},
	{"6h", 6 * time.Hour}, {"day", 24 * time.Hour}, {"week", 7 * 24 * time.Hour}, {"month", 30 * 24 * time.Hour},
}

// shortDuration writes d as 5m, 1h, 90s.
func shortDuration(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	case d%time.Second == 0:
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return d.String()
}

// chooseBucket returns the bucket parameter (auto, or what
// rollup.ParseBucket reads except all) as a rollup bucket, its name and its
// approximate length (a month as 31 days: the longest). Auto
// takes the window size, else the first of bucketChoices that gives at most
// autoPoints buckets. Errors: an unknown bucket, all, a bucket shorter than
// the window, or more than maxPoints buckets.
func chooseBucket(param string, span, window time.Duration) (rollup.Bucket, string, time.Duration, error) {
	param = strings.TrimSpace(param)
	points := func(d time.Duration) int64 { // ceil(span / d), without overflow
		n := int64(span / d)
		if span%d != 0 {
			n++
		}
		return n
	}
	if param == "" || param == "auto" {
		param = shortDuration(window)
		if points(window) > autoPoints {
			for _, c := range bucketChoices {
				param = c.name
				if c.approx >= window && points(c.approx) <= autoPoints {
					break
				}
			}
		}
	}
	b, err := rollup.ParseBucket(param)
	if err != nil {
		return b, "", 0, badParam("bucket", "%v", err)
	}
	if b == rollup.All {
		return b, "", 0, badParam("bucket", "want a bucket such as 15m, hour or day, or auto")
	}
	approx, ok := calendarApprox[b.String()]
	if !ok {
		approx, _ = time.ParseDuration(b.String()) // fixed bins: Every(d).String() is d
	}
	if approx > 0 && approx < window {
		return b, "", 0, badParam("bucket", "%s is shorter than the window size %s", param, shortDuration(window))
	}
	if approx > 0 && points(approx) > maxPoints {
		return b, "", 0, badParam("bucket", "%s over %s gives %d points, more than %d: choose a larger bucket or a shorter range",
			param, span, points(approx), maxPoints)
	}
	if b.String() == "month" {
		approx = 31 * 24 * time.Hour
	}
	return b, param, approx, nil
}

// calendarApprox are the calendar buckets' approximate lengths, by their
// rollup names.
var calendarApprox = map[string]time.Duration{"hour": time.Hour, "day": 24 * time.Hour, "week": 7 * 24 * time.Hour,
	"month": 28 * 24 * time.Hour, "year": 365 * 24 * time.Hour}
