package consumer

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/IBM/sarama"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/store"
)

// DefaultFetchBytes is Config.FetchBytes when it is zero: 128 KiB.
const DefaultFetchBytes = 128 << 10

// Config configures Run. Zero values take the defaults in the comments.
type Config struct {
	Brokers          []string // Kafka bootstrap addresses, host:port; required
	PredictionsTopic string   // arrival predictions; "" = not consumed
	PositionsTopic   string   // vehicle positions; "" = not consumed
	// Partitions is the manual assignment; nil = every partition of both topics.
	Partitions []aggregate.PartitionID
	Pipeline   string // name in pipelines and stream_positions (store.CheckPipelineName); default "ovstream"
	Owner      string // who holds the fencing epoch, host:pid-nonce (cmd/ovstream instanceOwner); required, unique per running process
	// InstanceID is the stable id of this process across restarts (run
	// --instance-id: a StatefulSet pod name, a systemd instance name), ""
	// for none. Owner must then be store.InstanceOwner(InstanceID, ...): a
	// restart takes its earlier incarnation's partitions at once once that
	// process is gone (store.ClaimOptions.InstanceID), not after Lease.
	InstanceID string
	// Lease: a partition whose owner's heartbeat is younger is held, and a
	// claim of it waits as a standby; the owner renews its heartbeat every
	// Lease/3. Every instance of a pipeline should use the same. Default
	// 15s, at least 1s.
	Lease time.Duration
	// Takeover claims the partitions at once even while a live instance
	// holds them (that instance is fenced at its next commit and exits).
	Takeover bool

	Window time.Duration // tumbling window size; default 5m
	// AllowedLateness: watermark = min partition max event time - this;
	// default 2m, NoLateness for none (Lateness returns the one in force).
	AllowedLateness time.Duration
	IdleTimeout     time.Duration // a caught-up partition quiet this long stops holding the watermark; default 30s
	MaxFutureSkew   time.Duration // events later than wall clock + this are dead-lettered; default 5m
	// MaxDelay bounds the plausible |delay_s| of a prediction: beyond it,
	// a dead letter implausible (a service-day error, not a delay). Shared
	// by every instance of a pipeline like Window (pipelines.max_delay).
	// Default DefaultMaxDelay; 1s to 24h.
	MaxDelay      time.Duration
	FlushInterval time.Duration // time between commits; default 5s
	// IdleFinalize, for live feeds whose event times follow the wall clock:
	// when every assigned partition is idle, the watermark advances to wall
	// clock - AllowedLateness, so the last window of a quiet feed is written
	// without waiting for newer events. An event arriving later for a window
	// so finalized is dead-lettered late. Off by default (docs/design.md
	// "Watermark and lateness").
	IdleFinalize bool
	// ProvisionalInterval, when positive, makes a commit at most this often
	// write provisional rows of the open windows that changed, in its
	// transaction, for the records read so far (provisional.go,
	// docs/windows.md "Provisional rows"); zero: none. Not with Drain. An
	// instance of a split pipeline writes its partitions' share, merged with
	// the others'. The commit that finalizes (or merges) a window deletes
	// its provisional rows either way.
	ProvisionalInterval time.Duration
	// MetadataRefresh is how often the topics' metadata is read while
	// running: partitions added to a topic are found, and a topic deleted and
	// recreated is told by its topic ID (docs/design.md "Start-up"); default 1m.
	MetadataRefresh time.Duration
	// ConnectTimeout bounds the wait for Kafka's brokers at each start of
	// the run loop (WaitKafka: a connection refused or reset is retried);
	// default 1m (run --connect-timeout).
	ConnectTimeout time.Duration
	// StartOffset is where a partition without a stored position starts:
	// "earliest" (default) or "latest".
	StartOffset string
	// OnOffsetOutOfRange says what to do when a stored offset lies outside
	// [log start, high water], the offset being read leaves it while running,
	// or the topic was deleted and recreated: "fail" (default: Run returns
	// *OffsetOutOfRangeError or *TopicIDChangedError), "earliest" or "latest"
	// (resume there, log the skipped range).
	OnOffsetOutOfRange string
	// Drain ends the run once every partition reached the last stable offset
	// it had at start (the high water mark unless a transaction is open: a
	// read_committed reader never gets past an open transaction, so the
	// drain leaves it and what follows it to the next run): every open
	// window is finalized and committed.
	Drain bool

	// Retention, when positive, drops the partitions of delay_aggregates
	// (whole days) that end at or before the lowest stored watermark of
	// every pipeline of the database minus Retention: event time, not wall
	// clock (store.DropOldPartitions). Zero: off. At least Window.
	Retention time.Duration
	// DeadLetterRetention, when positive, deletes this pipeline's dead
	// letters stored more than this long ago (created_at, the database's
	// clock), replayed or not (store.DeleteOldDeadLetters). Zero: off.
	DeadLetterRetention time.Duration
	// RetentionInterval is the time between two retention rounds (the first
	// runs at start); default DefaultRetentionInterval.
	RetentionInterval time.Duration

	// MaxUncommitted pauses fetching while this many records consumed since
	// the last successful commit wait for one (a database outage), so memory
	// stays bounded; default 2,000,000.
	MaxUncommitted int64
	// FetchBytes is how many bytes one fetch asks for per partition
	// (sarama Consumer.Fetch.Default; the Java client's
	// max.partition.fetch.bytes). A larger record is still read: the broker
	// returns the first record batch whole even when it is larger (KIP-74,
	// Fetch v3 and later), and sarama doubles the request for older brokers.
	// Default 128 KiB: sarama's own 1 MiB was slower end to end and used
	// more memory (measured, docs/benchmarks-history.md "Results at 5M
	// predictions", proposal C).
	FetchBytes int32
	// ProgressInterval is the time between two "progress" info lines of the
	// log (progress.go); default DefaultProgressInterval, negative = none.
	ProgressInterval time.Duration
	// OnCommit, when set, is called after each successful commit with the
	// committed positions (e.g. to mirror them into a Kafka consumer group
	// for lag monitoring). It must not block for long; its errors are its own.
	OnCommit func(positions []store.Position)

	Metrics *Metrics         // nil = unregistered series
	Health  *Health          // nil = none; read by /readyz
	Sarama  *sarama.Config   // base client config (TLS, SASL); nil = defaults
	Logger  *slog.Logger     // nil = discard
	Now     func() time.Time // wall clock; nil = time.Now
}

// NoLateness is Config.AllowedLateness for an allowed lateness of zero: the
// watermark is the minimum partition max event time itself. (A zero
// AllowedLateness takes the default, so zero needs a value of its own; Run
// validates its Config again, so the marker stays in the Config.)
const NoLateness time.Duration = -1

// Lateness returns the allowed lateness in force: AllowedLateness, or 0 for
// NoLateness.
func (c *Config) Lateness() time.Duration {
	if c.AllowedLateness == NoLateness {
		return 0
	}
	return c.AllowedLateness
}

// WithDefaults returns c with each unset setting at its default: window 5m,
// allowed lateness 2m (NoLateness keeps zero), idle timeout 30s, max future
// skew 5m, flush interval 5s, metadata refresh 1m, connect timeout 1m,
// progress interval DefaultProgressInterval, lease DefaultLease, retention
// interval DefaultRetentionInterval, pipeline
// "ovstream", start offset "earliest", on offset out of range "fail", max
// uncommitted 2,000,000, fetch bytes DefaultFetchBytes, a discarding
// Logger, unregistered Metrics, a Health and time.Now.
func (c Config) WithDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.Window, 5*time.Minute)
	if c.AllowedLateness != NoLateness {
		def(&c.AllowedLateness, 2*time.Minute)
	}
	def(&c.IdleTimeout, 30*time.Second)
	def(&c.MaxFutureSkew, 5*time.Minute)
	def(&c.MaxDelay, DefaultMaxDelay)
	def(&c.FlushInterval, 5*time.Second)
	def(&c.MetadataRefresh, time.Minute)
	def(&c.ConnectTimeout, time.Minute)
	def(&c.ProgressInterval, DefaultProgressInterval)
	def(&c.Lease, DefaultLease)
	def(&c.RetentionInterval, DefaultRetentionInterval)
	if c.Pipeline == "" {
		c.Pipeline = "ovstream"
	}
	if c.StartOffset == "" {
		c.StartOffset = "earliest"
	}
	if c.OnOffsetOutOfRange == "" {
		c.OnOffsetOutOfRange = "fail"
	}
	if c.MaxUncommitted == 0 {
		c.MaxUncommitted = 2_000_000
	}
	if c.FetchBytes == 0 {
		c.FetchBytes = DefaultFetchBytes
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics(nil)
	}
	if c.Health == nil {
		c.Health = &Health{}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Validate reports the first invalid setting of c, its unset settings taken
// at their defaults (WithDefaults); it changes nothing.
func (c *Config) Validate() error {
	d := c.WithDefaults()
	return d.validate()
}

// validate reports the first invalid setting of c, whose defaults are set.
func (c *Config) validate() error {
	if len(c.Brokers) == 0 {
		return errors.New("consumer: no Kafka brokers (--brokers or KAFKA_BROKERS)")
	}
	if c.PredictionsTopic == "" && c.PositionsTopic == "" {
		return errors.New("consumer: no topics to consume")
	}
	if c.PredictionsTopic == c.PositionsTopic {
		return fmt.Errorf("consumer: predictions and positions topic are both %q", c.PredictionsTopic)
	}
	for name, d := range map[string]time.Duration{"window": c.Window, "allowed lateness": c.Lateness(),
		"idle timeout": c.IdleTimeout, "max future skew": c.MaxFutureSkew, "flush interval": c.FlushInterval,
		"provisional interval": c.ProvisionalInterval,
		"metadata refresh":     c.MetadataRefresh} {
		if d < 0 {
			return fmt.Errorf("consumer: %s %v is negative", name, d)
		}
	}
	if c.Window < time.Second {
		return fmt.Errorf("consumer: window %v is shorter than 1s", c.Window)
	}
	if err := c.validateRetention(); err != nil {
		return err
	}
	if err := c.validateMaxDelay(); err != nil {
		return err
	}
	if err := store.CheckPipelineName(c.Pipeline); err != nil {
		return fmt.Errorf("consumer: pipeline %q: %w", c.Pipeline, err)
	}
	if c.InstanceID != "" && store.OwnerInstance(c.Owner) != c.InstanceID {
		return fmt.Errorf("consumer: owner %q is not of instance id %q (store.InstanceOwner)", c.Owner, c.InstanceID)
	}
	if c.Owner == "" {
		return errors.New("consumer: no owner (host:pid-nonce) to claim partitions as")
	}
	if c.Lease < time.Second {
		return fmt.Errorf("consumer: lease %v is shorter than 1s", c.Lease)
	}
	switch c.StartOffset {
	case "earliest", "latest":
	default:
		return fmt.Errorf("consumer: start offset %q: want earliest or latest", c.StartOffset)
	}
	switch c.OnOffsetOutOfRange {
	case "fail", "earliest", "latest":
	default:
		return fmt.Errorf("consumer: on offset out of range %q: want fail, earliest or latest", c.OnOffsetOutOfRange)
	}
	for _, p := range c.Partitions {
		if p.Topic != c.PredictionsTopic && p.Topic != c.PositionsTopic {
			return fmt.Errorf("consumer: assigned partition %s is not of a consumed topic", p)
		}
	}
	if c.FetchBytes < 0 {
		return fmt.Errorf("consumer: fetch bytes %d is negative", c.FetchBytes)
	}
	if c.MaxUncommitted < 0 {
		return fmt.Errorf("consumer: max uncommitted messages %d is negative", c.MaxUncommitted)
	}
	return nil
}

// topics returns the consumed topics: predictions, then positions.
func (c *Config) topics() []string {
	var ts []string
	for _, t := range []string{c.PredictionsTopic, c.PositionsTopic} {
		if t != "" {
			ts = append(ts, t)
		}
	}
	return ts
}
