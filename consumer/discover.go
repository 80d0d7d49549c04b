package consumer

import (
	"context"
	"fmt"
	"time"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/store"
)

// metadataRetry is how soon a metadata refresh that failed is tried again.
const metadataRetry = 2 * time.Second

// topology is what the run loop knows of its topics: their Kafka topic IDs
// and partitions when it started (or last found more), and the partition
// readers that ended and are not handled yet. Only the loop touches it.
type topology struct {
	ids   map[string]string              // topic -> topic ID at start-up; "" = the broker has none
	known map[aggregate.PartitionID]bool // every partition of the topics seen so far, assigned or not
	next  time.Time                      // the next metadata refresh
	ended []*readerEnded                 // readers that ended (lost.go)
	// changed: readers that stopped at a leader change, waiting for their
	// position to be validated (truncation.go)
	changed []*leaderChanged
	// failing: the last metadata refresh failed (its next failures are logged at debug level)
	failing bool
}

// poll runs every pollInterval on the loop: a partition reader that ended
// stops or restarts the run (lost), one that stopped at a leader change is
// validated and started again (leaderChanges); then the high water marks are refreshed
// and, every cfg.MetadataRefresh and at once after a consumer error, the
// topics' metadata (discover).
func (l *loop) poll(ctx context.Context) error {
	topo := &l.src.topo
	if len(topo.ended) > 0 {
		return l.lost(topo.ended[0])
	}
	if err := l.leaderChanges(ctx); err != nil {
		return err
	}
	l.pollHighWater()
	if now := l.cfg.Now(); !now.Before(topo.next) {
		topo.next = now.Add(l.cfg.MetadataRefresh)
		return l.discover(ctx)
	}
	return nil
}

// discover reads the topics' metadata (docs/design.md "Start-up"). A topic whose
// ID is no longer the one at start-up was deleted and recreated: the run
// stops with *TopicIDChangedError (*OffsetOutOfRangeError when a position
// of it lies outside the new log), or restarts from the stored state under
// --on-offset-out-of-range=earliest|latest, as for a reader that ended.
// Partitions added to a topic are claimed and consumed from --start-offset
// when this instance owns every partition (no --partitions); otherwise they
// are logged once each: no instance of the pipeline consumes them until one
// is assigned them (`status` shows them). A metadata request that fails is
// tried again within metadataRetry.
func (l *loop) discover(ctx context.Context) error {
	cfg, topo := l.cfg, &l.src.topo
	meta, err := l.src.metadata(l.topics())
	if err != nil { // the broker may be restarting: try again soon
		retryIn := min(cfg.MetadataRefresh, metadataRetry)
		topo.next = cfg.Now().Add(retryIn)
		log := cfg.Logger.Warn
		if topo.failing {
			log = cfg.Logger.Debug
		}
		log("metadata refresh failed", "err", err, "retry_in", retryIn)
		topo.failing = true
		return nil
	}
	topo.failing = false
	var added []aggregate.PartitionID
	for _, topic := range l.topics() {
		m := meta[topic]
		if changed := l.idChanged(topic, m.id); changed != nil {
			if oor := l.outOfRange(topic); oor != nil {
				changed = oor
			}
			if cfg.OnOffsetOutOfRange == "fail" {
				return changed
			}
			cfg.Logger.Warn("the log changed while reading: resuming per --on-offset-out-of-range",
				"policy", cfg.OnOffsetOutOfRange, "err", changed)
			return &restartError{why: "topic " + topic + " was recreated"}
		}
		for _, p := range m.partitions {
			if tp := (aggregate.PartitionID{Topic: topic, Partition: p}); !topo.known[tp] {
				topo.known[tp] = true
				added = append(added, tp)
			}
		}
	}
	if len(added) == 0 {
		return nil
	}
	if cfg.Partitions != nil {
		// Registered, an added partition holds a split pipeline's merge (its
		// watermark is NULL) until an instance consumes it.
		err := l.db.do(func(st *store.Store) error { return st.RegisterPartitions(ctx, cfg.Pipeline, added) })
		if err != nil {
			cfg.Logger.Warn("registering added partitions failed; trying again at the next metadata refresh", "err", err)
			for _, tp := range added {
				delete(topo.known, tp)
			}
			return nil
		}
		for _, tp := range added {
			cfg.Logger.Warn("partition added to the topic, not assigned to this instance: not consumed until an instance is assigned it",
				"partition", tp.String(), "assignment", "--partitions")
		}
		return nil
	}
	return l.claimAdded(ctx, added)
}

// claimAdded claims the partitions added to the topics at the loop's epoch
// (store.ClaimAdded) and starts reading them at --start-offset. One that
// another instance holds is logged and left alone; one whose row holds
// stored offsets restarts the loop from the stored state, so that start-up
// checks and seeks them. A retryable database error leaves them for the next
// refresh.
func (l *loop) claimAdded(ctx context.Context, added []aggregate.PartitionID) error {
	cfg := l.cfg
	// The commit in flight may find the claim lost (finishCommit): claim
	// more only at an epoch the database still holds.
	if err := l.waitCommit(ctx); err != nil {
		return err
	}
	var got []store.Added
	err := l.db.do(func(st *store.Store) (err error) {
		got, err = st.ClaimAdded(ctx, cfg.Pipeline, cfg.Owner, l.epoch, added, l.src.topo.ids)
		return err
	})
	if err != nil && store.Retryable(err) {
		cfg.Logger.Warn("claim of added partitions failed; trying again at the next metadata refresh", "err", err)
		for _, tp := range added {
			delete(l.src.topo.known, tp)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	restart := false
	for _, a := range got {
		switch {
		case !a.Claimed:
			cfg.Logger.Warn("partition added to the topic, but another instance holds it: not consumed here",
				"partition", a.String(), "holder", a.Holder)
		case a.Stored:
			restart = true
		default:
			if err := l.assignAdded(a.PartitionID); err != nil {
				return err
			}
		}
	}
	if restart {
		return &restartError{why: "claimed added partitions that hold stored offsets"}
	}
	return nil
}

// assignAdded starts consuming tp, claimed without stored offsets, at
// --start-offset. From then on it holds the watermark like any partition: it
// is not caught up while it has records to deliver. A drain waits for its
// high water mark too.
func (l *loop) assignAdded(tp aggregate.PartitionID) error {
	cfg := l.cfg
	logStart, hw, err := l.src.offsets(tp)
	if err != nil { // start-up tries again: the partition is claimed
		return &restartError{why: err.Error()}
	}
	from := logStart
	if cfg.StartOffset == "latest" {
		from = hw
	}
	l.led.Assign(tp, from)
	l.wm.Assign(tp)
	l.wm.SetCaughtUp(tp, false, time.Time{}) // until the next poll's reading
	p := l.assign(tp, hw)
	l.sum.HighWater[tp] = hw
	if cfg.Drain {
		if p.drainTarget, err = l.src.drainTarget(tp, hw); err != nil {
			return &restartError{why: err.Error()}
		}
	}
	cfg.Metrics.assign([]aggregate.PartitionID{tp})
	if err := l.src.start(tp, from, -1); err != nil {
		return err
	}
	l.sought(tp)
	cfg.Logger.Info("partition added: consuming", "partition", tp.String(), "from", from, "log_start", logStart, "high_water", hw)
	return nil
}
