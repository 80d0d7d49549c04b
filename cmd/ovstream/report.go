package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	_ "time/tzdata" // --tz works where the system has no zoneinfo

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ovstream/ovstream/redact"
	"github.com/ovstream/ovstream/store"
	"github.com/ovstream/ovstream/store/accuracy"
	"github.com/ovstream/ovstream/store/rollup"
	"github.com/ovstream/ovstream/store/visitstats"
)

func init() { register(newReportCmd) }

const reportLong = `Per bucket and dimension id, the count, mean, min, max and quantiles of the events of
the finalized windows whose window_start is in [--from, --to), merged exactly from the
distributions stored with each row: the numbers percentile_cont, avg, min and max give
over the events themselves (docs/analysing.md; SQL: ovs_rollup).
Buckets hour, day, week (from Monday), month and year are calendar buckets in --tz; a
duration (15m, 6h) gives fixed bins from --from; all (the default) one bucket. --from
and --to take RFC 3339 or a local date and time in --tz (2016-05-19, 2016-05-19T07:30).
--by orders each bucket's rows, greatest first: events, mean, min, max or a quantile
(p90 for 0.9); --top keeps the first N. --include-open adds the provisional rows of the
windows not yet final, with a column final (docs/windows.md "Provisional rows"). The table rounds to 0.1 s; --json and --csv are exact.
In CSV, an id or name starting with =, +, -, @, a tab or a carriage return is written with a
leading ' so that a spreadsheet shows it as text and never runs it as a formula; numbers
are written as they are.
--metric accuracy prints instead the accuracy of the predictions by horizon (SQL:
ovs_accuracy; docs/analysing.md "Prediction accuracy by horizon"): per id and horizon
bucket of --bands (default: the ETA Accuracy Benchmark's), the predictions of the stop
visits whose realized arrival is in [--from, --to), how many were accurate, the share, the
mean and --quantiles of the error, and the mean of the buckets' shares per id.`

// reportFlags are the flags of report.
type reportFlags struct {
	ops                                      opsFlags
	fs                                       *pflag.FlagSet
	metric, onTime, bands                    string
	waitTolerance                            float64
	dimension, ids, from, to, bucket, tz, by string
	quantiles                                string
	minEvents                                int64
	top                                      int
	json, csv, includeOpen                   bool
	statementTimeout                         time.Duration
}

func (f *reportFlags) register(fs *pflag.FlagSet) {
	f.ops.register(fs, false)
	f.fs = fs
	fs.StringVar(&f.metric, "metric", "delay", "`metric`: delay (the windows' distributions), on-time or headway (the stop visits), or accuracy (the predictions' accuracy by horizon, docs/analysing.md)")
	fs.StringVar(&f.onTime, "on-time", "na", "with --metric on-time, on time is `na` (60 s early to 300 s late), crow (30 s early to 180 s late) or EARLY,LATE seconds, bounds inclusive")
	fs.Float64Var(&f.waitTolerance, "wait-tolerance", 0.25, "with --metric headway, the wait assessment's `share` above the scheduled gap")
	fs.StringVar(&f.bands, "bands", "", "--metric accuracy: horizon buckets and their accuracy `bands`, FROM-TO:EARLY..LATE comma-separated (default: the ETA Accuracy Benchmark's, 0-3m:-30s..90s,3m-6m:-1m..2m30s,6m-10m:-1m..3m30s,10m-15m:-1m30s..4m30s)")
	fs.StringVar(&f.dimension, "dimension", "line", "`dimension`: line, station, operator or network")
	fs.StringVar(&f.ids, "ids", "", "only these dimension `ids`, comma-separated (default: all)")
	fs.StringVar(&f.from, "from", "", "start of the range, inclusive (`time`; required)")
	fs.StringVar(&f.to, "to", "", "end of the range, exclusive (`time`; required)")
	fs.StringVar(&f.bucket, "bucket", "all", "`bucket`: all, hour, day, week, month, year, a duration such as 15m, or (on-time, headway) service-day")
	fs.StringVar(&f.tz, "tz", "UTC", "IANA time `zone` of calendar buckets, local times and the output, e.g. Pacific/Auckland")
	fs.StringVar(&f.quantiles, "quantiles", "0.5,0.9,0.99", "comma-separated `quantiles` in [0, 1]")
	fs.Int64Var(&f.minEvents, "min-events", 1, "leave out groups with fewer than `N` events")
	fs.StringVar(&f.by, "by", "", "order each bucket's rows by this `statistic`, greatest first: events, mean, min, max or pNN")
	fs.IntVar(&f.top, "top", 0, "keep the first `N` rows of each bucket in --by order (0: all)")
	fs.BoolVar(&f.includeOpen, "include-open", false, "also read the provisional rows of the windows not yet final (view delay_aggregates_live); each row says whether it is final")
	fs.BoolVar(&f.json, "json", false, "print JSON (exact)")
	fs.BoolVar(&f.csv, "csv", false, "print CSV (exact; text starting with = + - @ tab or CR gets a leading ')")
	fs.DurationVar(&f.statementTimeout, "statement-timeout", time.Minute, "bound of each database statement (statement_timeout; 0: none)")
	zeroMeans(fs, "statement-timeout", "no timeout")
}

func newReportCmd() *cobra.Command {
	var f reportFlags
	c := &cobra.Command{Use: "report --from T1 --to T2", Short: "exact rollups of the stored distributions: count, mean, min, max, quantiles per bucket",
		Long: reportLong, Args: noArgs,
		Example: "  ovstream report --from 2016-05-19 --to 2016-05-20 --tz Pacific/Auckland --bucket hour --dimension line --by p90 --top 5"}
	f.register(c.Flags())
	c.RunE = run(func(ctx context.Context, stdout, stderr io.Writer, _ []string) int {
		return cmdReport(ctx, &f, stdout, stderr)
	})
	return c
}

func cmdReport(ctx context.Context, f *reportFlags, stdout, stderr io.Writer) int {
	o := &f.ops
	stdout = redact.NewWriter(stdout, o.secrets())
	stderr = redact.NewWriter(stderr, o.secrets())
	usageErr := func(err error) int {
		fmt.Fprintln(stderr, "report:", err)
		return exitUsage
	}
	if f.json && f.csv {
		return usageErr(errors.New("--json and --csv: choose one"))
	}
	if f.from == "" || f.to == "" {
		return usageErr(errors.New("--from and --to are required"))
	}
	loc, err := time.LoadLocation(f.tz)
	if err != nil {
		return usageErr(fmt.Errorf("--tz %q: %v", f.tz, err))
	}
	var ids []string
	for _, id := range strings.Split(f.ids, ",") {
		if id = strings.TrimSpace(id); id != "" {
			ids = append(ids, id)
		}
	}
	var from, to time.Time
	if from, err = rollup.ParseTime(f.from, loc); err != nil {
		return usageErr(fmt.Errorf("--from: %v", err))
	}
	if to, err = rollup.ParseTime(f.to, loc); err != nil {
		return usageErr(fmt.Errorf("--to: %v", err))
	}
	// Each metric returns the query that reads its rows and writes them.
	var report func(context.Context, rollup.Querier) (func(io.Writer) error, error)
	switch f.metric {
	case "delay":
		report, err = delayReport(f, loc, ids, from, to)
	case string(visitstats.OnTime), string(visitstats.Headway):
		report, err = visitReport(f, loc, ids, from, to)
	case "accuracy":
		report, err = accuracyReport(f, ids, from, to)
	default:
		err = fmt.Errorf("--metric %q: want delay, on-time, headway or accuracy", f.metric)
	}
	if err != nil {
		return usageErr(err)
	}
	st, err := o.openChecked(ctx, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "ovstream report:", err)
		return exitError
	}
	st.Close(context.Background()) // the schema is checked: the queries run on a read pool of one session
	pool, err := store.ReadPool(o.databaseURL, "ovstream-report", f.statementTimeout, 1)
	if err != nil {
		fmt.Fprintln(stderr, "ovstream report:", err)
		return exitError
	}
	defer pool.Close()
	err = store.CheckPipelineKnown(ctx, pool, o.pipeline)
	if store.IsUnknownPipeline(err) {
		return pipelineUnknown(stderr, "report", err)
	}
	var write func(io.Writer) error
	if err == nil {
		write, err = report(ctx, pool)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "57014" && ctx.Err() == nil {
		err = fmt.Errorf("%w: the query ran longer than --statement-timeout %s (a shorter range, or a larger timeout)", err, f.statementTimeout)
	}
	if err != nil {
		fmt.Fprintln(stderr, "ovstream report:", err)
		return exitError
	}
	if err := write(stdout); err != nil {
		fmt.Fprintln(stderr, "ovstream report:", err)
		return exitError
	}
	return exitOK
}

// onlyFor returns an error naming the first of flags given on the command
// line, which apply to --metric metric only.
func (f *reportFlags) onlyFor(metric string, flags ...string) error {
	for _, name := range flags {
		if f.fs.Changed(name) {
			return fmt.Errorf("--%s applies to --metric %s only", name, metric)
		}
	}
	return nil
}

// pick returns the writer of the output format asked for.
func pick[Q, R any](f *reportFlags, table, json, csv func(io.Writer, Q, R) error) func(io.Writer, Q, R) error {
	switch {
	case f.json:
		return json
	case f.csv:
		return csv
	}
	return table
}

// delayReport is --metric delay: the rollups of the windows' distributions.
func delayReport(f *reportFlags, loc *time.Location, ids []string, from, to time.Time) (func(context.Context, rollup.Querier) (func(io.Writer) error, error), error) {
	if err := f.onlyFor("on-time or headway", "on-time", "wait-tolerance"); err != nil {
		return nil, err
	}
	if err := f.onlyFor("accuracy", "bands"); err != nil {
		return nil, err
	}
	q := rollup.Query{Pipeline: f.ops.pipeline, Dimension: f.dimension, IDs: ids, From: from, To: to, Location: loc,
		MinEvents: f.minEvents, By: f.by, Top: f.top, IncludeOpen: f.includeOpen}
	var err error
	if q.Bucket, err = rollup.ParseBucket(f.bucket); err != nil {
		return nil, fmt.Errorf("--bucket: %v", err)
	}
	if q.Quantiles, err = rollup.ParseQuantiles(f.quantiles); err != nil {
		return nil, fmt.Errorf("--quantiles: %v", err)
	}
	if err := q.Validate(); err != nil {
		return nil, err
	}
	write := pick(f, rollup.WriteTable, rollup.WriteJSON, rollup.WriteCSV)
	return func(ctx context.Context, db rollup.Querier) (func(io.Writer) error, error) {
		res, err := rollup.Run(ctx, db, q)
		return func(w io.Writer) error { return write(w, q, res) }, err
	}, nil
}

// visitReport is --metric on-time and headway: the KPIs of the stop visits.
func visitReport(f *reportFlags, loc *time.Location, ids []string, from, to time.Time) (func(context.Context, rollup.Querier) (func(io.Writer) error, error), error) {
	if err := f.onlyFor("delay", "quantiles", "min-events", "by", "top", "include-open"); err != nil {
		return nil, err
	}
	if err := f.onlyFor("accuracy", "bands"); err != nil {
		return nil, err
	}
	q := visitstats.Query{Metric: visitstats.Metric(f.metric), Pipeline: f.ops.pipeline, Dimension: f.dimension, IDs: ids,
		From: from, To: to, Location: loc, WaitTolerance: f.waitTolerance}
	var err error
	if q.Bucket, q.ServiceDay, err = visitstats.ParseBucket(f.bucket); err != nil {
		return nil, fmt.Errorf("--bucket: %v", err)
	}
	if q.OnTime, err = visitstats.ParseOnTime(f.onTime); err != nil {
		return nil, fmt.Errorf("--on-time: %v", err)
	}
	if err := q.Validate(); err != nil {
		return nil, err
	}
	write := pick(f, visitstats.WriteTable, visitstats.WriteJSON, visitstats.WriteCSV)
	return func(ctx context.Context, db rollup.Querier) (func(io.Writer) error, error) {
		rows, err := visitstats.Run(ctx, db, q)
		return func(w io.Writer) error { return write(w, q, rows) }, err
	}, nil
}

// accuracyReport is --metric accuracy: the predictions' accuracy by horizon.
func accuracyReport(f *reportFlags, ids []string, from, to time.Time) (func(context.Context, rollup.Querier) (func(io.Writer) error, error), error) {
	if err := f.onlyFor("delay", "bucket", "min-events", "by", "top", "include-open"); err != nil {
		return nil, err
	}
	if err := f.onlyFor("on-time or headway", "on-time", "wait-tolerance"); err != nil {
		return nil, err
	}
	bands, err := accuracy.ParseBands(f.bands)
	if err != nil {
		return nil, fmt.Errorf("--bands: %w", err)
	}
	q := accuracy.Query{Pipeline: f.ops.pipeline, Dimension: f.dimension, IDs: ids, From: from, To: to, Bands: bands}
	if q.Quantiles, err = rollup.ParseQuantiles(f.quantiles); err != nil {
		return nil, fmt.Errorf("--quantiles: %v", err)
	}
	if err := q.Validate(); err != nil {
		return nil, err
	}
	return func(ctx context.Context, db rollup.Querier) (func(io.Writer) error, error) {
		res, err := accuracy.Run(ctx, db, q)
		return func(w io.Writer) error { return accuracy.Write(w, q, res, f.json, f.csv) }, err
	}, nil
}
