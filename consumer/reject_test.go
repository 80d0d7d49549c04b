package consumer

import (
	"errors"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/store"
)

// A prediction is rejected when its trip row or any of its four window rows
// was refused, and only then; a position when its vehicle row was; a
// successful commit forgets what no record read again can match.
func TestRejects(t *testing.T) {
	const preds, poss = "arrival_predictions", "vehicle_positions"
	p0 := aggregate.PartitionID{Topic: preds, Partition: 0}
	v0 := aggregate.PartitionID{Topic: poss, Partition: 0}
	w0 := time.Date(2016, 5, 18, 20, 0, 0, 0, time.UTC)
	cfg := Config{PredictionsTopic: preds, PositionsTopic: poss, Window: 5 * time.Minute,
		Metrics: NewMetrics(nil), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	l := &loop{cfg: cfg, rej: (&rejects{}).forLoop(), led: NewLedger(), sum: &Summary{DeadLetters: map[string]int64{}},
		trips: newLatest[store.Trip](), vehicles: newLatest[store.Vehicle]()}
	l.led.Assign(p0, 0)
	l.led.Assign(v0, 0)

	err := l.rejected(&store.RejectedError{
		Windows: []store.RefusedWindow{{WindowKey: store.WindowKey{WindowStart: w0, Dimension: aggregate.DimStation, DimensionID: "S9"}, Reason: "no S9"},
			{WindowKey: store.WindowKey{WindowStart: w0.Add(5 * time.Minute), Dimension: aggregate.DimNetwork, DimensionID: "all"}, Reason: "no network"}},
		Trips:    []store.RefusedRecord{{Key: "T1", Partition: 0, Offset: 7, Reason: "no T1"}},
		Vehicles: []store.RefusedRecord{{Key: "V1", Partition: 0, Offset: 3, Reason: "no V1"}},
	})
	if err == nil || l.rej.rounds != 1 {
		t.Fatalf("rejected = %v, rounds %d; want a resync, round 1", err, l.rej.rounds)
	}

	pred := func(trip, stop string, at time.Time) aggregate.Prediction {
		return aggregate.Prediction{TripID: trip, Line: "L", StopID: stop, Operator: "AT", EventTime: at}
	}
	for _, c := range []struct {
		offset int64
		p      aggregate.Prediction
		want   string // "" = not rejected
	}{
		{1, pred("T2", "S1", w0.Add(time.Minute)), ""},
		{2, pred("T2", "S9", w0.Add(time.Minute)), "no S9"},        // station row refused
		{3, pred("T2", "S9", w0.Add(6*time.Minute)), "no network"}, // another window: its network row
		{4, pred("T2", "S1", w0.Add(11*time.Minute)), ""},          // a window nothing refused in
		{7, pred("T1", "S1", w0.Add(time.Minute)), "no T1"},        // the record whose trip row was refused
		{8, pred("T1", "S1", w0.Add(2*time.Minute)), ""},           // another record of that trip
		{9, pred("T3", "S9", w0.Add(-time.Minute)), ""},            // the window before
	} {
		r := &record{tp: p0, offset: c.offset}
		before := len(l.dead)
		got := l.rejectPrediction(r, c.p)
		if got != (c.want != "") || (got && (len(l.dead) != before+1 || l.dead[before].Error != c.want ||
			l.dead[before].Reason != store.ReasonRejected)) {
			t.Errorf("offset %d: rejected %t, dead letters %v; want %q", c.offset, got, l.dead[before:], c.want)
		}
	}
	if !l.rejectPosition(&record{tp: v0, offset: 3}) || l.rejectPosition(&record{tp: v0, offset: 4}) {
		t.Error("rejectPosition: want the position at offset 3 only")
	}

	// Trip T1 had a row refused: its record at 7 is not kept, every other
	// version goes to the batch, the newest once.
	keep := func(off int64, at time.Time) {
		l.keepTrip(store.Trip{Prediction: pred("T1", "S1", at), Partition: 0, Offset: off})
	}
	keep(7, w0.Add(3*time.Minute))
	keep(5, w0.Add(time.Minute))
	keep(8, w0.Add(2*time.Minute))
	l.keepTrip(store.Trip{Prediction: pred("T2", "S1", w0), Offset: 1})
	b := store.Batch{Trips: slices.Clone(l.trips.rows)}
	l.olderVersions(&b)
	offsets := map[int64]int{}
	for _, tr := range b.Trips {
		offsets[tr.Offset]++
	}
	t1, _ := l.trips.get("T1")
	if len(b.Trips) != 3 || offsets[8] != 1 || offsets[5] != 1 || offsets[1] != 1 || t1.Offset != 8 {
		t.Errorf("batch trips %v, newest %d; want T1 at 8 (newest) and 5, T2 at 1", offsets, t1.Offset)
	}
	if len(l.rej.trips) != 0 {
		t.Error("olderVersions kept the versions")
	}

	// A commit at watermark 20:05 that stored offset 8 of the predictions
	// partition forgets the window [20:00, 20:05) and the record at 7, keeps
	// the rest, and starts the rounds again.
	l.rej.committed(w0.Add(5*time.Minute), []store.Position{{PartitionID: p0, NextOffset: 8}}, cfg.Window)
	if l.rej.rounds != 0 || len(l.rej.windows) != 1 || len(l.rej.records) != 1 {
		t.Errorf("after the commit: rounds %d, windows %v, records %v", l.rej.rounds, l.rej.windows, l.rej.records)
	}
	if !l.rej.tripIDs["T1"] {
		t.Error("the commit forgot that trip T1 had a refused row")
	}
}

// A round must name a row not refused before: otherwise re-reading did not
// reject the records, and the run stops at once, naming the refusal. Rounds
// in a row are bounded too.
func TestRejectRoundsBounded(t *testing.T) {
	refusal := errors.New("refused")
	newLoop := func() *loop {
		return &loop{cfg: Config{Metrics: NewMetrics(nil), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, rej: &rejects{}}
	}
	vehicle := func(off int64) *store.RejectedError {
		return &store.RejectedError{Vehicles: []store.RefusedRecord{{Key: "V", Offset: off}}, Err: refusal}
	}
	l := newLoop()
	if err := l.rejected(vehicle(1)); !errors.Is(err, errResync) {
		t.Fatalf("first round: %v, want a resync", err)
	}
	if err := l.rejected(vehicle(1)); errors.Is(err, errResync) || !errors.Is(err, refusal) {
		t.Fatalf("the same row refused again: %v, want a terminal error wrapping the refusal", err)
	}
	l = newLoop()
	var err error
	for i := 0; i <= maxRejectRounds; i++ {
		if err != nil && !errors.Is(err, errResync) {
			t.Fatalf("round %d: %v, want a resync", i, err)
		}
		err = l.rejected(vehicle(int64(i)))
	}
	if errors.Is(err, errResync) || !errors.Is(err, refusal) {
		t.Fatalf("round %d: %v, want a terminal error wrapping the refusal", maxRejectRounds+1, err)
	}
}
