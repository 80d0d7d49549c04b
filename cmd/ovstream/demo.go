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
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ovstream/ovstream/broker/embedded"
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
var demoOmits = map[string]bool{"brokers": true, "drain": true, "migrate": true, "pipeline": true,
	"retention": true, "dead-letter-retention": true, "kafka-tls": true, "kafka-tls-ca": true,
	"kafka-tls-cert": true, "kafka-tls-key": true, "kafka-tls-server-name": true, "kafka-sasl-mechanism": true,
	"kafka-sasl-user": true, "kafka-sasl-password": true}

// demoDefaults are run flags whose default the demo changes: the sample is
// out of order by up to 294 s, so with 10m no event is late.
var demoDefaults = map[string]string{"allowed-lateness": "10m", "flush-interval": "1s", "log-level": "warn"}

// demoPipeline is the demo's pipeline.
const demoPipeline = "demo"

func newDemoCmd() *cobra.Command {
	var f runFlags
	var data string
	c := &cobra.Command{Use: "demo", Short: "embedded broker + bundled real sample + run --drain + summary", Args: noArgs,
		Long: "Starts the embedded broker on a free port, produces the bundled real GTFS-realtime sample,\n" +
			"applies migrations, runs with --drain and prints a summary. The flags are run's, with the\n" +
			"demo's defaults; the broker, the pipeline (demo, whose earlier rows it drops first), --drain\n" +
			"and --migrate are the demo's own, and it keeps no --retention."}
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

// demoFeeds are the bundled real samples (testdata/README.md has their provenance).
var demoFeeds = []struct {
	dir, operator string
	static        string // the agency's static GTFS feed inside dir, "" = none
}{
	{"nl-ovapi-20141130", "", ""},             // OVapi: the operator is in the entity ids
	{"auckland-20160519-peak10min", "AT", ""}, // Auckland Transport
	// Halifax Transit: trip updates and vehicle positions; its static feed
	// turns the updates that give only a time into delays.
	{"halifax-20251106", "HFX", "google_transit_trimmed.zip"},
}

// cmdDemo runs the demo with the settled flags f and the sample folder data.
func cmdDemo(ctx context.Context, f *runFlags, data string, stdout, stderr io.Writer) int {
	f.drain, f.migrate, f.pipeline = true, true, demoPipeline
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
	b, err := embedded.Start(embedded.Config{Addr: "127.0.0.1:0",
		Topics: map[string]int32{"arrival_predictions": 6, "vehicle_positions": 3}})
	if err != nil {
		return err
	}
	defer b.Close()
	f.brokers = b.Addr()
	fmt.Fprintf(w, "embedded broker on %s (arrival_predictions: 6 partitions, vehicle_positions: 3)\n", b.Addr())

	var predictions int
	for _, feed := range demoFeeds {
		opt := gtfsrt.Options{Operator: feed.operator}
		if feed.static != "" {
			if opt.Schedule, err = gtfsstatic.Load(filepath.Join(data, feed.dir, feed.static)); err != nil {
				return err
			}
		}
		res, err := gtfsrt.Load([]string{filepath.Join(data, feed.dir)}, opt)
		if err != nil {
			return err
		}
		if err := produceResult(ctx, []string{b.Addr()}, res); err != nil {
			return err
		}
		predictions += len(res.Predictions)
		with := ""
		if feed.static != "" {
			with = " with static GTFS " + feed.static
		}
		fmt.Fprintf(w, "produced %s%s: %d predictions, %d positions from %d files (skipped: %s)\n",
			feed.dir, with, len(res.Predictions), len(res.Positions), res.Files, res.SkipSummary())
	}

	log, err := f.logger(stderr)
	if err != nil {
		return err
	}
	cfg, err := f.config(log)
	if err != nil {
		return err
	}
	if err := migrations.Up(ctx, f.databaseURL); err != nil {
		return err
	}
	if err := demoAfresh(ctx, w, f); err != nil {
		return err
	}
	sum, err := runService(ctx, f, cfg)
	if err != nil {
		return err
	}
	printSummary(w, sum)

	st, err := store.Open(ctx, f.databaseURL)
	if err != nil {
		return err
	}
	defer st.Close(context.Background())
	if err := st.Analyze(ctx); err != nil {
		return err
	}
	r, err := st.Report(ctx, f.pipeline)
	if err != nil {
		return err
	}
	printReport(w, r, predictions, f.window)
	printDashboardHint(w, os.Args[0], f.databaseURL, f.pipeline)
	return nil
}

// demoAfresh drops what an earlier demo wrote under its pipeline: each demo
// has a new embedded broker, whose topics have new topic IDs (KIP-516), so
// the offsets stored before belong to other topics and run would refuse them
// (README "Topic recreated"). The demo then writes the same table again.
func demoAfresh(ctx context.Context, w io.Writer, f *runFlags) error {
	st, err := store.Open(ctx, f.databaseURL)
	if err != nil {
		return err
	}
	defer st.Close(context.Background())
	if err := st.DropPipeline(ctx, f.pipeline, f.lease); err != nil {
		return err
	}
	fmt.Fprintf(w, "pipeline %s: rows of earlier demos dropped (the embedded broker is new each time)\n", f.pipeline)
	return nil
}

func printReport(w io.Writer, r *store.Report, produced int, window time.Duration) {
	fmt.Fprintf(w, "\ndelay_aggregates (database, all runs so far):\n")
	for _, d := range []string{"line", "station", "operator", "network"} {
		fmt.Fprintf(w, "  %-9s %7d rows, %8d events\n", d, r.Rows[d], r.Events[d])
	}
	fmt.Fprintf(w, "  predictions produced by this demo: %d\n", produced)
	for _, reason := range sortedKeys(r.DeadLetters) {
		fmt.Fprintf(w, "  dead letters (%s): %d\n", reason, r.DeadLetters[reason])
	}
	fmt.Fprintf(w, "  names (table names): %d lines, %d stations\n", r.Names["line"], r.Names["station"])
	for _, top := range []struct {
		what   string
		window time.Time
		count  int64
		rows   []store.Ranked
	}{
		{"lines of the busiest window", r.BusiestWindow, r.BusiestCount, r.TopLines},
		{"stations of the busiest window", r.BusiestWindow, r.BusiestCount, r.TopStations},
		{"named lines of the busiest window with names", r.NamedWindow, r.NamedCount, r.TopNamedLines},
		{"named stations of that window", r.NamedWindow, r.NamedCount, r.TopNamedStations},
	} {
		if len(top.rows) == 0 {
			continue
		}
		fmt.Fprintf(w, "\nten most delayed %s [%s, %s), %d events:\n",
			top.what, top.window.Format(time.RFC3339), top.window.Add(window).Format("15:04:05Z"), top.count)
		fmt.Fprintf(w, "  %-28s %-34s %6s %9s %9s %9s\n", "id", "name", "count", "mean s", "p90 s", "max s")
		for _, k := range top.rows {
			fmt.Fprintf(w, "  %-28s %-34s %6d %9.1f %9.1f %9.0f\n", k.ID, shorten(cmp.Or(k.Name, "-"), 34), k.Count, k.Mean, k.P90, k.Max)
		}
	}
	fmt.Fprintf(w, "\nstored offsets (stream_positions):\n")
	for _, p := range r.Positions {
		fmt.Fprintf(w, "  %-24s next %6d  consumed %6d  updated %s\n", p.PartitionID.String(), p.NextOffset, p.ConsumedOffset,
			p.UpdatedAt.Format(time.RFC3339))
	}
}

// shorten cuts s to at most n characters, the last one "…" when cut.
func shorten(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func produceResult(ctx context.Context, brokers []string, res *gtfsrt.Result) error {
	_, err := produce.GTFSRT(ctx, produce.Config{Brokers: brokers, ClientID: "ovstream-demo"}, res,
		produce.Topics{Predictions: "arrival_predictions", Positions: "vehicle_positions"})
	return err
}
