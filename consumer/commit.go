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
	err    error
	took   time.Duration
	merged store.Merged // a split commit's merge
}

// startCommit begins writing the pending batch, or a new one taken now, in
// ONE transaction on the commit connection's owner (committer); the loop
// goes on consuming. At most one commit is in flight: commits are a
// sequence of prefixes.
func (l *loop) startCommit(ctx context.Context) {
	if l.inflight != nil {
		return
	}
	if l.pending == nil {
		l.pending = l.takeBatch()
	}
	p := l.pending
	done := make(chan commitResult, 1)
	l.inflight = done
	l.db.send(func(st *store.Store) {
		switch {
		case p.batch.Split != nil && p.batch.Partials == nil && p.set.Len() > 0:
			p.batch.Partials = p.set.PartialWindows()
		case p.batch.Split == nil:
			p.batch.Closed = p.set // rows built as the COPY sends them
		}
		crashpoint.Hit(crashpoint.BeforeBegin)
		began := time.Now()
		// A SIGTERM does not interrupt a commit in flight; a hung server does, after commitTimeout.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
		var res commitResult
		if p.batch.Split != nil {
			res.merged, res.err = st.CommitSplit(cctx, p.batch)
		} else {
			res.err = st.Commit(cctx, p.batch)
		}
		cancel()
		if res.err == nil {
			crashpoint.Hit(crashpoint.AfterCommit)
		}
		res.took = time.Since(began)
		done <- res
	})
}

// takeBatch takes what the next commit writes: the windows the watermark
// finalized, the latest-state rows, the dead letters and the committable
// and consumed offsets. The loop keeps the windows and the ledger entries
// until the commit succeeds.
func (l *loop) takeBatch() *pendingCommit {
	wm := l.wm.Current()
	p := &pendingCommit{wm: wm, set: l.win.ClosedSet(wm), records: l.consumed}
	// The names changed since the last batch: a failed commit is retried
	// with them, so they stay until they are written (aggregate.Names).
	p.batch = store.Batch{Pipeline: l.cfg.Pipeline, Owner: l.cfg.Owner, Epoch: l.epoch, DeadLetters: l.dead, Watermark: wm,
		Names: l.names.Take()}
	p.batch.Trips, p.batch.Vehicles = l.trips.rows, l.vehicles.rows
	l.olderVersions(&p.batch)
	p.batch.Visits, p.batch.NoStartDate = l.takeVisits()
	p.batch.Replayed, p.batch.ReplayOut = l.takeCopies(l.copiesFinal(wm)), &store.ReplayOutcome{}
	floors := l.copyFloors() // of the copies still waiting (replayed.go)
	for _, tp := range SortedPartitions(l.led.parts) {
		next := l.led.Committable(tp, wm)
		if f, ok := floors[tp]; ok {
			next = min(next, f)
		}
		p.batch.Positions = append(p.batch.Positions, store.Position{PartitionID: tp,
			NextOffset: next, ConsumedOffset: l.led.ConsumedOffset(tp), Seq: l.stored[tp].Seq,
			LeaderEpoch: l.led.CommittableEpoch(tp, next)})
	}
	l.splitBatch(&p.batch)
	l.provisional(&p.batch, l.cfg.Now())
	l.dead = nil
	l.trips.take()
	l.vehicles.take()
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
// for a retry with capped backoff (nil is returned); rows PostgreSQL refused
// and an ambiguous COMMIT ask for a resync (errResync); a terminal failure
// is returned.
func (l *loop) finishCommit(res commitResult) error {
	cfg, p := l.cfg, l.pending
	l.inflight = nil
	now := cfg.Now()
	if err := res.err; err != nil {
		l.sum.CommitFailures++
		var ce *store.CommitError
		var rejected *store.RejectedError
		var behind *store.BehindError
		fail := cfg.Metrics.CommitFailures.WithLabelValues
		switch {
		case errors.Is(err, store.ErrFenced):
			fail(FailFenced).Inc()
			cfg.Metrics.Fenced.Set(1)
			cfg.Logger.Error("fenced: another instance claimed the pipeline; this one wrote nothing after the claim",
				"pipeline", cfg.Pipeline, "epoch", l.epoch)
			return ErrFenced
		case errors.As(err, &behind):
			fail(FailBehind).Inc()
			l.logBehind(behind, l.stored)
			if behind.ClaimLost {
				l.epoch = 0 // claim again (Run), then replay
			}
			l.stored = nil // logged: the next loop does not log it again (lostSinceBefore)
			return errResync
		case errors.As(err, &rejected):
			fail(FailRejected).Inc()
			return l.rejected(rejected)
		case errors.As(err, &ce) && ce.Ambiguous:
			fail(FailAmbiguous).Inc()
			cfg.Logger.Warn("COMMIT outcome unknown: re-reading stored positions and seeking again", "err", err)
			return errResync
		case l.mergedPast(err):
			return errResync
		case errors.Is(err, store.ErrNotSoleOwner):
			fail(FailNotSoleOwner).Inc()
			cfg.Logger.Warn("another instance owns a partition of the pipeline: re-reading stored positions and starting again as a split instance",
				"err", err)
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
	l.rej.committed(p.wm, p.batch.Positions, cfg.Window)
	l.win.Drop(p.wm)
	l.writtenClosable(p.wm)
	l.led.Release(p.wm)
	l.committed = p.records
	if p.batch.Split != nil {
		l.splitCommitted(res.merged, p.wm, p.batch.Positions)
	}
	b := &p.batch
	if b.Provisional != nil {
		l.prov.took = res.took
	}
	l.copiesCommitted(b.ReplayOut)
	for _, pos := range b.Positions {
		pos.Seq++ // the commit's fencing statement added one (store.Commit)
		l.stored[pos.PartitionID] = pos
		l.sum.Stored[pos.PartitionID] = pos.NextOffset
	}
	l.sum.Commits++
	l.sum.WindowRows += int64(b.WindowRows())
	l.sum.Watermark = p.wm
	m := cfg.Metrics
	m.Commits.Inc()
	m.CommitDuration.Observe(res.took.Seconds())
	m.WindowsFinalized.Add(float64(b.WindowRows()))
	m.LastCommit.Set(float64(l.in.clock.now(now).UnixNano()) / 1e9) // by the database's clock (clock.go)
	m.Uncommitted.Set(float64(l.consumed - l.committed))
	m.OpenWindows.Set(float64(l.win.OpenWindows()))
	cfg.Health.lastCommit.Store(now.UnixNano())
	if cfg.OnCommit != nil {
		cfg.OnCommit(b.Positions)
	}
	l.backoff = 0
	l.nextCommit = now.Add(cfg.FlushInterval)
	cfg.Logger.Debug("committed", "windows", b.WindowRows(), "trips", len(b.Trips), "vehicles", len(b.Vehicles), "names", len(b.Names),
		"dead_letters", len(b.DeadLetters), "watermark", p.wm.Format(time.RFC3339), "took", res.took)
	return nil
}

// claimLostMsg is logged when the database lost this instance's claim.
const claimLostMsg = "the database lost this instance's claim of its partitions (a failover to a replica that had not received it, or a restore): claiming them again"

// logBehind logs, once per loss, that the database does not hold what this
// instance committed (committed: its positions as it last wrote them) (a failover to a replica that had not received them, a
// restore): the partitions, the offsets this instance had committed and the
// ones the database holds. The loop then drops its state and replays from the
// stored positions (errResync): the lost commits took their offsets with
// them, so every event is counted once.
func (l *loop) logBehind(e *store.BehindError, committed map[aggregate.PartitionID]store.Position) {
	if e.ClaimLost {
		l.cfg.Logger.Error(claimLostMsg,
			"pipeline", l.cfg.Pipeline, "epoch", l.epoch)
	}
	for _, b := range e.Partitions {
		l.cfg.Logger.Error("the database lost commits this instance made (a failover to a replica that had not received them, or a restore): replaying them from the stored offsets",
			"pipeline", l.cfg.Pipeline, "partition", b.PartitionID.String(),
			"committed_next_offset", committed[b.PartitionID].NextOffset, "stored_next_offset", b.NextOffset,
			"commits_lost", b.WantSeq-b.Seq)
	}
}
