package consumer

import (
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"

	"github.com/ovstream/ovstream/aggregate"
)

// readerEnded is what a partition reader reports when sarama closed its
// partition consumer although the source is not stopping. sarama does that
// on OFFSET_OUT_OF_RANGE (the broker no longer holds the offset being read:
// it lost or truncated the log) and does not retry it.
type readerEnded struct {
	tp   aggregate.PartitionID
	next int64 // the offset the reader was about to read
}

func (e *readerEnded) Error() string {
	return fmt.Sprintf("consumer: the reader of %s ended at offset %d", e.tp, e.next)
}

// ended reports that tp's reader ended at next, unless the source is stopping.
func (s *source) ended(tp aggregate.PartitionID, next int64) {
	s.report(&readerEnded{tp: tp, next: next})
}

// report hands the run loop why a reader ended, unless the source is stopping.
func (s *source) report(err error) {
	select {
	case <-s.stop:
		return
	default:
	}
	select {
	case s.errs <- err:
	case <-s.stop:
	}
}

// restartError asks Run, like errResync, to restart the loop from the
// stored state: open windows and the ledger are dropped and rebuilt by
// re-reading from the stored offsets, so nothing the logs still hold is lost
// or counted twice (what a lost log held past the last commit is gone with
// it), and start-up applies --on-offset-out-of-range to the partitions whose
// stored offset or topic is no longer valid.
type restartError struct{ why string }

func (e *restartError) Error() string {
	return e.why + ": re-reading stored positions and seeking again"
}
func (e *restartError) Is(target error) bool { return target == errResync }

// sourceError handles an error of the source in the run loop, with every
// other one already queued: a partition reader that ended is kept for poll,
// which stops or restarts the run (see lost); the rest sarama retries by
// itself. Since such an error may mean that the broker restarted, maybe
// without its data, the topics' metadata is read at the next poll: a topic
// ID that changed is found before much of a new log is read under the old
// one's offsets. A burst (a connection reset fails every partition consumer
// of the broker at once: sarama's brokerConsumer.abort notifies each child)
// is one log line and one metadata read, not one per error queued: each
// used to be handled in a turn of the loop of its own, so after a network
// fault the loop went on meeting errors from before it. A refusal by the
// broker's authorizer is not retried: it is returned as an
// *AuthorizationError, which ends the run (authz.go).
func (l *loop) sourceError(err error) error {
	errs := []error{err}
	for more := true; more; {
		select {
		case e := <-l.src.errs:
			errs = append(errs, e)
		default:
			more = false
		}
	}
	var retried []error
	for _, err := range errs {
		var ended *readerEnded
		var changed *leaderChanged
		switch {
		case authorizationError(err) != nil:
			return authorizationError(err)
		case errors.As(err, &ended):
			l.src.topo.ended = append(l.src.topo.ended, ended)
		case errors.As(err, &changed):
			l.src.topo.changed = append(l.src.topo.changed, changed)
		case errors.Is(err, sarama.ErrOffsetOutOfRange):
			l.cfg.Logger.Debug("kafka consumer error: the partition reader ends", "err", err)
		default:
			retried = append(retried, err)
		}
	}
	if len(retried) > 0 {
		l.cfg.Logger.Warn("kafka consumer error (sarama retries)", "err", retried[0], "errors", len(retried))
		l.src.topo.next = time.Time{}
	}
	return nil
}

// lost decides what a reader that ended means (docs/design.md "Start-up": a
// partition reader never ends silently). Its position outside the log's range
// now, or a topic ID that changed, is an *OffsetOutOfRangeError or a
// *TopicIDChangedError: returned as it is under --on-offset-out-of-range=fail,
// else logged, and the loop restarts from the stored state (restartError),
// where start-up resets the stored positions that are out of range. A reader
// that ended for no reason found restarts the loop as well.
func (l *loop) lost(e *readerEnded) error {
	cfg := l.cfg
	var logStart, hw int64
	err := kafkaRetry(func() (err error) { // the broker may just be coming back
		logStart, hw, err = l.src.offsets(e.tp)
		return err
	})
	if err != nil {
		return fmt.Errorf("%w, and the range the broker holds cannot be read: %w", e, err)
	}
	var cause error
	if e.next < logStart || e.next > hw {
		cause = &OffsetOutOfRangeError{PartitionID: e.tp, Offset: e.next, LogStart: logStart, HighWater: hw, Running: true}
	} else {
		var meta map[string]topicMeta
		if err := kafkaRetry(func() (err error) {
			meta, err = l.src.metadata([]string{e.tp.Topic})
			return err
		}); err != nil {
			return fmt.Errorf("%w, and the topic's metadata cannot be read: %w", e, err)
		}
		cause = l.idChanged(e.tp.Topic, meta[e.tp.Topic].id)
	}
	if cause == nil {
		cfg.Logger.Warn("partition reader ended within the log's range", "partition", e.tp.String(),
			"offset", e.next, "log_start", logStart, "high_water", hw)
		return &restartError{why: e.Error()}
	}
	if cfg.OnOffsetOutOfRange == "fail" {
		return cause
	}
	cfg.Logger.Warn("the log changed while reading: resuming per --on-offset-out-of-range",
		"partition", e.tp.String(), "offset", e.next, "log_start", logStart, "high_water", hw,
		"policy", cfg.OnOffsetOutOfRange, "err", cause)
	return &restartError{why: "the log of " + e.tp.String() + " changed under its reader"}
}

// outOfRange returns an *OffsetOutOfRangeError (Running) for the first
// partition of topic whose position the broker no longer holds, or nil: a
// broker that lost its data also gives its topics new IDs, and the range
// says more about what happened.
func (l *loop) outOfRange(topic string) *OffsetOutOfRangeError {
	for _, tp := range SortedPartitions(l.parts) {
		if tp.Topic != topic {
			continue
		}
		logStart, hw, err := l.src.offsets(tp)
		if pos := l.led.ConsumedOffset(tp); err == nil && (pos < logStart || pos > hw) {
			return &OffsetOutOfRangeError{PartitionID: tp, Offset: pos, LogStart: logStart, HighWater: hw, Running: true}
		}
	}
	return nil
}
