package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ovstream/ovstream/consumer"
	"github.com/ovstream/ovstream/demo"
	"github.com/ovstream/ovstream/redact"
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

// cmdDemo runs the demo with the settled flags f and the sample folder data.
func cmdDemo(ctx context.Context, f *runFlags, data string, stdout, stderr io.Writer) int {
	f.drain, f.migrate, f.pipeline = true, true, demo.Feeds[0].Pipeline
	if err := f.check(); err != nil { // before the broker starts and the sample is produced
		fmt.Fprintln(stderr, "ovstream demo:", err)
		return exitUsage
	}
	stderr = redact.NewWriter(stderr, f.secrets())
	if err := demoDatabase(ctx, f.databaseURL); err != nil { // before anything is produced
		fmt.Fprintln(stderr, "ovstream demo:", err)
		return exitError
	}
	if err := runDemo(ctx, stdout, stderr, f, data); err != nil {
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
		return fmt.Errorf("PostgreSQL (DATABASE_URL, else %s): %w", redact.Database(defaultDatabaseURL), err)
	}
	st.Close(context.Background())
	return nil
}

// runDemo is demo.Run with f's settings: each feed's pipeline runs as `run
// --drain` would, logging to stderr; then the dashboard hint.
func runDemo(ctx context.Context, stdout, stderr io.Writer, f *runFlags, data string) error {
	log, err := f.logger(stderr)
	if err != nil {
		return err
	}
	err = demo.Run(ctx, stdout, demo.Config{DatabaseURL: f.databaseURL, Data: data, Lease: f.lease, Window: f.window,
		Run: func(ctx context.Context, brokers, pipeline, topics string) (*consumer.Summary, error) {
			f.brokers, f.pipeline, f.topics = brokers, pipeline, topics
			cfg, err := f.config(log)
			if err != nil {
				return nil, err
			}
			return runService(ctx, f, cfg)
		}})
	if err != nil {
		return err
	}
	printDashboardHint(stdout, os.Args[0], f.databaseURL)
	return nil
}
