package visitstats

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/ovstream/ovstream/store/rollup"
)

// Definition is what on time means: a visit is on time when
// -Early <= delay_s <= Late (seconds, both bounds inclusive); early below,
// late above.
type Definition struct {
	Name        string // "na", "crow", or "" for bounds given as numbers
	Early, Late float64
}

// The bundled definitions (docs/analysing.md "On-time performance and headways").
var (
	// NorthAmerica: at most 1 minute early, at most 5 minutes late.
	NorthAmerica = Definition{"na", 60, 300}
	// CROW: at most 30 s early, at most 3 minutes late (the Netherlands).
	CROW = Definition{"crow", 30, 180}
)

func (d Definition) String() string {
	if d.Name != "" {
		return d.Name
	}
	return rollup.Exact(d.Early) + "," + rollup.Exact(d.Late)
}

// ParseOnTime reads a definition: na, crow, or EARLY,LATE in seconds (each
// a finite number >= 0: 60,300 is na).
func ParseOnTime(s string) (Definition, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "na":
		return NorthAmerica, nil
	case "crow":
		return CROW, nil
	}
	e, l, ok := strings.Cut(s, ",")
	early, err1 := strconv.ParseFloat(strings.TrimSpace(e), 64)
	late, err2 := strconv.ParseFloat(strings.TrimSpace(l), 64)
	if !ok || err1 != nil || err2 != nil || !(early >= 0) || !(late >= 0) || math.IsInf(early, 0) || math.IsInf(late, 0) {
		return Definition{}, fmt.Errorf("on-time definition %q: want na, crow, or EARLY,LATE in seconds (e.g. 60,300)", s)
	}
	return Definition{Early: early, Late: late}, nil
}

// ParseBucket reads a bucket as rollup.ParseBucket does, plus service-day
// (the visits' start_date): serviceDay is then true.
func ParseBucket(s string) (b rollup.Bucket, serviceDay bool, err error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "service-day", "service_day", "serviceday":
		return rollup.All, true, nil
	}
	b, err = rollup.ParseBucket(s)
	if err != nil {
		err = fmt.Errorf("%w, or service-day", err)
	}
	return b, false, err
}

// Metric names a KPI of this package.
type Metric string

// The metrics.
const (
	OnTime  Metric = "on-time"
	Headway Metric = "headway"
)

// Query says what to read.
type Query struct {
	Metric    Metric
	Pipeline  string
	Dimension string   // aggregate.DimLine, DimStation, DimOperator or DimNetwork
	IDs       []string // nil: every id
	// From and To bound the visits by arrival_time: From <= arrival_time < To.
	From, To time.Time
	Bucket   rollup.Bucket // of arrival_time; fixed bins start at From
	// ServiceDay buckets by the visits' service day (start_date) instead
	// of Bucket: each bucket starts at the day's midnight in Location.
	ServiceDay bool
	Location   *time.Location // of calendar buckets and the output; nil: UTC
	OnTime     Definition     // Metric OnTime
	// WaitTolerance is the share above the scheduled gap an observed gap
	// may reach and still count in the wait assessment (Metric Headway;
	// 0.25 for the MTA's +25 %).
	WaitTolerance float64
	// RealizedWithinS, when positive, counts only the visits whose last
	// prediction was made at most this many seconds before the arrival it
	// predicts (or after it): the vehicle was at the stop, so the delay is
	// realized. 0: every visit, the others' delays still predictions.
	RealizedWithinS float64
}

// MaxWaitTolerance is the largest Query.WaitTolerance: a gap up to 11 times
// the scheduled one still in the wait assessment, far past any standard.
const MaxWaitTolerance = 10

// Validate checks q and says what is wrong in terms of report's flags.
func (q *Query) Validate() error {
	switch q.Metric {
	case OnTime, Headway:
	default:
		return fmt.Errorf("metric %q: want on-time or headway", q.Metric)
	}
	if err := rollup.ValidateSelection(q.Pipeline, q.Dimension, q.From, q.To, nil); err != nil {
		return err
	}
	if !(q.OnTime.Early >= 0 && q.OnTime.Late >= 0) || math.IsInf(q.OnTime.Early, 0) || math.IsInf(q.OnTime.Late, 0) {
		return fmt.Errorf("on-time bounds %v: want finite numbers >= 0", q.OnTime)
	}
	if !(q.WaitTolerance >= 0 && q.WaitTolerance <= MaxWaitTolerance) {
		return fmt.Errorf("wait tolerance %v: want a number from 0 to %v", q.WaitTolerance, MaxWaitTolerance)
	}
	if !(q.RealizedWithinS >= 0) || math.IsInf(q.RealizedWithinS, 0) {
		return fmt.Errorf("realized within %vs: want a finite number of seconds >= 0", q.RealizedWithinS)
	}
	return nil
}

func (q *Query) location() *time.Location {
	if q.Location == nil {
		return time.UTC
	}
	return q.Location
}

// Kind says how a column is written in a table for a person.
type Kind int

// The kinds of columns.
const (
	Count   Kind = iota // a whole number
	Seconds             // seconds, rounded to 0.1 s in a table
	Share               // in [0, 1], a percentage in a table
)

// Column is one statistic of a Row.
type Column struct {
	Name string
	Kind Kind
}

// columns are those of each metric, in the order of its SQL function's
// result after bucket_start and dimension_id.
var columns = map[Metric][]Column{
	OnTime: {{"visits", Count}, {"early", Count}, {"on_time", Count}, {"late", Count}, {"on_time_share", Share}},
	Headway: {{"gaps", Count}, {"mean_headway_s", Seconds}, {"awt_s", Seconds}, {"scheduled_gaps", Count},
		{"scheduled_mean_headway_s", Seconds}, {"swt_s", Seconds}, {"excess_wait_s", Seconds}, {"assessed", Count},
		{"within_tolerance", Count}, {"wait_assessment", Share}},
}

// Columns returns the statistics of m's rows.
func Columns(m Metric) []Column { return columns[m] }

// Row is one id in one bucket.
type Row struct {
	Bucket time.Time // the bucket's start, in Query.Location
	ID     string
	Name   string // the id's name from the names table, "" when none
	// Values holds one value per column of the metric: int64 for Count,
	// float64 for Seconds and Share, nil when nothing is counted (a wait
	// over gaps that sum to 0, a share of nothing).
	Values []any
}

const onTimeSQL = `SELECT * FROM ovs_on_time($1, $2, $3, $4, bucket => $5::text::interval, tz => $6, early_s => $7, late_s => $8,
	ids => $9, by_service_day => $10, realized_within_s => $11)`

const headwaySQL = `SELECT * FROM ovs_headways($1, $2, $3, $4, bucket => $5::text::interval, tz => $6, ids => $7,
	by_service_day => $8, wait_tolerance => $9, realized_within_s => $10)`

// Run reads q's rows from db, ordered by bucket and id.
func Run(ctx context.Context, db rollup.Querier, q Query) ([]Row, error) {
	if err := q.Validate(); err != nil {
		return nil, fmt.Errorf("visitstats: %w", err)
	}
	var ids any
	if q.IDs != nil {
		ids = q.IDs
	}
	var realized any // NULL: every visit
	if q.RealizedWithinS > 0 {
		realized = q.RealizedWithinS
	}
	loc := q.location()
	sql, args := onTimeSQL, []any{q.Pipeline, q.Dimension, q.From, q.To, q.Bucket.Interval(), loc.String(),
		q.OnTime.Early, q.OnTime.Late, ids, q.ServiceDay, realized}
	if q.Metric == Headway {
		sql, args = headwaySQL, []any{q.Pipeline, q.Dimension, q.From, q.To, q.Bucket.Interval(), loc.String(),
			ids, q.ServiceDay, q.WaitTolerance, realized}
	}
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("visitstats: %s: %w", q.Metric, err)
	}
	defer rows.Close()
	var out []Row
	for rows.Next() {
		vs, err := rows.Values()
		if err != nil {
			return nil, fmt.Errorf("visitstats: %s: %w", q.Metric, err)
		}
		b, _ := vs[0].(time.Time)
		id, _ := vs[1].(string)
		out = append(out, Row{Bucket: b.In(loc), ID: id, Values: vs[2:]})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("visitstats: %s: %w", q.Metric, err)
	}
	if err := addNames(ctx, db, q, out); err != nil {
		return nil, fmt.Errorf("visitstats: %w", err)
	}
	return out, nil
}

// addNames sets the Name of rows of lines and stations from the names table.
func addNames(ctx context.Context, db rollup.Querier, q Query, rows []Row) error {
	ids := make([]string, 0, len(rows))
	for _, r := range rows {
		ids = append(ids, r.ID)
	}
	names, err := rollup.NamesOf(ctx, db, q.Pipeline, q.Dimension, ids)
	for i := range rows {
		rows[i].Name = names[rows[i].ID].Name
	}
	return err
}
