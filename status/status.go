package status

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/IBM/sarama"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/kafkaconn"
	"github.com/ovstream/ovstream/store"
)

// Partition is one partition in `status --json`.
type Partition struct {
	Topic          string     `json:"topic"`
	Partition      int32      `json:"partition"`
	NextOffset     *int64     `json:"next_offset"`     // stored committable offset; null = no stored position
	ConsumedOffset *int64     `json:"consumed_offset"` // consumed position stored by the last commit: one past the last record read
	Held           *int64     `json:"held"`            // consumed_offset - next_offset: read, not yet committable (open windows); null = no stored position
	UpdatedAt      *time.Time `json:"updated_at"`
	LogStart       *int64     `json:"log_start"`       // null when Kafka could not be asked
	HighWater      *int64     `json:"high_water"`      // null when Kafka could not be asked
	Lag            *int64     `json:"lag"`             // records not yet read: high_water - consumed_offset (- log_start when nothing is stored); null = unknown
	Owner          string     `json:"owner"`           // host:pid-nonce of the instance holding it; "" = none
	Epoch          int64      `json:"epoch"`           // its fencing epoch (0 = never claimed)
	Lease          string     `json:"lease"`           // alive, expired or released ("" = never claimed)
	HeartbeatAgeS  *float64   `json:"heartbeat_age_s"` // seconds since the owner's heartbeat (database clock); null = none
}

// Instance is one running instance in `status --json` (pipeline_instances).
type Instance struct {
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

// Report is `status --json`.
type Report struct {
	Pipeline        string                       `json:"pipeline"`
	Claimed         bool                         `json:"claimed"`
	Epoch           int64                        `json:"epoch"`
	Owner           string                       `json:"owner"`
	HeartbeatAt     *time.Time                   `json:"heartbeat_at"`
	Watermark       *time.Time                   `json:"watermark"`
	NewestWindowEnd *time.Time                   `json:"newest_window_end"`
	LeaseS          float64                      `json:"lease_s"` // the --lease the lease states are judged by, seconds
	Partitions      []Partition                  `json:"partitions"`
	Instances       []Instance                   `json:"instances"`
	TotalLag        *int64                       `json:"total_lag"`  // null: unknown (a partition's lag could not be read)
	TotalHeld       int64                        `json:"total_held"` // the partitions' held, summed
	DeadLetters     map[string]store.ReasonCount `json:"dead_letters"`
	RefusedWindows  int64                        `json:"refused_windows"` // rows in refused_windows (docs/runbook.md)
	KafkaError      string                       `json:"kafka_error,omitempty"`
	Merge           *Merge                       `json:"merge"` // split pipelines (merge.go)
	// Unowned lists, as topic/partition, the partitions that no instance of
	// the pipeline owns, of the topics it owns a partition of: e.g. added to
	// a topic while instances with --partitions run. Nothing consumes them.
	Unowned []string `json:"unowned_partitions"`
	// Replica is set when the server read is a hot standby (replica.go).
	Replica *store.Replica `json:"replica"`
	// ClosableAgeS is freshness: the largest closable_age_s of the running
	// instances (the age of the oldest closable window not yet written,
	// seconds); 0 when every closable window is written or none runs.
	ClosableAgeS float64 `json:"closable_age_s"`
}

// PipelineTopics returns the pipeline's own topics: those recorded in
// pipelines.topics at claim, else those of its stored positions.
func PipelineTopics(s *store.Status) []string {
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

func FromStore(pipeline string, s *store.Status) *Report {
	r := &Report{Pipeline: pipeline, DeadLetters: s.DeadLetters, RefusedWindows: s.RefusedWindows}
	if p := s.Pipeline; p != nil {
		r.Claimed, r.Epoch, r.Owner = true, p.Epoch, p.Owner
		r.HeartbeatAt, r.Watermark = timePtr(p.HeartbeatAt), timePtr(p.Watermark)
	}
	r.NewestWindowEnd = timePtr(s.NewestWindowEnd)
	for _, p := range s.Positions {
		next, consumed, at := p.NextOffset, p.ConsumedOffset, p.UpdatedAt
		held := consumed - next
		r.TotalHeld += held
		r.Partitions = append(r.Partitions, Partition{Topic: p.Topic, Partition: p.Partition,
			NextOffset: &next, ConsumedOffset: &consumed, Held: &held, UpdatedAt: &at})
	}
	return r
}

// AddOwnership adds each partition's owner, epoch and lease (adding the
// partitions claimed but never committed that Kafka did not list), the
// instances and the partitions no instance ever claimed (Report.Unowned).
func AddOwnership(r *Report, lease time.Duration, leases []store.PartitionLease, instances []store.Instance) {
	r.LeaseS = lease.Seconds()
	at := map[aggregate.PartitionID]int{}
	for i, p := range r.Partitions {
		at[aggregate.PartitionID{Topic: p.Topic, Partition: p.Partition}] = i
	}
	for _, l := range leases {
		i, ok := at[l.PartitionID]
		if !ok {
			i = len(r.Partitions)
			r.Partitions = append(r.Partitions, Partition{Topic: l.Topic, Partition: l.Partition})
		}
		p := &r.Partitions[i]
		p.Owner, p.Epoch, p.Lease = l.Owner, l.Epoch, l.State
		if l.HeartbeatAge >= 0 {
			age := l.HeartbeatAge.Seconds()
			p.HeartbeatAgeS = &age
		}
	}
	sortPartitions(r.Partitions)
	r.Instances = []Instance{}
	for _, in := range instances {
		s := Instance{Owner: in.Owner, Role: in.Role, Partitions: []string{}, StartedAt: in.StartedAt,
			HeartbeatAgeS: in.HeartbeatAge.Seconds(), Alive: in.Alive, ClosableSince: timePtr(in.ClosableSince),
			ClosableAgeS: in.ClosableAge.Seconds()}
		r.ClosableAgeS = max(r.ClosableAgeS, s.ClosableAgeS)
		for _, p := range in.Partitions {
			s.Partitions = append(s.Partitions, p.String())
		}
		r.Instances = append(r.Instances, s)
	}
	r.Unowned = unowned(r.Partitions, leases)
}

// printFreshness prints the status line of freshness: the age of the oldest
// closable window not yet written, over the running instances.
func printFreshness(w io.Writer, r *Report) {
	var oldest *Instance
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

func sortPartitions(ps []Partition) {
	slices.SortFunc(ps, func(a, b Partition) int {
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
func unowned(ps []Partition, leases []store.PartitionLease) []string {
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

// KafkaOffsets adds to r the partitions of topics that have no stored
// position and fills in log start, high water and lag, read with client; the
// total lag only when every partition's lag could be read (else it stays
// nil: unknown). The error joins every reading that failed, prefixed
// "kafka: ".
func KafkaOffsets(r *Report, client sarama.Client, topics []string) error {
	have := map[aggregate.PartitionID]bool{}
	for _, p := range r.Partitions {
		have[aggregate.PartitionID{Topic: p.Topic, Partition: p.Partition}] = true
	}
	var errs []error
	for _, topic := range topics {
		ps, err := client.Partitions(topic)
		if err != nil {
			errs = append(errs, fmt.Errorf("partitions of topic %s: %w", topic, kafkaconn.Unprefixed(err)))
			continue
		}
		for _, p := range ps {
			if !have[aggregate.PartitionID{Topic: topic, Partition: p}] {
				r.Partitions = append(r.Partitions, Partition{Topic: topic, Partition: p})
			}
		}
	}
	sortPartitions(r.Partitions)
	for i := range r.Partitions {
		p := &r.Partitions[i]
		start, err := client.GetOffset(p.Topic, p.Partition, sarama.OffsetOldest)
		if err != nil {
			errs = append(errs, fmt.Errorf("log start of %s/%d: %w", p.Topic, p.Partition, kafkaconn.Unprefixed(err)))
			continue
		}
		hw, err := client.GetOffset(p.Topic, p.Partition, sarama.OffsetNewest)
		if err != nil {
			errs = append(errs, fmt.Errorf("high water of %s/%d: %w", p.Topic, p.Partition, kafkaconn.Unprefixed(err)))
			continue
		}
		from := start
		if p.ConsumedOffset != nil {
			from = *p.ConsumedOffset
		}
		lag := hw - from
		p.LogStart, p.HighWater, p.Lag = &start, &hw, &lag
	}
	var err error
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

func Print(w io.Writer, r *Report, now time.Time) {
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
	fmt.Fprintln(tw, "partition\tnext offset\tconsumed\theld\tlog start\thigh water\tlag\tupdated at\towner\tepoch\tlease\t")
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
		fmt.Fprintf(tw, "%s/%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t\n", p.Topic, p.Partition, num(p.NextOffset),
			num(p.ConsumedOffset), num(p.Held), num(p.LogStart), num(p.HighWater), lag(p.Lag), ts(p.UpdatedAt), dash(p.Owner), p.Epoch, lease)
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
		fmt.Fprintf(w, "total lag: %d (held in open windows: %d)\n", *r.TotalLag, r.TotalHeld)
	} else {
		fmt.Fprintf(w, "total lag: unknown (Kafka could not be read); held in open windows: %d\n", r.TotalHeld)
	}
	if len(r.Unowned) > 0 {
		fmt.Fprintf(w, "unowned partitions (no instance of the pipeline ever claimed them): %s\n", strings.Join(r.Unowned, ", "))
	}
	fmt.Fprint(w, "\ndead letters:")
	if len(r.DeadLetters) == 0 {
		fmt.Fprint(w, " none")
	}
	for _, reason := range slices.Sorted(maps.Keys(r.DeadLetters)) {
		c := r.DeadLetters[reason]
		fmt.Fprintf(w, " %s %d (%d replayed);", reason, c.Total, c.Replayed)
	}
	fmt.Fprintln(w)
	if r.RefusedWindows > 0 {
		fmt.Fprintf(w, "refused merged rows: %d in table refused_windows, not in delay_aggregates: fix the cause and re-apply them (docs/runbook.md)\n",
			r.RefusedWindows)
	}
	if r.KafkaError != "" {
		fmt.Fprintf(w, "%s\n", r.KafkaError)
	}
}
