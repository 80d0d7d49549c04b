package demo

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ovstream/ovstream/broker/embedded"
	"github.com/ovstream/ovstream/consumer"
	"github.com/ovstream/ovstream/feed/gtfsrt"
	"github.com/ovstream/ovstream/feed/gtfsstatic"
	"github.com/ovstream/ovstream/feed/produce"
	"github.com/ovstream/ovstream/migrations"
	"github.com/ovstream/ovstream/store"
	"github.com/ovstream/ovstream/store/rollup"
)

// Config is what a demo needs beside the bundled samples.
type Config struct {
	DatabaseURL string        // the demo's database (required); migrated up first
	Data        string        // the folder holding the bundled samples (Feed.Dir)
	Lease       time.Duration // the --lease by which an earlier demo's claim is judged when its rows are dropped
	Window      time.Duration // the tumbling window, for the report's busiest window
	// Run runs pipeline over topics (comma-separated) on brokers with
	// --drain, to the end, and returns its summary: the command's wiring of
	// the service (required).
	Run func(ctx context.Context, brokers, pipeline, topics string) (*consumer.Summary, error)
}

// Feed is one bundled sample and the pipeline it goes to.
type Feed struct {
	Dir      string // its folder under Config.Data
	Operator string // the operator of its entities; "" = in the entity ids (OVapi)
	Static   string // the agency's static GTFS feed inside Dir, "" = none
	Pipeline string
	TZ       string // the time zone its dashboard opens in
}

// Pipelines is the prefix of the demo's pipelines, one per bundled
// feed (demo-nl-ovapi, demo-auckland, demo-halifax); each reads topics of its
// own, PIPELINE.arrival_predictions and PIPELINE.vehicle_positions.
const Pipelines = "demo-"

// Feeds are the bundled real samples (testdata/README.md has their
// provenance), each with the pipeline it goes to and the time zone its
// dashboard opens in.
var Feeds = []Feed{
	// OVapi: the operator is in the entity ids.
	{Dir: "nl-ovapi-20141130", Pipeline: Pipelines + "nl-ovapi", TZ: "Europe/Amsterdam"},
	{Dir: "auckland-20160519-peak10min", Operator: "AT", Pipeline: Pipelines + "auckland", TZ: "Pacific/Auckland"}, // Auckland Transport
	// Halifax Transit: trip updates and vehicle positions; its static feed
	// turns the updates that give only a time into delays.
	{Dir: "halifax-20251106", Operator: "HFX", Static: "google_transit_trimmed.zip", Pipeline: Pipelines + "halifax", TZ: "America/Halifax"},
}

// Topics are a demo pipeline's topics and their partitions.
func Topics(pipeline string) (predictions, positions string) {
	return pipeline + ".arrival_predictions", pipeline + ".vehicle_positions"
}

// Run runs the demo as cfg says, printing to w: it starts the embedded
// broker on a free port, applies the migrations, then per bundled feed
// (Feeds) produces it into its pipeline's topics, drops what an earlier demo
// wrote under that pipeline, runs it to the end with cfg.Run and prints what it
// wrote. The error names the feed it happened on.
func Run(ctx context.Context, w io.Writer, cfg Config) error {
	topics := map[string]int32{}
	for _, feed := range Feeds {
		pred, pos := Topics(feed.Pipeline)
		topics[pred], topics[pos] = 6, 3
	}
	b, err := embedded.Start(embedded.Config{Addr: "127.0.0.1:0", Topics: topics})
	if err != nil {
		return err
	}
	defer b.Close()
	fmt.Fprintf(w, "embedded broker on %s: per feed a pipeline and its topics PIPELINE.arrival_predictions (6 partitions) "+
		"and PIPELINE.vehicle_positions (3)\n", b.Addr())
	if err := migrations.Up(ctx, cfg.DatabaseURL); err != nil {
		return err
	}
	st, err := store.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer st.Close(context.Background())
	pool, err := store.ReadPool(cfg.DatabaseURL, "ovstream-demo", time.Minute, 1)
	if err != nil {
		return err
	}
	defer pool.Close()
	for _, feed := range Feeds {
		if err := runFeed(ctx, w, st, pool, cfg, b.Addr(), feed); err != nil {
			return fmt.Errorf("%s: %w", feed.Dir, err)
		}
	}
	return nil
}

// runFeed produces one bundled feed into its pipeline's topics, drops
// what an earlier demo wrote under that pipeline, runs it with --drain and
// prints what it wrote and the on-time performance of its stop visits.
func runFeed(ctx context.Context, w io.Writer, st *store.Store, db rollup.Querier, cfg Config, brokers string, feed Feed) error {
	dir, static, pipeline := feed.Dir, feed.Static, feed.Pipeline
	opt := gtfsrt.Options{Operator: feed.Operator}
	var err error
	if static != "" {
		if opt.Schedule, err = gtfsstatic.Load(filepath.Join(cfg.Data, dir, static)); err != nil {
			return err
		}
	}
	res, err := gtfsrt.Load([]string{filepath.Join(cfg.Data, dir)}, opt)
	if err != nil {
		return err
	}
	pred, pos := Topics(pipeline)
	if _, err := produce.GTFSRT(ctx, produce.Config{Brokers: []string{brokers}, ClientID: "ovstream-demo"}, res,
		produce.Topics{Predictions: pred, Positions: pos}); err != nil {
		return err
	}
	with := ""
	if static != "" {
		with = " with static GTFS " + static
	}
	fmt.Fprintf(w, "\n== pipeline %s: %s%s\nproduced %d predictions, %d positions from %d files (skipped: %s) into %s, %s\n",
		pipeline, dir, with, len(res.Predictions), len(res.Positions), res.Files, res.SkipSummary(), pred, pos)

	// Each demo has a new embedded broker, whose topics have new topic IDs
	// (KIP-516), so the offsets stored before belong to other topics and run
	// would refuse them (docs/runbook.md "Topic recreated"): the pipeline
	// starts afresh and writes the same rows again.
	if err := st.DropPipeline(ctx, pipeline, cfg.Lease); err != nil {
		return err
	}
	sum, err := cfg.Run(ctx, brokers, pipeline, pred+","+pos)
	if err != nil {
		return err
	}
	printSummary(w, sum)
	if err := st.Analyze(ctx); err != nil {
		return err
	}
	r, err := st.Report(ctx, pipeline)
	if err != nil {
		return err
	}
	printReport(w, r, cfg.Window)
	return printOnTime(ctx, w, db, pipeline)
}

// printSummary is run's summary in three lines: what run --drain did,
// and whether every partition's stored offset reached its high water mark
// (else the partitions that did not).
func printSummary(w io.Writer, s *consumer.Summary) {
	fmt.Fprintf(w, "run --drain: %s, %d commits (%d failed, %d resyncs); %d predictions aggregated, %d positions applied, "+
		"%d window rows written; watermark %s\n", s.Elapsed.Round(time.Millisecond), s.Commits, s.CommitFailures, s.Resyncs,
		s.Predictions, s.Positions, s.WindowRows, s.Watermark.UTC().Format(time.RFC3339))
	var behind []string
	var records int64
	for _, tp := range consumer.SortedPartitions(s.Stored) {
		records += s.Stored[tp]
		if s.Stored[tp] != s.HighWater[tp] {
			behind = append(behind, fmt.Sprintf("%s %d (high water %d)", tp, s.Stored[tp], s.HighWater[tp]))
		}
	}
	if len(behind) == 0 {
		fmt.Fprintf(w, "stored offsets (stream_positions): every one of the %d partitions at its high water mark, %d records\n",
			len(s.Stored), records)
		return
	}
	fmt.Fprintf(w, "stored offsets (stream_positions) below the high water mark: %s\n", strings.Join(behind, ", "))
}

// printReport prints what a demo pipeline holds: the rows and events per
// dimension, its dead letters and names, and the ten most delayed lines
// of its busiest window.
func printReport(w io.Writer, r *store.Report, window time.Duration) {
	fmt.Fprintf(w, "delay_aggregates:")
	for _, d := range []string{"line", "station", "operator", "network"} {
		fmt.Fprintf(w, " %s %d rows (%d events);", d, r.Rows[d], r.Events[d])
	}
	fmt.Fprintf(w, " names: %d lines, %d stations\n", r.Names["line"], r.Names["station"])
	for _, reason := range slices.Sorted(maps.Keys(r.DeadLetters)) {
		fmt.Fprintf(w, "  dead letters (%s): %d\n", reason, r.DeadLetters[reason])
	}
	if len(r.TopLines) == 0 {
		return
	}
	fmt.Fprintf(w, "ten most delayed lines of the busiest window [%s, %s), %d events, ranked by P90 as the dashboard:\n",
		r.BusiestWindow.Format(time.RFC3339), r.BusiestWindow.Add(window).Format("15:04:05Z"), r.BusiestCount)
	fmt.Fprintf(w, "  %-28s %-34s %6s %9s %9s %9s\n", "id", "name", "count", "p90 s", "mean s", "max s")
	for _, k := range r.TopLines {
		fmt.Fprintf(w, "  %-28s %-34s %6d %9.1f %9.1f %9.0f\n", k.ID, shorten(cmp.Or(k.Name, "-"), 34), k.Count, k.P90, k.Mean, k.Max)
	}
}

// shorten cuts s to at most n characters, the last one "…" when cut.
func shorten(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
