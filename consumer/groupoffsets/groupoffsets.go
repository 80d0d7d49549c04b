// Package groupoffsets mirrors the offsets ovstream committed to PostgreSQL
// into a Kafka consumer group, so that standard Kafka tooling
// (kafka-consumer-groups.sh, kcat, Burrow, lag exporters) shows the
// pipeline's lag.
//
// Guarantee: monitoring only. The mirror is never read back (ovstream seeks
// from stream_positions in PostgreSQL, docs/design.md "The commit"), it never blocks the run
// loop (Commit only records the newest offsets; one goroutine sends them),
// and a failure is logged and counted, never fatal. The committed offset of
// a partition is its stored next_offset: every record below it is durable in
// PostgreSQL, so "high water mark minus committed offset" is the sum of the
// ovstream_partition_lag_messages (records not yet read) and
// ovstream_partition_held_messages (read, not yet committable) gauges.
//
// Commits go through franz-go's admin client (kadm.Client.CommitOffsets):
// "simple" commits (generation -1, no member id), as Kafka accepts for a
// group without members; the first one creates the group. kfake answers
// OffsetFetch of a never-used group with GROUP_ID_NOT_FOUND, so sarama's
// OffsetManager fails there; Apache Kafka answers offset -1 and no error, as
// the protocol says (integration TestRealKafkaOffsetFetchOfNeverUsedGroup):
// Kafka is right, and kadm works on both. If another client joins a group
// of the same name, the broker refuses the commits (UNKNOWN_MEMBER_ID):
// they are counted as failures, and the pipeline goes on.
package groupoffsets

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/store"
)

// Metadata is stored with every committed offset, for whoever reads the group.
const Metadata = "ovstream: monitoring only; the truth is stream_positions in PostgreSQL"

// Config configures a Mirror.
type Config struct {
	Brokers []string // Kafka bootstrap addresses; required
	Group   string   // consumer group id (ovstream uses the pipeline name); required
	// Sarama is the base client config of the run (nil = defaults): its
	// TLS and SASL settings (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) apply to
	// the mirror's own franz-go client, and its ClientID.
	Sarama *sarama.Config
	Logger *slog.Logger // nil = discard
	// OnFailure is called once per failed commit (a metric counter).
	OnFailure func(err error)
	// OnSuccess is called once per successful commit (tests, metrics); optional.
	OnSuccess func(offsets map[aggregate.PartitionID]int64)
	// Timeout bounds one commit, connection included; default 10s.
	Timeout time.Duration
}

// Mirror sends the newest committed positions to the consumer group from one
// goroutine. Start it with Start; stop it with Close.
type Mirror struct {
	cfg Config

	mu      sync.Mutex
	pending map[aggregate.PartitionID]int64 // newest offsets not yet sent
	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}

	opts    []kgo.Opt
	client  *kgo.Client // owned by the goroutine
	failing bool        // the last attempt failed (log once, not at every flush)
}

// Start validates cfg and starts the mirror's goroutine. It does not connect:
// the first commit does, so an unreachable broker is a counted failure, not
// a start-up error.
func Start(cfg Config) (*Mirror, error) {
	if len(cfg.Brokers) == 0 {
		return nil, errors.New("groupoffsets: no brokers")
	}
	if cfg.Group == "" {
		return nil, errors.New("groupoffsets: no consumer group")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Sarama == nil {
		cfg.Sarama = sarama.NewConfig()
	}
	opts, err := ClientOptions(cfg.Sarama)
	if err != nil {
		return nil, err
	}
	m := &Mirror{cfg: cfg, opts: append(opts, kgo.SeedBrokers(cfg.Brokers...), kgo.DialTimeout(cfg.Timeout)),
		pending: map[aggregate.PartitionID]int64{}, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go m.loop()
	return m, nil
}

// Commit records positions (their NextOffset) to be sent; it never blocks on
// Kafka. Use it as consumer.Config.OnCommit.
func (m *Mirror) Commit(positions []store.Position) {
	m.mu.Lock()
	for _, p := range positions {
		if old, ok := m.pending[p.PartitionID]; !ok || p.NextOffset > old {
			m.pending[p.PartitionID] = p.NextOffset
		}
	}
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// Close sends what is still pending (one attempt, bounded by Timeout) and
// stops the goroutine; nothing outlives it.
func (m *Mirror) Close() {
	close(m.stop)
	<-m.done
}

func (m *Mirror) loop() {
	defer close(m.done)
	defer func() {
		if m.client != nil {
			m.client.Close()
		}
	}()
	for {
		select {
		case <-m.wake:
			m.send()
		case <-m.stop:
			m.send()
			return
		}
	}
}

// send commits the pending offsets; on failure they stay pending (merged
// with newer ones) for the next wake-up.
func (m *Mirror) send() {
	m.mu.Lock()
	offsets := m.pending
	m.pending = map[aggregate.PartitionID]int64{}
	m.mu.Unlock()
	if len(offsets) == 0 {
		return
	}
	err := m.commit(offsets)
	if err == nil {
		if m.failing {
			m.cfg.Logger.Info("kafka consumer group offsets committed again", "group", m.cfg.Group)
		}
		m.failing = false
		if m.cfg.OnSuccess != nil {
			m.cfg.OnSuccess(offsets)
		}
		return
	}
	m.mu.Lock()
	for tp, off := range offsets {
		if newer, ok := m.pending[tp]; !ok || off > newer {
			m.pending[tp] = off
		}
	}
	m.mu.Unlock()
	if m.cfg.OnFailure != nil {
		m.cfg.OnFailure(err)
	}
	level := slog.LevelWarn
	if m.failing {
		level = slog.LevelDebug // said once already; the metric counts the rest
	}
	m.failing = true
	m.cfg.Logger.Log(context.Background(), level, "cannot commit offsets to the Kafka consumer group (monitoring only: the pipeline goes on)",
		"group", m.cfg.Group, "err", err)
}

func (m *Mirror) commit(offsets map[aggregate.PartitionID]int64) error {
	if m.client == nil {
		c, err := kgo.NewClient(m.opts...)
		if err != nil {
			return fmt.Errorf("groupoffsets: Kafka client for %v: %w", m.cfg.Brokers, err)
		}
		m.client = c
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.Timeout)
	defer cancel()
	var offs kadm.Offsets
	for tp, off := range offsets {
		offs.Add(kadm.Offset{Topic: tp.Topic, Partition: tp.Partition, At: off, LeaderEpoch: -1, Metadata: Metadata})
	}
	resp, err := kadm.NewClient(m.client).CommitOffsets(ctx, m.cfg.Group, offs)
	if err != nil {
		return fmt.Errorf("groupoffsets: commit to group %q: %w", m.cfg.Group, err)
	}
	var bad []string
	resp.Each(func(r kadm.OffsetResponse) {
		if r.Err != nil {
			bad = append(bad, fmt.Sprintf("%s/%d: %v", r.Topic, r.Partition, r.Err))
		}
	})
	if len(bad) > 0 {
		sort.Strings(bad)
		return fmt.Errorf("groupoffsets: commit to group %q refused for %d partitions: %s", m.cfg.Group, len(bad),
			strings.Join(bad[:min(len(bad), 3)], ", "))
	}
	return nil
}

// ClientOptions turns the client ID, TLS and SASL settings of c into
// franz-go options, so the mirror connects as every other client of the
// run does.
func ClientOptions(c *sarama.Config) ([]kgo.Opt, error) {
	id := c.ClientID
	if id == "" || id == "sarama" {
		id = "ovstream"
	}
	opts := []kgo.Opt{kgo.ClientID(id), kgo.RequestRetries(1), kgo.MetadataMinAge(time.Second)}
	if c.Net.TLS.Enable {
		tc := c.Net.TLS.Config
		if tc == nil {
			tc = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		opts = append(opts, kgo.DialTLSConfig(tc.Clone()))
	}
	if !c.Net.SASL.Enable {
		return opts, nil
	}
	user, pass := c.Net.SASL.User, c.Net.SASL.Password
	switch c.Net.SASL.Mechanism {
	case sarama.SASLTypePlaintext, "":
		opts = append(opts, kgo.SASL(plain.Auth{User: user, Pass: pass}.AsMechanism()))
	case sarama.SASLTypeSCRAMSHA256:
		opts = append(opts, kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha256Mechanism()))
	case sarama.SASLTypeSCRAMSHA512:
		opts = append(opts, kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha512Mechanism()))
	default:
		return nil, fmt.Errorf("groupoffsets: SASL mechanism %s is not supported", c.Net.SASL.Mechanism)
	}
	return opts, nil
}
