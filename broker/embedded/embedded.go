// Package embedded runs an in-process Kafka-protocol broker (franz-go's kfake)
// for the demo and the tests.
//
// Guarantee: with a DataDir, every record the broker acknowledged (acks=all)
// survives a restart, a kill -9 included (tested), and even a machine crash,
// since every batch is fsynced before the acknowledgement (kfake.SyncWrites;
// a kill -9 alone would not need it, the OS keeps what was written). Without
// a DataDir everything is kept in memory and lost on Close.
package embedded

import (
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
)

// Config configures the embedded broker.
type Config struct {
	// Addr is the host:port to listen on; port 0 picks a free port.
	// "" means 127.0.0.1:0. The host is also the one advertised in metadata.
	Addr string
	// Topics to create at start, name -> number of partitions (> 0). After a
	// restart with a DataDir, topics that already exist are kept as they are
	// (their partition count is not changed).
	Topics map[string]int32
	// DataDir keeps the log and committed offsets across restarts;
	// "" keeps everything in memory.
	DataDir string
	// Advertised, when set, is the host:port put in metadata instead of the
	// listening address (Kafka's advertised.listeners): clients then reach
	// the broker through whatever listens there, e.g. a test's TCP proxy.
	Advertised string
	// AutoCreateTopics makes a metadata request that asks for it create a
	// missing topic, with 10 partitions, as Apache Kafka does by default
	// (auto.create.topics.enable=true); false, the default, creates none.
	AutoCreateTopics bool
}

// Validate reports the first problem of the configuration.
func (c Config) Validate() error {
	if c.Addr != "" {
		if _, port, err := net.SplitHostPort(c.Addr); err != nil {
			return fmt.Errorf("embedded: addr %q: %w", c.Addr, err)
		} else if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
			return fmt.Errorf("embedded: addr %q: bad port", c.Addr)
		}
	}
	for name, n := range c.Topics {
		if name == "" {
			return errors.New("embedded: empty topic name")
		}
		if n <= 0 {
			return fmt.Errorf("embedded: topic %s: partitions must be > 0, got %d", name, n)
		}
	}
	return nil
}

// Broker is a running embedded broker (a one-node kfake cluster).
type Broker struct {
	c    *kfake.Cluster
	addr string
}

// Start starts a one-node broker listening on cfg.Addr and creates cfg.Topics.
// Its DescribeTopicPartitions answers carry empty ELR lists where kfake
// leaves them null, as Kafka does (describepartitions.go), so that Kafka's
// Java AdminClient works against it.
func Start(cfg Config) (*Broker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	host, port := "127.0.0.1", 0
	if cfg.Addr != "" {
		h, p, _ := net.SplitHostPort(cfg.Addr)
		if h != "" {
			host = h
		}
		port, _ = strconv.Atoi(p)
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.Ports(port),
		// kfake always asks for 127.0.0.1:PORT; listen on the host we were given.
		kfake.ListenFn(func(network, address string) (net.Listener, error) {
			_, p, err := net.SplitHostPort(address)
			if err != nil {
				return nil, err
			}
			ln, err := net.Listen(network, net.JoinHostPort(host, p))
			if err != nil {
				return nil, err
			}
			return elrListener{ln}, nil
		}),
	}
	var listened string
	if cfg.Advertised != "" {
		adv, err := net.ResolveTCPAddr("tcp", cfg.Advertised)
		if err != nil {
			return nil, fmt.Errorf("embedded: advertised %q: %w", cfg.Advertised, err)
		}
		opts[2] = kfake.ListenFn(func(network, address string) (net.Listener, error) {
			_, p, err := net.SplitHostPort(address)
			if err != nil {
				return nil, err
			}
			ln, err := net.Listen(network, net.JoinHostPort(host, p))
			if err != nil {
				return nil, err
			}
			listened = ln.Addr().String()
			return advertisedListener{elrListener{ln}, adv}, nil // kfake advertises its listener's Addr
		})
	}
	if cfg.DataDir != "" {
		opts = append(opts, kfake.DataDir(cfg.DataDir), kfake.SyncWrites())
	}
	if cfg.AutoCreateTopics {
		opts = append(opts, kfake.AllowAutoTopicCreation())
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("embedded: start broker on %s:%d: %w", host, port, err)
	}
	b := &Broker{c: c, addr: listened}
	if addrs := c.ListenAddrs(); len(addrs) > 0 && listened == "" {
		b.addr = addrs[0]
	}
	names := make([]string, 0, len(cfg.Topics))
	for name := range cfg.Topics {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		err := c.CreateTopic(name, cfg.Topics[name], nil)
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			c.Close()
			return nil, fmt.Errorf("embedded: create topic %s with %d partitions: %w", name, cfg.Topics[name], err)
		}
	}
	return b, nil
}

// advertisedListener is a listener whose Addr is the advertised address.
type advertisedListener struct {
	net.Listener
	addr net.Addr
}

func (l advertisedListener) Addr() net.Addr { return l.addr }

// Addr returns the host:port the broker listens on (the real port when 0
// was asked), not Config.Advertised.
func (b *Broker) Addr() string { return b.addr }

// Close stops the broker; with a DataDir it flushes its state to disk first.
// Calling it more than once is harmless.
func (b *Broker) Close() { b.c.Close() }

// ParseTopics parses "name:partitions,name:partitions", e.g.
// "arrival_predictions:6,vehicle_positions:3". Spaces around items are ignored;
// a name without ":N" is an error.
func ParseTopics(s string) (map[string]int32, error) {
	topics := make(map[string]int32)
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, n, ok := strings.Cut(item, ":")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return nil, fmt.Errorf("topics: %q: want NAME:PARTITIONS", item)
		}
		p, err := strconv.ParseInt(strings.TrimSpace(n), 10, 32)
		if err != nil || p <= 0 {
			return nil, fmt.Errorf("topics: %q: partitions must be a positive integer", item)
		}
		if _, dup := topics[name]; dup {
			return nil, fmt.Errorf("topics: %q given twice", name)
		}
		topics[name] = int32(p)
	}
	if len(topics) == 0 {
		return nil, fmt.Errorf("topics: %q: no topic", s)
	}
	return topics, nil
}
