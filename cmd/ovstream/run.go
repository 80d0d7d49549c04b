package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ovstream/ovstream/config"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/consumer"
	"github.com/ovstream/ovstream/consumer/groupoffsets"
	"github.com/ovstream/ovstream/kafkaconn"
	"github.com/ovstream/ovstream/migrations"
	"github.com/ovstream/ovstream/redact"
	"github.com/ovstream/ovstream/status"
	"github.com/ovstream/ovstream/store"
)

func init() { register(newRunCmd) }

func newRunCmd() *cobra.Command {
	var f runFlags
	c := &cobra.Command{Use: "run", Short: "consume Kafka into PostgreSQL: the service", Args: noArgs,
		Long: "The service: reads the topics, writes exact delay statistics per tumbling window, the latest\n" +
			"state, dead letters and the offsets in one PostgreSQL transaction (README.md). Exit 0 on\n" +
			"SIGINT/SIGTERM or a finished --drain, 1 on an error, 2 on bad flags, 3 when fenced by another\n" +
			"instance of the pipeline."}
	f.register(c.Flags())
	c.RunE = run(func(ctx context.Context, stdout, stderr io.Writer, _ []string) int {
		return cmdRun(ctx, &f, stdout, stderr)
	})
	return c
}

// runFlags are the flags of `run`; demo reuses them.
type runFlags struct {
	brokers, databaseURL, pipeline, topics, partitions  string
	window, lateness, idle, skew, flush, connectTimeout time.Duration
	provisional                                         time.Duration
	lease, metadataRefresh, maxDelay                    time.Duration
	startOffset, onOutOfRange                           string
	drain, migrate, idleFinalize, takeover              bool
	logFormat, logLevel                                 string
	metricsAddr                                         string
	dashboard                                           bool
	pprof                                               bool
	kafkaCommitOffsets                                  bool
	maxUncommitted                                      int64
	fetchBytes                                          int
	memoryLimit                                         string
	memoryLimitBytes                                    int64 // set by config
	memoryLimitSet                                      bool  // false: leave GOMEMLIMIT's
	progress                                            time.Duration
	instanceID                                          string
	retention, deadLetterRetention                      string // consumer.ParseAge; "" = off
	kafka                                               kafkaFlags
}

// register defines the flags of run (demo takes most of them, demoOmits).
func (f *runFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.brokers, "brokers", "127.0.0.1:9092", "Kafka bootstrap brokers, comma-separated host:port (env KAFKA_BROKERS)")
	fs.StringVar(&f.databaseURL, "database-url", defaultDatabaseURL, "PostgreSQL URL (env DATABASE_URL)")
	fs.StringVar(&f.pipeline, "pipeline", "ovstream", "pipeline name: key of stream_positions and the fencing epoch")
	fs.StringVar(&f.topics, "topics", "arrival_predictions,vehicle_positions", "PREDICTIONS_TOPIC,POSITIONS_TOPIC (leave one empty to skip it, e.g. 'arrival_predictions,')")
	fs.StringVar(&f.partitions, "partitions", "", "manual assignment TOPIC:N,... (default: every partition of the topics)")
	fs.DurationVar(&f.window, "window", 5*time.Minute, "tumbling window size")
	fs.DurationVar(&f.lateness, "allowed-lateness", 2*time.Minute, "watermark = min over active partitions of their max event time, minus this (0: none)")
	fs.DurationVar(&f.idle, "idle-timeout", 30*time.Second, "a caught-up partition quiet this long stops holding the watermark")
	fs.BoolVar(&f.idleFinalize, "idle-finalize", false, "for live feeds whose event times follow the wall clock: when every partition is idle, the watermark advances to wall clock minus the allowed lateness, so a quiet feed's last window is written (later events for it are late)")
	fs.DurationVar(&f.skew, "max-future-skew", 5*time.Minute, "events later than wall clock + this are dead-lettered (reason future)")
	fs.DurationVar(&f.maxDelay, "max-delay", consumer.DefaultMaxDelay, "predictions whose |delay_s| is larger are dead-lettered (reason implausible: a service-day error, not a delay); 1s to 24h, shared by every instance of the pipeline like --window")
	fs.DurationVar(&f.flush, "flush-interval", 5*time.Second, "time between commits")
	fs.DurationVar(&f.provisional, "provisional-interval", 5*time.Second, "at most this often a commit also writes the provisional rows of the open windows that changed, exact for the records read so far (view delay_aggregates_live; commits run every --flush-interval, and one that finalizes a window writes none; not with --drain; in a split pipeline each instance writes its partitions' share, merged with the others'); 0: none")
	fs.DurationVar(&f.progress, "progress-interval", consumer.DefaultProgressInterval, "time between two progress lines of the log: records/s, lag, watermark, open windows, commits; with --drain the time left (0: none)")
	fs.StringVar(&f.startOffset, "start-offset", "earliest", "where a partition without a stored offset starts: earliest|latest")
	fs.StringVar(&f.onOutOfRange, "on-offset-out-of-range", "fail", "a stored offset outside [log start, high water], a position the broker lost while running, a recreated topic (another topic ID), or a log truncated below the position (KIP-320 leader epoch check): fail|earliest|latest")
	fs.DurationVar(&f.metadataRefresh, "metadata-refresh", time.Minute, "how often the topics' metadata is read while running: added partitions are found, a recreated topic is detected")
	fs.BoolVar(&f.drain, "drain", false, "stop once every partition reached its high water mark at start; finalize every window; print a summary")
	fs.BoolVar(&f.migrate, "migrate", false, "apply pending migrations before starting")
	fs.DurationVar(&f.lease, "lease", consumer.DefaultLease, "a partition whose owner's heartbeat is younger is held: this instance waits as a standby until it is released or the lease expires (use one lease for all instances of a pipeline)")
	fs.StringVar(&f.instanceID, "instance-id", "", "stable id of this process across restarts (a StatefulSet pod name, a systemd instance name): a restart claims the partitions of its earlier incarnation at once once that process is gone, instead of waiting --lease; give every process its own (empty: none)")
	fs.BoolVar(&f.takeover, "takeover", false, "claim the partitions at once even while a live instance holds them (it is fenced and exits 3)")
	fs.DurationVar(&f.connectTimeout, "connect-timeout", time.Minute, connectTimeoutUsage+"; so are Kafka's brokers: the bootstrap connection and each start-up read")
	fs.StringVar(&f.logFormat, "log-format", "text", "log format: text|json")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug|info|warn|error")
	fs.StringVar(&f.metricsAddr, "metrics-addr", defaultMetricsAddr, "`host:port` serving /metrics, /healthz and /readyz (empty: none; port 0: a free port, logged)")
	fs.BoolVar(&f.dashboard, "dashboard", true, "serve the dashboard under /dashboard/ of --metrics-addr (it has no login: bind --metrics-addr where only operators reach it)")
	fs.BoolVar(&f.pprof, "pprof", false, "also serve the Go runtime's profiles (net/http/pprof) under /debug/pprof/ of --metrics-addr, for go tool pprof http://ADDR/debug/pprof/profile?seconds=20 (they show the process's internals: bind --metrics-addr where only operators reach it)")
	fs.BoolVar(&f.kafkaCommitOffsets, "kafka-commit-offsets", true, "after each database commit, commit the same offsets to the Kafka consumer group named after the pipeline (monitoring only, never read back)")
	fs.Int64Var(&f.maxUncommitted, "max-uncommitted-messages", 2_000_000, "pause fetching while this many consumed records wait for a database commit (bounds memory during an outage)")
	fs.IntVar(&f.fetchBytes, "fetch-bytes", consumer.DefaultFetchBytes, "bytes one Kafka fetch asks for per partition (max.partition.fetch.bytes); larger records are still read")
	fs.StringVar(&f.memoryLimit, "memory-limit", "", "soft memory limit of the Go runtime, e.g. 224MiB, 1GiB or off; the garbage collector runs more often near it (default 224MiB, or GOMEMLIMIT when set)")
	fs.StringVar(&f.retention, "retention", "", "drop whole days of delay_aggregates that end this long before the lowest stored watermark of every pipeline (event time), e.g. 90d or 36h; hourly (empty: off)")
	fs.StringVar(&f.deadLetterRetention, "dead-letter-retention", "", "delete this pipeline's dead letters stored longer ago than this, replayed or not, e.g. 30d; hourly (empty: off)")
	f.kafka.register(fs)
	config.ZeroMeans(fs, "allowed-lateness", "no lateness")
	config.ZeroMeans(fs, "progress-interval", "no progress lines")
	config.ZeroMeans(fs, "provisional-interval", "no provisional rows")
	config.NameFlag(fs, "pipeline")
}

// ages reads --retention and --dead-letter-retention into cfg (consumer.ParseAge).
func (f *runFlags) ages(cfg *consumer.Config) (err error) {
	if f.retention != "" {
		cfg.Retention, err = consumer.ParseAge("--retention", f.retention)
	}
	if err == nil && f.deadLetterRetention != "" {
		cfg.DeadLetterRetention, err = consumer.ParseAge("--dead-letter-retention", f.deadLetterRetention)
	}
	return err
}

// secrets returns what must never appear in a log line, an error or output:
// the database password and the SASL password.
func (f *runFlags) secrets() []string {
	return append(redact.DatabaseSecrets(f.databaseURL), redact.Spellings(f.kafka.secrets())...)
}

func (f *runFlags) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", f.logLevel)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch f.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", f.logFormat)
}

// check reports the first invalid flag, as config would.
func (f *runFlags) check() error {
	log, err := f.logger(io.Discard)
	if err == nil {
		_, err = f.config(log)
	}
	return err
}

// instanceOwner returns the owner string of this process, the identity its
// claims and commits are fenced by: host:pid, then 8 random hex digits.
// host:pid alone is not unique: two containers with the host's network (one
// hostname) or the same fixed hostname both run as pid 1, and two processes
// with one owner string each took the other's live partitions as their own
// (a claim, and a claim of added partitions, at the same epoch: both counted
// its events). A restarted process is a new owner: it claims at once what
// the old one released, and waits one lease for what a crash left.
func instanceOwner() string {
	host, _ := os.Hostname()
	var nonce [4]byte
	_, _ = rand.Read(nonce[:]) // crypto/rand.Read never fails (Go 1.24+)
	return fmt.Sprintf("%s:%d-%x", host, os.Getpid(), nonce)
}

// config turns the flags into a consumer.Config.
func (f *runFlags) config(log *slog.Logger) (consumer.Config, error) {
	cfg := consumer.Config{
		Brokers:            splitList(f.brokers),
		Pipeline:           f.pipeline,
		Owner:              store.InstanceOwner(f.instanceID, instanceOwner()),
		InstanceID:         f.instanceID,
		Window:             f.window,
		AllowedLateness:    f.lateness,
		IdleTimeout:        f.idle,
		MaxFutureSkew:      f.skew,
		MaxDelay:           f.maxDelay,
		IdleFinalize:       f.idleFinalize,
		FlushInterval:      f.flush,
		MetadataRefresh:    f.metadataRefresh,
		ConnectTimeout:     f.connectTimeout,
		StartOffset:        f.startOffset,
		OnOffsetOutOfRange: f.onOutOfRange,
		Drain:              f.drain,
		Lease:              f.lease,
		Takeover:           f.takeover,
		MaxUncommitted:     f.maxUncommitted,
		FetchBytes:         int32(f.fetchBytes),
		ProgressInterval:   f.progress,
		Logger:             log,
	}
	cfg.ProvisionalInterval = f.provisional
	if f.lateness == 0 {
		cfg.AllowedLateness = consumer.NoLateness // 0 in Config takes the default
	}
	if err := f.ages(&cfg); err != nil {
		return cfg, err
	}
	if f.progress == 0 {
		cfg.ProgressInterval = -1 // none
	}
	if f.instanceID != "" {
		if err := store.CheckInstanceID(f.instanceID); err != nil {
			return cfg, fmt.Errorf("--instance-id %q %v", f.instanceID, err)
		}
	}
	// Durations are checked for every command (config.CheckValues); these take more.
	switch {
	case f.window < time.Second:
		return cfg, fmt.Errorf("--window %v: want at least 1s", f.window)
	case f.lease < time.Second:
		return cfg, fmt.Errorf("--lease %v: want at least 1s", f.lease)
	case f.startOffset != "earliest" && f.startOffset != "latest":
		return cfg, fmt.Errorf("--start-offset %q: want earliest or latest", f.startOffset)
	case f.onOutOfRange != "fail" && f.onOutOfRange != "earliest" && f.onOutOfRange != "latest":
		return cfg, fmt.Errorf("--on-offset-out-of-range %q: want fail, earliest or latest", f.onOutOfRange)
	}
	if f.maxUncommitted <= 0 {
		return cfg, fmt.Errorf("--max-uncommitted-messages %d: want a positive number", f.maxUncommitted)
	}
	if f.fetchBytes <= 0 || f.fetchBytes > 1<<30 {
		return cfg, fmt.Errorf("--fetch-bytes %d: want a positive number of bytes up to 1 GiB", f.fetchBytes)
	}
	limit, set, err := memoryLimit(f.memoryLimit)
	if err != nil {
		return cfg, err
	}
	f.memoryLimitBytes, f.memoryLimitSet = limit, set
	sc, err := f.kafka.ConsumerConfig()
	if err != nil {
		return cfg, err
	}
	cfg.Sarama = sc
	topics := strings.Split(f.topics, ",")
	if len(topics) > 2 {
		return cfg, fmt.Errorf("--topics %q: want PREDICTIONS_TOPIC,POSITIONS_TOPIC", f.topics)
	}
	cfg.PredictionsTopic = strings.TrimSpace(topics[0])
	if len(topics) == 2 {
		cfg.PositionsTopic = strings.TrimSpace(topics[1])
	}
	if cfg.PredictionsTopic == cfg.PositionsTopic {
		return cfg, fmt.Errorf("--topics %q: want PREDICTIONS_TOPIC,POSITIONS_TOPIC, two different topics or one of them", f.topics)
	}
	for _, s := range splitList(f.partitions) {
		topic, n, ok := strings.Cut(s, ":")
		p, err := strconv.ParseInt(n, 10, 32)
		if !ok || err != nil || p < 0 {
			return cfg, fmt.Errorf("--partitions: %q is not TOPIC:N", s)
		}
		cfg.Partitions = append(cfg.Partitions, aggregate.PartitionID{Topic: topic, Partition: int32(p)})
	}
	cfg = cfg.WithDefaults()
	return cfg, cfg.Validate()
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// cmdRun runs the service with the settled flags f.
func cmdRun(ctx context.Context, f *runFlags, stdout, stderr io.Writer) int {
	stderr = redact.NewWriter(stderr, f.secrets())
	log, err := f.logger(stderr)
	if err != nil {
		fmt.Fprintln(stderr, "ovstream run:", err)
		return exitUsage
	}
	cfg, err := f.config(log)
	if err != nil {
		fmt.Fprintln(stderr, "ovstream run:", err)
		return exitUsage
	}
	logStart(log, f, cfg)
	sum, err := runService(ctx, f, cfg)
	if err != nil && ctx.Err() != nil && (sum == nil || errors.Is(err, context.Canceled)) {
		// SIGTERM while starting (connecting, checking the schema, claiming):
		// nothing was written after it, and stopping is what was asked
		// (docs/design.md "Shutdown and drain"): a clean stop, exit 0.
		cfg.Logger.Info("stopped during start-up", "err", err)
		err = nil
	}
	code := reportRun(stdout, stderr, cfg, sum, err)
	logStop(ctx, log, cfg, sum, err, code)
	return code
}

// runService checks the schema, connects and runs the consumer, with the
// metrics and health endpoint and the consumer-group offset mirror.
func runService(ctx context.Context, f *runFlags, cfg consumer.Config) (*consumer.Summary, error) {
	tuneGC(f.memoryLimitBytes, f.memoryLimitSet)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// config's Validate filled in unregistered ones: these are served.
	cfg.Metrics = consumer.NewMetrics(reg)
	cfg.Health = &consumer.Health{}
	flush := cfg.FlushInterval
	if flush <= 0 {
		flush = 5 * time.Second
	}
	secrets := f.secrets()
	ready := &status.Readiness{Health: cfg.Health, Flush: flush, DatabaseURL: f.databaseURL, PingTimeout: 2 * time.Second,
		Redact: func(s string) string { return redact.String(s, secrets) }}
	ops, err := startOpsServer(f.metricsAddr, reg, ready, runDashboard(f, cfg, reg), f.pprof, cfg.Logger)
	if err != nil && f.metricsAddr == defaultMetricsAddr && errors.Is(err, syscall.EADDRINUSE) {
		// The default address is taken (another ovstream on this host?):
		// run without the endpoint rather than not at all. An address given
		// on purpose must work.
		cfg.Logger.Warn("metrics and health endpoint disabled: the default address is in use; set --metrics-addr",
			"addr", f.metricsAddr, "err", err)
	} else if err != nil {
		return nil, err
	}
	defer ops.stop()
	err = consumer.WaitKafka(ctx, f.connectTimeout, cfg.Logger, "connect to the bootstrap brokers", func() error {
		return kafkaPreflight(cfg.Brokers, cfg.Sarama)
	})
	if err != nil {
		return nil, err
	}
	err = consumer.WaitKafka(ctx, f.connectTimeout, cfg.Logger, "read the topics' partitions", func() error {
		return kafkaconn.CheckPartitions(cfg.Brokers, cfg.Sarama, cfg.Partitions)
	})
	if err != nil {
		return nil, err
	}
	if f.kafkaCommitOffsets {
		sc, err := f.kafka.ConsumerConfig()
		if err != nil {
			return nil, err
		}
		fails := cfg.Metrics.KafkaCommitFails
		mirror, err := groupoffsets.Start(groupoffsets.Config{Brokers: cfg.Brokers, Group: cfg.Pipeline, Sarama: sc,
			Logger: cfg.Logger, OnFailure: func(error) { fails.Inc() }})
		if err != nil {
			return nil, err
		}
		defer mirror.Close()
		cfg.OnCommit = mirror.Commit
	}
	// Wait for PostgreSQL and check that the URL keeps its session (a pooler
	// in transaction mode is refused here); Run opens connections of its own.
	st, err := openStore(ctx, f.databaseURL, f.connectTimeout, cfg.Logger)
	if err != nil {
		return nil, err
	}
	_ = st.Close(context.Background())
	if f.migrate {
		err := store.WaitConnect(ctx, f.connectTimeout, cfg.Logger, "migrate up", func(ctx context.Context) error {
			return migrations.Up(ctx, f.databaseURL)
		})
		if err != nil {
			return nil, err
		}
	}
	if err := checkSchema(ctx, f.databaseURL, f.connectTimeout, cfg.Logger); err != nil {
		return nil, err
	}
	return consumer.Run(ctx, cfg, f.databaseURL)
}

// reportRun prints the outcome to w, errors to errw, and returns the exit code.
func reportRun(w, errw io.Writer, cfg consumer.Config, sum *consumer.Summary, err error) int {
	if sum != nil && (cfg.Drain || err == nil) {
		sum.Print(w)
	}
	switch {
	case errors.As(err, new(*store.SettingsError)):
		fmt.Fprintln(errw, "ovstream run:", err)
		return exitUsage
	case errors.Is(err, consumer.ErrFenced):
		fmt.Fprintf(errw, "ovstream run: fenced: another instance claimed a partition of pipeline %q; this one wrote nothing after the claim and stops\n", cfg.Pipeline)
		return exitFenced
	case err != nil:
		fmt.Fprintln(errw, "ovstream run:", err)
		return exitError
	}
	return exitOK
}
