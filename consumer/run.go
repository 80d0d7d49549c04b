package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/consumer/crashpoint"
	"github.com/ovstream/ovstream/store"
)

// ErrFenced is returned by Run when another instance claimed the pipeline:
// this one wrote nothing after the claim and must exit (G6, docs/design.md "Guarantees the tests assert").
var ErrFenced = store.ErrFenced

// errResync asks Run to rebuild its state from the database: a COMMIT failed
// ambiguously, so what is stored is unknown until it is read again; or
// PostgreSQL refused rows, whose records are dead-lettered when read again;
// or the log under a reader changed (restartError, lost.go).
var errResync = errors.New("consumer: resync from stored positions")

const (
	tickInterval  = 100 * time.Millisecond // watermark, drain check
	pollInterval  = time.Second            // high water marks
	probeAfter    = time.Second            // quiet time before probing for trailing transaction markers
	probeBackoff  = 30 * time.Second       // the longest wait between marker probes that fail
	maxBackoff    = 5 * time.Second        // commit retries: a database that returns is used within seconds
	shutdownGrace = 30 * time.Second       // final commit after SIGTERM
	commitTimeout = 2 * time.Minute        // one commit transaction, then it counts as failed
)

// Run consumes the assigned partitions until ctx is cancelled (final commit
// of what is durable, then nil) or, with cfg.Drain, until every partition
// reached its high water mark at start (every window finalized and
// committed). It claims its partitions first, waiting as a standby while a
// live instance holds them (cancelling ctx then ends it with nil); every
// commit is ONE transaction of finalized windows, latest state, dead
// letters, offsets and watermark. At the end it releases its partitions
// (unless fenced), so a standby claims them at once.
//
// Errors: ErrFenced when another instance claimed one of its partitions;
// *OffsetOutOfRangeError when a stored offset is gone and
// cfg.OnOffsetOutOfRange is "fail"; *AuthorizationError when the broker
// refuses a partition's fetch for want of an ACL (authz.go); otherwise a wrapped Kafka or database
// error that did not clear with retries.
func Run(ctx context.Context, cfg Config, databaseURL string) (*Summary, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	opts := []store.Option{
		store.WithNameRefused(func(n aggregate.Name, reason string) {
			cfg.Logger.Warn("name left out: "+reason, "dimension", n.Dimension, "id", n.ID)
		}),
		store.WithServerChange(func(from, to string) {
			cfg.Logger.Warn("connected to another PostgreSQL server (a failover?): commits go on there once it holds what this instance committed",
				"from", from, "to", to)
		}),
	}
	if crashpoint.Enabled {
		opts = append(opts, store.WithHooks(store.Hooks{
			AfterWindows: func() { crashpoint.Hit(crashpoint.MidCommit) },
			BeforeCommit: func() { crashpoint.Hit(crashpoint.BeforeCommit) },
		}))
	}
	began := cfg.Now()
	sum := &Summary{Consumed: map[string]int64{}, DeadLetters: map[string]int64{},
		Stored: map[aggregate.PartitionID]int64{}, HighWater: map[aggregate.PartitionID]int64{}}
	in, err := startInstance(ctx, cfg, databaseURL, opts...)
	if err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	// The skew of this host's clock, before any event is judged by it
	// (clock.go); the heartbeat measures it again from then on.
	if err := retry(ctx, cfg, "read the database's clock", func() error {
		return in.clock.measure(ctx, func(ctx context.Context) (t time.Time, err error) {
			err = in.db.do(func(st *store.Store) (err error) {
				t, err = st.DatabaseTime(ctx)
				return err
			})
			return t, err
		})
	}); err != nil && ctx.Err() == nil {
		cfg.Logger.Warn("cannot read PostgreSQL's clock at start-up: the host's clock is used until a heartbeat reads it", "err", err)
	}
	// Retention runs on a connection of its own, never in a commit.
	ret := startRetention(ctx, cfg, in.hb, in.active)
	var epoch int64                                     // claimed by the first loop's start; a resync keeps it
	rej := &rejects{}                                   // what PostgreSQL refused: a resync keeps it
	var stored map[aggregate.PartitionID]store.Position // what the loop before last wrote
	for {
		l := &loop{cfg: cfg, db: in.db, in: in, epoch: epoch, sum: sum, rej: rej.forLoop(), before: stored}
		err = l.run(ctx)
		epoch, stored = l.epoch, l.stored
		if !errors.Is(err, errResync) {
			break
		}
		sum.Resyncs++
		var re *restartError
		if errors.As(err, &re) {
			cfg.Logger.Warn(re.Error())
		}
	}
	ret.stop()
	in.stop(err)
	if stoppedEarly(err) {
		err = nil
	}
	sum.Elapsed = cfg.Now().Sub(began)
	return sum, err
}

// loop is the one goroutine that owns the windower, the ledger, the
// latest-state buffers and the dead letters: no locks.
type loop struct {
	cfg   Config
	db    *committer // the commit connection
	in    *instance  // this instance's heartbeat and lease
	epoch int64
	sum   *Summary
	src   *source
	rej   *rejects

	lastHeld *store.HeldError // what a standby waits for, said again while a poll fails

	win        *aggregate.Windower
	wm         *aggregate.Watermark
	led        *Ledger
	deadBefore map[aggregate.PartitionID][]int64    // dead letters in [next_offset, consumed_offset) (replay.go)
	sp         splitState                           // split pipeline, stored watermarks (split.go)
	prov       provisionalState                     // provisional rows (provisional.go)
	parts      map[aggregate.PartitionID]*partState // the assigned partitions (partstate.go)

	trips    *latest[store.Trip]    // newest prediction per trip since the last commit
	vehicles *latest[store.Vehicle] // newest position per vehicle since the last commit
	names    *aggregate.Names       // the lines' and stations' names; changed ones go into the next batch
	dead     []store.DeadLetter
	visits   visitBuffer            // stop visits since the last batch (visits.go)
	copies   []store.ReplayedRecord // copies of dead letters waiting for their window (replayed.go)
	stored   map[aggregate.PartitionID]store.Position
	before   map[aggregate.PartitionID]store.Position // the stored positions of the loop before a resync, nil at start

	nextCommit time.Time
	backoff    time.Duration
	pending    *pendingCommit    // the batch in flight, or failed and waiting for its retry
	closable   closable          // when the windows not yet written became closable (freshness.go)
	inflight   chan commitResult // non-nil while a commit runs
	hwPending  chan highWaters   // non-nil while a high water mark poll runs (pollHighWater)
	consumed   int64             // records consumed by this loop
	committed  int64             // of those, the ones a successful commit covered
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
	l.pollHighWater() // at once: the first reading finds which partitions are caught up and confirms the first proposal
	for {
		in := l.src.out
		if l.consumed-l.committed >= cfg.MaxUncommitted {
			in = nil // pause fetching until a commit succeeds: memory stays bounded
		}
		if l.inflight != nil && l.win.OpenRows() > maxPendingRows {
			in = nil // writing is behind reading: wait for the commit in flight
		}
		if l.sp.flow.held {
			in = nil // far ahead of the other instances of the pipeline (splitflow.go)
		}
		select {
		case <-ctx.Done():
			return l.shutdown()
		case batch := <-in:
			l.handleBatch(batch)
			releaseBatch(batch) // handle copies what it keeps
			if l.inflight == nil && l.pending == nil && l.closedWaiting() {
				l.startCommit(ctx) // the batch closed a window: write it now, not at the next tick (freshness)
			}
		case res := <-l.inflight:
			if err := l.finishCommit(res); err != nil {
				return err
			}
			l.beatInline(ctx)
			if l.pending == nil && l.closedWaiting() {
				l.startCommit(ctx) // windows closed while it ran: write them now
			}
		case err := <-l.src.errs:
			if err := l.sourceError(err); err != nil {
				return err
			}
		case hws := <-l.hwPending:
			l.applyHighWaters(hws)
		case <-poll.C:
			if err := l.poll(ctx); err != nil {
				return err
			}
		case <-tick.C:
			now := cfg.Now()
			l.updateCaughtUp(now)
			cfg.Metrics.watermark(l.wm.Advance(now))
			if l.hwPending == nil && l.wm.CouldRaise(now) {
				l.pollHighWater() // a reading now may let the watermark leave quiet partitions out
			}
			l.noteClosable(now)
			cfg.Metrics.Uncommitted.Set(float64(l.consumed - l.committed))
			cfg.Metrics.OpenWindows.Set(float64(l.win.OpenWindows()))
			l.logProgress(now)
			l.splitFlowTick(now)
			l.beatInline(ctx)
			if cfg.Drain && l.drained() {
				return l.finishDrain(ctx)
			}
			if !now.Before(l.nextCommit) || (l.pending == nil && l.closedWaiting()) {
				l.startCommit(ctx)
			}
		}
	}
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
		store.LogRetry(cfg.Logger, what, err, backoff)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}
