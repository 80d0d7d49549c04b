// Package produce writes events to Kafka: GTFS-realtime files mapped by
// package gtfsrt, or JSONL files line by line.
//
// Guarantees: the producer is idempotent with acks=all (one request in
// flight per broker), so retries neither duplicate nor reorder records of a
// partition; keys are trip_id for predictions and vehicle_id for positions,
// hashed like sarama's default (FNV-1a), so each key's order holds inside its
// partition; a call returns only after every record was acknowledged or
// failed, and its Counts say which.
package produce

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/ovstream/ovstream/feed/gtfsrt"
)

// Config says where and how to produce.
type Config struct {
	Brokers []string // host:port of the bootstrap brokers, at least one
	// ClientID is sent to the brokers; "" means "ovstream-produce".
	ClientID string
	// Sarama, when not nil, is used instead of NewSaramaConfig(ClientID)
	// (SASL, TLS, compression). It must keep the idempotence settings.
	Sarama *sarama.Config
}

// Validate reports the first problem of the configuration.
func (c Config) Validate() error {
	if len(c.Brokers) == 0 {
		return errors.New("produce: no brokers")
	}
	for _, b := range c.Brokers {
		if b == "" {
			return errors.New("produce: empty broker address")
		}
	}
	return nil
}

// NewSaramaConfig returns the producer configuration: idempotent, acks=all,
// hash partitioner on the key, batches flushed every 5 ms or 512 KiB, no
// topic auto-creation.
func NewSaramaConfig(clientID string) *sarama.Config {
	if clientID == "" {
		clientID = "ovstream-produce"
	}
	cfg := sarama.NewConfig()
	cfg.ClientID = clientID
	cfg.Version = sarama.V2_8_0_0 // >= 0.11 for idempotence; kfake speaks newer too
	cfg.Producer.Idempotent = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Net.MaxOpenRequests = 1 // required by sarama's idempotent producer
	cfg.Producer.Retry.Max = 10
	cfg.Producer.Retry.Backoff = 200 * time.Millisecond
	cfg.Producer.Partitioner = sarama.NewHashPartitioner
	cfg.Producer.Return.Successes = true
	cfg.Producer.Return.Errors = true
	cfg.Producer.Flush.Frequency = 5 * time.Millisecond
	cfg.Producer.Flush.Bytes = 512 << 10
	cfg.Metadata.Retry.Max = 10
	cfg.Metadata.Retry.Backoff = 250 * time.Millisecond
	// A topic is never created by producing to it (CheckTopics creates
	// one when asked): Kafka's default auto.create.topics.enable=true would
	// make a misspelt one.
	cfg.Metadata.AllowAutoTopicCreation = false
	return cfg
}

// Message is one record to produce.
type Message struct {
	Topic   string
	Key     []byte // nil: no key (the hash partitioner then picks a random partition)
	Value   []byte
	Headers []Header
	// Ack, when set, is called once the broker acknowledged the record (nil)
	// or the producer gave up on it (the error), from Send's goroutines.
	Ack func(err error)
}

// Header is one Kafka record header.
type Header struct {
	Key, Value []byte
}

// TopicCount is what happened to the records of one topic.
type TopicCount struct {
	Produced int   // acknowledged by the broker
	Failed   int   // given up by the producer after its retries
	FirstErr error // the first failure, nil when Failed == 0
}

// Counts maps topic -> TopicCount.
type Counts map[string]TopicCount

// Produced returns the number of acknowledged records of topic.
func (c Counts) Produced(topic string) int { return c[topic].Produced }

// Failed returns the number of failed records over all topics.
func (c Counts) Failed() int {
	n := 0
	for _, tc := range c {
		n += tc.Failed
	}
	return n
}

// Err returns nil when nothing failed, else an error with the failure count
// and the first failure of each topic.
func (c Counts) Err() error {
	var errs []error
	for topic, tc := range c {
		if tc.Failed > 0 {
			errs = append(errs, fmt.Errorf("produce: %d records to %s failed, first: %w", tc.Failed, topic, tc.FirstErr))
		}
	}
	return errors.Join(errs...)
}

// Send produces every message next returns (until it returns false) with
// an AsyncProducer and waits until each is acknowledged or failed. It stops
// taking messages when ctx is cancelled, still waits for those already handed
// over, and returns ctx.Err(). Otherwise the error is counts.Err(), or the
// failure to connect.
func Send(ctx context.Context, cfg Config, next func() (Message, bool)) (Counts, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	sc := cfg.Sarama
	if sc == nil {
		sc = NewSaramaConfig(cfg.ClientID)
	}
	p, err := sarama.NewAsyncProducer(cfg.Brokers, sc)
	if err != nil {
		return nil, fmt.Errorf("produce: connect to %v: %w", cfg.Brokers, err)
	}
	counts := make(Counts)
	var mu sync.Mutex
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for m := range p.Successes() {
			mu.Lock()
			tc := counts[m.Topic]
			tc.Produced++
			counts[m.Topic] = tc
			mu.Unlock()
			if ack, ok := m.Metadata.(func(error)); ok {
				ack(nil)
			}
		}
	}()
	go func() {
		defer wg.Done()
		for e := range p.Errors() {
			mu.Lock()
			tc := counts[e.Msg.Topic]
			tc.Failed++
			if tc.FirstErr == nil {
				tc.FirstErr = e.Err
			}
			counts[e.Msg.Topic] = tc
			mu.Unlock()
			if ack, ok := e.Msg.Metadata.(func(error)); ok {
				ack(e.Err)
			}
		}
	}()
	var ctxErr error
feed:
	for {
		m, ok := next()
		if !ok {
			break
		}
		pm := &sarama.ProducerMessage{Topic: m.Topic, Value: sarama.ByteEncoder(m.Value)}
		if m.Key != nil {
			pm.Key = sarama.ByteEncoder(m.Key)
		}
		for _, h := range m.Headers {
			pm.Headers = append(pm.Headers, sarama.RecordHeader{Key: h.Key, Value: h.Value})
		}
		if m.Ack != nil {
			pm.Metadata = m.Ack
		}
		select {
		case p.Input() <- pm:
		case <-ctx.Done():
			ctxErr = ctx.Err()
			break feed
		}
	}
	// AsyncClose flushes what is buffered, waits for the in-flight requests and
	// then closes Successes and Errors, which ends the two readers.
	p.AsyncClose()
	wg.Wait()
	if ctxErr != nil {
		return counts, ctxErr
	}
	return counts, counts.Err()
}

// Topics names the topics GTFSRT writes to.
type Topics struct {
	Predictions string // e.g. "arrival_predictions"
	Positions   string // e.g. "vehicle_positions"
}

// GTFSRT produces res: its predictions to topics.Predictions keyed by
// trip_id, then its positions to topics.Positions keyed by vehicle_id, each
// in the order of res (header-timestamp order of the files). First it
// removes from res what breaks the data contract (Conform), counting it in
// res.Skipped.
func GTFSRT(ctx context.Context, cfg Config, res *gtfsrt.Result, topics Topics) (Counts, error) {
	Conform(res)
	if len(res.Predictions) > 0 && topics.Predictions == "" {
		return nil, errors.New("produce: no predictions topic")
	}
	if len(res.Positions) > 0 && topics.Positions == "" {
		return nil, errors.New("produce: no positions topic")
	}
	i, j := 0, 0
	counts, err := Send(ctx, cfg, func() (Message, bool) {
		switch {
		case i < len(res.Predictions):
			p := res.Predictions[i]
			i++
			return Message{Topic: topics.Predictions, Key: []byte(p.TripID), Value: EncodePrediction(p)}, true
		case j < len(res.Positions):
			p := res.Positions[j]
			j++
			return Message{Topic: topics.Positions, Key: []byte(p.VehicleID), Value: EncodePosition(p)}, true
		}
		return Message{}, false
	})
	if counts != nil {
		// Name both topics even when nothing went to one of them.
		for _, t := range []string{topics.Predictions, topics.Positions} {
			if _, ok := counts[t]; !ok && t != "" {
				counts[t] = TopicCount{}
			}
		}
	}
	return counts, err
}

// JSONLCounts is what JSONL did with the lines of its input.
type JSONLCounts struct {
	Lines    int    // lines read, empty ones included
	Empty    int    // empty or blank lines, skipped
	NoKey    int    // produced without a key: invalid JSON or no key field
	Produced int    // acknowledged
	Failed   int    // given up by the producer
	Counts   Counts // per topic (one topic)
}

// KeyFields returns the key fields to try, in order, for a topic: vehicle_id
// then trip_id when positions is true (positions carry an optional trip_id
// too), else trip_id then vehicle_id.
func KeyFields(positions bool) []string {
	if positions {
		return []string{"vehicle_id", "trip_id"}
	}
	return []string{"trip_id", "vehicle_id"}
}

// JSONL produces each line of r as one record of topic, as it is (without
// its line ending), even when it is not valid JSON, so bad input can be
// tested; empty and blank lines are skipped. The key is the first of
// keyFields (see KeyFields) that the line's JSON object holds as a string;
// a line without one is produced without a key.
func JSONL(ctx context.Context, cfg Config, r io.Reader, topic string, keyFields []string) (JSONLCounts, error) {
	var jc JSONLCounts
	if topic == "" {
		return jc, errors.New("produce: no topic for the JSONL lines")
	}
	br := bufio.NewReaderSize(r, 1<<20)
	var readErr error
	counts, err := Send(ctx, cfg, func() (Message, bool) {
		for readErr == nil {
			line, err := br.ReadBytes('\n')
			if err != nil {
				if err != io.EOF {
					readErr = fmt.Errorf("produce: read line %d: %w", jc.Lines+1, err)
					return Message{}, false
				}
				readErr = io.EOF
				if len(line) == 0 {
					return Message{}, false
				}
			}
			jc.Lines++
			line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
			if len(bytes.TrimSpace(line)) == 0 {
				jc.Empty++
				continue
			}
			key := lineKey(line, keyFields)
			if key == nil {
				jc.NoKey++
			}
			return Message{Topic: topic, Key: key, Value: line}, true
		}
		return Message{}, false
	})
	jc.Counts = counts
	jc.Produced = counts.Produced(topic)
	jc.Failed = counts.Failed()
	if readErr != nil && readErr != io.EOF {
		return jc, errors.Join(readErr, err)
	}
	return jc, err
}

// lineKey returns the value of the first of fields that line holds as a
// JSON string, or nil.
func lineKey(line []byte, fields []string) []byte {
	var obj map[string]json.RawMessage
	if json.Unmarshal(line, &obj) != nil {
		return nil
	}
	for _, f := range fields {
		raw, ok := obj[f]
		if !ok {
			continue
		}
		var s string
		if json.Unmarshal(raw, &s) == nil && s != "" {
			return []byte(s)
		}
	}
	return nil
}
