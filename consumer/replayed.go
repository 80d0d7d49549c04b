package consumer

import (
	"context"
	"fmt"
	"time"

	"github.com/IBM/sarama"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/store"
)

// Copies of dead letters (store/replayed.go; docs/runbook.md, "Growing
// dead-letter table"). A prediction with the header ovstream-dlq-source is a
// copy `dlq replay` produced. It never enters the windower: a copy whose
// window is open waits, a copy whose window is final goes into the next
// batch (Batch.Replayed), whose commit merges it into the stored rows of its
// window and records its source, unless a copy of that source was counted
// before (then it is skipped). So a source counts at most once, whatever
// copies the topic holds and whatever restarts re-read. A waiting copy holds
// its partition's committable offset, so a restart reads it again: it counts
// at least once.
//
// Its verdict when first read: decode and future as for any record; a copy
// whose window is final is dead-lettered late again unless its header
// ovstream-dlq-final says merge (dlq replay sets it for rejected, future and
// implausible dead letters, and for late and decode ones with
// --into-final-windows); then implausible, as for any record. A
// copy below the stored consumed_offset that was not dead-lettered then was
// accepted then: it waits again, and the commit's record of its source
// decides whether it counts.

// replayHeaders reads the headers dlq replay sets on a copy: its source
// (zero when the record is no copy) and whether it may be merged into a final
// window. A malformed source makes the record a decode dead letter (*derr,
// unless it failed to decode already): counted as an original it could count
// twice.
func replayHeaders(hs []*sarama.RecordHeader, derr *error) (src store.SourceID, mergeFinal bool) {
	for _, h := range hs {
		switch string(h.Key) {
		case store.HeaderSource:
			s, err := store.ParseSourceID(string(h.Value))
			if err != nil && *derr == nil {
				*derr = err
			}
			src = s
		case store.HeaderFinal:
			mergeFinal = string(h.Value) == store.FinalMerge
		}
	}
	return src, mergeFinal
}

// replayedCopy handles p, read from the copy r, whose window ends at end;
// replay: r was read before a restart (and not dead-lettered then).
func (l *loop) replayedCopy(r *record, p aggregate.Prediction, end time.Time, replay bool) {
	open := end.After(l.wm.Current()) && end.After(l.sp.storedAt(r.tp, end))
	if !replay && !open && !r.mergeFinal {
		l.late(r, p, end)
		return
	}
	if !replay && !l.plausible(&p) {
		l.implausible(r, &p)
		return
	}
	if l.rejectPrediction(r, p) {
		return
	}
	l.copies = append(l.copies, store.ReplayedRecord{Source: r.src, Copy: r.tp, Offset: r.offset, Key: r.key, Value: r.value,
		Prediction: p, WindowStart: end.Add(-l.cfg.Window), WindowEnd: end})
	l.led.Consumed(r.tp, r.offset)
}

// takeCopies removes from the waiting copies those whose window ends at or
// before final and returns them.
func (l *loop) takeCopies(final time.Time) []store.ReplayedRecord {
	var take []store.ReplayedRecord
	keep := l.copies[:0]
	for _, c := range l.copies {
		if c.WindowEnd.After(final) {
			keep = append(keep, c)
		} else {
			take = append(take, c)
		}
	}
	clear(l.copies[len(keep):])
	l.copies = keep
	return take
}

// copiesFinal is the end of the last window whose copies a batch taken at
// watermark wm counts: wm, whose windows the batch writes; in a split
// pipeline the end of the last merged window (delay_aggregates holds only
// merged windows), as the last commit saw it.
func (l *loop) copiesFinal(wm time.Time) time.Time {
	if l.sp.on {
		return l.sp.merged.Until
	}
	return wm
}

// copyFloors returns, per partition, the smallest offset of a copy still
// waiting: the partition's committable offset stays at or below it.
func (l *loop) copyFloors() map[aggregate.PartitionID]int64 {
	floors := map[aggregate.PartitionID]int64{}
	for _, c := range l.copies {
		if f, ok := floors[c.Copy]; !ok || c.Offset < f {
			floors[c.Copy] = c.Offset
		}
	}
	return floors
}

// copiesLastEnd returns the end of the last window a waiting copy belongs
// to; zero when none waits.
func (l *loop) copiesLastEnd() time.Time {
	var last time.Time
	for _, c := range l.copies {
		if c.WindowEnd.After(last) {
			last = c.WindowEnd
		}
	}
	return last
}

// copiesCommitted applies what a successful commit did with its copies.
func (l *loop) copiesCommitted(out *store.ReplayOutcome) {
	if out == nil {
		return
	}
	l.sum.ReplayedCounted += int64(out.Counted)
	l.sum.ReplayedDuplicates += int64(out.Duplicates)
	for _, d := range out.DeadLetters {
		l.sum.DeadLetters[d.Reason]++
		l.cfg.Metrics.DeadLetters.WithLabelValues(d.Topic, d.Reason).Inc()
	}
	if out.Counted+out.Duplicates+len(out.DeadLetters) > 0 {
		l.cfg.Logger.Info("replayed dead letters", "counted", out.Counted, "duplicates_skipped", out.Duplicates,
			"dead_lettered", len(out.DeadLetters))
	}
	for i, d := range out.DeadLetters {
		if i == 10 {
			l.cfg.Logger.Warn(fmt.Sprintf("%d more replayed copies dead-lettered", len(out.DeadLetters)-i))
			break
		}
		l.cfg.Logger.Warn("a replayed copy was dead-lettered", "copy", fmt.Sprintf("%s/%d/%d", d.Topic, d.Partition, d.Offset),
			"source", d.Source.String(), "reason", d.Reason, "error", d.Error)
	}
}

// drainCopies ends a split drain whose merge is done: the copies still
// waiting are counted by up to three more commits (each learns the merge
// frontier, pipelines.merged_until, that the next one counts up to). Copies
// of windows the pipeline never merged (no partial of any partition) are left
// to the next run, logged: their offsets stay stored below them.
func (l *loop) drainCopies(ctx context.Context) error {
	if !l.sp.on || ctx.Err() != nil {
		return nil
	}
	l.sp.draining = false // the drain's merge cleared the drained flags: a commit now must not set them again
	for i := 0; i < 3 && len(l.copies) > 0; i++ {
		if err := l.commitUntilDone(ctx, ctx); err != nil {
			return err
		}
	}
	if n := len(l.copies); n > 0 {
		l.cfg.Logger.Warn("replayed copies wait for windows the pipeline has not merged: the next run counts them",
			"copies", n, "merged_until", l.sp.merged.Until.Format(time.RFC3339))
	}
	return nil
}
