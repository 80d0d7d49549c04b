package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	_ "time/tzdata" // --tz works where the system has no zoneinfo

	"github.com/ovstream/ovstream/config"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ovstream/ovstream/redact"
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
--metric on-time and headway read the stop visits instead, by arrival_time in [--from, --to)
(--bucket service-day: by start_date): per id, the visits early, on time and late (--on-time
na: 60 s early to 300 s late, crow: 30 s early to 180 s late, or EARLY,LATE seconds; bounds
inclusive), or the gaps between a line's visits at a stop on one service day against the
scheduled ones: average and excess wait, and the wait assessment (docs/analysing.md "On-time
performance and headways"; SQL: ovs_on_time, ovs_headways).
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
	realizedWithin                           time.Duration
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
	fs.StringVar(&f.bands, "bands", "", "--metric accuracy: horizon buckets and their accuracy `bands`, FROM-TO:EARLY..LATE comma-separated (default: the ETA Accuracy Benchmark's, 0-3m:-30s..90s,3m-6m:-1m..2m30s,6m-10m:-1m..3m30s,10m-15m:-1m30s..4m30s)")
	fs.StringVar(&f.onTime, "on-time", "na", "with --metric on-time, on time is `na` (60 s early to 300 s late), crow (30 s early to 180 s late) or EARLY,LATE seconds, bounds inclusive")
	fs.Float64Var(&f.waitTolerance, "wait-tolerance", 0.25, "with --metric headway, the wait assessment's `share` above the scheduled gap")
	fs.DurationVar(&f.realizedWithin, "realized-within", 0, "with --metric on-time, headway or accuracy, count only the visits whose last prediction was made at most this long before their arrival: the vehicle was at the stop, its delay realized (`duration`; 0: every visit for on-time and headway, those not yet realized with a predicted delay; 2m for accuracy)")
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
	config.ZeroMeans(fs, "statement-timeout", "no timeout")
	config.ZeroMeans(fs, "realized-within", "every visit for on-time and headway, those not yet realized with a predicted delay; 2m for accuracy")
}

func newReportCmd() *cobra.Command {
	var f reportFlags
	c := &cobra.Command{Use: "report --from T1 --to T2", Short: "exact rollups of the stored distributions: count, mean, min, max, quantiles per bucket",
		Long: reportLong, Args: noArgs,
		Example: "  ovstream report --from 2016-05-19 --to 2016-05-20 --tz Pacific/Auckland --bucket hour --dimension line --by p90 --top 5\n  ovstream report --metric on-time --on-time crow --from 2025-11-06 --to 2025-11-07 --tz America/Halifax --bucket hour --dimension line --json"}
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
	q := rollup.Query{Pipeline: o.pipeline, Dimension: f.dimension, Location: loc} // what every metric shares
	for _, id := range strings.Split(f.ids, ",") {
		if id = strings.TrimSpace(id); id != "" {
			q.IDs = append(q.IDs, id)
		}
	}
	if q.From, err = rollup.ParseTime(f.from, loc); err != nil {
		return usageErr(fmt.Errorf("--from: %v", err))
	}
	if q.To, err = rollup.ParseTime(f.to, loc); err != nil {
		return usageErr(fmt.Errorf("--to: %v", err))
	}
	f.fs.Visit(func(fl *pflag.Flag) {
		if ms := metricOnly[fl.Name]; ms != nil && !slices.Contains(ms, f.metric) && err == nil {
			err = fmt.Errorf("--%s applies to --metric %s only", fl.Name, strings.Join(ms, " or "))
		}
	})
	if err != nil {
		return usageErr(err)
	}
	// Each metric returns the query that reads its rows and writes them.
	var report func(context.Context, rollup.Querier) (func(io.Writer) error, error)
	switch f.metric {
	case "delay":
		report, err = delayReport(f, q)
	case string(visitstats.OnTime), string(visitstats.Headway):
		report, err = visitReport(f, q)
	case "accuracy":
		report, err = accuracyReport(f, q)
	default:
		err = fmt.Errorf("--metric %q: want delay, on-time, headway or accuracy", f.metric)
	}
	if err != nil {
		return usageErr(err)
	}
	pool, code := o.readPool(ctx, stderr, "report", f.statementTimeout)
	if code != exitOK {
		return code
	}
	defer pool.Close()
	write, err := report(ctx, pool)
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

// metricOnly names the metrics of each flag that applies to some only.
var metricOnly = map[string][]string{"quantiles": {"delay", "accuracy"}, "min-events": {"delay"}, "by": {"delay"},
	"top": {"delay"}, "include-open": {"delay"}, "on-time": {"on-time"}, "wait-tolerance": {"headway"},
	"bucket": {"delay", "on-time", "headway"}, "bands": {"accuracy"},
	"realized-within": {"on-time", "headway", "accuracy"}}

// delayReport is --metric delay: the rollups of the windows' distributions.
func delayReport(f *reportFlags, q rollup.Query) (func(context.Context, rollup.Querier) (func(io.Writer) error, error), error) {
	q.MinEvents, q.By, q.Top, q.IncludeOpen = f.minEvents, f.by, f.top, f.includeOpen
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
	write := rollup.Pick(f.json, f.csv, rollup.WriteTable, rollup.WriteJSON, rollup.WriteCSV)
	return func(ctx context.Context, db rollup.Querier) (func(io.Writer) error, error) {
		res, err := rollup.Run(ctx, db, q)
		return func(w io.Writer) error { return write(w, q, res) }, err
	}, nil
}

// visitReport is --metric on-time and headway: the KPIs of the stop visits.
func visitReport(f *reportFlags, r rollup.Query) (func(context.Context, rollup.Querier) (func(io.Writer) error, error), error) {
	q := visitstats.Query{Metric: visitstats.Metric(f.metric), Pipeline: r.Pipeline, Dimension: r.Dimension, IDs: r.IDs,
		From: r.From, To: r.To, Location: r.Location, WaitTolerance: f.waitTolerance, RealizedWithinS: f.realizedWithin.Seconds()}
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
	write := rollup.Pick(f.json, f.csv, visitstats.WriteTable, visitstats.WriteJSON, visitstats.WriteCSV)
	return func(ctx context.Context, db rollup.Querier) (func(io.Writer) error, error) {
		rows, err := visitstats.Run(ctx, db, q)
		return func(w io.Writer) error { return write(w, q, rows) }, err
	}, nil
}

// accuracyReport is --metric accuracy: the predictions' accuracy by horizon.
func accuracyReport(f *reportFlags, r rollup.Query) (func(context.Context, rollup.Querier) (func(io.Writer) error, error), error) {
	bands, err := accuracy.ParseBands(f.bands)
	if err != nil {
		return nil, fmt.Errorf("--bands: %w", err)
	}
	q := accuracy.Query{Pipeline: r.Pipeline, Dimension: r.Dimension, IDs: r.IDs, From: r.From, To: r.To, Bands: bands,
		RealizedWithinS: f.realizedWithin.Seconds()}
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
