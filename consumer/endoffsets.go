package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ovstream/ovstream/aggregate"
)

// endOffsetsTimeout bounds one reading of the end offsets: a leader that
// does not answer (a stopped JVM, a partitioned link) makes its partitions'
// readings fail, so they hold the watermark, instead of leaving the last
// reading in force.
const endOffsetsTimeout = 5 * time.Second

// endOffsets reads the end offsets of parts from their leaders: the high
// water mark (isolation read_uncommitted) or the last stable offset
// (read_committed), with ListOffsets (Kafka protocol, API key 2) through
// franz-go, which routes each partition to its leader and, on
// NOT_LEADER_OR_FOLLOWER or an unknown partition, refreshes its metadata and
// asks the new leader.
//
// Each partition is asked with its current leader epoch (KIP-320: the
// largest that the run's two sarama clients know, which never move
// backwards), so a deposed leader that has not learnt it yet (a JVM that was
// stopped and resumes) answers FENCED_LEADER_EPOCH or UNKNOWN_LEADER_EPOCH
// instead of its stale log end. Every failed partition makes both the
// franz-go and the sarama metadata be read again, so the next reading goes
// to the partition's leader of the moment. A partition missing from the
// first map has its error in the second: its end offset is unknown, never
// the last one read.
func (s *source) endOffsets(ctx context.Context, parts []aggregate.PartitionID, committed bool) (map[aggregate.PartitionID]int64, map[aggregate.PartitionID]error) {
	ends, errs := map[aggregate.PartitionID]int64{}, map[aggregate.PartitionID]error{}
	if len(parts) == 0 {
		return ends, errs
	}
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	if committed {
		req.IsolationLevel = 1
	}
	byTopic := map[string]int{}
	for _, tp := range parts {
		i, ok := byTopic[tp.Topic]
		if !ok {
			i = len(req.Topics)
			byTopic[tp.Topic] = i
			t := kmsg.NewListOffsetsRequestTopic()
			t.Topic = tp.Topic
			req.Topics = append(req.Topics, t)
		}
		p := kmsg.NewListOffsetsRequestTopicPartition()
		p.Partition = tp.Partition
		p.CurrentLeaderEpoch = s.leaderEpoch(tp)
		p.Timestamp = -1 // the latest offset
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, p)
	}
	ctx, cancel := context.WithTimeout(ctx, endOffsetsTimeout)
	defer cancel()
	for _, shard := range s.admin.RequestSharded(ctx, req) {
		sreq, _ := shard.Req.(*kmsg.ListOffsetsRequest)
		if shard.Err != nil || sreq == nil {
			err := shard.Err
			if err == nil {
				err = errors.New("no request in the answer")
			}
			if sreq == nil { // cannot tell which partitions it held: all fail
				for _, tp := range parts {
					errs[tp] = err
				}
				continue
			}
			for _, t := range sreq.Topics {
				for _, p := range t.Partitions {
					errs[aggregate.PartitionID{Topic: t.Topic, Partition: p.Partition}] = err
				}
			}
			continue
		}
		resp := shard.Resp.(*kmsg.ListOffsetsResponse)
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				tp := aggregate.PartitionID{Topic: t.Topic, Partition: p.Partition}
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					errs[tp] = err
					continue
				}
				ends[tp] = p.Offset
			}
		}
	}
	for _, tp := range parts {
		if _, ok := ends[tp]; !ok && errs[tp] == nil {
			errs[tp] = errors.New("no answer for the partition")
		}
	}
	if len(errs) > 0 {
		s.refreshMetadata(errs)
	}
	return ends, errs
}

// leaderEpoch returns the largest leader epoch of tp that the run's sarama
// clients know (-1 when neither knows one: the broker then checks nothing).
func (s *source) leaderEpoch(tp aggregate.PartitionID) int32 {
	epoch := int32(-1)
	if _, e, err := s.client.LeaderAndEpoch(tp.Topic, tp.Partition); err == nil {
		epoch = max(epoch, e)
	}
	if _, e, err := s.fetches.LeaderAndEpoch(tp.Topic, tp.Partition); err == nil {
		epoch = max(epoch, e)
	}
	return epoch
}

// refreshMetadata has the metadata of the topics of failed partitions read
// again: franz-go's at its next request, sarama's (the run loop's client:
// leaders and epochs of the readings, marker probes and start-up reads) on
// a goroutine of its own, one at a time, so that neither the reading that
// failed nor the run loop waits for it (a stopped broker holds a metadata
// request until sarama's read timeout). source.close ends it (closing the
// client) and waits for it.
func (s *source) refreshMetadata(failed map[aggregate.PartitionID]error) {
	s.admin.ForceMetadataRefresh()
	if !s.refreshing.CompareAndSwap(false, true) {
		return // one is under way; the next failure asks again
	}
	topics := map[string]bool{}
	for tp := range failed {
		topics[tp.Topic] = true
	}
	s.refreshMu.Lock()
	defer s.refreshMu.Unlock()
	if s.closed {
		s.refreshing.Store(false)
		return
	}
	s.refreshWG.Add(1)
	go func() {
		defer s.refreshWG.Done()
		defer s.refreshing.Store(false)
		for t := range topics {
			select {
			case <-s.stop:
				return
			default:
			}
			_ = s.client.RefreshMetadata(t) // a failure leaves the next reading failing too
		}
	}()
}

// highWaters reads the high water marks of parts (endOffsets). Safe to
// call from any goroutine.
func (s *source) highWaters(parts []aggregate.PartitionID) highWaters {
	hw, errs := s.endOffsets(context.Background(), parts, false)
	return highWaters{hw: hw, errs: errs}
}

// stableOffset returns tp's last stable offset: the end of what this
// read_committed reader can read now. It is the first offset of the oldest
// transaction still open on tp, else the high water mark (ListOffsets of
// the latest offset with isolation level read_committed, v2+; KIP-98). A
// drain ends there: on Kafka the read_committed fetches never go past it, so
// a drain targeting the high water mark waited for every open transaction
// to end (up to transaction.max.timeout.ms, 15 min by default).
func (s *source) stableOffset(tp aggregate.PartitionID) (int64, error) {
	ends, errs := s.endOffsets(context.Background(), []aggregate.PartitionID{tp}, true)
	if err := errs[tp]; err != nil {
		return 0, fmt.Errorf("consumer: last stable offset of %s: %w", tp, err)
	}
	return ends[tp], nil
}

// newAdminClient returns the franz-go client of the end-offset readings,
// with the run's TLS and SASL settings (groupoffsets.ClientOptions).
func newAdminClient(opts []kgo.Opt, brokers []string) (*kgo.Client, error) {
	return kgo.NewClient(append(opts, kgo.SeedBrokers(brokers...), kgo.DialTimeout(metadataTimeout),
		kgo.RetryTimeout(endOffsetsTimeout))...)
}
