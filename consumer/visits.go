package consumer

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/store"
)

// Stop visits (store/visits.go, docs/tables.md). Every prediction counted
// in a window and read for the first time adds to its visit: the trip, the
// service day (start_date) and the stop (stop_sequence, else stop_id). The
// loop keeps, per visit, the last prediction read since the last batch and
// how many were read; takeBatch hands them to the commit, which upserts
// them in the transaction that stores the offsets. So a visit holds each
// prediction once:
//   - a crash or a refused commit loses the additions with the offsets, and
//     the records are read again;
//   - a record read again after a restart below the stored consumed_offset
//     was added by the commit that stored that offset: it adds nothing now
//     (as a dead letter is not written twice, replay.go);
//   - the upsert adds counts and keeps the later last prediction, so split
//     instances, partitions and commits may bring a visit's predictions in
//     any order.
//
// Upserting at every commit rather than with the finalized windows keeps a
// visit as fresh as the latest state, and a visit belongs to no window: its
// predictions span the hour before the arrival. Dead letters (decode,
// future, late, rejected, implausible) and copies `dlq replay` produced
// form no visit; a prediction without start_date forms none either and is
// counted per partition (stop_visit_counts, status) and in
// ovstream_predictions_without_start_date_total.

// visitKey names one visit in memory: stop_sequence when given, else stop.
type visitKey struct {
	trip   string
	date   int32
	seq    int64
	hasSeq bool
	stop   string // "" when hasSeq
}

// visitBuffer is what the predictions read since the last batch add to
// their visits.
type visitBuffer struct {
	// visits[index[k]] is visit k: a map of large values would allocate
	// each one; the index is kept across batches.
	index  map[visitKey]int
	visits []store.Visit
	// history holds every prediction added since the last batch, with the
	// index of its visit in visits; takeVisits sorts it and hands each
	// visit its part.
	history []visitPrediction
	none    map[aggregate.PartitionID]int64
}

// visitPrediction is one prediction of visits[visit].
type visitPrediction struct {
	visit int
	store.Predicted
}

// observeVisit adds p, read from r and counted in its window, to its
// visit; r is not a replay of a record read before a restart.
func (l *loop) observeVisit(r *record, p *aggregate.Prediction) {
	b := &l.visits
	if p.StartDate == 0 {
		if b.none == nil {
			b.none = map[aggregate.PartitionID]int64{}
		}
		b.none[r.tp]++
		l.cfg.Metrics.NoStartDate.Inc()
		return
	}
	k := visitKey{trip: p.TripID, date: p.StartDate, seq: p.StopSequence, hasSeq: p.HasStopSequence}
	if !p.HasStopSequence {
		k.stop = p.StopID
	}
	if b.index == nil {
		b.index = map[visitKey]int{}
	}
	i, ok := b.index[k]
	if !ok {
		i = len(b.visits)
		b.index[k] = i
		b.visits = append(b.visits, store.Visit{TripID: p.TripID, StartDate: p.StartDate, StopSequence: p.StopSequence,
			HasStopSequence: p.HasStopSequence})
		setLast(&b.visits[i], r, p)
	} else if v := &b.visits[i]; v.Later(p.EventTime, r.tp.Partition, r.offset) {
		setLast(v, r, p)
	}
	b.visits[i].Predictions++
	// PostgreSQL keeps microseconds: the history is sorted as it will be
	// stored.
	b.history = append(b.history, visitPrediction{visit: i,
		Predicted: store.Predicted{EventTime: p.EventTime.Truncate(time.Microsecond), DelayS: p.DelayS}})
}

// setLast makes p, read from r, the last prediction of v.
func setLast(v *store.Visit, r *record, p *aggregate.Prediction) {
	v.StopID, v.Line, v.Operator, v.DelayS = p.StopID, p.Line, p.Operator, p.DelayS
	v.EventTime, v.Partition, v.Offset = p.EventTime, r.tp.Partition, r.offset
	v.ArrivalTime, v.ArrivalGiven = p.ArrivalTime, !p.ArrivalTime.IsZero()
	if !v.ArrivalGiven {
		v.ArrivalTime = p.EventTime
	}
}

// takeVisits returns what the next batch upserts, in a fixed order (so
// that two commits upserting the same visits lock their rows in the same
// order), and starts a new buffer.
func (l *loop) takeVisits() ([]store.Visit, []store.NoStartDate) {
	b := &l.visits
	vs := b.visits
	if len(b.history) > 0 {
		slices.SortFunc(b.history, func(x, y visitPrediction) int {
			return cmp.Or(cmp.Compare(x.visit, y.visit), store.ComparePredicted(x.Predicted, y.Predicted))
		})
		flat := make([]store.Predicted, len(b.history))
		for j, h := range b.history {
			flat[j] = h.Predicted
		}
		for lo := 0; lo < len(flat); {
			i, hi := b.history[lo].visit, lo+int(vs[b.history[lo].visit].Predictions)
			vs[i].History = flat[lo:hi:hi]
			lo = hi
		}
		b.history = b.history[:0]
	}
	if len(vs) > 0 {
		slices.SortFunc(vs, func(x, y store.Visit) int {
			return cmp.Or(strings.Compare(x.TripID, y.TripID), cmp.Compare(x.StartDate, y.StartDate),
				compareBool(x.HasStopSequence, y.HasStopSequence), cmp.Compare(x.StopSequence, y.StopSequence),
				strings.Compare(x.StopID, y.StopID))
		})
	}
	var none []store.NoStartDate
	for _, tp := range SortedPartitions(b.none) {
		none = append(none, store.NoStartDate{PartitionID: tp, N: b.none[tp]})
	}
	clear(b.index) // its buckets serve the next batch; vs goes with the batch
	b.visits = make([]store.Visit, 0, len(vs))
	b.none = nil
	return vs, none
}

// compareBool orders false before true.
func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case b:
		return -1
	}
	return 1
}

// deleteOldVisits is the stop visits' part of a retention round: the
// pipeline's visits older than the windows --retention keeps
// (store.DeleteOldVisits).
func deleteOldVisits(ctx context.Context, cfg Config, rs *store.Store) error {
	n, err := rs.DeleteOldVisits(ctx, cfg.Pipeline, cfg.Retention)
	if n > 0 {
		cfg.Logger.Info("retention: deleted old stop visits", "pipeline", cfg.Pipeline, "deleted", n, "retention", cfg.Retention)
	}
	return err
}
