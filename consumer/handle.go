package consumer

import (
	"fmt"
	"time"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/consumer/crashpoint"
	"github.com/ovstream/ovstream/store"
)

// handleBatch processes the records of one partition read together, then
// advances the watermark.
func (l *loop) handleBatch(batch []record) {
	now := l.cfg.Now()
	tp := batch[0].tp
	l.consumed += int64(len(batch))
	l.sum.Consumed[tp.Topic] += int64(len(batch))
	l.cfg.Metrics.Consumed.WithLabelValues(tp.Topic).Add(float64(len(batch)))
	l.parts[tp].lastSeen = now
	l.led.Epoch(tp, batch[0].offset, batch[0].epoch) // one reader's batch: one epoch
	for i := range batch {
		crashpoint.Hit(crashpoint.AfterConsume)
		l.handle(&batch[i], now)
	}
	l.wm.Advance(now)
	l.noteClosable(now)
	l.flowControl(now)
}

// handle processes one record read at wall time now: replay, decode, check
// time, window, ledger. A record consumed before a restart is never judged by
// the wall clock again (see replay.go).
func (l *loop) handle(r *record, now time.Time) {
	cfg := l.cfg
	replay := l.replaying(r)
	if replay && l.skipDeadLettered(r) {
		return
	}
	if r.tp.Topic == cfg.PredictionsTopic {
		p, err := r.pred, r.derr // decoded by the partition's reader
		if err != nil {
			l.deadLetter(r, store.ReasonDecode, err.Error())
			return
		}
		if !replay && l.future(r, p.EventTime, now) {
			return
		}
		l.wm.Observe(r.tp, p.EventTime, now)
		l.observeCrossing(r.tp, p.EventTime, r.ts, now)
		// Names count whatever the verdict below (late, replayed, rejected):
		// the name of a line is a fact about the line, not about the window.
		l.names.Observe(&p, r.names)
		plausible := l.plausible(&p) // see plausible.go for the verdict's order
		if plausible {
			l.keepTrip(store.Trip{Prediction: p, Partition: r.tp.Partition, Offset: r.offset})
		}
		end := aggregate.WindowStart(p.EventTime, cfg.Window).Add(cfg.Window)
		if !r.src.IsZero() {
			l.replayedCopy(r, p, end, replay)
			return
		}
		switch classify(r.offset, end, l.wm.Current(), l.parts[r.tp].replayUntil, l.sp.storedAt(r.tp, end)) {
		case replayed:
			l.sum.Skipped++
			l.led.Consumed(r.tp, r.offset)
			return
		case late:
			l.late(r, p, end)
			return
		}
		if !plausible {
			l.implausible(r, &p)
			return
		}
		if l.rejectPrediction(r, p) {
			return
		}
		l.win.AddFrom(r.tp.Partition, p)
		if !replay {
			l.observeVisit(r, &p)
		}
		l.led.InWindow(r.tp, r.offset, end)
		l.sum.Predictions++
		return
	}
	v, err := r.pos, r.derr
	if err != nil {
		l.deadLetter(r, store.ReasonDecode, err.Error())
		return
	}
	if !replay && l.future(r, v.EventTime, now) {
		return
	}
	l.wm.Observe(r.tp, v.EventTime, now)
	l.observeCrossing(r.tp, v.EventTime, r.ts, now)
	if l.rejectPosition(r) {
		return
	}
	l.keepVehicle(store.Vehicle{Position: v, Partition: r.tp.Partition, Offset: r.offset})
	l.led.Consumed(r.tp, r.offset)
	l.sum.Positions++
}

// future dead-letters an event later than wall clock + max future skew,
// the wall clock read at local time now being the later of this host's and
// PostgreSQL's (dbClock.futureNow): a host clock behind does not make live
// events future.
func (l *loop) future(r *record, t, now time.Time) bool {
	limit := l.in.clock.futureNow(now).Add(l.cfg.MaxFutureSkew)
	if !t.After(limit) {
		return false
	}
	l.deadLetter(r, store.ReasonFuture, fmt.Sprintf("event_time %s is later than wall clock + max future skew (%s)",
		t.Format(time.RFC3339), limit.UTC().Format(time.RFC3339)))
	return true
}

// late dead-letters p, read from r, whose window (ending at end) was
// finalized before it arrived.
func (l *loop) late(r *record, p aggregate.Prediction, end time.Time) {
	l.cfg.Metrics.Late.WithLabelValues(r.tp.Topic).Inc()
	if l.cfg.IdleFinalize && !l.sum.lateUnderIdleFinalize {
		l.sum.lateUnderIdleFinalize = true
		l.cfg.Logger.Warn("a record is late under --idle-finalize: when every partition is idle the watermark follows "+
			"the wall clock, so records older than the wall clock minus the allowed lateness are late; "+
			"run without --idle-finalize to read old data (docs/windows.md)", "setting", "--idle-finalize",
			"partition", r.tp.String(), "offset", r.offset, "event_time", p.EventTime.Format(time.RFC3339),
			"watermark", l.wm.Current().Format(time.RFC3339))
	}
	l.deadLetter(r, store.ReasonLate, fmt.Sprintf("event_time %s: window [%s, %s) was finalized at watermark %s",
		p.EventTime.Format(time.RFC3339), end.Add(-l.cfg.Window).Format(time.RFC3339),
		end.Format(time.RFC3339), l.wm.Current().Format(time.RFC3339)))
}

func (l *loop) deadLetter(r *record, reason, msg string) {
	l.dead = append(l.dead, store.DeadLetter{Topic: r.tp.Topic, Partition: r.tp.Partition, Offset: r.offset,
		Key: r.key, Value: r.value, Reason: reason, Error: msg, Source: r.src})
	l.sum.DeadLetters[reason]++
	l.cfg.Metrics.DeadLetters.WithLabelValues(r.tp.Topic, reason).Inc()
	l.led.Consumed(r.tp, r.offset)
}

// keepTrip keeps the newest prediction per trip: greater event time, a tie
// going to the later offset; never one whose trip row PostgreSQL refused.
func (l *loop) keepTrip(t store.Trip) {
	if l.rej.refusedTrip(l.cfg.PredictionsTopic, t) {
		return
	}
	l.trips.put(t.TripID, t, func(old *store.Trip) bool { return newer(t.EventTime, t.Offset, old.EventTime, old.Offset) })
}

func (l *loop) keepVehicle(v store.Vehicle) {
	if l.rej.refusedVehicle(l.cfg.PositionsTopic, v) {
		return
	}
	l.vehicles.put(v.VehicleID, v, func(old *store.Vehicle) bool {
		return newer(v.EventTime, v.Offset, old.EventTime, old.Offset)
	})
}

func newer(t time.Time, off int64, oldT time.Time, oldOff int64) bool {
	return t.After(oldT) || (t.Equal(oldT) && off >= oldOff)
}
