package consumer

import (
	"hash/fnv"
	"runtime"
	"testing"
	"time"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/feed/gtfsrt"
	"github.com/ovstream/ovstream/feed/produce"
	"github.com/ovstream/ovstream/store"
)

// loopBatches returns the 2 h Auckland sample of testdata (49,140
// predictions, mapped like `ovstream produce --operator AT`) as the run loop
// receives it: keyed by trip id over 6 partitions, decoded (as the partition
// readers do), in batches of up to maxBatch records of one partition, in feed
// order.
func loopBatches(b *testing.B) ([][]record, []aggregate.PartitionID) {
	b.Helper()
	res, err := gtfsrt.LoadArchive("../testdata/auckland-20160518-2h.tar.gz", gtfsrt.Options{Operator: "AT"})
	if err != nil {
		b.Fatal(err)
	}
	const parts = 6
	var tps []aggregate.PartitionID
	for p := range parts {
		tps = append(tps, aggregate.PartitionID{Topic: "arrival_predictions", Partition: int32(p)})
	}
	var out [][]record
	open := make([][]record, parts)
	next := make([]int64, parts)
	for _, p := range res.Predictions {
		h := fnv.New32a()
		h.Write([]byte(p.TripID))
		i := h.Sum32() % parts
		v := produce.EncodePrediction(p)
		r := record{tp: tps[i], offset: next[i], key: []byte(p.TripID), value: v}
		r.pred, r.names, r.derr = aggregate.DecodePredictionNames(v)
		next[i]++
		open[i] = append(open[i], r)
		if len(open[i]) == maxBatch {
			out, open[i] = append(out, open[i]), nil
		}
	}
	for _, o := range open {
		if len(o) > 0 {
			out = append(out, o)
		}
	}
	return out, tps
}

// BenchmarkLoop is the run loop's own work per message, without Kafka,
// decoding or PostgreSQL: handleBatch (replay check, watermark, latest
// state, windowing, ledger) over the 2 h sample, and at every tick that finds
// a closed window what a commit does on the loop and its writer goroutine
// around the database: takeBatch, the finalized rows (a ClosedSet's Cursor) and a
// successful finishCommit (Drop, Release). One op is one pass with 10
// minutes of allowed lateness, like `make bench`; it reports ns/msg,
// allocs/msg and rows/msg.
func BenchmarkLoop(b *testing.B) {
	batches, tps := loopBatches(b)
	msgs := 0
	for _, bt := range batches {
		msgs += len(bt)
	}
	cfg := Config{Brokers: []string{"unused:9092"}, PredictionsTopic: "arrival_predictions", PositionsTopic: "vehicle_positions",
		Owner: "bench:1", AllowedLateness: 10 * time.Minute, Metrics: NewMetrics(nil)}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		b.Fatal(err)
	}
	// Far enough after the sample's event times that none is in the future.
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	cfg.Now = func() time.Time { return now }
	b.ReportAllocs()
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	rows := 0
	for b.Loop() {
		l := &loop{cfg: cfg, in: &instance{clock: &dbClock{cfg: cfg}}, sum: &Summary{Consumed: map[string]int64{}, DeadLetters: map[string]int64{},
			Stored: map[aggregate.PartitionID]int64{}, HighWater: map[aggregate.PartitionID]int64{}},
			rej: (&rejects{}).forLoop(), led: NewLedger(), win: aggregate.NewWindower(cfg.Window),
			wm:    aggregate.NewWatermark(cfg.AllowedLateness, cfg.IdleTimeout, time.Time{}),
			parts: map[aggregate.PartitionID]*partState{},
			trips: newLatest[store.Trip](), vehicles: newLatest[store.Vehicle](), names: aggregate.NewNames(),
			stored: map[aggregate.PartitionID]store.Position{}}
		for _, tp := range tps {
			l.led.Assign(tp, 0)
			l.wm.Assign(tp)
			l.assign(tp, 0)
		}
		commit := func() {
			l.pending = l.takeBatch()
			// The rows, built one at a time as a commit's COPY sends them.
			l.pending.batch.Closed = l.pending.set
			cur, r := l.pending.set.Cursor(), aggregate.Row{}
			for cur.Next(&r) {
				rows++
			}
			if err := l.finishCommit(commitResult{}); err != nil {
				b.Fatal(err)
			}
		}
		for _, bt := range batches {
			l.handleBatch(bt)
			if l.closedWaiting() {
				commit()
			}
		}
		l.wm.Raise(l.win.LastEnd())
		commit()
	}
	runtime.ReadMemStats(&ms1)
	n := float64(b.N) * float64(msgs)
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/n, "allocs/msg")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/msg")
	b.ReportMetric(float64(rows)/n, "rows/msg")
}
