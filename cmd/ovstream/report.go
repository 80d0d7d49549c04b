package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
	_ "time/tzdata" // --tz works where the system has no zoneinfo

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/store/rollup"
)

func init() {
	register("report", "exact rollups of the stored distributions: count, mean, min, max, quantiles per bucket", cmdReport)
}

const reportUsage = `usage: ovstream report --from T1 --to T2 [--pipeline P] [--dimension line|station|operator|network]
         [--ids A,B] [--bucket all|hour|day|week|month|year|DURATION] [--tz ZONE]
         [--quantiles 0.5,0.9,0.99] [--min-events N] [--by p90 [--top N]] [--json|--csv]

Per bucket and dimension id, the count, mean, min, max and quantiles of the events of
the finalized windows whose window_start is in [--from, --to), merged exactly from the
distributions stored with each row: the numbers percentile_cont, avg, min and max give
over the events themselves (README.md "Analysing the numbers"; SQL: ovs_rollup).
Buckets hour, day, week (from Monday), month and year are calendar buckets in --tz; a
duration (15m, 6h) gives fixed bins from --from; all (the default) one bucket. --from
and --to take RFC 3339 or a local date and time in --tz (2016-05-19, 2016-05-19T07:30).
--by orders each bucket's rows, greatest first: events, mean, min, max or a quantile
(p90 for 0.9); --top keeps the first N. The table rounds to 0.1 s; --json and --csv are exact.

flags:`

func cmdReport(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	var o opsFlags
	o.register(fs, false)
	dimension := fs.String("dimension", "line", "`dimension`: line, station, operator or network")
	ids := fs.String("ids", "", "only these dimension `ids`, comma-separated (default: all)")
	from := fs.String("from", "", "start of the range, inclusive (`time`; required)")
	to := fs.String("to", "", "end of the range, exclusive (`time`; required)")
	bucket := fs.String("bucket", "all", "`bucket`: all, hour, day, week, month, year, or a duration such as 15m")
	tz := fs.String("tz", "UTC", "IANA time `zone` of calendar buckets, local times and the output, e.g. Pacific/Auckland")
	quantiles := fs.String("quantiles", "0.5,0.9,0.99", "comma-separated `quantiles` in [0, 1]")
	minEvents := fs.Int64("min-events", 1, "leave out groups with fewer than `N` events")
	by := fs.String("by", "", "order each bucket's rows by this `statistic`, greatest first: events, mean, min, max or pNN")
	top := fs.Int("top", 0, "keep the first `N` rows of each bucket in --by order (0: all)")
	asJSON := fs.Bool("json", false, "print JSON (exact)")
	asCSV := fs.Bool("csv", false, "print CSV (exact)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), reportUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	stdout := newRedactingWriter(os.Stdout, o.secrets())
	stderr := newRedactingWriter(os.Stderr, o.secrets())
	usageErr := func(err error) int {
		fmt.Fprintln(stderr, "report:", err)
		return exitUsage
	}
	if fs.NArg() > 0 {
		return usageErr(fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	if *asJSON && *asCSV {
		return usageErr(errors.New("--json and --csv: choose one"))
	}
	if *from == "" || *to == "" {
		return usageErr(errors.New("--from and --to are required"))
	}
	loc, err := time.LoadLocation(*tz)
	if err != nil {
		return usageErr(fmt.Errorf("--tz %q: %v", *tz, err))
	}
	q := rollup.Query{Pipeline: o.pipeline, Dimension: *dimension, Location: loc, MinEvents: *minEvents, By: *by, Top: *top}
	for _, id := range strings.Split(*ids, ",") {
		if id = strings.TrimSpace(id); id != "" {
			q.IDs = append(q.IDs, id)
		}
	}
	if q.From, err = rollup.ParseTime(*from, loc); err != nil {
		return usageErr(fmt.Errorf("--from: %v", err))
	}
	if q.To, err = rollup.ParseTime(*to, loc); err != nil {
		return usageErr(fmt.Errorf("--to: %v", err))
	}
	if q.Bucket, err = rollup.ParseBucket(*bucket); err != nil {
		return usageErr(fmt.Errorf("--bucket: %v", err))
	}
	if q.Quantiles, err = rollup.ParseQuantiles(*quantiles); err != nil {
		return usageErr(fmt.Errorf("--quantiles: %v", err))
	}
	if err := q.Validate(); err != nil {
		return usageErr(err)
	}
	st, err := openStoreQuick(ctx, o.databaseURL)
	if err != nil {
		fmt.Fprintln(stderr, "ovstream report:", err)
		return exitError
	}
	defer st.Close(context.Background())
	var res *rollup.Result
	err = st.Read(ctx, func(c *pgx.Conn) error {
		res, err = rollup.Run(ctx, c, q)
		return err
	})
	if err != nil {
		fmt.Fprintln(stderr, "ovstream report:", err)
		return exitError
	}
	write := rollup.WriteTable
	switch {
	case *asJSON:
		write = rollup.WriteJSON
	case *asCSV:
		write = rollup.WriteCSV
	}
	if err := write(stdout, q, res); err != nil {
		fmt.Fprintln(stderr, "ovstream report:", err)
		return exitError
	}
	return exitOK
}
