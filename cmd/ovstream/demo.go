package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ovstream/ovstream/broker/embedded"
	"github.com/ovstream/ovstream/consumer"
	"github.com/ovstream/ovstream/feed/gtfsrt"
	"github.com/ovstream/ovstream/feed/gtfsstatic"
	"github.com/ovstream/ovstream/feed/produce"
	"github.com/ovstream/ovstream/migrations"
	"github.com/ovstream/ovstream/store"
)

func init() { register(newDemoCmd) }

// demoOmits are the run flags demo sets itself (the embedded broker, which
// speaks plaintext only; --drain; --migrate; its pipeline, demo, whose rows
// it drops first: never another pipeline's, whatever OVSTREAM_PIPELINE or a
// config file says) or must not take from the environment or a config file
// (--retention, --dead-letter-retention act on the whole database): they
// are not demo's flags.
var demoOmits = map[string]bool{"brokers": true, "drain": true, "migrate": true, "pipeline": true, "topics": true,
	"retention": true, "dead-letter-retention": true, "kafka-tls": true, "kafka-tls-ca": true,
	"kafka-tls-cert": true, "kafka-tls-key": true, "kafka-tls-server-name": true, "kafka-sasl-mechanism": true,
	"kafka-sasl-user": true, "kafka-sasl-password": true}

// demoDefaults are run flags whose default the demo changes: the sample is
// out of order by up to 294 s, so with 10m no event is late.
var demoDefaults = map[string]string{"allowed-lateness": "10m", "flush-interval": "1s", "log-level": "warn"}

// demoPipelines is the prefix of the demo's pipelines, one per bundled
// feed (demo-nl-ovapi, demo-auckland, demo-halifax); each reads topics of its
// own, PIPELINE.arrival_predictions and PIPELINE.vehicle_positions.
const demoPipelines = "demo-"

func newDemoCmd() *cobra.Command {
	var f runFlags
	var data string
	c := &cobra.Command{Use: "demo", Short: "embedded broker + bundled real sample + run --drain + summary", Args: noArgs,
		Long: "Starts the embedded broker on a free port, produces the bundled real GTFS-realtime sample,\n" +
			"applies migrations, runs with --drain and prints a summary. The flags are run's, with the\n" +
			"demo's defaults. Each bundled feed gets a pipeline and topics of its own (demo-nl-ovapi,\n" +
			"demo-auckland, demo-halifax; earlier rows of these pipelines are dropped first); the broker,\n" +
			"the pipelines, --topics, --drain and --migrate are the demo's own, and it keeps no --retention."}
	all := pflag.NewFlagSet("run", pflag.ContinueOnError)
	f.register(all)
	all.VisitAll(func(fl *pflag.Flag) {
		if demoOmits[fl.Name] {
			return
		}
		if def, ok := demoDefaults[fl.Name]; ok {
			if err := fl.Value.Set(def); err != nil {
				panic(err)
			}
			fl.DefValue = def
		}
		c.Flags().AddFlag(fl)
	})
	c.Flags().StringVar(&data, "data", "testdata", "folder holding the bundled samples")
	c.RunE = run(func(ctx context.Context, stdout, stderr io.Writer, _ []string) int {
		return cmdDemo(ctx, &f, data, stdout, stderr)
	})
	return c
}

// demoFeeds are the bundled real samples (testdata/README.md has their
// provenance), each with the pipeline it goes to and the time zone its
// dashboard opens in.
var demoFeeds = []struct {
	dir, operator string
	static        string // the agency's static GTFS feed inside dir, "" = none
	pipeline, tz  string
}{
	// OVapi: the operator is in the entity ids.
	{"nl-ovapi-20141130", "", "", demoPipelines + "nl-ovapi", "Europe/Amsterdam"},
	{"auckland-20160519-peak10min", "AT", "", demoPipelines + "auckland", "Pacific/Auckland"}, // Auckland Transport
	// Halifax Transit: trip updates and vehicle positions; its static feed
	// turns the updates that give only a time into delays.
	{"halifax-20251106", "HFX", "google_transit_trimmed.zip", demoPipelines + "halifax", "America/Halifax"},
}

// demoTopics are a demo pipeline's topics and their partitions.
func demoTopics(pipeline string) (predictions, positions string) {
	return pipeline + ".arrival_predictions", pipeline + ".vehicle_positions"
}

// cmdDemo runs the demo with the settled flags f and the sample folder data.
func cmdDemo(ctx context.Context, f *runFlags, data string, stdout, stderr io.Writer) int {
	f.drain, f.migrate, f.pipeline = true, true, demoFeeds[0].pipeline
	if err := f.check(); err != nil { // before the broker starts and the sample is produced
		fmt.Fprintln(stderr, "ovstream demo:", err)
		return exitUsage
	}
	stderr = newRedactingWriter(stderr, f.secrets())
	if err := demoDatabase(ctx, f.databaseURL); err != nil { // before anything is produced
		fmt.Fprintln(stderr, "ovstream demo:", err)
		return exitError
	}
	if err := demo(ctx, stdout, stderr, f, data); err != nil {
		fmt.Fprintln(stderr, "ovstream demo:", err)
		return exitError
	}
	return exitOK
}

// demoDatabase connects to the demo's database once, so that a missing
// database or a refused login is said before the broker starts.
func demoDatabase(ctx context.Context, databaseURL string) error {
	st, err := openStore(ctx, databaseURL, 15*time.Second, slog.New(slog.DiscardHandler))
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "3D000" { // invalid_catalog_name
		name := "?"
		if cfg, perr := pgconn.ParseConfig(databaseURL); perr == nil {
			name = cfg.Database
		}
		return fmt.Errorf("database %q does not exist: create it (createdb %s), or unset DATABASE_URL and run "+
			"`bash .ci/postgres.sh`, which creates the default database ovstream", name, name)
	}
	if err != nil {
		return fmt.Errorf("PostgreSQL (DATABASE_URL, else %s): %w", describeDatabase(defaultDatabaseURL), err)
	}
	st.Close(context.Background())
	return nil
}

func demo(ctx context.Context, w, stderr io.Writer, f *runFlags, data string) error {
	topics := map[string]int32{}
	for _, feed := range demoFeeds {
		pred, pos := demoTopics(feed.pipeline)
		topics[pred], topics[pos] = 6, 3
	}
	b, err := embedded.Start(embedded.Config{Addr: "127.0.0.1:0", Topics: topics})
	if err != nil {
		return err
	}
	defer b.Close()
	f.brokers = b.Addr()
	fmt.Fprintf(w, "embedded broker on %s: per feed a pipeline and its topics PIPELINE.arrival_predictions (6 partitions) "+
		"and PIPELINE.vehicle_positions (3)\n", b.Addr())
	log, err := f.logger(stderr)
	if err != nil {
		return err
	}
	if err := migrations.Up(ctx, f.databaseURL); err != nil {
		return err
	}
	st, err := store.Open(ctx, f.databaseURL)
	if err != nil {
		return err
	}
	defer st.Close(context.Background())
	for _, feed := range demoFeeds {
		if err := demoFeed(ctx, w, st, f, log, data, feed.dir, feed.operator, feed.static, feed.pipeline); err != nil {
			return fmt.Errorf("%s: %w", feed.dir, err)
		}
	}
	printDashboardHint(w, os.Args[0], f.databaseURL)
	return nil
}

// demoFeed produces one bundled feed into its pipeline's topics, drops
// what an earlier demo wrote under that pipeline, runs it with --drain and
// prints what it wrote.
func demoFeed(ctx context.Context, w io.Writer, st *store.Store, f *runFlags, log *slog.Logger, data, dir, operator, static, pipeline string) error {
	opt := gtfsrt.Options{Operator: operator}
	var err error
	if static != "" {
		if opt.Schedule, err = gtfsstatic.Load(filepath.Join(data, dir, static)); err != nil {
			return err
		}
	}
	res, err := gtfsrt.Load([]string{filepath.Join(data, dir)}, opt)
	if err != nil {
		return err
	}
	pred, pos := demoTopics(pipeline)
	if _, err := produce.GTFSRT(ctx, produce.Config{Brokers: []string{f.brokers}, ClientID: "ovstream-demo"}, res,
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
	if err := st.DropPipeline(ctx, pipeline, f.lease); err != nil {
		return err
	}
	f.pipeline, f.topics = pipeline, pred+","+pos
	cfg, err := f.config(log)
	if err != nil {
		return err
	}
	sum, err := runService(ctx, f, cfg)
	if err != nil {
		return err
	}
	printDemoSummary(w, sum)
	if err := st.Analyze(ctx); err != nil {
		return err
	}
	r, err := st.Report(ctx, pipeline)
	if err != nil {
		return err
	}
	printReport(w, r, f.window)
	return nil
}

// printDemoSummary is printSummary in three lines: what run --drain did,
// and whether every partition's stored offset reached its high water mark
// (else the partitions that did not).
func printDemoSummary(w io.Writer, s *consumer.Summary) {
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
	for _, reason := range sortedKeys(r.DeadLetters) {
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
