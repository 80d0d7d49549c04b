package rollup

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/store"
)

// Querier is what Run needs of a connection: *pgx.Conn and pgx.Tx have it.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Query says what to roll up.
type Query struct {
	Pipeline  string
	Dimension string   // aggregate.DimLine, DimStation, DimOperator or DimNetwork
	IDs       []string // dimension ids to keep; nil: every id
	// From and To bound the windows: From <= window_start < To.
	From, To time.Time
	Bucket   Bucket
	// Location is the time zone of calendar buckets and of the bucket
	// starts returned; nil: UTC. Its name (IANA) is what PostgreSQL uses.
	Location  *time.Location
	Quantiles []float64 // each in [0, 1]
	MinEvents int64     // groups with fewer events are left out; <= 1: none
	// By orders the rows of each bucket, greatest first (ties by id):
	// "" (by id), "events", "mean", "min", "max", or the Name of one of
	// Quantiles (e.g. "p90").
	By  string
	Top int // keep the first Top rows of each bucket (in By's order); 0: all
	// IncludeOpen reads view delay_aggregates_live: the final rows and the
	// provisional rows of the windows not yet final (docs/windows.md
	// "Provisional rows"); each Row says whether all of it is final.
	// Without it only final rows are read.
	IncludeOpen bool
}

// Validate checks q, and says what is wrong in terms of the flags of
// `ovstream report`.
func (q *Query) Validate() error {
	if err := ValidateSelection(q.Pipeline, q.Dimension, q.From, q.To, q.Quantiles); err != nil {
		return err
	}
	if q.Top < 0 {
		return fmt.Errorf("top %d: want >= 0", q.Top)
	}
	if q.Top > 0 && q.By == "" {
		return errors.New("top needs by (events, mean, min, max or a quantile such as p90)")
	}
	if _, err := q.metric(); err != nil {
		return err
	}
	return nil
}

// ValidateSelection checks what every report selects: a pipeline, a
// dimension (line, station, operator or network), a time range [from, to)
// and quantiles in [0, 1].
func ValidateSelection(pipeline, dimension string, from, to time.Time, quantiles []float64) error {
	switch dimension {
	case aggregate.DimLine, aggregate.DimStation, aggregate.DimOperator, aggregate.DimNetwork:
	default:
		return fmt.Errorf("dimension %q: want line, station, operator or network", dimension)
	}
	if pipeline == "" {
		return errors.New("no pipeline")
	}
	if !from.Before(to) { // not IsZero: 0001-01-01T00:00:00Z is a bound like any other
		return fmt.Errorf("time range [%s, %s): want from < to", from.Format(time.RFC3339), to.Format(time.RFC3339))
	}
	for _, p := range quantiles {
		if !(p >= 0 && p <= 1) {
			return fmt.Errorf("quantile %v: want 0 <= q <= 1", p)
		}
	}
	return nil
}

// metric returns how to read q.By of a Row; nil for "".
func (q *Query) metric() (func(*Row) float64, error) {
	switch q.By {
	case "":
		return nil, nil
	case "events":
		return func(r *Row) float64 { return float64(r.Count) }, nil
	case "mean":
		return func(r *Row) float64 { return r.Mean }, nil
	case "min":
		return func(r *Row) float64 { return r.Min }, nil
	case "max":
		return func(r *Row) float64 { return r.Max }, nil
	}
	for i, p := range q.Quantiles {
		if Name(p) == q.By {
			return func(r *Row) float64 { return r.Quantiles[i] }, nil
		}
	}
	names := []string{"events", "mean", "min", "max"}
	for _, p := range q.Quantiles {
		names = append(names, Name(p))
	}
	return nil, fmt.Errorf("by %q: want one of %s", q.By, strings.Join(names, ", "))
}

// Row is one id in one bucket.
type Row struct {
	Bucket time.Time // the bucket's start, in Query.Location
	ID     string
	// Name is the id's name from the pipeline's names table (a line's
	// line_name, else line_short_name; a station's stop_name), "" when it
	// has none (operators and the network never do).
	Name string
	// ShortName is a line's line_short_name (its public number), "" when
	// it has none; stations never have one.
	ShortName string
	// Final is false when a provisional row of an open window went into
	// the row (Query.IncludeOpen): its numbers still change.
	Final bool
	aggregate.Summary
}

// Result is what Run read.
type Result struct {
	Rows []Row
	// WithoutDistribution counts the rows in the range (of the ids asked
	// for) that have no stored distribution (written before schema
	// version 5): they are not in Rows.
	WithoutDistribution int64
}

// distributionsSQL merges, per bucket and id, the stored distributions of the
// rows in the range: one row per (bucket, id, distinct delay) with its count.
const distributionsSQL = `
SELECT ovs_bucket(a.window_start, $5::text::interval, $6::text, $3) AS b, a.dimension_id, u.v, sum(u.c)::bigint,
    bool_and(a.final)
FROM %s AS a CROSS JOIN LATERAL unnest(a.delay_values, a.delay_counts) AS u(v, c)
WHERE a.pipeline = $1 AND a.dimension = $2 AND a.window_start >= $3 AND a.window_start < $4
  AND ($7::text[] IS NULL OR a.dimension_id = ANY ($7::text[]))
GROUP BY 1, 2, 3
ORDER BY 1, 2`

const withoutSQL = `
SELECT count(*) FROM %s AS a
WHERE a.pipeline = $1 AND a.dimension = $2 AND a.window_start >= $3 AND a.window_start < $4
  AND ($5::text[] IS NULL OR a.dimension_id = ANY ($5::text[])) AND a.delay_values IS NULL`

// Run reads the rollup q asks for from db. Errors: q's Validate, or the
// failing query, wrapped (an unknown time zone is PostgreSQL's error).
func Run(ctx context.Context, db Querier, q Query) (*Result, error) {
	if err := q.Validate(); err != nil {
		return nil, fmt.Errorf("rollup: %w", err)
	}
	loc := q.Location
	if loc == nil {
		loc = time.UTC
	}
	metric, _ := q.metric()
	var ids any
	if q.IDs != nil {
		ids = q.IDs
	}
	res := &Result{}
	// final is a column of the view; for the table it is the constant true.
	from := "(SELECT *, true AS final FROM delay_aggregates)"
	if q.IncludeOpen {
		from = "delay_aggregates_live"
	}
	if err := db.QueryRow(ctx, fmt.Sprintf(withoutSQL, from), q.Pipeline, q.Dimension, q.From, q.To, ids).Scan(&res.WithoutDistribution); err != nil {
		return nil, fmt.Errorf("rollup: rows without distribution: %w", err)
	}
	rows, err := db.Query(ctx, fmt.Sprintf(distributionsSQL, from), q.Pipeline, q.Dimension, q.From, q.To, q.Bucket.Interval(), loc.String(), ids)
	if err != nil {
		return nil, fmt.Errorf("rollup: %w", err)
	}
	var (
		bucket, b time.Time
		id, cur   string
		v         float64
		c         int64
		final     bool
		allFinal  = true // of the current row
		values    []float64
		counts    []int64
		bucketAt  int // index in res.Rows of the current bucket's first row
	)
	flush := func() {
		if len(values) == 0 {
			return
		}
		s := aggregate.Summarize(values, counts, q.Quantiles)
		values, counts = values[:0], counts[:0]
		rowFinal := allFinal
		allFinal = true
		if s.Count < q.MinEvents {
			return
		}
		res.Rows = append(res.Rows, Row{Bucket: bucket.In(loc), ID: cur, Final: rowFinal, Summary: s})
	}
	endBucket := func() {
		res.Rows = rank(res.Rows, bucketAt, metric, q.Top)
		bucketAt = len(res.Rows)
	}
	_, err = pgx.ForEachRow(rows, []any{&b, &id, &v, &c, &final}, func() error {
		if len(values) > 0 && (!b.Equal(bucket) || id != cur) {
			flush()
			if !b.Equal(bucket) {
				endBucket()
			}
		}
		bucket, cur = b, id
		values, counts = append(values, v), append(counts, c)
		allFinal = allFinal && final
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("rollup: %w", err)
	}
	flush()
	endBucket()
	if err := addNames(ctx, db, q, res.Rows); err != nil {
		return nil, fmt.Errorf("rollup: %w", err)
	}
	return res, nil
}

// addNames sets the Name and ShortName of rows from the names table: each id LEFT JOIN
// names, so an id without a name keeps "". One query for all ids.
func addNames(ctx context.Context, db Querier, q Query, rows []Row) error {
	ids := make([]string, 0, len(rows))
	for _, r := range rows {
		ids = append(ids, r.ID)
	}
	names, err := NamesOf(ctx, db, q.Pipeline, q.Dimension, ids)
	for i := range rows {
		rows[i].Name, rows[i].ShortName = names[rows[i].ID].Name, names[rows[i].ID].ShortName
	}
	return err
}

// NamesOf returns the names of ids (in any order, repeated or not) of a
// line or station dimension from the names table, in one query; nil for
// other dimensions and for no ids.
func NamesOf(ctx context.Context, db Querier, pipeline, dimension string, ids []string) (map[string]store.Name, error) {
	if len(ids) == 0 || (dimension != aggregate.DimLine && dimension != aggregate.DimStation) {
		return nil, nil
	}
	ids = slices.Clone(ids)
	slices.Sort(ids)
	return store.Names(ctx, db, pipeline, dimension, slices.Compact(ids))
}

// rank orders rows[from:] (one bucket) by metric, greatest first, ties by
// id, and keeps the first top of them (0: all). A nil metric keeps the id
// order.
func rank(rows []Row, from int, metric func(*Row) float64, top int) []Row {
	if metric != nil {
		b := rows[from:]
		slices.SortStableFunc(b, func(x, y Row) int {
			if c := cmp.Compare(metric(&y), metric(&x)); c != 0 {
				return c
			}
			return strings.Compare(x.ID, y.ID)
		})
	}
	if top > 0 && len(rows)-from > top {
		rows = rows[:from+top]
	}
	return rows
}

// Name is the column name of the p-quantile: "p" and 100*p in decimal, from
// p's shortest decimal form (0.9 -> p90, 0.999 -> p99.9, 0.05 -> p5, 1 -> p100).
func Name(p float64) string {
	r, ok := new(big.Rat).SetString(strconv.FormatFloat(p, 'f', -1, 64))
	if !ok {
		return "p" + strconv.FormatFloat(100*p, 'g', -1, 64)
	}
	r.Mul(r, big.NewRat(100, 1))
	if r.IsInt() {
		return "p" + r.Num().String()
	}
	f, _ := r.Float64()
	return "p" + strconv.FormatFloat(f, 'f', -1, 64)
}
