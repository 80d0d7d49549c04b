package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ovstream/ovstream/consumer"
	"github.com/ovstream/ovstream/dashboard"
	"github.com/ovstream/ovstream/demo"
	"github.com/ovstream/ovstream/redact"
	"github.com/ovstream/ovstream/status"
	"github.com/ovstream/ovstream/store"
)

func init() { register(newServeCmd) }

const serveLong = `Serves the dashboard (docs/dashboard.md): per pipeline the network delay over time
(mean, P50, P90), the most delayed lines and stations of a day, one line's delay by
hour of day, and the pipeline's health (lag, watermark, merge lag, dead letters, last
commit). Every number is an exact rollup of the stored distributions; the pages and
their charting library are in the binary and work offline. --brokers lets the health
page read the lag from Kafka (else it says unknown). Until SIGINT or SIGTERM.`

// serveFlags are the flags of serve.
type serveFlags struct {
	ops              opsFlags
	addr, tz         string
	statementTimeout time.Duration
}

func (f *serveFlags) register(fs *pflag.FlagSet) {
	f.ops.register(fs, false)
	fs.StringVar(&f.addr, "addr", "127.0.0.1:8080", "`host:port` to serve on (port 0: a free port, printed)")
	fs.StringVar(&f.tz, "tz", "UTC", "IANA time `zone` the pages start in, e.g. Pacific/Auckland (each page can change it)")
	fs.DurationVar(&f.statementTimeout, "statement-timeout", dashboard.DefaultStatementTimeout,
		"bound of each database statement of a request (statement_timeout); a request that runs out answers 503")
	fs.StringVar(&f.ops.brokers, "brokers", "", "Kafka bootstrap brokers for the health page's lag, comma-separated host:port (env KAFKA_BROKERS; empty: lag unknown)")
	f.ops.kafka.register(fs)
}

func newServeCmd() *cobra.Command {
	var f serveFlags
	c := &cobra.Command{Use: "serve", Short: "the dashboard in the browser: delay charts, rankings, pipeline health",
		Long: serveLong, Args: noArgs,
		Example: "  ovstream serve --pipeline demo --tz Pacific/Auckland   # then open http://127.0.0.1:8080/"}
	f.register(c.Flags())
	c.RunE = run(func(ctx context.Context, stdout, stderr io.Writer, _ []string) int {
		return cmdServe(ctx, &f, stdout, stderr)
	})
	return c
}

// cmdServe serves the dashboard until the context is cancelled (SIGINT/SIGTERM).
func cmdServe(ctx context.Context, f *serveFlags, stdout, stderr io.Writer) int {
	o := &f.ops
	stdout = redact.NewWriter(stdout, o.secrets())
	stderr = redact.NewWriter(stderr, o.secrets())
	loc, err := dashboard.LoadZone(f.tz)
	if err != nil {
		fmt.Fprintf(stderr, "serve: --tz: %v\n", err)
		return exitUsage
	}
	if _, err := o.kafka.ConsumerConfig(); err != nil {
		fmt.Fprintln(stderr, "serve:", err)
		return exitUsage
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	cfg := dashboard.Config{DatabaseURL: o.databaseURL, Pipeline: o.pipeline, Location: loc, Logger: log,
		StatementTimeout: f.statementTimeout}
	if brokers := splitList(o.brokers); len(brokers) > 0 {
		cfg.Lag = kafkaLag(brokers, &o.kafka)
	}
	dash, err := dashboard.New(cfg)
	if err != nil {
		fmt.Fprintln(stderr, "serve:", err)
		return exitUsage
	}
	defer dash.Close()
	err = store.WaitConnect(ctx, o.connectTimeout, log, "connect to PostgreSQL", dash.Ping)
	if err == nil {
		// Read-only, as everything serve does: a schema behind, dirty or
		// newer is said now, not as a 500 on every request.
		if err = checkSchema(ctx, o.databaseURL, o.connectTimeout, log); err != nil {
			fmt.Fprintln(stderr, "ovstream serve:", err)
			return exitError
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "ovstream serve: PostgreSQL:", err)
		return exitError
	}
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		fmt.Fprintf(stderr, "ovstream serve: --addr %s: %v\n", f.addr, err)
		return exitError
	}
	srv := &http.Server{Handler: dash, ReadHeaderTimeout: 5 * time.Second, WriteTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	fmt.Fprintf(stdout, "dashboard of pipeline %s: http://%s/\n", o.pipeline, ln.Addr())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err = <-done:
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = srv.Shutdown(sctx)
		cancel()
		err = <-done
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(stderr, "ovstream serve:", err)
		return exitError
	}
	return exitOK
}

// kafkaLag reads the lag of a pipeline's partitions as `status` does: its
// own topics' high water marks against the stored consumed positions.
func kafkaLag(brokers []string, k *kafkaFlags) dashboard.LagFunc {
	return func(_ context.Context, pipeline string, st *store.Status) ([]dashboard.PartitionLag, error) {
		sc, err := k.ConsumerConfig()
		if err != nil {
			return nil, err
		}
		rep := status.FromStore(pipeline, st)
		err = kafkaOffsets(rep, brokers, status.PipelineTopics(st), sc)
		out := make([]dashboard.PartitionLag, 0, len(rep.Partitions))
		for _, p := range rep.Partitions {
			out = append(out, dashboard.PartitionLag{Partition: fmt.Sprintf("%s/%d", p.Topic, p.Partition),
				NextOffset: p.NextOffset, HighWater: p.HighWater, Lag: p.Lag, Held: p.Held})
		}
		return out, err
	}
}

// runDashboard is the dashboard `run` serves under /dashboard/ of
// --metrics-addr: the health page of its own pipeline shows the run's own
// health and gauges (reg). Nil with --dashboard=false, or when the database
// URL does not parse (the run then fails on it by itself).
func runDashboard(f *runFlags, cfg consumer.Config, reg prometheus.Gatherer) *dashboard.Handler {
	if !f.dashboard {
		return nil
	}
	dash, err := dashboard.New(dashboard.Config{DatabaseURL: f.databaseURL, Pipeline: cfg.Pipeline, MaxConns: 2,
		QueryTimeout: 25 * time.Second, // within the ops server's WriteTimeout
		Logger:       cfg.Logger, Live: dashboard.RunSource(cfg.Pipeline, cfg.Owner, reg, cfg.Health)})
	if err != nil {
		cfg.Logger.Warn("dashboard disabled", "err", err)
		return nil
	}
	return dash
}

// printDashboardHint tells how to open the dashboard on what the demo
// wrote: the serve command (the database URL without its password) and,
// per feed, the address of its pipeline's page in its time zone.
func printDashboardHint(w io.Writer, binary, databaseURL string) {
	shown := redact.Database(databaseURL)
	fmt.Fprintf(w, "\nthe dashboard of this data (docs/dashboard.md):\n  %s serve --database-url '%s'\n", binary, shown)
	if len(redact.DatabaseSecrets(databaseURL)) > 0 {
		fmt.Fprintln(w, "  (the URL without its password: add it, or set DATABASE_URL and leave out --database-url)")
	}
	fmt.Fprintf(w, "then open in a browser (pages: delay, top, line, ontime, headway, accuracy, health):\n")
	for _, feed := range demo.Feeds {
		q := url.Values{"pipeline": {feed.Pipeline}, "tz": {feed.TZ}}
		fmt.Fprintf(w, "  %-28s http://127.0.0.1:8080/?%s\n", feed.Dir, q.Encode())
	}
}
