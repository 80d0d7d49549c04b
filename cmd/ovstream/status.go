package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/ovstream/ovstream/config"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ovstream/ovstream/kafkaconn"
	"github.com/ovstream/ovstream/migrations"
	"github.com/ovstream/ovstream/redact"
	"github.com/ovstream/ovstream/status"
	"github.com/ovstream/ovstream/store"
)

func init() { register(newStatusCmd) }

// opsFlags are the connection flags of status, dlq and report.
type opsFlags struct {
	databaseURL, brokers, pipeline string
	connectTimeout                 time.Duration
	kafka                          kafkaFlags
}

// connectTimeoutUsage is the help of every command's --connect-timeout.
const connectTimeoutUsage = "how long to wait for PostgreSQL at start: a refused or failed connection (e.g. no connection slot free, SQLSTATE 53300) is retried with backoff and logged until then"

func (o *opsFlags) register(fs *pflag.FlagSet, withKafka bool) {
	fs.StringVar(&o.databaseURL, "database-url", defaultDatabaseURL, "PostgreSQL URL (env DATABASE_URL)")
	fs.StringVar(&o.pipeline, "pipeline", "ovstream", "pipeline name")
	fs.DurationVar(&o.connectTimeout, "connect-timeout", 15*time.Second, connectTimeoutUsage)
	config.NameFlag(fs, "pipeline")
	if withKafka {
		fs.StringVar(&o.brokers, "brokers", "127.0.0.1:9092", "Kafka bootstrap brokers, comma-separated host:port (env KAFKA_BROKERS)")
		o.kafka.register(fs)
	}
}

// statusFlags are the flags of status.
type statusFlags struct {
	ops    opsFlags
	topics string
	json   bool
	lease  time.Duration
}

func (f *statusFlags) register(fs *pflag.FlagSet) {
	f.ops.register(fs, true)
	fs.StringVar(&f.topics, "topics", "", "topics whose partitions to show besides the stored ones (default: the pipeline's own, recorded when it claimed)")
	fs.BoolVar(&f.json, "json", false, "print JSON")
	fs.DurationVar(&f.lease, "lease", 15*time.Second, "the --lease of the pipeline's instances: a heartbeat younger is alive")
}

func newStatusCmd() *cobra.Command {
	var f statusFlags
	c := &cobra.Command{Use: "status", Short: "per partition: stored offset, log start, high water, lag, owner, epoch and lease; the instances",
		Args: noArgs,
		Long: "Per partition: the stored next offset (committable), the consumed position the last commit\n" +
			"stored and the records held between them (read, in open windows: a restart reads them again),\n" +
			"Kafka's log start and high water mark, the lag (records not yet read: high water - consumed)\n" +
			"and when it was stored, its owner, fencing epoch and lease\n" +
			"(alive, expired, released); the running instances (active and standby) and the age of\n" +
			"their heartbeats; the newest finalized window_end; freshness: the age of the oldest window\n" +
			"that is closable but not yet written (as of the instances' heartbeats); dead letters per reason;\n" +
			"refused merged rows.\n" +
			"Exit 1 when the database or Kafka cannot be read (what could be read is printed)."}
	f.register(c.Flags())
	c.RunE = run(func(ctx context.Context, stdout, stderr io.Writer, _ []string) int {
		return cmdStatus(ctx, &f, stdout, stderr)
	})
	return c
}

func (o *opsFlags) secrets() []string {
	return append(redact.DatabaseSecrets(o.databaseURL), redact.Spellings(o.kafka.secrets())...)
}

// openStore connects to PostgreSQL by ovstream's one rule for every
// command (store.WaitConnect): a retryable failure, e.g. no connection slot
// free (53300), is logged to log and retried with backoff until timeout.
func openStore(ctx context.Context, url string, timeout time.Duration, log *slog.Logger) (*store.Store, error) {
	var st *store.Store
	err := store.WaitConnect(ctx, timeout, log, "connect to PostgreSQL", func(ctx context.Context) (err error) {
		st, err = store.Open(ctx, url)
		return err
	})
	return st, err
}

// checkSchema is migrations.Check under the same rule: its connection is
// one more, which a crowded server may refuse too.
func checkSchema(ctx context.Context, url string, timeout time.Duration, log *slog.Logger) error {
	return store.WaitConnect(ctx, timeout, log, "read the schema version", func(ctx context.Context) error {
		return migrations.Check(ctx, url)
	})
}

// commandLog is the logger of a command's waits for the database, to stderr.
func commandLog(stderr io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(stderr, nil)) }

// openCommand is openStore for a command (not the service) of o, logging to stderr.
func (o *opsFlags) openCommand(ctx context.Context, stderr io.Writer) (*store.Store, error) {
	return openStore(ctx, o.databaseURL, o.connectTimeout, commandLog(stderr))
}

// openChecked is openCommand for the commands that read ovstream's
// tables (status, dlq, report): it then checks, read-only, that the schema
// is the version this binary reads (migrations.Check), so that a schema
// behind, dirty or newer is said with what to do instead of as a missing
// relation or column.
func (o *opsFlags) openChecked(ctx context.Context, stderr io.Writer) (*store.Store, error) {
	st, err := o.openCommand(ctx, stderr)
	if err != nil {
		return nil, err
	}
	if err := checkSchema(ctx, o.databaseURL, o.connectTimeout, commandLog(stderr)); err != nil {
		st.Close(context.Background())
		return nil, err
	}
	return st, nil
}

// readPool checks the schema, then opens a read pool of one session
// (application name ovstream-CMD; statementTimeout 0: none) and checks the
// pipeline is known on it. On failure it reports on stderr as cmd and
// returns the exit code, nil.
func (o *opsFlags) readPool(ctx context.Context, stderr io.Writer, cmd string, statementTimeout time.Duration) (*pgxpool.Pool, int) {
	st, err := o.openChecked(ctx, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "ovstream %s: %v\n", cmd, err)
		return nil, exitError
	}
	st.Close(context.Background()) // connected and checked: the reads run on the pool
	pool, err := store.ReadPool(o.databaseURL, "ovstream-"+strings.ReplaceAll(cmd, " ", "-"), statementTimeout, 1)
	if err != nil {
		fmt.Fprintf(stderr, "ovstream %s: %v\n", cmd, err)
		return nil, exitError
	}
	if code := pipelineUnknown(stderr, cmd, store.CheckPipelineKnown(ctx, pool, o.pipeline)); code != exitOK {
		pool.Close()
		return nil, code
	}
	return pool, exitOK
}

// pipelineUnknown reports err, the result of Store.CheckPipelineKnown, on
// stderr as cmd's error: exitUsage for a pipeline the database does not
// know (a misspelt --pipeline: the message lists the known ones),
// exitError for a failed query, exitOK when err is nil.
func pipelineUnknown(stderr io.Writer, cmd string, err error) int {
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(stderr, "ovstream %s: %v\n", cmd, err)
	if store.IsUnknownPipeline(err) {
		return exitUsage
	}
	return exitError
}

func cmdStatus(ctx context.Context, f *statusFlags, stdout, stderr io.Writer) int {
	o := &f.ops
	stdout = redact.NewWriter(stdout, o.secrets())
	stderr = redact.NewWriter(stderr, o.secrets())
	sc, err := o.kafka.ConsumerConfig()
	if err != nil {
		fmt.Fprintln(stderr, "ovstream status:", err)
		return exitUsage
	}
	pool, code := o.readPool(ctx, stderr, "status", 0)
	if code != exitOK {
		return code
	}
	defer pool.Close()
	dbs, err := store.ReadStatus(ctx, pool, o.pipeline)
	if err != nil {
		fmt.Fprintln(stderr, "ovstream status:", err)
		return exitError
	}
	leases, err := store.ReadLeases(ctx, pool, o.pipeline, f.lease)
	if err != nil {
		fmt.Fprintln(stderr, "ovstream status:", err)
		return exitError
	}
	instances, err := store.ReadInstances(ctx, pool, o.pipeline, f.lease)
	if err != nil {
		fmt.Fprintln(stderr, "ovstream status:", err)
		return exitError
	}
	rep := status.FromStore(o.pipeline, dbs)
	if rep.Merge, err = status.MergeOf(ctx, pool, o.pipeline); err != nil {
		fmt.Fprintln(stderr, "ovstream status:", err)
		return exitError
	}
	own := splitList(f.topics)
	if f.topics == "" {
		own = status.PipelineTopics(dbs)
	}
	kerr := kafkaOffsets(rep, splitList(o.brokers), own, sc)
	if kerr != nil {
		rep.KafkaError = kerr.Error()
	}
	status.AddOwnership(rep, f.lease, leases, instances)
	if rep.Replica, err = status.Replica(ctx, pool); err != nil {
		fmt.Fprintln(stderr, "ovstream status:", err)
		return exitError
	}
	if f.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintln(stderr, "ovstream status:", err)
			return exitError
		}
	} else {
		status.Print(stdout, rep, time.Now())
		status.PrintReplica(stdout, rep.Replica)
	}
	if kerr != nil {
		fmt.Fprintln(stderr, "ovstream status:", kerr)
		return exitError
	}
	return exitOK
}

// kafkaOffsets is status.KafkaOffsets over a client of its own, opened
// after kafkaPreflight so that a wrong address, certificate or password is
// said as such.
func kafkaOffsets(r *status.Report, brokers, topics []string, sc *sarama.Config) error {
	sc.Net.DialTimeout = 10 * time.Second
	sc.Metadata.Retry.Max = 2
	sc.Metadata.Full = false
	if err := kafkaPreflight(brokers, sc); err != nil {
		return err
	}
	client, err := sarama.NewClient(brokers, sc)
	if err != nil {
		return fmt.Errorf("kafka: connect to %v: %w", brokers, kafkaconn.Unprefixed(err))
	}
	defer client.Close()
	return status.KafkaOffsets(r, client, topics)
}
