package consumer

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/consumer/groupoffsets"
	"github.com/ovstream/ovstream/store"
)

// record is one Kafka record as the run loop sees it: our type, never sarama's.
type record struct {
	tp     aggregate.PartitionID
	offset int64
	epoch  int32 // the leader epoch its reader read under (truncation.go), -1 unknown
	ts     int64 // the record's Kafka timestamp (CreateTime or LogAppendTime), Unix ns; 0 when it has none
	key    []byte
	value  []byte
	// Decoded by the partition's reader goroutine, off the run loop:
	pred  aggregate.Prediction // when tp.Topic is the predictions topic
	names aggregate.RawNames   // pred's names: aliases of value (Names.Observe copies what changed)
	pos   aggregate.Position   // otherwise
	derr  error                // the decode error, if any
	// A copy `dlq replay` produced (store.HeaderSource; predictions only):
	// the record it was replayed from, and whether its header lets it be
	// merged into a final window (store.HeaderFinal).
	src        store.SourceID
	mergeFinal bool
}

// maxBatch bounds how many records a partition reader hands over at once.
const maxBatch = 512

// batches recycles the readers' batches: a batch of maxBatch records is
// about 180 KB, and growing a new one per hand-over (each growth a zeroed
// large allocation) cost CPU, plus the garbage collector's share (measured,
// docs/benchmarks-history.md "6. Fetch size, garbage collector, batches").
var batches = sync.Pool{New: func() any { return new([]record) }}

// newBatch returns an empty batch with room for maxBatch records.
func newBatch() []record {
	b := *batches.Get().(*[]record)
	if cap(b) < maxBatch {
		b = make([]record, 0, maxBatch)
	}
	return b[:0]
}

// releaseBatch hands b back for reuse once nothing refers to its records any
// more; its records are cleared so that the pool keeps no fetch buffer alive.
func releaseBatch(b []record) {
	clear(b)
	b = b[:0]
	batches.Put(&b)
}

// OffsetOutOfRangeError says a stored offset lies outside what the broker
// still holds: below the log start offset (deleted by retention) or above the
// high water mark (the topic was recreated). Kafka docs: ListOffsets.
// Running: the offset is the one a partition reader was reading when the
// broker answered OFFSET_OUT_OF_RANGE (the broker lost or truncated the log).
type OffsetOutOfRangeError struct {
	aggregate.PartitionID
	Offset    int64 // the stored next offset, or the one being read
	LogStart  int64 // earliest offset available
	HighWater int64 // one past the last offset written
	Running   bool  // Offset is the position being read, not a stored one
}

func (e *OffsetOutOfRangeError) Error() string {
	what := fmt.Sprintf("stored offset %d is outside the available range [%d, %d]", e.Offset, e.LogStart, e.HighWater)
	if e.Running {
		what = fmt.Sprintf("offset %d being read is no longer in the log: available range [%d, %d] "+
			"(the broker lost or truncated it)", e.Offset, e.LogStart, e.HighWater)
	}
	return fmt.Sprintf("%s: %s; restart with --on-offset-out-of-range=earliest or =latest to resume there and skip the rest",
		e.PartitionID, what)
}

// source adapts sarama: metadata, offsets and one reader per assigned
// partition, all feeding one channel of record batches.
//
// The readers and the run loop's requests (high water marks, marker probes)
// use two clients, so two sets of broker connections: sarama holds a
// broker's connection lock until the answer arrives, and a caught-up fetch
// waits up to Consumer.MaxWaitTime (fetchMaxWait) for data, so on one connection
// every high water mark request of the run loop queued behind a fetch, and
// the loop stalled for seconds per poll (seen in the crash suite's drains).
type source struct {
	predTopic, posTopic string        // what decode decodes as what
	brokers             []string      // bootstrap addresses, for topic IDs (topicid.go)
	topo                topology      // the run loop's view of the topics (discover.go); only the loop touches it
	client              sarama.Client // metadata and offsets for the run loop
	admin               *kgo.Client   // end offsets (endoffsets.go)
	fetches             sarama.Client // the partition consumers' own
	consumer            sarama.Consumer
	pcs                 map[aggregate.PartitionID]sarama.PartitionConsumer
	out                 chan []record
	errs                chan error
	stop                chan struct{}
	wg                  sync.WaitGroup
	refreshing          atomic.Bool    // a metadata refresh after a failed reading is under way (refreshMetadata)
	refreshMu           sync.Mutex     // guards closed and refreshWG.Add
	closed              bool           // close began: no refresh starts
	refreshWG           sync.WaitGroup // the refresh under way; close ends it and waits
	probeBytes          int32          // what a marker probe asks for: one fetch of a partition
}

// fetchMaxWait is how long the broker holds a fetch of a caught-up reader
// for data (Kafka's fetch.max.wait.ms; sarama Consumer.MaxWaitTime, 500 ms
// by default, 100 ms the least it advises). Closing a reader waits for its
// fetch in flight (sarama), so every stop and the end of every drain waited
// for up to 500 ms (docs/benchmarks-history.md "The drain's tail"). Data
// ends a fetch at once, so it costs latency nothing; a caught-up instance
// sends at most ten empty fetches a second per broker.
const fetchMaxWait = 100 * time.Millisecond

// A reader never creates the topic it reads. sarama's metadata requests ask
// the broker to create a missing topic by default (Metadata.AllowAutoTopicCreation,
// Metadata request v4+, KIP-204), and Apache Kafka does so when
// auto.create.topics.enable is true, its default: `run` on a misspelt or not
// yet created topic got an empty topic of num.partitions (1) partitions and
// drained it, exit 0 (TestRealKafkaMissingTopic, Kafka 4.3.1). Kafka's Java
// consumer has allow.auto.create.topics (KIP-361) for the same; readers here
// set it false, so a missing topic is an error naming it.
func newSaramaConfig(base *sarama.Config, fetchBytes int32) *sarama.Config {
	c := base
	if c == nil {
		c = sarama.NewConfig()
	}
	c.ClientID = "ovstream"
	if !c.Version.IsAtLeast(sarama.V2_1_0_0) {
		c.Version = sarama.V2_1_0_0
	}
	c.Consumer.IsolationLevel = sarama.ReadCommitted
	c.Metadata.AllowAutoTopicCreation = false // noAutoCreate
	c.Consumer.Return.Errors = true
	c.Consumer.Offsets.AutoCommit.Enable = false
	c.Consumer.MaxWaitTime = fetchMaxWait
	if fetchBytes > 0 {
		c.Consumer.Fetch.Default = fetchBytes
	}
	return c
}

func openSource(brokers []string, base *sarama.Config, fetchBytes int32) (*source, error) {
	client, err := sarama.NewClient(brokers, newSaramaConfig(base, fetchBytes))
	if err != nil {
		return nil, fmt.Errorf("consumer: connect to Kafka %v: %w", brokers, err)
	}
	fetches, err := sarama.NewClient(brokers, newSaramaConfig(base, fetchBytes))
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("consumer: connect to Kafka %v: %w", brokers, err)
	}
	cons, err := sarama.NewConsumerFromClient(fetches)
	if err != nil {
		fetches.Close()
		client.Close()
		return nil, fmt.Errorf("consumer: %w", err)
	}
	opts, err := groupoffsets.ClientOptions(client.Config())
	var admin *kgo.Client
	if err == nil {
		admin, err = newAdminClient(opts, brokers)
	}
	if err != nil {
		cons.Close()
		fetches.Close()
		client.Close()
		return nil, fmt.Errorf("consumer: %w", err)
	}
	return &source{
		brokers:  brokers,
		client:   client,
		admin:    admin,
		fetches:  fetches,
		consumer: cons,
		pcs:      map[aggregate.PartitionID]sarama.PartitionConsumer{},
		out:      make(chan []record, 64),
		errs:     make(chan error, 16),
		stop:     make(chan struct{}),
		// newSaramaConfig set the fetch size: probes ask for the same.
		probeBytes: fetches.Config().Consumer.Fetch.Default,
	}, nil
}

// partitions returns every partition of topic.
func (s *source) partitions(topic string) ([]int32, error) {
	ps, err := s.client.Partitions(topic)
	if err != nil {
		return nil, fmt.Errorf("consumer: partitions of topic %q: %w", topic, err)
	}
	return ps, nil
}

// offsets returns tp's log start offset and high water mark.
func (s *source) offsets(tp aggregate.PartitionID) (logStart, highWater int64, err error) {
	if logStart, err = s.client.GetOffset(tp.Topic, tp.Partition, sarama.OffsetOldest); err != nil {
		return 0, 0, fmt.Errorf("consumer: log start offset of %s: %w", tp, err)
	}
	if highWater, err = s.client.GetOffset(tp.Topic, tp.Partition, sarama.OffsetNewest); err != nil {
		return 0, 0, fmt.Errorf("consumer: high water mark of %s: %w", tp, err)
	}
	return logStart, highWater, nil
}

// drainTarget is where a drain of tp ends: its last stable offset (see
// stableOffset), which is hw when no transaction is open.
func (s *source) drainTarget(tp aggregate.PartitionID, hw int64) (int64, error) {
	lso, err := s.stableOffset(tp)
	if err != nil {
		return 0, err
	}
	return min(lso, hw), nil
}

// start begins reading tp at offset, under the leader epoch the fetch
// client's metadata holds for tp now (readEpoch), or floor when that is
// lower: the epoch the records below offset were read under (-1 none), which
// a metadata answer of a broker that lags behind (a fresh client learns tp's
// epoch from any broker) must not undercut (truncation.go).
func (s *source) start(tp aggregate.PartitionID, offset int64, floor int32) error {
	epoch, err := s.readEpoch(tp)
	if err != nil {
		return fmt.Errorf("consumer: start %s at offset %d: %w", tp, offset, err)
	}
	epoch = max(epoch, floor)
	pc, err := s.consumer.ConsumePartition(tp.Topic, tp.Partition, offset)
	if err != nil {
		return fmt.Errorf("consumer: start %s at offset %d: %w", tp, offset, err)
	}
	s.pcs[tp] = pc
	s.wg.Add(2)
	go s.read(tp, pc, offset, epoch)
	go func() {
		defer s.wg.Done()
		for err := range pc.Errors() {
			select {
			case s.errs <- err:
			default: // the loop is behind on errors; sarama retries by itself
			}
		}
	}()
	return nil
}

// read forwards pc's messages, from offset next on, in batches until the
// source stops, each record marked with epoch, the leader epoch read under.
// A partition reader never ends silently: when sarama closes pc while the
// source is not stopping (it does on OFFSET_OUT_OF_RANGE), read hands the run
// loop a *readerEnded on errs. When the leader epoch of tp in the fetch
// client's metadata is above epoch after a batch was taken from pc (a leader
// change, which sarama follows by itself), or tp has no leader there, the
// batch is dropped and read hands the loop a *leaderChanged and ends
// (truncation.go says why).
func (s *source) read(tp aggregate.PartitionID, pc sarama.PartitionConsumer, next int64, epoch int32) {
	defer s.wg.Done()
	msgs := pc.Messages()
	for {
		m, ok := <-msgs
		if !ok {
			s.ended(tp, next)
			return
		}
		handed := next // one past the last record handed over
		next = m.Offset + 1
		batch := append(newBatch(), s.decode(tp, m, epoch))
	more:
		for len(batch) < maxBatch {
			select {
			case m, ok = <-msgs:
				if !ok {
					break more
				}
				next = m.Offset + 1
				batch = append(batch, s.decode(tp, m, epoch))
			default:
				break more
			}
		}
		if now, err := s.readEpoch(tp); err != nil || now > epoch {
			releaseBatch(batch)
			s.report(&leaderChanged{tp: tp, next: handed, epoch: epoch})
			return
		}
		select {
		case s.out <- batch:
		case <-s.stop:
			return
		}
	}
}

// decode turns m, read under leader epoch epoch, into a record, decoding its
// value here, on the partition's reader goroutine: decoding is pure, so the
// partitions decode in parallel and the run loop only aggregates.
func (s *source) decode(tp aggregate.PartitionID, m *sarama.ConsumerMessage, epoch int32) record {
	r := record{tp: tp, offset: m.Offset, epoch: epoch, key: m.Key, value: m.Value}
	if !m.Timestamp.IsZero() && m.Timestamp.Unix() > 0 {
		r.ts = m.Timestamp.UnixNano()
	}
	if tp.Topic == s.predTopic {
		r.pred, r.names, r.derr = aggregate.DecodePredictionNames(m.Value)
		r.src, r.mergeFinal = replayHeaders(m.Headers, &r.derr)
	} else {
		r.pos, r.derr = aggregate.DecodePosition(m.Value)
	}
	return r
}

// visibleEnd answers whether tp holds any record a read_committed consumer
// would deliver in [from, high water). sarama hides control records and
// aborted transactions and does not expose its fetch position, so after a
// transaction marker the last delivered offset + 1 can stay below the high
// water mark for good. visibleEnd fetches at from and returns the offset
// after the leading run of invisible batches (control batches and batches of
// aborted transactions); it returns from when a visible record comes first.
// It asks for what one fetch of the partition asks for (Config.FetchBytes):
// the run loop waits for the answer, and a probe of a partition that only
// looked quiet reads visible records it throws away; the broker returns the
// first batch whole however small the request (KIP-74).
func (s *source) visibleEnd(tp aggregate.PartitionID, from int64) (end int64, err error) {
	defer func() {
		if err != nil { // the leader moved or is gone: the next probe asks the one of the moment
			s.refreshMetadata(map[aggregate.PartitionID]error{tp: err})
		}
	}()
	b, err := s.client.Leader(tp.Topic, tp.Partition)
	if err != nil {
		return from, err
	}
	req := &sarama.FetchRequest{Version: 4, MaxBytes: s.probeBytes, Isolation: sarama.ReadCommitted}
	req.AddBlock(tp.Topic, tp.Partition, from, s.probeBytes, -1)
	resp, err := b.Fetch(req)
	if err != nil {
		return from, err
	}
	block := resp.GetBlock(tp.Topic, tp.Partition)
	if block == nil {
		return from, errors.New("no block in fetch response")
	}
	if !errors.Is(block.Err, sarama.ErrNoError) {
		return from, block.Err
	}
	aborted := map[int64]int64{} // producer id -> first offset of its aborted transaction
	for _, a := range block.AbortedTransactions {
		aborted[a.ProducerID] = a.FirstOffset
	}
	end = from
	for _, recs := range block.RecordsSet {
		rb := recs.RecordBatch
		if rb == nil {
			return from, nil // legacy message set: visible
		}
		first, isAborted := aborted[rb.ProducerID]
		if !rb.Control && !(rb.IsTransactional && isAborted && first <= rb.FirstOffset) {
			return from, nil
		}
		if last := rb.FirstOffset + int64(rb.LastOffsetDelta) + 1; last > end {
			end = last
		}
	}
	return end, nil
}

// close stops every reader and waits for them; nothing outlives it.
func (s *source) close() {
	close(s.stop)
	for _, pc := range s.pcs {
		pc.AsyncClose()
	}
	// Drain what readers still hold so they can see their channel close.
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	for {
		select {
		case <-s.out:
		case <-s.errs: //nolint:errcheck // drained on close so the readers can exit; the run is over
		case <-done:
			s.refreshMu.Lock()
			s.closed = true
			s.refreshMu.Unlock()
			_ = s.consumer.Close()
			s.fetches.Close()
			s.client.Close() // ends a metadata refresh under way
			s.admin.Close()
			s.refreshWG.Wait()
			return
		}
	}
}
