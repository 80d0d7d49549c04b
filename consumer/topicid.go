package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/store"
)

// TopicIDChangedError says a topic was deleted and recreated: the stored
// offsets belong to a topic of the same name with another Kafka topic ID
// (KIP-516), so they say nothing about the new log, even when its range
// covers them (docs/design.md "Start-up").
type TopicIDChangedError struct {
	Topic   string
	Stored  string // the topic ID the stored offsets belong to
	Current string // the topic ID the broker has now
}

func (e *TopicIDChangedError) Error() string {
	return fmt.Sprintf("topic %s was recreated: the stored offsets belong to topic ID %s, the broker's topic has ID %s; "+
		"restart with --on-offset-out-of-range=earliest or =latest to resume in the new topic there and skip the rest",
		e.Topic, e.Stored, e.Current)
}

// metadataTimeout bounds each step of a metadata request of the loop.
const metadataTimeout = 5 * time.Second

// topicMeta is what the metadata of one topic says.
type topicMeta struct {
	id         string  // Kafka topic ID as Kafka prints it; "" when the broker has none (Metadata < v10)
	partitions []int32 // every partition
}

// metadata asks a bootstrap broker, on a connection of its own, for the
// metadata of topics: their topic IDs (Metadata v10+, sarama config Version
// >= V2_8_0_0; sarama's client keeps them to itself) and partitions. A
// connection of its own keeps the loop's client and its broker connections
// out of it, and works the same after a broker restart. Its timeouts are
// short (metadataTimeout): the run loop waits for it.
func (s *source) metadata(topics []string) (map[string]topicMeta, error) {
	conf := *s.client.Config()
	conf.Net.DialTimeout = min(conf.Net.DialTimeout, metadataTimeout)
	conf.Net.ReadTimeout = min(conf.Net.ReadTimeout, metadataTimeout)
	conf.Net.WriteTimeout = min(conf.Net.WriteTimeout, metadataTimeout)
	var errs []error
	for _, addr := range s.brokers {
		b := sarama.NewBroker(addr)
		if err := b.Open(&conf); err != nil {
			errs = append(errs, err)
			continue
		}
		resp, err := b.GetMetadata(sarama.NewMetadataRequest(conf.Version, topics))
		_ = b.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", addr, err))
			continue
		}
		out := map[string]topicMeta{}
		for _, t := range resp.Topics {
			if !errors.Is(t.Err, sarama.ErrNoError) {
				return nil, fmt.Errorf("consumer: metadata of topic %q: %w", t.Name, t.Err)
			}
			m := topicMeta{}
			if t.Uuid != (sarama.Uuid{}) {
				m.id = t.Uuid.String()
			}
			for _, p := range t.Partitions {
				m.partitions = append(m.partitions, p.ID)
			}
			out[t.Name] = m
		}
		for _, t := range topics {
			if _, ok := out[t]; !ok {
				return nil, fmt.Errorf("consumer: metadata of topic %q: not in the answer", t)
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("consumer: metadata of topics %v: %w", topics, errors.Join(errs...))
}

// kafkaRetry runs fn up to 5 times, a second apart, until it succeeds: for
// the few requests the loop makes right after a broker restart.
func kafkaRetry(fn func() error) error {
	err := fn()
	for attempt := 1; attempt < 5 && err != nil; attempt++ {
		time.Sleep(time.Second)
		err = fn()
	}
	return err
}

// topics returns the topics the loop consumes, predictions first.
func (l *loop) topics() []string {
	var ts []string
	for _, t := range []string{l.cfg.PredictionsTopic, l.cfg.PositionsTopic} {
		if t != "" {
			ts = append(ts, t)
		}
	}
	return ts
}

// checkTopics runs at start-up, after the claim and before seeking: it reads
// the topics' metadata (their IDs and partitions, for discover) and compares
// each assigned partition's Kafka topic ID with the one its stored offsets
// belong to. A different ID fails with *TopicIDChangedError under
// --on-offset-out-of-range=fail; under earliest or latest the stored
// position moves to the new log's start or end (logged), in place in stored.
// The current IDs are then recorded (store.SetTopicIDs, with the resets, in
// one transaction). Offsets stored without a topic ID (a broker without topic
// IDs, or before schema 3) are taken as the current topic's: they cannot be
// checked.
func (l *loop) checkTopics(ctx context.Context, assigned []aggregate.PartitionID, stored map[aggregate.PartitionID]store.Position) error {
	cfg := l.cfg
	var meta map[string]topicMeta
	err := kafkaRetry(func() (err error) {
		meta, err = l.src.metadata(l.topics())
		return err
	})
	if err != nil {
		return err
	}
	topo := &l.src.topo
	topo.ids, topo.known = map[string]string{}, map[aggregate.PartitionID]bool{}
	topo.next = cfg.Now().Add(cfg.MetadataRefresh)
	for topic, m := range meta {
		topo.ids[topic] = m.id
		for _, p := range m.partitions {
			// Owning every partition, one added since the assignment was
			// resolved is found by the next refresh.
			topo.known[aggregate.PartitionID{Topic: topic, Partition: p}] = cfg.Partitions != nil
		}
	}
	for _, tp := range assigned {
		topo.known[tp] = true
	}
	var have map[aggregate.PartitionID]string
	if err := retry(ctx, cfg, "load topic IDs", func() error {
		return l.db.do(func(st *store.Store) (err error) {
			have, err = st.TopicIDs(ctx, cfg.Pipeline)
			return err
		})
	}); err != nil {
		return err
	}
	set := map[aggregate.PartitionID]string{}
	var resets []store.Position
	for _, tp := range assigned {
		id, old := topo.ids[tp.Topic], have[tp]
		if id == "" || id == old {
			continue
		}
		set[tp] = id
		pos, ok := stored[tp]
		if old == "" || !ok {
			continue
		}
		changed := &TopicIDChangedError{Topic: tp.Topic, Stored: old, Current: id}
		if cfg.OnOffsetOutOfRange == "fail" {
			return changed
		}
		logStart, hw, err := l.src.offsets(tp)
		if err != nil {
			return err
		}
		from := logStart
		if cfg.OnOffsetOutOfRange == "latest" {
			from = hw
		}
		cfg.Logger.Warn("topic recreated: resuming", "partition", tp.String(), "stored_topic_id", old, "topic_id", id,
			"stored", pos.NextOffset, "log_start", logStart, "high_water", hw, "resume_at", from)
		stored[tp] = store.Position{PartitionID: tp, NextOffset: from, ConsumedOffset: from, Seq: pos.Seq, LeaderEpoch: -1}
		resets = append(resets, stored[tp])
	}
	if len(set) == 0 {
		return nil
	}
	return retry(ctx, cfg, "record topic IDs", func() error {
		return l.db.do(func(st *store.Store) error {
			return st.SetTopicIDs(ctx, cfg.Pipeline, cfg.Owner, l.epoch, set, resets)
		})
	})
}

// idChanged returns a *TopicIDChangedError when id is not the topic ID topic
// had at start-up; nil when it is, or either is unknown.
func (l *loop) idChanged(topic, id string) error {
	if was := l.src.topo.ids[topic]; was != "" && id != "" && id != was {
		return &TopicIDChangedError{Topic: topic, Stored: was, Current: id}
	}
	return nil
}
