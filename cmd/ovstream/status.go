package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/IBM/sarama"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/migrations"
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
	nameFlag(fs, "pipeline")
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
		Long: "Per partition: the stored next offset, Kafka's log start and high water mark, the lag\n" +
			"(high water - next offset) and when it was stored, its owner, fencing epoch and lease\n" +
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
	return append(databaseSecrets(o.databaseURL), spellings(o.kafka.secrets())...)
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

// PartitionStatus is one partition in `status --json`.
type PartitionStatus struct {
	Topic          string     `json:"topic"`
	Partition      int32      `json:"partition"`
	NextOffset     *int64     `json:"next_offset"`     // stored committable offset; null = no stored position
	ConsumedOffset *int64     `json:"consumed_offset"` // stored one-past-last consumed
	UpdatedAt      *time.Time `json:"updated_at"`
	LogStart       *int64     `json:"log_start"`       // null when Kafka could not be asked
	HighWater      *int64     `json:"high_water"`      // null when Kafka could not be asked
	Lag            *int64     `json:"lag"`             // high_water - next_offset (log_start when nothing is stored); null = unknown
	Owner          string     `json:"owner"`           // host:pid-nonce of the instance holding it; "" = none
	Epoch          int64      `json:"epoch"`           // its fencing epoch (0 = never claimed)
	Lease          string     `json:"lease"`           // alive, expired or released ("" = never claimed)
	HeartbeatAgeS  *float64   `json:"heartbeat_age_s"` // seconds since the owner's heartbeat (database clock); null = none
}

// InstanceStatus is one running instance in `status --json` (pipeline_instances).
type InstanceStatus struct {
	Owner         string    `json:"owner"`
	Role          string    `json:"role"`       // active or standby
	Partitions    []string  `json:"partitions"` // topic/partition owned (active) or waited for (standby)
	StartedAt     time.Time `json:"started_at"`
	HeartbeatAgeS float64   `json:"heartbeat_age_s"`
	Alive         bool      `json:"alive"` // heartbeat younger than the lease
	// ClosableSince: since when its oldest window that is closable but not
	// yet written has been closable, as of its last heartbeat (null: none).
	ClosableSince *time.Time `json:"closable_since"`
	ClosableAgeS  float64    `json:"closable_age_s"` // the database's now() - closable_since; 0 when null
}

// StatusReport is `status --json`.
type StatusReport struct {
	Pipeline        string                       `json:"pipeline"`
	Claimed         bool                         `json:"claimed"`
	Epoch           int64                        `json:"epoch"`
	Owner           string                       `json:"owner"`
	HeartbeatAt     *time.Time                   `json:"heartbeat_at"`
	Watermark       *time.Time                   `json:"watermark"`
	NewestWindowEnd *time.Time                   `json:"newest_window_end"`
	LeaseS          float64                      `json:"lease_s"` // the --lease the lease states are judged by, seconds
	Partitions      []PartitionStatus            `json:"partitions"`
	Instances       []InstanceStatus             `json:"instances"`
	TotalLag        *int64                       `json:"total_lag"` // null: unknown (a partition's lag could not be read)
	DeadLetters     map[string]store.ReasonCount `json:"dead_letters"`
	RefusedWindows  int64                        `json:"refused_windows"`                // rows in refused_windows (docs/runbook.md)
	StopVisits      int64                        `json:"stop_visits"`                    // rows in stop_visits
	NoStartDate     int64                        `json:"predictions_without_start_date"` // predictions that formed no visit
	KafkaError      string                       `json:"kafka_error,omitempty"`
	Merge           *MergeStatus                 `json:"merge"` // split pipelines (status_merge.go)
	// Unowned lists, as topic/partition, the partitions that no instance of
	// the pipeline owns, of the topics it owns a partition of: e.g. added to
	// a topic while instances with --partitions run. Nothing consumes them.
	Unowned []string `json:"unowned_partitions"`
	// Replica is set when the server read is a hot standby (status_replica.go).
	Replica *store.Replica `json:"replica"`
	// ClosableAgeS is freshness: the largest closable_age_s of the running
	// instances (the age of the oldest closable window not yet written,
	// seconds); 0 when every closable window is written or none runs.
	ClosableAgeS float64 `json:"closable_age_s"`
}

func cmdStatus(ctx context.Context, f *statusFlags, stdout, stderr io.Writer) int {
	o := &f.ops
	stdout = newRedactingWriter(stdout, o.secrets())
	stderr = newRedactingWriter(stderr, o.secrets())
	sc, err := o.kafka.consumerConfig()
	if err != nil {
		fmt.Fprintln(stderr, "ovstream status:", err)
		return exitUsage
	}
	st, err := o.openChecked(ctx, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "ovstream status:", err)
		return exitError
	}
	defer st.Close(context.Background())
	if code := pipelineUnknown(stderr, "status", st.CheckPipelineKnown(ctx, o.pipeline)); code != exitOK {
		return code
	}
	dbs, err := st.Status(ctx, o.pipeline)
	if err != nil {
		fmt.Fprintln(stderr, "ovstream status:", err)
		return exitError
	}
	leases, err := st.Leases(ctx, o.pipeline, f.lease)
	if err != nil {
		fmt.Fprintln(stderr, "ovstream status:", err)
		return exitError
	}
	instances, err := st.Instances(ctx, o.pipeline, f.lease)
	if err != nil {
		fmt.Fprintln(stderr, "ovstream status:", err)
		return exitError
	}
	rep := buildStatus(o.pipeline, dbs)
	if rep.Merge, err = mergeStatus(ctx, st, o.pipeline); err != nil {
		fmt.Fprintln(stderr, "ovstream status:", err)
		return exitError
	}
	own := splitList(f.topics)
	if f.topics == "" {
		own = pipelineTopics(dbs)
	}
	kerr := kafkaOffsets(rep, splitList(o.brokers), own, sc)
	if kerr != nil {
		rep.KafkaError = kerr.Error()
	}
	addOwnership(rep, f.lease, leases, instances)
	rep.Unowned = unowned(rep.Partitions, leases)
	if rep.Replica, err = replicaStatus(ctx, o.databaseURL); err != nil {
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
		printStatus(stdout, rep, time.Now())
		printReplica(stdout, rep.Replica)
	}
	if kerr != nil {
		fmt.Fprintln(stderr, "ovstream status:", kerr)
		return exitError
	}
	return exitOK
}

// pipelineTopics returns the pipeline's own topics: those recorded in
// pipelines.topics at claim, else those of its stored positions.
func pipelineTopics(s *store.Status) []string {
	if s.Topics != nil {
		return s.Topics
	}
	var ts []string
	for _, p := range s.Positions {
		if !slices.Contains(ts, p.Topic) {
			ts = append(ts, p.Topic)
		}
	}
	return ts
}

func buildStatus(pipeline string, s *store.Status) *StatusReport {
	r := &StatusReport{Pipeline: pipeline, DeadLetters: s.DeadLetters, RefusedWindows: s.RefusedWindows,
		StopVisits: s.StopVisits, NoStartDate: s.NoStartDate}
	if p := s.Pipeline; p != nil {
		r.Claimed, r.Epoch, r.Owner = true, p.Epoch, p.Owner
		r.HeartbeatAt, r.Watermark = timePtr(p.HeartbeatAt), timePtr(p.Watermark)
	}
	r.NewestWindowEnd = timePtr(s.NewestWindowEnd)
	for _, p := range s.Positions {
		next, consumed, at := p.NextOffset, p.ConsumedOffset, p.UpdatedAt
		r.Partitions = append(r.Partitions, PartitionStatus{Topic: p.Topic, Partition: p.Partition,
			NextOffset: &next, ConsumedOffset: &consumed, UpdatedAt: &at})
	}
	return r
}

// addOwnership adds each partition's owner, epoch and lease (adding the
// partitions claimed but never committed that Kafka did not list) and the
// instances.
func addOwnership(r *StatusReport, lease time.Duration, leases []store.PartitionLease, instances []store.Instance) {
	r.LeaseS = lease.Seconds()
	at := map[aggregate.PartitionID]int{}
	for i, p := range r.Partitions {
		at[aggregate.PartitionID{Topic: p.Topic, Partition: p.Partition}] = i
	}
	for _, l := range leases {
		i, ok := at[l.PartitionID]
		if !ok {
			i = len(r.Partitions)
			r.Partitions = append(r.Partitions, PartitionStatus{Topic: l.Topic, Partition: l.Partition})
		}
		p := &r.Partitions[i]
		p.Owner, p.Epoch, p.Lease = l.Owner, l.Epoch, l.State
		if l.HeartbeatAge >= 0 {
			age := l.HeartbeatAge.Seconds()
			p.HeartbeatAgeS = &age
		}
	}
	sortPartitions(r.Partitions)
	r.Instances = []InstanceStatus{}
	for _, in := range instances {
		s := InstanceStatus{Owner: in.Owner, Role: in.Role, Partitions: []string{}, StartedAt: in.StartedAt,
			HeartbeatAgeS: in.HeartbeatAge.Seconds(), Alive: in.Alive, ClosableSince: timePtr(in.ClosableSince),
			ClosableAgeS: in.ClosableAge.Seconds()}
		r.ClosableAgeS = max(r.ClosableAgeS, s.ClosableAgeS)
		for _, p := range in.Partitions {
			s.Partitions = append(s.Partitions, p.String())
		}
		r.Instances = append(r.Instances, s)
	}
}

// printFreshness prints the status line of freshness: the age of the oldest
// closable window not yet written, over the running instances.
func printFreshness(w io.Writer, r *StatusReport) {
	var oldest *InstanceStatus
	for i := range r.Instances {
		if in := &r.Instances[i]; in.ClosableSince != nil && (oldest == nil || in.ClosableSince.Before(*oldest.ClosableSince)) {
			oldest = in
		}
	}
	if oldest == nil {
		fmt.Fprintln(w, "freshness: every closable window is written (closable window age 0s)")
		return
	}
	fmt.Fprintf(w, "freshness: closable window age %.1fs: a window closable since %s is not yet written (instance %s)\n",
		oldest.ClosableAgeS, oldest.ClosableSince.Format(time.RFC3339Nano), oldest.Owner)
}

func sortPartitions(ps []PartitionStatus) {
	slices.SortFunc(ps, func(a, b PartitionStatus) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition - b.Partition)
	})
}

// unowned returns, as topic/partition, the partitions Kafka lists that no
// instance of the pipeline ever claimed, of the topics it claimed a
// partition of: e.g. added to a topic while instances with --partitions run.
// Nothing consumes them.
func unowned(ps []PartitionStatus, leases []store.PartitionLease) []string {
	claimed, topics := map[aggregate.PartitionID]bool{}, map[string]bool{}
	for _, l := range leases {
		if l.Epoch > 0 { // epoch 0: registered for a split pipeline's merge, never claimed
			claimed[l.PartitionID], topics[l.Topic] = true, true
		}
	}
	out := []string{}
	for _, p := range ps {
		if tp := (aggregate.PartitionID{Topic: p.Topic, Partition: p.Partition}); !claimed[tp] && topics[p.Topic] {
			out = append(out, tp.String())
		}
	}
	return out
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// kafkaOffsets adds the partitions of topics that have no stored position
// and fills in log start, high water and lag; the total lag only when every
// partition's lag could be read (else it stays nil: unknown).
func kafkaOffsets(r *StatusReport, brokers, topics []string, sc *sarama.Config) error {
	sc.Net.DialTimeout = 10 * time.Second
	sc.Metadata.Retry.Max = 2
	sc.Metadata.Full = false
	if err := kafkaPreflight(brokers, sc); err != nil {
		return err
	}
	client, err := sarama.NewClient(brokers, sc)
	if err != nil {
		return fmt.Errorf("kafka: connect to %v: %w", brokers, unprefixed{err})
	}
	defer client.Close()
	have := map[aggregate.PartitionID]bool{}
	for _, p := range r.Partitions {
		have[aggregate.PartitionID{Topic: p.Topic, Partition: p.Partition}] = true
	}
	var errs []error
	for _, topic := range topics {
		ps, err := client.Partitions(topic)
		if err != nil {
			errs = append(errs, fmt.Errorf("partitions of topic %s: %w", topic, unprefixed{err}))
			continue
		}
		for _, p := range ps {
			if !have[aggregate.PartitionID{Topic: topic, Partition: p}] {
				r.Partitions = append(r.Partitions, PartitionStatus{Topic: topic, Partition: p})
			}
		}
	}
	sortPartitions(r.Partitions)
	for i := range r.Partitions {
		p := &r.Partitions[i]
		start, err := client.GetOffset(p.Topic, p.Partition, sarama.OffsetOldest)
		if err != nil {
			errs = append(errs, fmt.Errorf("log start of %s/%d: %w", p.Topic, p.Partition, unprefixed{err}))
			continue
		}
		hw, err := client.GetOffset(p.Topic, p.Partition, sarama.OffsetNewest)
		if err != nil {
			errs = append(errs, fmt.Errorf("high water of %s/%d: %w", p.Topic, p.Partition, unprefixed{err}))
			continue
		}
		from := start
		if p.NextOffset != nil {
			from = *p.NextOffset
		}
		lag := hw - from
		p.LogStart, p.HighWater, p.Lag = &start, &hw, &lag
	}
	err = nil
	if len(errs) > 0 {
		err = fmt.Errorf("kafka: %w", errors.Join(errs...))
	}
	var total int64
	for _, p := range r.Partitions {
		if p.Lag == nil {
			return err
		}
		total += *p.Lag
	}
	r.TotalLag = &total
	return err
}

func printStatus(w io.Writer, r *StatusReport, now time.Time) {
	ts := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.Format(time.RFC3339)
	}
	if r.Claimed {
		owner := r.Owner
		if owner == "" {
			owner = "none (released)"
		}
		fmt.Fprintf(w, "pipeline %s: epoch %d, owner %s, last heartbeat %s", r.Pipeline, r.Epoch, owner, ts(r.HeartbeatAt))
		if r.HeartbeatAt != nil {
			fmt.Fprintf(w, " (%s ago)", now.Sub(*r.HeartbeatAt).Round(100*time.Millisecond))
		}
		fmt.Fprintf(w, ", watermark %s\n", ts(r.Watermark))
	} else {
		fmt.Fprintf(w, "pipeline %s: never claimed (no run has started)\n", r.Pipeline)
	}
	fmt.Fprintf(w, "newest window_end: %s\n", ts(r.NewestWindowEnd))
	printFreshness(w, r)
	printMerge(w, r.Merge, ts)
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "partition\tnext offset\tlog start\thigh water\tlag\tupdated at\towner\tepoch\tlease\t")
	num := func(v *int64) string {
		if v == nil {
			return "-"
		}
		return fmt.Sprint(*v)
	}
	lag := func(v *int64) string {
		if v == nil {
			return "unknown"
		}
		return fmt.Sprint(*v)
	}
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	for _, p := range r.Partitions {
		lease := dash(p.Lease)
		if p.HeartbeatAgeS != nil && p.Lease != "released" {
			lease = fmt.Sprintf("%s (%.1fs)", p.Lease, *p.HeartbeatAgeS)
		}
		fmt.Fprintf(tw, "%s/%d\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t\n", p.Topic, p.Partition, num(p.NextOffset), num(p.LogStart),
			num(p.HighWater), lag(p.Lag), ts(p.UpdatedAt), dash(p.Owner), p.Epoch, lease)
	}
	tw.Flush()
	fmt.Fprintf(w, "\ninstances (lease %s):", time.Duration(r.LeaseS*float64(time.Second)))
	if len(r.Instances) == 0 {
		fmt.Fprint(w, " none running")
	}
	fmt.Fprintln(w)
	for _, in := range r.Instances {
		state := "alive"
		if !in.Alive {
			state = "expired: dead or frozen"
		}
		fmt.Fprintf(w, "  %s %s, %d partitions, started %s, heartbeat %.1fs ago (%s)\n", in.Owner, in.Role,
			len(in.Partitions), in.StartedAt.Format(time.RFC3339), in.HeartbeatAgeS, state)
	}
	fmt.Fprintln(w)
	if r.TotalLag != nil {
		fmt.Fprintf(w, "total lag: %d\n", *r.TotalLag)
	} else {
		fmt.Fprintln(w, "total lag: unknown (Kafka could not be read)")
	}
	if len(r.Unowned) > 0 {
		fmt.Fprintf(w, "unowned partitions (no instance of the pipeline ever claimed them): %s\n", strings.Join(r.Unowned, ", "))
	}
	fmt.Fprint(w, "\ndead letters:")
	if len(r.DeadLetters) == 0 {
		fmt.Fprint(w, " none")
	}
	for _, reason := range sortedKeys(r.DeadLetters) {
		c := r.DeadLetters[reason]
		fmt.Fprintf(w, " %s %d (%d replayed);", reason, c.Total, c.Replayed)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "stop visits: %d; predictions without start_date (in the windows, in no visit): %d\n", r.StopVisits, r.NoStartDate)
	if r.RefusedWindows > 0 {
		fmt.Fprintf(w, "refused merged rows: %d in table refused_windows, not in delay_aggregates: fix the cause and re-apply them (docs/runbook.md)\n",
			r.RefusedWindows)
	}
	if r.KafkaError != "" {
		fmt.Fprintf(w, "%s\n", r.KafkaError)
	}
}
