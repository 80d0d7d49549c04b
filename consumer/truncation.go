package consumer

// Log truncation the broker does not announce (KIP-320: "Allow fetchers to
// detect and handle log truncation"). An unclean leader election (a topic
// with unclean.leader.election.enable, its in-sync replicas lost) makes a
// replica leader that lacks the last records of the log; when the old leader
// returns it truncates its log to the new leader's and takes the records
// produced since at the same offsets. A stored offset can then still lie
// within [log start, high water mark] (no OFFSET_OUT_OF_RANGE, see
// OffsetOutOfRangeError) while the records below it are not the ones that
// were counted: reading on from it would skip, silently, the new records
// between the point where the logs diverge and the stored offset.
//
// Kafka's consumer finds it by the leader epoch: it keeps with its position
// the leader epoch of the last record consumed and, at start-up and after
// each leader change, asks the leader for the end offset of that epoch
// (OffsetForLeaderEpoch, API key 23): the first offset of the next larger
// epoch the leader knows, or its log end offset when the epoch is the
// current one. An end offset below the position means the log was
// truncated below it (org.apache.kafka.clients.consumer.internals
// SubscriptionState.maybeCompleteValidation): with a reset policy the
// consumer goes on from that end offset (the first offset known to
// diverge), without one it raises LogTruncationException; an answer
// without an epoch or offset (-1, the broker does not know the epoch) is a
// truncation to an unknown offset: reset per policy, or the exception.
// ovstream applies the same rule to stream_positions (next_offset,
// leader_epoch) at start-up and to a reader's position after each leader
// change; --on-offset-out-of-range is the policy ("fail" = none).
//
// Which epoch. sarama's ConsumerMessage does not carry its record batch's
// partition leader epoch (RecordBatch.PartitionLeaderEpoch is decoded and
// dropped in partitionConsumer.parseRecords). What ovstream stores instead
// is the leader epoch a reader read under: the epoch of tp in the fetch
// client's metadata, read before the partition consumer starts (never below
// the epoch the records before the start offset were read under: a fresh
// client may learn it from a broker whose metadata lags) and checked again
// after every batch taken from it. sarama refreshes that metadata
// before it fetches from a new leader and sends the epoch as the fetch's
// CurrentLeaderEpoch (Fetch v9+, KIP-320), which the broker refuses unless
// it is its own (FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH), and sarama's
// client never moves a partition's epoch backwards; so while the metadata
// holds epoch E, every record delivered was served by the leader of E or
// an earlier one. A batch after which the metadata holds a later epoch (or
// no leader) may hold records of the new leader: it is dropped, and the reader stops
// (leaderChanged) until the run loop has validated the position reached
// with E against the new leader and started it again.
//
// E bounds the batch epoch of each record read under it from above, and no
// later leader has an epoch as low: so OffsetForLeaderEpoch(E) answers an
// end offset >= the position exactly when the leader's log holds the
// records below the position with their epochs, as the record's own batch
// epoch would (records below the position keep epochs <= E in a log that
// kept them, and a leader elected later that lacks them starts its epoch,
// greater than E, below the position). The detection is KIP-320's; only the
// epoch stored may be greater than the record batch's.

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/consumer/groupoffsets"
	"github.com/ovstream/ovstream/store"
)

// LogTruncationError says that the log of a partition no longer holds the
// records below Offset that were read under LeaderEpoch: the broker's end
// offset for that epoch (OffsetForLeaderEpoch) is EndOffset < Offset (KIP-320;
// Kafka's consumer raises LogTruncationException). The usual cause is an
// unclean leader election. Records [EndOffset, Offset) were counted from a
// log the broker no longer has, and the log holds other records there now.
// Running: Offset is the position a reader reached, checked after a leader
// change, not a stored one.
type LogTruncationError struct {
	aggregate.PartitionID
	Offset      int64 // the stored next offset, or the position being read
	LeaderEpoch int32 // the leader epoch stored with Offset (read under)
	EndOffset   int64 // the broker's end offset for LeaderEpoch; -1 when the broker does not know the epoch
	EndEpoch    int32 // the epoch the broker answered with: the largest it knows <= LeaderEpoch; -1 unknown
	Running     bool
}

func (e *LogTruncationError) Error() string {
	what := "stored offset"
	if e.Running {
		what = "offset being read"
	}
	if e.EndOffset < 0 {
		return fmt.Sprintf("%s: the log was truncated (KIP-320): the broker does not know leader epoch %d of the %s %d "+
			"(an unclean leader election?); restart with --on-offset-out-of-range=earliest or =latest to resume there",
			e.PartitionID, e.LeaderEpoch, what, e.Offset)
	}
	return fmt.Sprintf("%s: the log was truncated below the %s %d (KIP-320): the broker's end offset for leader epoch %d is %d "+
		"(an unclean leader election?); records [%d, %d) counted before are no longer in the log; "+
		"restart with --on-offset-out-of-range=earliest or =latest to resume at offset %d, where the log diverges",
		e.PartitionID, what, e.Offset, e.LeaderEpoch, e.EndOffset, e.EndOffset, e.Offset, e.EndOffset)
}

// leaderChanged is what a partition reader reports when the leader epoch of
// its partition in the fetch client's metadata is no longer the one it read
// under: it stopped, its last batch dropped, and waits until the run loop
// validated next, the offset after the last record it handed over, with
// epoch against the new leader (leaderChanges).
type leaderChanged struct {
	tp    aggregate.PartitionID
	next  int64
	epoch int32
}

func (e *leaderChanged) Error() string {
	return fmt.Sprintf("consumer: the leader of %s changed (leader epoch %d was read up to offset %d)", e.tp, e.epoch, e.next)
}

// readEpoch returns the leader epoch of tp in the fetch client's metadata
// (-1 when the broker's metadata has none: Metadata < v7); an error when
// tp has no leader there.
func (s *source) readEpoch(tp aggregate.PartitionID) (int32, error) {
	_, epoch, err := s.fetches.LeaderAndEpoch(tp.Topic, tp.Partition)
	return epoch, err
}

// epochEnd is one answer of OffsetForLeaderEpoch: the end offset of the
// epoch asked for and the epoch it belongs to; -1 and -1 when the broker
// does not know the epoch (UNDEFINED_EPOCH_OFFSET, UNDEFINED_EPOCH).
type epochEnd struct {
	offset int64
	epoch  int32
}

// epochEnds asks the partitions' leaders for the end offset of each epoch
// of want (OffsetForLeaderEpoch v3+, through franz-go's kadm client with the
// run's TLS and SASL settings). An error names the first partition without
// an answer (no leader, NOT_LEADER_OR_FOLLOWER, a broker down): try again.
func (s *source) epochEnds(ctx context.Context, want map[aggregate.PartitionID]int32) (map[aggregate.PartitionID]epochEnd, error) {
	opts, err := groupoffsets.ClientOptions(s.client.Config())
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers(s.brokers...), kgo.DialTimeout(metadataTimeout))...)
	if err != nil {
		return nil, fmt.Errorf("consumer: OffsetForLeaderEpoch: %w", err)
	}
	defer cl.Close()
	req := kadm.OffsetForLeaderEpochRequest{}
	for tp, e := range want {
		if req[tp.Topic] == nil {
			req[tp.Topic] = map[int32]int32{}
		}
		req[tp.Topic][tp.Partition] = e
	}
	ctx, cancel := context.WithTimeout(ctx, 2*metadataTimeout)
	defer cancel()
	resp, reqErr := kadm.NewClient(cl).OffsetForLeaderEpoch(ctx, req)
	out := map[aggregate.PartitionID]epochEnd{}
	for _, tp := range SortedPartitions(want) {
		r, ok := resp[tp.Topic][tp.Partition]
		switch {
		case !ok:
			return nil, fmt.Errorf("consumer: OffsetForLeaderEpoch of %s: no answer: %w", tp, errors.Join(reqErr, ctx.Err()))
		case r.Err != nil:
			return nil, fmt.Errorf("consumer: OffsetForLeaderEpoch of %s: %w", tp, r.Err)
		}
		out[tp] = epochEnd{offset: r.EndOffset, epoch: r.LeaderEpoch}
	}
	return out, nil
}

// truncation applies the rule of Kafka's consumer (SubscriptionState
// .maybeCompleteValidation) to the position next of tp, read under leader
// epoch epoch, and the leader's answer end: a *LogTruncationError when the
// answer has no epoch or offset, or its end offset is below next; nil when
// the log holds the records below next.
func truncation(tp aggregate.PartitionID, next int64, epoch int32, end epochEnd, running bool) *LogTruncationError {
	e := &LogTruncationError{PartitionID: tp, Offset: next, LeaderEpoch: epoch, EndOffset: end.offset, EndEpoch: end.epoch, Running: running}
	switch {
	case end.offset < 0 || end.epoch < 0:
		e.EndOffset, e.EndEpoch = -1, -1
		return e
	case end.offset < next:
		return e
	}
	return nil
}

// resumeAt is where --on-offset-out-of-range=policy (earliest or latest)
// resumes tp after a truncation e, the log holding [logStart, hw): at the
// broker's end offset for the stored epoch, the first offset known to
// diverge, as Kafka's consumer does with any reset policy; where the broker
// does not know the epoch, at logStart (earliest) or hw (latest).
func resumeAt(policy string, logStart, hw int64, e *LogTruncationError) (from int64, epoch int32) {
	switch {
	case e.EndOffset >= 0:
		return min(max(e.EndOffset, logStart), hw), e.EndEpoch
	case policy == "earliest":
		return logStart, -1
	}
	return hw, -1
}

// storedTruncations validates the stored positions of assigned that carry a
// leader epoch and lie within the log (in reports which do) against the
// partitions' leaders: it returns a *LogTruncationError per partition whose
// log was truncated below its stored offset.
func (l *loop) storedTruncations(assigned []aggregate.PartitionID, stored map[aggregate.PartitionID]store.Position,
	in func(tp aggregate.PartitionID, next int64) (bool, error)) (map[aggregate.PartitionID]*LogTruncationError, error) {
	want := map[aggregate.PartitionID]int32{}
	for _, tp := range assigned {
		pos, have := stored[tp]
		if !have || pos.LeaderEpoch < 0 {
			continue
		}
		ok, err := in(tp, pos.NextOffset)
		if err != nil {
			return nil, err
		}
		if ok {
			want[tp] = pos.LeaderEpoch
		}
	}
	if len(want) == 0 {
		return nil, nil
	}
	var ends map[aggregate.PartitionID]epochEnd
	if err := kafkaRetry(func() (err error) {
		ends, err = l.src.epochEnds(context.Background(), want)
		return err
	}); err != nil {
		return nil, err
	}
	out := map[aggregate.PartitionID]*LogTruncationError{}
	for tp, epoch := range want {
		if e := truncation(tp, stored[tp].NextOffset, epoch, ends[tp], false); e != nil {
			out[tp] = e
		}
	}
	return out, nil
}

// leaderChanges validates the positions of the readers that stopped at a
// leader change (leaderChanged) against the new leaders: a reader whose
// position the log still holds starts again there, under the new epoch. A
// truncation below a position is returned as a *LogTruncationError (Running)
// under --on-offset-out-of-range=fail; otherwise it is logged and the loop
// restarts from the stored state (restartError), where start-up validates
// the stored offsets and resumes per the policy. While a leader does not
// answer (none elected yet), the readers wait for the next poll.
func (l *loop) leaderChanges(ctx context.Context) error {
	topo := &l.src.topo
	if len(topo.changed) == 0 {
		return nil
	}
	want := map[aggregate.PartitionID]int32{}
	for _, c := range topo.changed {
		want[c.tp] = c.epoch
	}
	ends, err := l.src.epochEnds(ctx, want)
	if err != nil {
		l.cfg.Logger.Debug("leader change: the new leader's answer is not there yet; trying again", "err", err)
		return nil
	}
	changed := topo.changed
	topo.changed = nil
	for i, c := range changed {
		if e := truncation(c.tp, c.next, c.epoch, ends[c.tp], true); e != nil {
			if l.cfg.OnOffsetOutOfRange == "fail" {
				return e
			}
			l.cfg.Logger.Warn("the log was truncated under a reader: resuming per --on-offset-out-of-range",
				"partition", c.tp.String(), "offset", c.next, "leader_epoch", c.epoch, "end_offset", e.EndOffset,
				"policy", l.cfg.OnOffsetOutOfRange, "err", e)
			return &restartError{why: "the log of " + c.tp.String() + " was truncated under its reader"}
		}
		if err := l.src.restart(c.tp, c.next, c.epoch); err != nil {
			topo.changed = changed[i:] // try again at the next poll
			l.cfg.Logger.Warn("leader change: starting the reader again failed; trying again", "partition", c.tp.String(), "err", err)
			return nil
		}
		if l.parts[c.tp].paused { // flow control paused the partition (flow.go): its new consumer too
			l.src.consumer.Pause(map[string][]int32{c.tp.Topic: {c.tp.Partition}})
		}
		l.cfg.Logger.Info("leader changed: position validated against the new leader (KIP-320); reading on",
			"partition", c.tp.String(), "offset", c.next, "leader_epoch", c.epoch, "end_offset", ends[c.tp].offset)
	}
	return nil
}

// restart stops tp's partition consumer (its reader stopped already: a
// leaderChanged) and starts a new one at from, under an epoch not below
// floor, the one read under so far.
func (s *source) restart(tp aggregate.PartitionID, from int64, floor int32) error {
	if pc := s.pcs[tp]; pc != nil {
		delete(s.pcs, tp)
		_ = pc.Close() // waits until sarama let go of tp: a new consumer of it may start
	}
	return s.start(tp, from, floor)
}

// belowStart is the first offset of the ledger's epoch run that holds the
// stored position: the records below the seek offset.
const belowStart = math.MinInt64
