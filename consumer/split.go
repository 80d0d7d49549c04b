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

// Split pipelines (docs/design.md "Pipelines, instances and partitions", Split
// windows and Draining a split pipeline). An instance that does not own
// every partition of its pipeline, or that finds partials of an earlier
// split run waiting, keeps its rows per source partition and writes them as
// partial aggregates; its commits merge the windows every partition of the
// pipeline finalized (store.CommitSplit). An instance that owns every
// partition and finds nothing pending writes final rows, as fast as ever.
//
// Lateness stays each instance's own: an event is late when its window ends
// at or before the instance's watermark, or at or before the watermark stored
// for its partition (a partial of that partition and window may be written
// already, and must never be written again with other events).

// splitState is the loop's part in a split pipeline, and the stored
// watermarks every instance judges replayed and late events by.
type splitState struct {
	on     bool     // write partials and merge (store.CommitSplit)
	topics []string // the pipeline's topics
	// stored is the watermark stored for each assigned partition at start;
	// floor is the greatest of them: events of later windows need no look-up.
	stored map[aggregate.PartitionID]time.Time
	floor  time.Time

	draining bool         // the drain's final commit: mark the partitions drained
	merged   store.Merged // what the last commit's merge did
	flow     splitFlow    // flow control across the pipeline's instances (splitflow.go)
	// holding: this instance's last successful commit stored none of its
	// partitions idle or drained (store.Split.Holding); false until its
	// first commit, since an earlier owner may have.
	holding bool
}

// idleLease is how long after an owner's last commit its idle partitions
// still stop holding the merge, and after a drain's last instance heartbeat
// its drained partitions: commits come every flush interval and heartbeats
// every lease/3, so a partition whose owner stopped holds the merge again
// within this.
func idleLease(cfg Config) time.Duration { return max(30*time.Second, 3*cfg.FlushInterval, cfg.Lease) }

// startSplit decides, once the stored positions are loaded, whether this
// instance writes partials: it does unless it owns every partition of the
// pipeline's topics and no partials are pending. A split instance registers
// every partition of the pipeline, so that one no instance claimed yet holds
// the merge back.
func (l *loop) startSplit(ctx context.Context, assigned []aggregate.PartitionID, stored map[aggregate.PartitionID]store.Position) error {
	cfg := l.cfg
	sp := splitState{stored: map[aggregate.PartitionID]time.Time{}}
	for _, tp := range assigned {
		if pos, ok := stored[tp]; ok && !pos.Watermark.IsZero() {
			sp.stored[tp] = pos.Watermark
			if pos.Watermark.After(sp.floor) {
				sp.floor = pos.Watermark
			}
		}
	}
	var all []aggregate.PartitionID
	for _, topic := range []string{cfg.PredictionsTopic, cfg.PositionsTopic} {
		if topic == "" {
			continue
		}
		sp.topics = append(sp.topics, topic)
		ps, err := l.src.partitions(topic)
		if err != nil {
			return err
		}
		for _, p := range ps {
			all = append(all, aggregate.PartitionID{Topic: topic, Partition: p})
		}
	}
	ownsAll := true
	for _, tp := range all {
		ownsAll = ownsAll && slices.Contains(assigned, tp)
	}
	var pending int
	err := retry(ctx, cfg, "register the pipeline's partitions", func() (err error) {
		return l.db.do(func(st *store.Store) error {
			if !ownsAll {
				if err := st.RegisterPartitions(ctx, cfg.Pipeline, all); err != nil {
					return err
				}
			}
			pending, err = st.PendingPartials(ctx, cfg.Pipeline)
			return err
		})
	})
	if err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	sp.on = !ownsAll || pending > 0
	if sp.on {
		cfg.Logger.Info("split pipeline: writing partial aggregates and merging the windows every partition finalized",
			"pipeline", cfg.Pipeline, "owned", len(assigned), "partitions", len(all), "pending_windows", pending)
	}
	l.sp = sp
	cfg.Metrics.MergePending.Set(float64(pending))
	return nil
}

// newWindower returns the loop's windower: per source partition when split.
func (sp *splitState) newWindower(size time.Duration) *aggregate.Windower {
	if sp.on {
		return aggregate.NewPartitionedWindower(size)
	}
	return aggregate.NewWindower(size)
}

// storedAt returns the watermark stored for tp at start when a window ending
// at end may lie at or before it, else the zero time.
func (sp *splitState) storedAt(tp aggregate.PartitionID, end time.Time) time.Time {
	if end.After(sp.floor) {
		return time.Time{}
	}
	return sp.stored[tp]
}

// splitBatch adds to b what a split commit needs: the partition flags the
// merge reads and the earliest window held. It runs in takeBatch.
func (l *loop) splitBatch(b *store.Batch) {
	if !l.sp.on {
		return
	}
	cfg, now := l.cfg, l.cfg.Now()
	open := l.win.OpenPartitions(b.Watermark)
	for i := range b.Positions {
		p := &b.Positions[i]
		p.Drained = l.sp.draining
		p.Idle = l.wm.Idle(p.PartitionID, now) && !(p.Topic == cfg.PredictionsTopic && open[p.Partition])
	}
	b.Split = &store.Split{Topic: cfg.PredictionsTopic, Topics: l.sp.topics, Window: cfg.Window,
		FirstOpen: l.win.FirstEnd(), IdleLease: idleLease(cfg), Holding: l.sp.holding}
}

// splitCommitted applies a successful split commit's merge: the watermark
// never stays below the end of the last merged window (its events are late
// for the pipeline). positions are the flags the commit stored.
func (l *loop) splitCommitted(m store.Merged, wm time.Time, positions []store.Position) {
	l.sp.merged = m
	l.sp.flow.committed(wm, m, l.cfg.Now())
	l.sp.holding = len(positions) > 0
	for _, p := range positions {
		l.sp.holding = l.sp.holding && !p.Idle && !p.Drained
	}
	l.wm.Raise(m.Until)
	l.noteClosable(l.cfg.Now())
	l.sum.WindowRows += int64(m.Rows)
	l.cfg.Metrics.MergePending.Set(float64(m.Pending))
	l.cfg.Metrics.WindowsFinalized.Add(float64(m.Rows))
	for i, r := range m.Refused {
		if i == 10 {
			l.cfg.Logger.Warn("more merged rows refused: see table refused_windows", "rows", len(m.Refused))
			break
		}
		l.cfg.Logger.Warn("PostgreSQL refused a merged row: kept in refused_windows with its statistics and distribution; fix the cause and re-apply it (docs/runbook.md)",
			"window_start", r.WindowStart.Format(time.RFC3339), "dimension", r.Dimension, "id", r.DimensionID, "reason", r.Reason)
	}
	if m.Skipped {
		l.cfg.Logger.Debug("merge left to the next commit: another one was deciding a merge", "pending_windows", m.Pending)
	}
	if m.Windows > 0 {
		l.cfg.Logger.Debug("merged", "windows", m.Windows, "rows", m.Rows, "merged_until", m.Until.Format(time.RFC3339),
			"pending_windows", m.Pending)
	}
}

// mergedPast reports whether err says the pipeline merged a window this
// instance still held events of: it resyncs, and those events are late.
func (l *loop) mergedPast(err error) bool {
	if !errors.Is(err, store.ErrMergedPast) {
		return false
	}
	l.cfg.Metrics.CommitFailures.WithLabelValues(FailMergedPast).Inc()
	l.cfg.Logger.Warn("the pipeline merged a window this instance still held events of (its partition was idle): "+
		"re-reading stored positions; those events are late", "err", err)
	return true
}

// awaitMerge ends a split drain: it waits until the commit that found every
// partition of the pipeline drained merged everything (perhaps this
// instance's own), or until nothing is left to merge while no other
// instance of the pipeline is alive (store.DrainMerged), polling. A cancelled ctx stops the wait: what this
// instance read is durable as partials either way.
func (l *loop) awaitMerge(ctx context.Context) error {
	if !l.sp.on || l.sp.merged.Drained {
		return nil
	}
	var mine []aggregate.PartitionID
	for tp := range l.led.parts {
		mine = append(mine, tp)
	}
	// Polled at 25 ms, doubling to 200 ms: the other instance's last merge
	// often ends within a few hundred milliseconds of this one's (a fixed
	// 200 ms poll added 100 ms to a drain on average); a backoff to a second
	// added up to a second to a wait of a few seconds.
	poll := 25 * time.Millisecond
	var logged time.Time
	for {
		var done bool
		var waiting []string
		err := retry(ctx, l.cfg, "check the merge of the drain", func() (err error) {
			return l.db.do(func(st *store.Store) (err error) {
				done, waiting, err = st.DrainMerged(ctx, l.cfg.Pipeline, mine, idleLease(l.cfg))
				return err
			})
		})
		if err != nil || done {
			return err
		}
		if now := time.Now(); now.Sub(logged) >= 10*time.Second {
			logged = now
			l.cfg.Logger.Info("drained: waiting for the other instances of the pipeline to drain and merge",
				"pipeline", l.cfg.Pipeline, "not_drained", waiting)
		}
		select {
		case <-ctx.Done():
			l.cfg.Logger.Warn("stopped waiting for the merge of the drain: this instance's windows are stored as partials",
				"pipeline", l.cfg.Pipeline)
			return nil
		case <-time.After(poll):
		}
		poll = min(2*poll, 200*time.Millisecond)
	}
}
