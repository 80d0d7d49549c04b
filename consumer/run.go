package consumer

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/consumer/crashpoint"
	"github.com/ovstream/ovstream/store"
)

// ErrFenced is returned by Run when another instance claimed the pipeline:
// this one wrote nothing after the claim and must exit (DESIGN.md G6).
var ErrFenced = store.ErrFenced

// errResync asks Run to rebuild its state from the database: a COMMIT failed
// ambiguously, so what is stored is unknown until it is read again.
var errResync = errors.New("consumer: resync from stored positions")

// Summary describes what a run did, for logs and the drain report.
type Summary struct {
	Consumed       map[string]int64 // records read per topic
	Predictions    int64            // predictions aggregated into windows
	Positions      int64            // positions applied to vehicle_latest
	Skipped        int64            // replayed events of windows written before (DESIGN.md "Replay")
	DeadLetters    map[string]int64 // per reason
	WindowRows     int64            // delay_aggregates rows written
	Commits        int64
	CommitFailures int64
	Resyncs        int64
	Watermark      time.Time                       // the last committed watermark
	Stored         map[aggregate.PartitionID]int64 // committed next offset per partition
	HighWater      map[aggregate.PartitionID]int64 // high water mark per partition, last seen
	Elapsed        time.Duration
}

const (
	tickInterval  = 100 * time.Millisecond // watermark, drain check
	pollInterval  = time.Second            // high water marks
	probeAfter    = time.Second            // quiet time before probing for trailing transaction markers
	maxBackoff    = 5 * time.Second        // commit retries: a database that returns is used within seconds
	shutdownGrace = 30 * time.Second       // final commit after SIGTERM
	commitTimeout = 2 * time.Minute        // one commit transaction, then it counts as failed
)

// Run consumes the assigned partitions until ctx is cancelled (final commit
// of what is durable, then nil) or, with cfg.Drain, until every partition
// reached its high water mark at start (every window finalized and
// committed). It claims the pipeline first; every commit is ONE transaction
// of finalized windows, latest state, dead letters, offsets and watermark.
//
// Errors: ErrFenced when another instance claimed the pipeline;
// *OffsetOutOfRangeError when a stored offset is gone and
// cfg.OnOffsetOutOfRange is "fail"; otherwise a wrapped Kafka or database
// error that did not clear with retries.
func Run(ctx context.Context, cfg Config, st *store.Store) (*Summary, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if crashpoint.Enabled {
		st.Hooks.AfterWindows = func() { crashpoint.Hit(crashpoint.MidCommit) }
		st.Hooks.BeforeCommit = func() { crashpoint.Hit(crashpoint.BeforeCommit) }
	}
	began := cfg.Now()
	sum := &Summary{Consumed: map[string]int64{}, DeadLetters: map[string]int64{},
		Stored: map[aggregate.PartitionID]int64{}, HighWater: map[aggregate.PartitionID]int64{}}
	var epoch int64
	err := retry(ctx, cfg, "claim pipeline", func() (err error) {
		epoch, err = st.Claim(ctx, cfg.Pipeline, cfg.Owner)
		return err
	})
	if err != nil {
		return sum, fmt.Errorf("consumer: claim pipeline %q: %w", cfg.Pipeline, err)
	}
	cfg.Logger.Info("claimed pipeline", "pipeline", cfg.Pipeline, "epoch", epoch, "owner", cfg.Owner)
	for {
		l := &loop{cfg: cfg, st: st, epoch: epoch, sum: sum}
		err = l.run(ctx)
		if !errors.Is(err, errResync) {
			break
		}
		sum.Resyncs++
		cfg.Logger.Warn("COMMIT outcome unknown: re-reading stored positions and seeking again")
	}
	sum.Elapsed = cfg.Now().Sub(began)
	return sum, err
}

// loop is the one goroutine that owns the windower, the ledger, the
// latest-state buffers and the dead letters: no locks.
type loop struct {
	cfg   Config
	st    *store.Store
	epoch int64
	sum   *Summary
	src   *source

	win         *aggregate.Windower
	wm          *aggregate.Watermark
	led         *Ledger
	replayUntil map[aggregate.PartitionID]int64 // stored consumed_offset
	highWater   map[aggregate.PartitionID]int64
	drainTarget map[aggregate.PartitionID]int64
	lastSeen    map[aggregate.PartitionID]time.Time // wall time of the last record
	probed      map[aggregate.PartitionID]int64     // consumed offset at the last marker probe

	trips    map[string]store.Trip
	vehicles map[string]store.Vehicle
	dead     []store.DeadLetter
	stored   map[aggregate.PartitionID]store.Position

	nextCommit time.Time
	backoff    time.Duration
	pending    *pendingCommit                 // the batch in flight, or failed and waiting for its retry
	paused     map[aggregate.PartitionID]bool // by flowControl: far ahead in event time
	inflight   chan commitResult              // non-nil while a commit runs
	consumed   int64                          // records consumed by this loop
	committed  int64                          // of those, the ones a successful commit covered
}

func (l *loop) run(ctx context.Context) (err error) {
	cfg := l.cfg
	if err := l.start(ctx); err != nil {
		return err
	}
	defer func() {
		if l.inflight != nil { // nothing outlives run: wait for the writer
			<-l.inflight
		}
		l.src.close()
	}()

	tick := time.NewTicker(tickInterval)
	defer tick.Stop()
	poll := time.NewTicker(pollInterval)
	defer poll.Stop()
	l.nextCommit = cfg.Now().Add(cfg.FlushInterval)
	defer cfg.Health.assigned.Store(false)
	for {
		in := l.src.out
		if l.consumed-l.committed >= cfg.MaxUncommitted {
			in = nil // pause fetching until a commit succeeds: memory stays bounded
		}
		if l.inflight != nil && l.win.OpenRows() > maxPendingRows {
			in = nil // writing is behind reading: wait for the commit in flight
		}
		select {
		case <-ctx.Done():
			return l.shutdown()
		case batch := <-in:
			l.handleBatch(batch)
			releaseBatch(batch) // handle copies what it keeps
		case res := <-l.inflight:
			if err := l.finishCommit(res); err != nil {
				return err
			}
			if l.pending == nil && l.closedWaiting() {
				l.startCommit(ctx) // windows closed while it ran: write them now
			}
		case err := <-l.src.errs:
			cfg.Logger.Warn("kafka consumer error (sarama retries)", "err", err)
		case <-poll.C:
			l.pollHighWater()
		case <-tick.C:
			now := cfg.Now()
			l.updateCaughtUp(now)
			cfg.Metrics.watermark(l.wm.Advance(now))
			cfg.Metrics.Uncommitted.Set(float64(l.consumed - l.committed))
			cfg.Metrics.OpenWindows.Set(float64(l.win.OpenWindows()))
			if cfg.Drain && l.drained() {
				return l.finishDrain(ctx)
			}
			if !now.Before(l.nextCommit) || (l.pending == nil && l.closedWaiting()) {
				l.startCommit(ctx)
			}
		}
	}
}

// start loads the stored state, seeks every assigned partition and seeds the watermark.
func (l *loop) start(ctx context.Context) error {
	cfg := l.cfg
	src, err := openSource(cfg.Brokers, cfg.Sarama, cfg.FetchBytes)
	if err != nil {
		return err
	}
	src.predTopic, src.posTopic = cfg.PredictionsTopic, cfg.PositionsTopic
	l.src = src
	ok := false
	defer func() {
		if !ok {
			src.close()
		}
	}()
	assigned := cfg.Partitions
	if assigned == nil {
		for _, topic := range []string{cfg.PredictionsTopic, cfg.PositionsTopic} {
			if topic == "" {
				continue
			}
			ps, err := src.partitions(topic)
			if err != nil {
				return err
			}
			for _, p := range ps {
				assigned = append(assigned, aggregate.PartitionID{Topic: topic, Partition: p})
			}
		}
	}
	var stored map[aggregate.PartitionID]store.Position
	var seed time.Time
	err = retry(ctx, cfg, "load stream_positions and watermark", func() (err error) {
		if stored, err = l.st.LoadPositions(ctx, cfg.Pipeline); err != nil {
			return fmt.Errorf("consumer: load stream_positions: %w", err)
		}
		if seed, err = l.st.SeedWatermark(ctx, cfg.Pipeline); err != nil {
			return fmt.Errorf("consumer: seed watermark: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	l.win = aggregate.NewWindower(cfg.Window)
	l.wm = aggregate.NewWatermark(cfg.AllowedLateness, cfg.IdleTimeout, seed)
	l.led = NewLedger()
	l.replayUntil = map[aggregate.PartitionID]int64{}
	l.highWater = map[aggregate.PartitionID]int64{}
	l.drainTarget = map[aggregate.PartitionID]int64{}
	l.lastSeen = map[aggregate.PartitionID]time.Time{}
	l.probed = map[aggregate.PartitionID]int64{}
	l.trips = map[string]store.Trip{}
	l.vehicles = map[string]store.Vehicle{}
	l.stored = map[aggregate.PartitionID]store.Position{}

	for _, tp := range assigned {
		logStart, hw, err := src.offsets(tp)
		if err != nil {
			return err
		}
		var from int64
		pos, have := stored[tp]
		switch {
		case have && pos.NextOffset >= logStart && pos.NextOffset <= hw:
			from = pos.NextOffset
			l.replayUntil[tp] = pos.ConsumedOffset
			l.stored[tp] = pos
		case have:
			oor := &OffsetOutOfRangeError{PartitionID: tp, Offset: pos.NextOffset, LogStart: logStart, HighWater: hw}
			switch cfg.OnOffsetOutOfRange {
			case "earliest":
				from = logStart
			case "latest":
				from = hw
			default:
				return oor
			}
			cfg.Logger.Warn("stored offset out of range: resuming", "partition", tp.String(),
				"stored", pos.NextOffset, "log_start", logStart, "high_water", hw, "resume_at", from)
			reset := store.Position{PartitionID: tp, NextOffset: from, ConsumedOffset: from}
			if err := l.st.ResetPosition(ctx, cfg.Pipeline, l.epoch, reset); err != nil {
				return err
			}
			l.stored[tp] = reset
		case cfg.StartOffset == "latest":
			from = hw
		default:
			from = logStart
		}
		l.led.Assign(tp, from)
		l.wm.Assign(tp)
		l.highWater[tp] = hw
		l.drainTarget[tp] = hw
		l.sum.HighWater[tp] = hw
		if _, ok := l.sum.Stored[tp]; !ok && have {
			l.sum.Stored[tp] = pos.NextOffset
		}
		l.wm.SetCaughtUp(tp, from >= hw)
		if err := src.start(tp, from); err != nil {
			return err
		}
		cfg.Logger.Info("assigned", "partition", tp.String(), "from", from, "log_start", logStart, "high_water", hw)
	}
	cfg.Metrics.assign(assigned)
	cfg.Metrics.watermark(seed)
	cfg.Health.assigned.Store(true)
	cfg.Logger.Info("watermark seeded", "watermark", seed.UTC().Format(time.RFC3339))
	ok = true
	return nil
}

// handleBatch processes the records of one partition read together, then
// advances the watermark.
func (l *loop) handleBatch(batch []record) {
	now := l.cfg.Now()
	tp := batch[0].tp
	l.consumed += int64(len(batch))
	l.sum.Consumed[tp.Topic] += int64(len(batch))
	l.cfg.Metrics.Consumed.WithLabelValues(tp.Topic).Add(float64(len(batch)))
	l.lastSeen[tp] = now
	for i := range batch {
		crashpoint.Hit(crashpoint.AfterConsume)
		l.handle(&batch[i], now)
	}
	l.wm.Advance(now)
	l.flowControl(now)
}

// handle processes one record read at wall time now: decode, check time,
// window, ledger.
func (l *loop) handle(r *record, now time.Time) {
	cfg := l.cfg
	if r.tp.Topic == cfg.PredictionsTopic {
		p, err := r.pred, r.derr // decoded by the partition's reader
		if err != nil {
			l.deadLetter(r, store.ReasonDecode, err.Error())
			return
		}
		if l.future(r, p.EventTime, now) {
			return
		}
		l.wm.Observe(r.tp, p.EventTime, now)
		l.keepTrip(store.Trip{Prediction: p, Partition: r.tp.Partition, Offset: r.offset})
		end := aggregate.WindowStart(p.EventTime, cfg.Window).Add(cfg.Window)
		switch classify(r.offset, end, l.wm.Current(), l.replayUntil[r.tp]) {
		case replayed:
			l.sum.Skipped++
			l.led.Consumed(r.tp, r.offset)
			return
		case late:
			cfg.Metrics.Late.WithLabelValues(r.tp.Topic).Inc()
			l.deadLetter(r, store.ReasonLate, fmt.Sprintf("event_time %s: window [%s, %s) was finalized at watermark %s",
				p.EventTime.Format(time.RFC3339), end.Add(-cfg.Window).Format(time.RFC3339),
				end.Format(time.RFC3339), l.wm.Current().Format(time.RFC3339)))
			return
		}
		l.win.Add(p)
		l.led.InWindow(r.tp, r.offset, end)
		l.sum.Predictions++
		return
	}
	v, err := r.pos, r.derr
	if err != nil {
		l.deadLetter(r, store.ReasonDecode, err.Error())
		return
	}
	if l.future(r, v.EventTime, now) {
		return
	}
	l.wm.Observe(r.tp, v.EventTime, now)
	l.keepVehicle(store.Vehicle{Position: v, Partition: r.tp.Partition, Offset: r.offset})
	l.led.Consumed(r.tp, r.offset)
	l.sum.Positions++
}

// verdict is what happens to a decoded prediction.
type verdict int

const (
	aggregateIt verdict = iota // its window is open: count it
	replayed                   // its window was written and it was consumed before a restart: skip it
	late                       // its window was written before it first arrived: dead letter "late"
)

// classify applies DESIGN.md "Watermark and lateness" and "Replay after a
// restart": an event whose window ends at or before the watermark is late,
// unless its offset is below consumedOffset, the stored one-past-last offset
// consumed before the restart: then it was counted (or recorded as late)
// before, and is skipped without a trace.
func classify(offset int64, windowEnd, watermark time.Time, consumedOffset int64) verdict {
	switch {
	case windowEnd.After(watermark):
		return aggregateIt
	case offset < consumedOffset:
		return replayed
	}
	return late
}

// future dead-letters an event later than wall clock + max future skew.
func (l *loop) future(r *record, t, now time.Time) bool {
	limit := now.Add(l.cfg.MaxFutureSkew)
	if !t.After(limit) {
		return false
	}
	l.deadLetter(r, store.ReasonFuture, fmt.Sprintf("event_time %s is later than wall clock + max future skew (%s)",
		t.Format(time.RFC3339), limit.UTC().Format(time.RFC3339)))
	return true
}

func (l *loop) deadLetter(r *record, reason, msg string) {
	l.dead = append(l.dead, store.DeadLetter{Topic: r.tp.Topic, Partition: r.tp.Partition, Offset: r.offset,
		Key: r.key, Value: r.value, Reason: reason, Error: msg})
	l.sum.DeadLetters[reason]++
	l.cfg.Metrics.DeadLetters.WithLabelValues(r.tp.Topic, reason).Inc()
	l.led.Consumed(r.tp, r.offset)
}

// keepTrip keeps the newest prediction per trip: greater event time, a tie
// going to the later offset.
func (l *loop) keepTrip(t store.Trip) {
	old, ok := l.trips[t.TripID]
	if !ok || newer(t.EventTime, t.Offset, old.EventTime, old.Offset) {
		l.trips[t.TripID] = t
	}
}

func (l *loop) keepVehicle(v store.Vehicle) {
	old, ok := l.vehicles[v.VehicleID]
	if !ok || newer(v.EventTime, v.Offset, old.EventTime, old.Offset) {
		l.vehicles[v.VehicleID] = v
	}
}

func newer(t time.Time, off int64, oldT time.Time, oldOff int64) bool {
	return t.After(oldT) || (t.Equal(oldT) && off >= oldOff)
}

// pollHighWater refreshes every partition's high water mark.
func (l *loop) pollHighWater() {
	for tp := range l.highWater {
		hw, err := l.src.client.GetOffset(tp.Topic, tp.Partition, -1)
		if err != nil {
			l.cfg.Logger.Warn("high water mark", "partition", tp.String(), "err", err)
			continue
		}
		l.highWater[tp] = hw
		l.sum.HighWater[tp] = hw
		l.cfg.Metrics.partition(tp, hw-l.stored[tp].NextOffset, l.wm.Idle(tp, l.cfg.Now()))
	}
}

// updateCaughtUp tells the watermark which partitions have reached the high
// water mark. A partition whose position stays below it with nothing
// arriving is probed for trailing transaction markers (see visibleEnd).
func (l *loop) updateCaughtUp(now time.Time) {
	for tp, hw := range l.highWater {
		pos := l.led.ConsumedOffset(tp)
		if pos < hw && now.Sub(l.lastSeen[tp]) >= probeAfter && l.probed[tp] != pos && !l.paused[tp] && !l.holding() {
			l.probed[tp] = pos
			if end, err := l.src.visibleEnd(tp, pos); err == nil && end > pos {
				l.led.Consumed(tp, min(end, hw)-1) // only markers or aborted records in [pos, end)
				pos = l.led.ConsumedOffset(tp)
			}
		}
		l.wm.SetCaughtUp(tp, pos >= hw)
	}
}

// drained tells whether every partition reached its high water mark at start.
func (l *loop) drained() bool {
	for tp, target := range l.drainTarget {
		if l.led.ConsumedOffset(tp) < target {
			return false
		}
	}
	return true
}

// finishDrain finalizes every open window and commits, retrying until it
// succeeds or ctx ends.
func (l *loop) finishDrain(ctx context.Context) error {
	if err := l.waitCommit(ctx); err != nil {
		return err
	}
	l.wm.Raise(l.win.LastEnd())
	return l.commitUntilDone(ctx, ctx)
}

// shutdown makes the final commit of what is durable after SIGTERM. Open
// windows are not written: Kafka redelivers them on the next start.
func (l *loop) shutdown() error {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	crashpoint.Hit(crashpoint.Shutdown)
	err := l.waitCommit(ctx)
	if err == nil {
		err = l.commitUntilDone(ctx, ctx)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("consumer: final commit did not succeed within %v (nothing is lost: Kafka redelivers from the stored offsets)", shutdownGrace)
	}
	return err
}

// commitUntilDone commits until a batch taken now has been committed:
// a batch that failed before is retried first; retryable failures wait with
// backoff until stop ends.
func (l *loop) commitUntilDone(ctx context.Context, stop context.Context) error {
	for {
		fresh := l.pending == nil
		l.startCommit(ctx)
		if err := l.waitCommit(ctx); err != nil {
			return err
		}
		if fresh && l.pending == nil {
			return nil
		}
		if l.pending != nil { // failed: back off before the retry
			select {
			case <-stop.Done():
				return stop.Err()
			case <-time.After(l.backoff):
			}
		}
	}
}

// pendingCommit is one batch: taken from the loop's state at one watermark,
// written by a goroutine of its own while the loop goes on consuming, and
// retried as it is when a retryable failure stops it.
type pendingCommit struct {
	wm      time.Time
	set     aggregate.ClosedSet // the windows wm finalized; their rows are built by the writer
	batch   store.Batch
	records int64 // the loop's consumed count when the batch was taken
}

// commitResult is what the writer goroutine reports.
type commitResult struct {
	err  error
	took time.Duration
}

// startCommit begins writing the pending batch, or a new one taken now, in
// ONE transaction on a goroutine of its own; the loop goes on consuming. At
// most one commit is in flight: commits are a sequence of prefixes.
func (l *loop) startCommit(ctx context.Context) {
	if l.inflight != nil {
		return
	}
	if l.pending == nil {
		l.pending = l.takeBatch()
	}
	p, st := l.pending, l.st
	done := make(chan commitResult, 1)
	l.inflight = done
	go func() {
		if p.batch.Windows == nil && p.set.Len() > 0 {
			p.batch.Windows = p.set.Rows()
		}
		crashpoint.Hit(crashpoint.BeforeBegin)
		began := time.Now()
		// A SIGTERM does not interrupt a commit in flight; a hung server does, after commitTimeout.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
		err := st.Commit(cctx, p.batch)
		cancel()
		if err == nil {
			crashpoint.Hit(crashpoint.AfterCommit)
		}
		done <- commitResult{err: err, took: time.Since(began)}
	}()
}

// takeBatch takes what the next commit writes: the windows the watermark
// finalized, the latest-state rows, the dead letters and the committable
// and consumed offsets. The loop keeps the windows and the ledger entries
// until the commit succeeds.
func (l *loop) takeBatch() *pendingCommit {
	wm := l.wm.Current()
	p := &pendingCommit{wm: wm, set: l.win.ClosedSet(wm), records: l.consumed}
	p.batch = store.Batch{Pipeline: l.cfg.Pipeline, Epoch: l.epoch, DeadLetters: l.dead, Watermark: wm}
	for _, t := range l.trips {
		p.batch.Trips = append(p.batch.Trips, t)
	}
	for _, v := range l.vehicles {
		p.batch.Vehicles = append(p.batch.Vehicles, v)
	}
	for _, tp := range SortedPartitions(l.led.parts) {
		p.batch.Positions = append(p.batch.Positions, store.Position{PartitionID: tp,
			NextOffset: l.led.Committable(tp, wm), ConsumedOffset: l.led.ConsumedOffset(tp)})
	}
	l.dead = nil
	l.trips = map[string]store.Trip{}
	l.vehicles = map[string]store.Vehicle{}
	return p
}

// waitCommit waits for the commit in flight, if any, and applies its result.
func (l *loop) waitCommit(ctx context.Context) error {
	if l.inflight == nil {
		return nil
	}
	return l.finishCommit(<-l.inflight)
}

// finishCommit applies a commit's result. Success: only now release the
// ledger and drop the written windows. A retryable failure keeps the batch
// for a retry with capped backoff (nil is returned); a terminal one is
// returned.
func (l *loop) finishCommit(res commitResult) error {
	cfg, p := l.cfg, l.pending
	l.inflight = nil
	now := cfg.Now()
	if err := res.err; err != nil {
		l.sum.CommitFailures++
		var ce *store.CommitError
		fail := cfg.Metrics.CommitFailures.WithLabelValues
		switch {
		case errors.Is(err, store.ErrFenced):
			fail(FailFenced).Inc()
			cfg.Metrics.Fenced.Set(1)
			cfg.Logger.Error("fenced: another instance claimed the pipeline; this one wrote nothing after the claim",
				"pipeline", cfg.Pipeline, "epoch", l.epoch)
			return ErrFenced
		case errors.As(err, &ce) && ce.Ambiguous:
			fail(FailAmbiguous).Inc()
			return errResync
		case !store.Retryable(err):
			fail(FailTerminal).Inc()
			return fmt.Errorf("consumer: commit: %w", err)
		}
		fail(FailRetryable).Inc()
		l.backoff = min(max(2*l.backoff, 100*time.Millisecond), maxBackoff)
		l.nextCommit = now.Add(l.backoff)
		cfg.Logger.Warn("commit failed; retrying", "err", err, "retry_in", l.backoff)
		return nil
	}
	l.pending = nil
	l.win.Drop(p.wm)
	l.led.Release(p.wm)
	l.committed = p.records
	b := &p.batch
	for _, pos := range b.Positions {
		l.stored[pos.PartitionID] = pos
		l.sum.Stored[pos.PartitionID] = pos.NextOffset
	}
	l.sum.Commits++
	l.sum.WindowRows += int64(len(b.Windows))
	l.sum.Watermark = p.wm
	m := cfg.Metrics
	m.Commits.Inc()
	m.CommitDuration.Observe(res.took.Seconds())
	m.WindowsFinalized.Add(float64(len(b.Windows)))
	m.LastCommit.Set(float64(now.UnixNano()) / 1e9)
	m.Uncommitted.Set(float64(l.consumed - l.committed))
	m.OpenWindows.Set(float64(l.win.OpenWindows()))
	cfg.Health.lastCommit.Store(now.UnixNano())
	if cfg.OnCommit != nil {
		cfg.OnCommit(b.Positions)
	}
	l.backoff = 0
	l.nextCommit = now.Add(cfg.FlushInterval)
	cfg.Logger.Debug("committed", "windows", len(b.Windows), "trips", len(b.Trips), "vehicles", len(b.Vehicles),
		"dead_letters", len(b.DeadLetters), "watermark", p.wm.Format(time.RFC3339), "took", res.took)
	return nil
}

// SortedPartitions returns m's keys in (topic, partition) order.
func SortedPartitions[V any](m map[aggregate.PartitionID]V) []aggregate.PartitionID {
	ps := make([]aggregate.PartitionID, 0, len(m))
	for p := range m {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool {
		if ps[i].Topic != ps[j].Topic {
			return ps[i].Topic < ps[j].Topic
		}
		return ps[i].Partition < ps[j].Partition
	})
	return ps
}

// retry runs fn until it succeeds, fails terminally or ctx ends; a retryable
// database error (store.Retryable) waits with capped exponential backoff.
func retry(ctx context.Context, cfg Config, what string, fn func() error) error {
	backoff := 100 * time.Millisecond
	for {
		err := fn()
		if err == nil || !store.Retryable(err) {
			return err
		}
		cfg.Logger.Warn(what+" failed; retrying", "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// maxPendingRows bounds the window rows the loop holds while a commit is in
// flight: past it, reading waits for the commit (writing is the bottleneck).
const maxPendingRows = 150_000

// maxSpread is how far in event time a partition may run ahead of the
// slowest one still delivering before flowControl pauses it.
const maxSpread = 30 * time.Minute

// holding reports whether the loop is not reading because writing is behind.
func (l *loop) holding() bool {
	return l.inflight != nil && l.win.OpenRows() > maxPendingRows
}

// closedWaiting reports whether the watermark finalized windows that no
// commit took yet.
func (l *loop) closedWaiting() bool {
	first := l.win.FirstEnd()
	return !first.IsZero() && !first.After(l.wm.Current())
}

// flowControl pauses the partitions whose event time is more than maxSpread
// ahead of the slowest partition still delivering, and resumes them once
// within half of it: a backfill reads the partitions in step by event time,
// so its open windows, and its memory, are bounded by the spread, not by the
// backlog. Live, every partition is near the wall clock and none is paused.
func (l *loop) flowControl(now time.Time) {
	if l.paused == nil {
		l.paused = map[aggregate.PartitionID]bool{}
	}
	base, ok := l.wm.Slowest(now)
	var pause, resume map[string][]int32
	for tp := range l.highWater {
		t, has := l.wm.MaxEvent(tp)
		switch ahead := has && ok && t.Sub(base) > maxSpread; {
		case ahead && !l.paused[tp]:
			l.paused[tp] = true
			if pause == nil {
				pause = map[string][]int32{}
			}
			pause[tp.Topic] = append(pause[tp.Topic], tp.Partition)
		case l.paused[tp] && (!ok || !has || t.Sub(base) <= maxSpread/2):
			delete(l.paused, tp)
			if resume == nil {
				resume = map[string][]int32{}
			}
			resume[tp.Topic] = append(resume[tp.Topic], tp.Partition)
		}
	}
	if pause != nil {
		l.src.consumer.Pause(pause)
	}
	if resume != nil {
		l.src.consumer.Resume(resume)
	}
}
