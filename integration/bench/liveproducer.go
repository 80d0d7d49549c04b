package main

// The live phase's producer (live.go): the archive at a fixed rate, event
// times on the wall clock, and when each partition first crossed a threshold.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/feed/produce"
)

// liveProducer produces the archive's messages at a fixed rate with event
// times moved onto the wall clock, and records per partition when the first
// record at or past each threshold was acknowledged. It is franz-go's kgo
// client, not sarama's AsyncProducer: one sarama producer goroutine topped
// out near 10,000-44,000 messages/s here, below the rates the sustained
// search must try (up to 150,000).
type liveProducer struct {
	cl         *kgo.Client
	d          *dataset
	pred, pos  string
	delta      time.Duration
	thresholds []time.Time // window end + allowed lateness of the windows measured

	i, j      int
	startedAt time.Time
	stoppedAt time.Time

	mu       sync.Mutex
	crossed  map[crossKey]time.Time // earliest acknowledgement at or past a threshold
	parts    map[aggregate.PartitionID]bool
	produced int64
	failed   int64
	firstErr error
}

type crossKey struct {
	tp        aggregate.PartitionID
	threshold time.Time
}

func newLiveProducer(addr, pred, pos string, d *dataset, delta time.Duration, ends []time.Time) (*liveProducer, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ClientID("ovstream-bench-live"),
		kgo.ProducerBatchCompression(kgo.Lz4Compression()), kgo.ProducerLinger(5*time.Millisecond),
		kgo.MaxBufferedRecords(1<<16), kgo.ProducerBatchMaxBytes(1<<20))
	if err != nil {
		return nil, err
	}
	lp := &liveProducer{cl: cl, d: d, pred: pred, pos: pos, delta: delta, crossed: map[crossKey]time.Time{},
		parts: map[aggregate.PartitionID]bool{}}
	for _, e := range ends {
		lp.thresholds = append(lp.thresholds, e.Add(liveLateness))
	}
	return lp, nil
}

// acked is the promise of a record with event time et.
func (lp *liveProducer) acked(r *kgo.Record, et time.Time, err error) {
	at := time.Now()
	lp.mu.Lock()
	defer lp.mu.Unlock()
	switch {
	case errors.Is(err, context.Canceled): // still buffered when run stopped: neither produced nor failed
		return
	case err != nil:
		lp.failed++
		if lp.firstErr == nil {
			lp.firstErr = err
		}
		return
	}
	tp := aggregate.PartitionID{Topic: r.Topic, Partition: r.Partition}
	lp.produced++
	lp.parts[tp] = true
	for _, th := range lp.thresholds {
		if !et.Before(th) {
			k := crossKey{tp, th}
			if c, ok := lp.crossed[k]; !ok || at.Before(c) {
				lp.crossed[k] = at
			}
		}
	}
}

// next returns the next message of the archive (cycling), event time now -
// delta, and that event time.
func (lp *liveProducer) next(now time.Time) (*kgo.Record, time.Time) {
	preds, poss := lp.d.predictions, lp.d.positions
	if lp.i >= len(preds) && lp.j >= len(poss) {
		lp.i, lp.j = 0, 0
	}
	et := now.Add(-lp.delta).UTC().Truncate(time.Microsecond)
	if lp.j < len(poss) && (lp.i >= len(preds) || !poss[lp.j].EventTime.After(preds[lp.i].EventTime)) {
		p := poss[lp.j]
		lp.j++
		p.EventTime = et
		return &kgo.Record{Topic: lp.pos, Key: []byte(p.VehicleID), Value: produce.EncodePosition(p)}, et
	}
	p := preds[lp.i]
	lp.i++
	p.EventTime = et
	return &kgo.Record{Topic: lp.pred, Key: []byte(p.TripID), Value: produce.EncodePrediction(p)}, et
}

// run produces rate messages per second, in slices of 10 ms, until ctx ends;
// it returns nil then (after the records buffered are acknowledged), or the
// producer's first error.
func (lp *liveProducer) run(ctx context.Context, rate int) error {
	const slice = 10 * time.Millisecond
	lp.startedAt = time.Now()
	defer func() {
		lp.stoppedAt = time.Now()
		fctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		lp.cl.Flush(fctx)
		lp.cl.Close()
	}()
	var sent int64
	t := time.NewTicker(slice)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			due := int64(now.Sub(lp.startedAt).Seconds() * float64(rate))
			for ; sent < due && ctx.Err() == nil; sent++ {
				r, et := lp.next(time.Now())
				lp.cl.Produce(ctx, r, func(r *kgo.Record, err error) { lp.acked(r, et, err) })
			}
			lp.mu.Lock()
			err := lp.firstErr
			lp.mu.Unlock()
			if err != nil {
				return err
			}
		}
	}
}

// elapsed is the time the producer ran.
func (lp *liveProducer) elapsed() time.Duration { return lp.stoppedAt.Sub(lp.startedAt) }

// counts returns the records acknowledged and failed (after run returned).
func (lp *liveProducer) counts() (int64, int64) {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	return lp.produced, lp.failed
}

// closable returns when every partition the producer wrote to had an
// acknowledged record at or past threshold: the latest of their first
// acknowledgements.
func (lp *liveProducer) closable(threshold time.Time) (time.Time, error) {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	var c time.Time
	for tp := range lp.parts {
		t, ok := lp.crossed[crossKey{tp, threshold}]
		if !ok {
			return time.Time{}, fmt.Errorf("partition %s never got a record at or past %s", tp, threshold.Format(time.TimeOnly))
		}
		if t.After(c) {
			c = t
		}
	}
	if len(lp.parts) < 9 {
		return time.Time{}, fmt.Errorf("the producer wrote to %d partitions, not 9", len(lp.parts))
	}
	return c, nil
}
