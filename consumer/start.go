package consumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/store"
)

// errStoppedStarting ends a run stopped (ctx cancelled: SIGTERM) during its
// start-up, before it consumed anything: like a standby stopped while it
// waited, it wrote nothing, releases what it claimed, and Run returns nil
// (docs/design.md "Shutdown and drain": SIGTERM ends the run with exit 0).
var errStoppedStarting = errors.New("consumer: stopped during start-up")

// stoppedEarly tells whether err is a stop before the run consumed anything.
func stoppedEarly(err error) bool {
	return errors.Is(err, errStandbyStopped) || errors.Is(err, errStoppedStarting)
}

// start loads the stored state, seeks every assigned partition and seeds the
// watermark, in steps: connect, find the assignment, claim it, load what is
// stored, check the topics, seek (with the KIP-320 validation of the stored
// offsets), load the replay state. When ctx is cancelled meanwhile, the step
// that fails for it makes start return errStoppedStarting.
func (l *loop) start(ctx context.Context) (err error) {
	defer func() {
		if err != nil && ctx.Err() != nil && !stoppedEarly(err) {
			l.cfg.Logger.Info("stopped during start-up", "err", err)
			err = errStoppedStarting
		}
	}()
	cfg := l.cfg
	err = WaitKafka(ctx, cfg.ConnectTimeout, cfg.Logger, "connect to Kafka", func() (err error) {
		l.src, err = openSource(cfg.Brokers, cfg.Sarama, cfg.FetchBytes)
		return err
	})
	if err != nil {
		return err
	}
	l.src.predTopic, l.src.posTopic = cfg.PredictionsTopic, cfg.PositionsTopic
	ok := false
	defer func() {
		if !ok {
			l.src.close()
		}
	}()
	assigned, err := l.assignment(ctx)
	if err != nil {
		return err
	}
	if assigned, err = l.claimAssignment(ctx, assigned); err != nil {
		return err
	}
	var stored map[aggregate.PartitionID]store.Position
	var seed time.Time
	err = retry(ctx, cfg, "load stream_positions and watermark", func() error {
		return l.db.do(func(st *store.Store) (err error) {
			if stored, err = st.LoadPositions(ctx, cfg.Pipeline); err != nil {
				return fmt.Errorf("consumer: load stream_positions: %w", err)
			}
			if seed, err = st.SeedWatermark(ctx, cfg.Pipeline, assigned); err != nil {
				return fmt.Errorf("consumer: seed watermark: %w", err)
			}
			return nil
		})
	})
	if err != nil {
		return err
	}
	if err := l.checkTopics(ctx, assigned, stored); err != nil { // topicid.go
		return err
	}
	if err := l.startSplit(ctx, assigned, stored); err != nil {
		return err
	}
	l.reset(seed)
	if err := l.seek(ctx, assigned, stored); err != nil {
		return err
	}
	if err := l.loadReplay(ctx); err != nil {
		return err
	}
	l.lostSinceBefore(stored)
	cfg.Metrics.assign(assigned)
	cfg.Metrics.watermark(seed)
	cfg.Health.highWatersUnknown(len(assigned), cfg.Now()) // until the first poll reads them
	cfg.Health.assigned.Store(true)
	cfg.Logger.Info("watermark seeded", "watermark", seed.UTC().Format(time.RFC3339))
	ok = true
	return nil
}

// assignment returns the partitions to read: --partitions, or every
// partition of the topics.
func (l *loop) assignment(ctx context.Context) ([]aggregate.PartitionID, error) {
	cfg := l.cfg
	if cfg.Partitions != nil {
		return cfg.Partitions, nil
	}
	var assigned []aggregate.PartitionID
	for _, topic := range []string{cfg.PredictionsTopic, cfg.PositionsTopic} {
		if topic == "" {
			continue
		}
		var ps []int32
		err := WaitKafka(ctx, cfg.ConnectTimeout, cfg.Logger, "read the partitions of "+topic, func() (err error) {
			ps, err = l.src.partitions(topic)
			return err
		})
		if err != nil {
			return nil, err
		}
		for _, p := range ps {
			assigned = append(assigned, aggregate.PartitionID{Topic: topic, Partition: p})
		}
	}
	return assigned, nil
}

// claimAssignment claims assigned at a new fencing epoch (lease.go), or,
// after a resync, keeps the claim: it returns the partitions this instance
// still owns, claiming again when it lost some.
func (l *loop) claimAssignment(ctx context.Context, assigned []aggregate.PartitionID) ([]aggregate.PartitionID, error) {
	cfg := l.cfg
	if l.epoch == 0 {
		return assigned, l.claim(ctx, assigned)
	}
	if cfg.Partitions != nil {
		return assigned, nil
	}
	// A resync keeps the claim: read only what it holds, not a partition
	// added since and claimed by another instance.
	var owned []aggregate.PartitionID
	err := retry(ctx, cfg, "read the partitions this instance owns", func() error {
		return l.db.do(func(st *store.Store) (err error) {
			owned, err = st.Owned(ctx, cfg.Pipeline, cfg.Owner, l.epoch)
			return err
		})
	})
	if err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	lost, err := l.claimLost(ctx, assigned, owned)
	if err != nil {
		return nil, err
	}
	if lost { // claim them again: as at start-up, a live holder makes this a standby
		l.epoch = 0
		return assigned, l.claim(ctx, assigned)
	}
	assigned = slices.DeleteFunc(assigned, func(tp aggregate.PartitionID) bool { return !slices.Contains(owned, tp) })
	if len(assigned) == 0 {
		return nil, ErrFenced
	}
	return assigned, nil
}

// reset gives the loop new state, the watermark seeded at seed: a resync
// starts from the database, not from what the loop before held.
func (l *loop) reset(seed time.Time) {
	cfg := l.cfg
	l.win = l.sp.newWindower(cfg.Window)
	l.resetClosable()
	l.wm = aggregate.NewWatermark(cfg.Lateness(), cfg.IdleTimeout, seed)
	l.wm.IdleFinalize(cfg.IdleFinalize)
	l.led = NewLedger()
	l.parts = map[aggregate.PartitionID]*partState{}
	l.trips = newLatest[store.Trip]()
	l.vehicles = newLatest[store.Vehicle]()
	l.names = aggregate.NewNames() // a resync starts with none: it writes again the names it meets (no-ops)
	l.stored = map[aggregate.PartitionID]store.Position{}
}

// logRange is a partition's log start offset and high water mark.
type logRange struct{ start, hw int64 }

// seek validates the stored offsets of assigned (in the log, and not
// truncated below: KIP-320, truncation.go) and starts reading each partition
// where it resumes (seekPartition).
func (l *loop) seek(ctx context.Context, assigned []aggregate.PartitionID, stored map[aggregate.PartitionID]store.Position) error {
	ranges := map[aggregate.PartitionID]logRange{}
	truncated, err := l.storedTruncations(assigned, stored, func(tp aggregate.PartitionID, next int64) (bool, error) {
		logStart, hw, err := l.offsets(ctx, tp)
		ranges[tp] = logRange{logStart, hw}
		return err == nil && next >= logStart && next <= hw, err
	})
	if err != nil {
		return err
	}
	for _, tp := range assigned {
		r, ok := ranges[tp]
		if !ok {
			if r.start, r.hw, err = l.offsets(ctx, tp); err != nil {
				return err
			}
		}
		pos, have := stored[tp]
		if err := l.seekPartition(ctx, tp, r, pos, have, truncated[tp]); err != nil {
			return err
		}
	}
	return nil
}

// offsets reads tp's log start and high water mark, retrying a broker
// connection that fails within --connect-timeout (WaitKafka).
func (l *loop) offsets(ctx context.Context, tp aggregate.PartitionID) (logStart, hw int64, err error) {
	err = WaitKafka(ctx, l.cfg.ConnectTimeout, l.cfg.Logger, "read the offsets of "+tp.String(), func() (err error) {
		logStart, hw, err = l.src.offsets(tp)
		return err
	})
	return logStart, hw, err
}

// seekPartition starts reading tp, whose log holds r: at its stored
// position pos (have) when the log still holds it, else per
// --on-offset-out-of-range (a truncation tr below it, or a position outside
// the log), or at --start-offset when nothing is stored.
func (l *loop) seekPartition(ctx context.Context, tp aggregate.PartitionID, r logRange, pos store.Position, have bool,
	tr *LogTruncationError) error {
	cfg := l.cfg
	logStart, hw := r.start, r.hw
	var from, replayUntil int64
	switch {
	case have && pos.NextOffset >= logStart && pos.NextOffset <= hw && tr == nil:
		from = pos.NextOffset
		replayUntil = pos.ConsumedOffset
		l.stored[tp] = pos
	case have:
		var why error = &OffsetOutOfRangeError{PartitionID: tp, Offset: pos.NextOffset, LogStart: logStart, HighWater: hw}
		msg, epoch := "stored offset out of range: resuming", int32(-1)
		switch cfg.OnOffsetOutOfRange {
		case "earliest":
			from = logStart
		case "latest":
			from = hw
		}
		if tr != nil {
			why, msg = tr, "the log was truncated below the stored offset (KIP-320): resuming"
			from, epoch = resumeAt(cfg.OnOffsetOutOfRange, logStart, hw, tr)
		}
		if cfg.OnOffsetOutOfRange == "fail" {
			return why
		}
		cfg.Logger.Warn(msg, "partition", tp.String(),
			"stored", pos.NextOffset, "log_start", logStart, "high_water", hw, "resume_at", from, "err", why)
		reset := store.Position{PartitionID: tp, NextOffset: from, ConsumedOffset: from, Seq: pos.Seq, LeaderEpoch: epoch}
		err := l.db.do(func(st *store.Store) error { return st.ResetPosition(ctx, cfg.Pipeline, cfg.Owner, l.epoch, reset) })
		if err != nil {
			return err
		}
		l.stored[tp] = reset
	case cfg.StartOffset == "latest":
		from = hw
	default:
		from = logStart
	}
	l.led.Assign(tp, from)
	floor := int32(-1) // the epoch the records below from were read under
	if p, ok := l.stored[tp]; ok {
		floor = p.LeaderEpoch
		l.led.Epoch(tp, belowStart, floor)
	}
	l.wm.Assign(tp)
	p := l.assign(tp, hw)
	p.replayUntil, p.seek = replayUntil, from
	if cfg.Drain {
		err := WaitKafka(ctx, cfg.ConnectTimeout, cfg.Logger, "read the last stable offset of "+tp.String(), func() (err error) {
			p.drainTarget, err = l.src.drainTarget(tp, hw)
			return err
		})
		if err != nil {
			return err
		}
	}
	l.sum.HighWater[tp] = hw
	if _, ok := l.sum.Stored[tp]; !ok && have {
		l.sum.Stored[tp] = pos.NextOffset
	}
	l.wm.SetCaughtUp(tp, false, time.Time{}) // until the first poll's reading
	if err := WaitKafka(ctx, cfg.ConnectTimeout, cfg.Logger, "start reading "+tp.String(), func() error {
		return l.src.start(tp, from, floor)
	}); err != nil {
		return err
	}
	l.sought(tp)
	cfg.Logger.Info("assigned", "partition", tp.String(), "from", from, "log_start", logStart, "high_water", hw)
	return nil
}

// lostSinceBefore logs, after a resync, the partitions whose stored commit
// sequence is lower than the one the loop before wrote: the database lost
// commits this instance made while it did not look (a COMMIT in flight at a
// failover, whose outcome was unknown, re-read positions behind the commits
// acknowledged before it). The replay from the stored positions counts
// their events again, once, as after a store.BehindError.
func (l *loop) lostSinceBefore(stored map[aggregate.PartitionID]store.Position) {
	e := &store.BehindError{Pipeline: l.cfg.Pipeline}
	for _, tp := range SortedPartitions(l.before) {
		was, now := l.before[tp], stored[tp] // absent: Seq 0, no commit
		if now.Seq < was.Seq {
			next := now.NextOffset
			if _, ok := stored[tp]; !ok {
				next = -1
			}
			e.Partitions = append(e.Partitions, store.Behind{PartitionID: tp, Seq: now.Seq, WantSeq: was.Seq, NextOffset: next})
		}
	}
	if len(e.Partitions) > 0 {
		l.cfg.Metrics.CommitFailures.WithLabelValues(FailBehind).Inc()
		l.logBehind(e, l.before)
	}
}

// claimLost tells whether the database lost this instance's claim (a
// failover to a replica that had not received it, a restore): a partition
// of assigned it no longer owns has an epoch lower than the claim's (epochs
// never go down). Partitions taken by a newer claim are not lost: fenced.
func (l *loop) claimLost(ctx context.Context, assigned, owned []aggregate.PartitionID) (bool, error) {
	if len(owned) == len(assigned) {
		return false, nil
	}
	var leases []store.PartitionLease
	err := retry(ctx, l.cfg, "read the partitions' epochs", func() error {
		return l.db.do(func(st *store.Store) (err error) {
			leases, err = st.Leases(ctx, l.cfg.Pipeline, l.cfg.Lease)
			return err
		})
	})
	if err != nil {
		return false, fmt.Errorf("consumer: %w", err)
	}
	known := map[aggregate.PartitionID]bool{}
	for _, p := range leases {
		known[p.PartitionID] = true
	}
	for _, tp := range assigned {
		if !known[tp] && !slices.Contains(owned, tp) { // the claim made its row: lost with it
			l.cfg.Logger.Error(claimLostMsg, "pipeline", l.cfg.Pipeline, "partition", tp.String(), "epoch", l.epoch)
			return true, nil
		}
	}
	for _, p := range leases {
		if slices.Contains(assigned, p.PartitionID) && !slices.Contains(owned, p.PartitionID) && p.Epoch < l.epoch {
			l.cfg.Logger.Error(claimLostMsg,
				"pipeline", l.cfg.Pipeline, "partition", p.PartitionID.String(), "epoch", l.epoch, "stored_epoch", p.Epoch)
			return true, nil
		}
	}
	return false, nil
}
