// Package accuracy reads the accuracy of the arrival predictions by horizon
// from the prediction history of the stop visits (stop_visits, migration
// 18), through the SQL function ovs_accuracy: for one pipeline, one
// dimension, an optional set of ids and a range of realized arrivals, per
// id and horizon bucket, how many predictions there were, how many were
// accurate, their share, and the mean and quantiles of their error.
// `ovstream report --metric accuracy` prints it.
//
// Definitions (docs/analysing.md "Prediction accuracy by horizon"): a
// visit's realized arrival is its last prediction's arrival_time (else its
// event time) and its realized delay that prediction's delay_s, for the
// visits whose last prediction was made at most Query.RealizedWithinS
// before that arrival (the vehicle arrived); every other
// prediction, made at event time t with delay d, has the horizon realized
// arrival - t and the error realized delay - d (the realized arrival minus
// the predicted one: positive when the vehicle came later than predicted).
// Bucket [From, To) of the horizon; accurate when Early <= error <= Late.
// The default bands are the ETA Accuracy Benchmark's (TransitApp).
//
// Guarantees:
//   - The numbers are those of ovs_accuracy, exact counts; the overall
//     accuracy (Result.Overall) is the benchmark's single number: the
//     unweighted mean of the shares of an id's buckets that have
//     predictions.
//   - A visit whose history is not complete (upserted partly before
//     migration 19) is left out whole.
package accuracy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/ovstream/ovstream/store/rollup"
)

// Band is one horizon bucket and its accuracy band, in seconds: the
// predictions whose horizon is in [FromS, ToS) are accurate when their error
// is in [EarlyS, LateS].
type Band struct {
	FromS, ToS    float64
	EarlyS, LateS float64
}

// Benchmark are the ETA Accuracy Benchmark's buckets and bands: 0-3 minutes
// before the arrival, 30 s early to 90 s late; 3-6, 1 min early to 2.5 min
// late; 6-10, 1 min to 3.5 min; 10-15, 1.5 min to 4.5 min.
var Benchmark = []Band{{0, 180, -30, 90}, {180, 360, -60, 150}, {360, 600, -60, 210}, {600, 900, -90, 270}}

// ParseBands reads bands written FROM-TO:EARLY..LATE, comma-separated, in
// Go durations ("0-3m:-30s..90s,3m-6m:-1m..2m30s"): FROM and TO the
// horizon bucket, each band's FROM the TO of the one before, EARLY <= 0 <=
// LATE. "" gives Benchmark.
func ParseBands(s string) ([]Band, error) {
	if strings.TrimSpace(s) == "" {
		return Benchmark, nil
	}
	var bands []Band
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		horizon, errs, ok := strings.Cut(part, ":")
		from, to, ok1 := strings.Cut(horizon, "-")
		early, late, ok2 := strings.Cut(errs, "..")
		if !ok || !ok1 || !ok2 {
			return nil, fmt.Errorf("band %q: want FROM-TO:EARLY..LATE, e.g. 0-3m:-30s..90s", part)
		}
		var b Band
		for _, f := range []struct {
			s   string
			dst *float64
		}{{from, &b.FromS}, {to, &b.ToS}, {early, &b.EarlyS}, {late, &b.LateS}} {
			d, err := time.ParseDuration(strings.TrimSpace(f.s))
			if err != nil {
				return nil, fmt.Errorf("band %q: %v", part, err)
			}
			*f.dst = d.Seconds()
		}
		bands = append(bands, b)
	}
	return bands, validateBands(bands)
}

// validateBands checks that bands are contiguous buckets of positive length
// from a horizon of at least 0, each with EarlyS <= 0 <= LateS.
func validateBands(bands []Band) error {
	if len(bands) == 0 {
		return errors.New("no bands")
	}
	for i, b := range bands {
		switch {
		case b.FromS < 0 || b.ToS <= b.FromS:
			return fmt.Errorf("band %d: horizon [%gs, %gs) is empty or negative", i+1, b.FromS, b.ToS)
		case i > 0 && b.FromS != bands[i-1].ToS:
			return fmt.Errorf("band %d starts at %gs, not where band %d ends (%gs)", i+1, b.FromS, i, bands[i-1].ToS)
		case b.EarlyS > 0 || b.LateS < 0:
			return fmt.Errorf("band %d: error band [%gs, %gs] must hold 0", i+1, b.EarlyS, b.LateS)
		}
	}
	return nil
}

// Query says which predictions to score.
type Query struct {
	Pipeline  string
	Dimension string   // aggregate.DimLine, DimStation, DimOperator or DimNetwork
	IDs       []string // dimension ids to keep; nil: every id
	// From and To bound the visits by realized arrival: From <= arrival < To.
	From, To  time.Time
	Bands     []Band    // nil: Benchmark
	Quantiles []float64 // of the error, each in [0, 1]
	// RealizedWithinS: a visit counts when its last prediction was made
	// at most this many seconds before the arrival it predicts (or after
	// it): the vehicle arrived, the last prediction stands for the
	// arrival. 0: DefaultRealizedWithinS.
	RealizedWithinS float64
}

// DefaultRealizedWithinS is Query.RealizedWithinS when not set: two
// minutes, two polls of a feed that updates every minute.
const DefaultRealizedWithinS = 120

// Validate checks q, and says what is wrong in terms of the flags of
// `ovstream report`.
func (q *Query) Validate() error {
	if err := rollup.ValidateSelection(q.Pipeline, q.Dimension, q.From, q.To, q.Quantiles); err != nil {
		return err
	}
	if q.Bands != nil {
		if err := validateBands(q.Bands); err != nil {
			return fmt.Errorf("--bands: %w", err)
		}
	}
	if q.RealizedWithinS < 0 {
		return fmt.Errorf("realized within %gs: not positive", q.RealizedWithinS)
	}
	return nil
}

// Row is one id's predictions in one horizon bucket (Band, the Bucket-th
// of the query's, from 1).
type Row struct {
	ID                    string
	Bucket                int
	Band                  Band
	Predictions, Accurate int64
	Accuracy              float64   // Accurate / Predictions
	MeanErrorS            float64   // seconds
	ErrorQuantiles        []float64 // seconds, one per Query.Quantiles
}

// Overall is the benchmark's single number for one id: the unweighted mean
// of the Accuracy of its Buckets buckets that have predictions.
type Overall struct {
	ID       string
	Accuracy float64
	Buckets  int
}

// Result is what Run read: Rows ordered by id and bucket, Overall by id.
type Result struct {
	Rows    []Row
	Overall []Overall
}

// Run reads the accuracy q asks for from db with ovs_accuracy. Errors:
// q's Validate, or the failing query, wrapped.
func Run(ctx context.Context, db rollup.Querier, q Query) (*Result, error) {
	if err := q.Validate(); err != nil {
		return nil, fmt.Errorf("accuracy: %w", err)
	}
	bands := q.Bands
	if bands == nil {
		bands = Benchmark
	}
	bounds, early, late := []float64{bands[0].FromS}, []float64{}, []float64{}
	for _, b := range bands {
		bounds, early, late = append(bounds, b.ToS), append(early, b.EarlyS), append(late, b.LateS)
	}
	var ids any
	if q.IDs != nil {
		ids = q.IDs
	}
	quantiles := q.Quantiles
	if quantiles == nil {
		quantiles = []float64{}
	}
	rows, err := db.Query(ctx, `
SELECT dimension_id, bucket, horizon_from_s, horizon_to_s, early_s, late_s, predictions, accurate, accuracy,
       mean_error_s, error_quantiles
FROM ovs_accuracy($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`, q.Pipeline, q.Dimension, q.From, q.To, bounds, early, late, quantiles, ids,
		cmp.Or(q.RealizedWithinS, DefaultRealizedWithinS))
	if err != nil {
		return nil, fmt.Errorf("accuracy: %w", err)
	}
	defer rows.Close()
	res := &Result{}
	for rows.Next() {
		var r Row
		if err := rows.Scan(&r.ID, &r.Bucket, &r.Band.FromS, &r.Band.ToS, &r.Band.EarlyS, &r.Band.LateS, &r.Predictions,
			&r.Accurate, &r.Accuracy, &r.MeanErrorS, &r.ErrorQuantiles); err != nil {
			return nil, fmt.Errorf("accuracy: %w", err)
		}
		res.Rows = append(res.Rows, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("accuracy: %w", err)
	}
	res.Overall = overall(res.Rows)
	return res, nil
}

// overall returns the Overall of each id of rows (ordered by id).
func overall(rows []Row) []Overall {
	var out []Overall
	for i := 0; i < len(rows); {
		o := Overall{ID: rows[i].ID}
		sum := 0.0
		for ; i < len(rows) && rows[i].ID == o.ID; i++ {
			sum += rows[i].Accuracy
			o.Buckets++
		}
		o.Accuracy = sum / float64(o.Buckets)
		out = append(out, o)
	}
	return out
}

// minutes formats s seconds for a column name: whole minutes as "3m",
// else seconds ("90s").
func minutes(s float64) string {
	if m := s / 60; m == math.Trunc(m) {
		return fmt.Sprintf("%gm", m)
	}
	return fmt.Sprintf("%gs", s)
}
