//go:build integration

package store_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ovstream/ovstream/integration/harness"
	"github.com/ovstream/ovstream/store"
)

// A visit's prediction history is the same sorted arrays whatever the
// order in which commits bring its predictions: in time order (each
// commit appends), in reverse (each merges), and interleaved, with a tie
// on event time ordered by delay; the counts and the last prediction
// agree with the arrays.
func TestStopVisitHistoryIndependentOfCommitOrder(t *testing.T) {
	ctx := harness.TestCtx(t)
	at := func(s int) time.Time { return harness.T0.Add(time.Duration(s) * time.Second) }
	preds := []store.Predicted{{EventTime: at(10), DelayS: 5}, {EventTime: at(20), DelayS: 9}, {EventTime: at(20), DelayS: -3},
		{EventTime: at(30), DelayS: 12}, {EventTime: at(40), DelayS: 0}}
	const want = `[3 [12:00:10 12:00:20 12:00:20 12:00:30 12:00:40] [5 -3 9 12 0] 0]`
	for name, order := range map[string][][]int{
		"in time order": {{0}, {1, 2}, {3}, {4}},
		"reversed":      {{4}, {3}, {2, 1}, {0}},
		"interleaved":   {{3, 1}, {0, 4}, {2}},
	} {
		t.Run(name, func(t *testing.T) {
			s, url, epoch := harness.OpenStore(t)
			for i, commit := range order {
				v := store.Visit{TripID: "t", StartDate: 20260301, StopSequence: 3, HasStopSequence: true, StopID: "S", Line: "L",
					Operator: "O", Partition: 0}
				for _, k := range commit {
					p := preds[k]
					v.History = append(v.History, p)
					v.Predictions++
					if v.EventTime.IsZero() || v.Later(p.EventTime, 0, int64(k)) {
						v.EventTime, v.Offset, v.DelayS, v.ArrivalTime = p.EventTime, int64(k), p.DelayS, p.EventTime
					}
				}
				slices.SortFunc(v.History, store.ComparePredicted)
				if err := s.Commit(ctx, harness.WithSeqs(t, s, store.Batch{Pipeline: "p", Owner: harness.Owner0, Epoch: epoch,
					Positions: harness.At0(int64(i)), Visits: []store.Visit{v}})); err != nil {
					t.Fatal(err)
				}
			}
			got := harness.Dump(t, url, `SELECT stop_key, array(SELECT to_char(x AT TIME ZONE 'UTC', 'HH24:MI:SS') FROM unnest(prediction_times) x),
				prediction_delays, delay_s FROM stop_visits`)
			if strings.Join(got, " ") != want || harness.Query[int64](t, url, `SELECT predictions FROM stop_visits`) != 5 {
				t.Errorf("stop_visits %v, want %s and 5 predictions", got, want)
			}
		})
	}
}
