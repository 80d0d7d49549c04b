package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/IBM/sarama"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/store"
)

func init() {
	register("status", "per partition: stored offset, log start, high water, lag; pipeline epoch and heartbeat", cmdStatus)
}

// opsFlags are the connection flags of status and dlq.
type opsFlags struct {
	databaseURL, brokers, pipeline string
	kafka                          kafkaFlags
}

func (o *opsFlags) register(fs *flag.FlagSet, withKafka bool) {
	fs.StringVar(&o.databaseURL, "database-url", envOr("DATABASE_URL", defaultDatabaseURL), "PostgreSQL URL (env DATABASE_URL)")
	fs.StringVar(&o.pipeline, "pipeline", envOr("OVSTREAM_PIPELINE", "ovstream"), "pipeline name (env OVSTREAM_PIPELINE)")
	if withKafka {
		fs.StringVar(&o.brokers, "brokers", envOr("KAFKA_BROKERS", "127.0.0.1:9092"), "Kafka bootstrap brokers, comma-separated host:port (env KAFKA_BROKERS)")
		o.kafka.register(fs)
	}
}

func (o *opsFlags) secrets() []string {
	return append(databaseSecrets(o.databaseURL), spellings(o.kafka.secrets())...)
}

// openStoreQuick connects once, within a short timeout: for commands, not the service.
func openStoreQuick(ctx context.Context, url string) (*store.Store, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	return store.Open(ctx, url)
}

// PartitionStatus is one partition in `status --json`.
type PartitionStatus struct {
	Topic          string     `json:"topic"`
	Partition      int32      `json:"partition"`
	NextOffset     *int64     `json:"next_offset"`     // stored committable offset; null = no stored position
	ConsumedOffset *int64     `json:"consumed_offset"` // stored one-past-last consumed
	UpdatedAt      *time.Time `json:"updated_at"`
	LogStart       *int64     `json:"log_start"`  // null when Kafka could not be asked
	HighWater      *int64     `json:"high_water"` // null when Kafka could not be asked
	Lag            *int64     `json:"lag"`        // high_water - next_offset (log_start when nothing is stored)
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
	Partitions      []PartitionStatus            `json:"partitions"`
	TotalLag        int64                        `json:"total_lag"`
	DeadLetters     map[string]store.ReasonCount `json:"dead_letters"`
	KafkaError      string                       `json:"kafka_error,omitempty"`
	// Unowned lists, as topic/partition, the partitions that no instance of
	// the pipeline owns, of the topics it owns a partition of: e.g. added to
	// a topic while instances with --partitions run. Nothing consumes them.
	Unowned []string `json:"unowned_partitions"`
}

func cmdStatus(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	var o opsFlags
	o.register(fs, true)
	topics := fs.String("topics", "arrival_predictions,vehicle_positions", "topics whose partitions to show besides the stored ones (empty: only stored)")
	asJSON := fs.Bool("json", false, "print JSON")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: ovstream status [flags]\n\n"+
			"Per partition: the stored next offset, Kafka's log start and high water mark, the lag\n"+
			"(high water - next offset) and when it was stored; the pipeline's fencing epoch, owner\n"+
			"and last heartbeat; the newest finalized window_end; dead letters per reason.\n"+
			"Exit 1 when the database or Kafka cannot be read (what could be read is printed).")
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
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "status: unexpected arguments %q\n", fs.Args())
		return exitUsage
	}
	sc, err := o.kafka.consumerConfig()
	if err != nil {
		fmt.Fprintln(stderr, "ovstream status:", err)
		return exitUsage
	}
	st, err := openStoreQuick(ctx, o.databaseURL)
	if err != nil {
		fmt.Fprintln(stderr, "ovstream status:", err)
		return exitError
	}
	defer st.Close(context.Background())
	dbs, err := st.Status(ctx, o.pipeline)
	if err != nil {
		fmt.Fprintln(stderr, "ovstream status:", err)
		return exitError
	}
	rep := buildStatus(o.pipeline, dbs)
	kerr := kafkaOffsets(rep, splitList(o.brokers), splitList(*topics), sc)
	if kerr != nil {
		rep.KafkaError = kerr.Error()
	}
	owners, err := st.Owners(ctx, o.pipeline)
	if err != nil {
		fmt.Fprintln(stderr, "ovstream status:", err)
		return exitError
	}
	rep.Unowned = unowned(rep.Partitions, owners)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintln(stderr, "ovstream status:", err)
			return exitError
		}
	} else {
		printStatus(stdout, rep, time.Now())
	}
	if kerr != nil {
		fmt.Fprintln(stderr, "ovstream status: kafka:", kerr)
		return exitError
	}
	return exitOK
}

func buildStatus(pipeline string, s *store.Status) *StatusReport {
	r := &StatusReport{Pipeline: pipeline, DeadLetters: s.DeadLetters}
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

// unowned returns the partitions of ps without an owner, of the topics
// where owners names at least one owned partition, as topic/partition.
func unowned(ps []PartitionStatus, owners map[aggregate.PartitionID]string) []string {
	consumed := map[string]bool{}
	for tp := range owners {
		consumed[tp.Topic] = true
	}
	out := []string{}
	for _, p := range ps {
		if _, ok := owners[aggregate.PartitionID{Topic: p.Topic, Partition: p.Partition}]; !ok && consumed[p.Topic] {
			out = append(out, fmt.Sprintf("%s/%d", p.Topic, p.Partition))
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
// and fills in log start, high water and lag.
func kafkaOffsets(r *StatusReport, brokers, topics []string, sc *sarama.Config) error {
	sc.Net.DialTimeout = 10 * time.Second
	sc.Metadata.Retry.Max = 2
	sc.Metadata.Full = false
	if err := kafkaPreflight(brokers, sc); err != nil {
		return err
	}
	client, err := sarama.NewClient(brokers, sc)
	if err != nil {
		return fmt.Errorf("connect to %v: %w", brokers, err)
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
			errs = append(errs, fmt.Errorf("partitions of topic %s: %w", topic, err))
			continue
		}
		for _, p := range ps {
			if !have[aggregate.PartitionID{Topic: topic, Partition: p}] {
				r.Partitions = append(r.Partitions, PartitionStatus{Topic: topic, Partition: p})
			}
		}
	}
	slices.SortFunc(r.Partitions, func(a, b PartitionStatus) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition - b.Partition)
	})
	for i := range r.Partitions {
		p := &r.Partitions[i]
		start, err := client.GetOffset(p.Topic, p.Partition, sarama.OffsetOldest)
		if err != nil {
			errs = append(errs, fmt.Errorf("log start of %s/%d: %w", p.Topic, p.Partition, err))
			continue
		}
		hw, err := client.GetOffset(p.Topic, p.Partition, sarama.OffsetNewest)
		if err != nil {
			errs = append(errs, fmt.Errorf("high water of %s/%d: %w", p.Topic, p.Partition, err))
			continue
		}
		from := start
		if p.NextOffset != nil {
			from = *p.NextOffset
		}
		lag := hw - from
		p.LogStart, p.HighWater, p.Lag = &start, &hw, &lag
		r.TotalLag += lag
	}
	return errors.Join(errs...)
}

func printStatus(w io.Writer, r *StatusReport, now time.Time) {
	ts := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.Format(time.RFC3339)
	}
	if r.Claimed {
		fmt.Fprintf(w, "pipeline %s: epoch %d, owner %s, last heartbeat %s", r.Pipeline, r.Epoch, r.Owner, ts(r.HeartbeatAt))
		if r.HeartbeatAt != nil {
			fmt.Fprintf(w, " (%s ago)", now.Sub(*r.HeartbeatAt).Round(100*time.Millisecond))
		}
		fmt.Fprintf(w, ", watermark %s\n", ts(r.Watermark))
	} else {
		fmt.Fprintf(w, "pipeline %s: never claimed (no run has started)\n", r.Pipeline)
	}
	fmt.Fprintf(w, "newest window_end: %s\n\n", ts(r.NewestWindowEnd))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "partition\tnext offset\tlog start\thigh water\tlag\tupdated at\t")
	num := func(v *int64) string {
		if v == nil {
			return "-"
		}
		return fmt.Sprint(*v)
	}
	for _, p := range r.Partitions {
		fmt.Fprintf(tw, "%s/%d\t%s\t%s\t%s\t%s\t%s\t\n", p.Topic, p.Partition, num(p.NextOffset), num(p.LogStart),
			num(p.HighWater), num(p.Lag), ts(p.UpdatedAt))
	}
	tw.Flush()
	fmt.Fprintf(w, "total lag: %d\n", r.TotalLag)
	if len(r.Unowned) > 0 {
		fmt.Fprintf(w, "unowned partitions (no instance of the pipeline consumes them): %s\n", strings.Join(r.Unowned, ", "))
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
	if r.KafkaError != "" {
		fmt.Fprintf(w, "kafka: %s\n", r.KafkaError)
	}
}
