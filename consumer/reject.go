package consumer

import (
	"fmt"
	"time"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/store"
)

// maxRejectRounds bounds the rejection rounds in a row, without a commit
// between them. Each round must name a row not refused before (else the
// run stops at once: re-reading did not reject the records it named), so the
// rounds end; a batch usually needs one or two, plus one per batch that meets
// a key PostgreSQL refuses as it goes on (2 h of Auckland data with a refused
// station and 39 refused trips: 4 to 7 rounds in four runs, at most 3 in a
// row). The bound is a safety net.
const maxRejectRounds = 100

// rejects is what PostgreSQL refused during this run (docs/design.md "The
// commit", G9, G10). Run keeps it across the loop's resyncs: a refused batch
// was not committed, so every record that fed it is read again, and the
// records of its refused rows are then dead-lettered with reason rejected
// and the database's message, counted nowhere, and the rebuilt batch
// commits. A restart forgets it and finds the refusal again the same way.
//
// A refused delay_aggregates row rejects every record it counts (matched by
// window and key), a refused delay_partial_windows row every record of its
// window and partition; a refused latest-state row rejects the one record that
// wrote it (matched by partition and offset), and its key is marked so that
// every version of it goes to the next commits, which lets the store test
// them all in one round.
type rejects struct {
	windows map[windowKey]string  // refused delay_aggregates rows -> message
	partial map[partialKey]string // refused delay_partial_windows rows -> message
	records map[recordKey]string  // records whose latest-state row was refused -> message
	tripIDs map[string]bool       // trips with a refused row: all versions go to the commit
	vehicle map[string]bool       // vehicles with a refused row: all versions go to the commit
	rounds  int                   // rejection rounds since the last successful commit

	// The older versions of marked keys kept since the last batch was taken.
	trips    []store.Trip
	vehicles []store.Vehicle
}

// windowKey is a store.WindowKey with the window start in Unix microseconds,
// so equal instants are equal keys.
type windowKey struct {
	start   int64
	dim, id string
}

// partialKey names one delay_partial_windows row of the predictions topic:
// a window (start in Unix microseconds) of one partition.
type partialKey struct {
	start     int64
	partition int32
}

// recordKey names one Kafka record.
type recordKey struct {
	tp     aggregate.PartitionID
	offset int64
}

// forLoop returns x for a new loop: versions kept by the previous one are
// read again.
func (x *rejects) forLoop() *rejects {
	x.trips, x.vehicles = nil, nil
	return x
}

// rejected applies a commit refused by PostgreSQL: it remembers the refused
// rows and asks Run for a resync, or stops the run after maxRejectRounds
// rounds in a row.
func (l *loop) rejected(e *store.RejectedError) error {
	x, cfg := l.rej, l.cfg
	x.rounds++
	if x.windows == nil {
		x.windows, x.records, x.partial = map[windowKey]string{}, map[recordKey]string{}, map[partialKey]string{}
		x.tripIDs, x.vehicle = map[string]bool{}, map[string]bool{}
	}
	before := len(x.windows) + len(x.partial) + len(x.records)
	for _, w := range e.Windows {
		x.windows[windowKey{w.WindowStart.UnixMicro(), w.Dimension, w.DimensionID}] = w.Reason
	}
	for _, p := range e.Partials {
		x.partial[partialKey{p.WindowStart.UnixMicro(), p.Partition}] = p.Reason
	}
	for _, t := range e.Trips {
		x.records[recordKey{aggregate.PartitionID{Topic: cfg.PredictionsTopic, Partition: t.Partition}, t.Offset}] = t.Reason
		x.tripIDs[t.Key] = true
	}
	for _, v := range e.Vehicles {
		x.records[recordKey{aggregate.PartitionID{Topic: cfg.PositionsTopic, Partition: v.Partition}, v.Offset}] = v.Reason
		x.vehicle[v.Key] = true
	}
	switch {
	case len(x.windows)+len(x.partial)+len(x.records) == before:
		return fmt.Errorf("consumer: commit: PostgreSQL refused again only rows it refused before, whose records were dead-lettered: %w", e)
	case x.rounds > maxRejectRounds:
		return fmt.Errorf("consumer: commit: PostgreSQL refused %d batches in a row: %w", x.rounds, e)
	}
	cfg.Logger.Warn("PostgreSQL refused rows: re-reading from the stored positions to dead-letter their records (reason rejected)",
		"round", x.rounds, "max_rounds", maxRejectRounds, "windows", len(e.Windows), "partials", len(e.Partials), "trips", len(e.Trips),
		"vehicles", len(e.Vehicles), "err", e)
	return fmt.Errorf("PostgreSQL refused rows: %w", errResync)
}

// committed notes a successful commit at watermark wm with positions: the
// rounds in a row start again, and what no record read again can match is
// forgotten (windows wm finalized: their records are replayed or late; records
// below the stored offsets: never read again).
func (x *rejects) committed(wm time.Time, positions []store.Position, window time.Duration) {
	x.rounds = 0
	for k := range x.windows {
		if !time.UnixMicro(k.start).Add(window).After(wm) {
			delete(x.windows, k)
		}
	}
	for k := range x.partial {
		if !time.UnixMicro(k.start).Add(window).After(wm) {
			delete(x.partial, k)
		}
	}
	next := map[aggregate.PartitionID]int64{}
	for _, p := range positions {
		next[p.PartitionID] = p.NextOffset
	}
	for k := range x.records {
		if n, ok := next[k.tp]; ok && k.offset < n {
			delete(x.records, k)
		}
	}
}

// rejectPrediction dead-letters, with reason rejected, a prediction about to
// be aggregated whose trip row or one of whose four window rows PostgreSQL
// refused, and reports whether it did.
func (l *loop) rejectPrediction(r *record, p aggregate.Prediction) bool {
	x := l.rej
	if len(x.windows)+len(x.partial)+len(x.records) == 0 {
		return false
	}
	msg, ok := x.records[recordKey{r.tp, r.offset}]
	start := aggregate.WindowStart(p.EventTime, l.cfg.Window).UnixMicro()
	if !ok {
		msg, ok = x.partial[partialKey{start, r.tp.Partition}]
	}
	for _, k := range [...]windowKey{{start, aggregate.DimStation, p.StopID}, {start, aggregate.DimLine, p.Line},
		{start, aggregate.DimOperator, p.Operator}, {start, aggregate.DimNetwork, aggregate.NetworkID}} {
		if ok {
			break
		}
		msg, ok = x.windows[k]
	}
	if ok {
		l.deadLetter(r, store.ReasonRejected, msg)
	}
	return ok
}

// rejectPosition dead-letters, with reason rejected, a position whose
// vehicle row PostgreSQL refused, and reports whether it did.
func (l *loop) rejectPosition(r *record) bool {
	msg, ok := l.rej.records[recordKey{r.tp, r.offset}]
	if ok {
		l.deadLetter(r, store.ReasonRejected, msg)
	}
	return ok
}

// refusedTrip tells whether t's trip row was refused (t is not kept), and
// keeps every version of a trip with a refused row for the next batch.
func (x *rejects) refusedTrip(topic string, t store.Trip) bool {
	if _, ok := x.records[recordKey{aggregate.PartitionID{Topic: topic, Partition: t.Partition}, t.Offset}]; ok {
		return true
	}
	if x.tripIDs[t.TripID] {
		x.trips = append(x.trips, t)
	}
	return false
}

// refusedVehicle is refusedTrip for vehicle rows.
func (x *rejects) refusedVehicle(topic string, v store.Vehicle) bool {
	if _, ok := x.records[recordKey{aggregate.PartitionID{Topic: topic, Partition: v.Partition}, v.Offset}]; ok {
		return true
	}
	if x.vehicle[v.VehicleID] {
		x.vehicles = append(x.vehicles, v)
	}
	return false
}

// olderVersions adds to b the versions kept by refusedTrip and
// refusedVehicle that are not the newest of their key (b holds that one
// already), and forgets them.
func (l *loop) olderVersions(b *store.Batch) {
	x := l.rej
	for _, t := range x.trips {
		if n, _ := l.trips.get(t.TripID); n.Partition != t.Partition || n.Offset != t.Offset {
			b.Trips = append(b.Trips, t)
		}
	}
	for _, v := range x.vehicles {
		if n, _ := l.vehicles.get(v.VehicleID); n.Partition != v.Partition || n.Offset != v.Offset {
			b.Vehicles = append(b.Vehicles, v)
		}
	}
	x.trips, x.vehicles = nil, nil
}
