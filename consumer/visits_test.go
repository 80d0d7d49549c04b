package consumer

import (
	"testing"
	"time"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/store"
)

// takeVisits hands each visit its own predictions, sorted by (event time,
// delay), however the visits and their predictions were read; the next
// batch starts empty.
func TestTakeVisitsSortsEachHistory(t *testing.T) {
	var l loop
	at := func(minute int) time.Time { return time.Date(2016, 5, 19, 7, minute, 0, 0, time.UTC) }
	add := func(trip string, off int64, minute int, delay float64) {
		p := aggregate.Prediction{TripID: trip, StopID: "S", StartDate: 20160519, StopSequence: 1, HasStopSequence: true,
			EventTime: at(minute), DelayS: delay}
		l.observeVisit(&record{tp: aggregate.PartitionID{Topic: "t", Partition: 0}, offset: off}, &p)
	}
	add("b", 0, 5, 10)
	add("a", 1, 9, 3)
	add("b", 2, 1, 40)
	add("a", 3, 2, 7)
	add("b", 4, 5, -2)
	vs, _ := l.takeVisits()
	want := map[string][]store.Predicted{
		"a": {{EventTime: at(2), DelayS: 7}, {EventTime: at(9), DelayS: 3}},
		"b": {{EventTime: at(1), DelayS: 40}, {EventTime: at(5), DelayS: -2}, {EventTime: at(5), DelayS: 10}},
	}
	if len(vs) != 2 || vs[0].TripID != "a" || vs[1].TripID != "b" {
		t.Fatalf("visits %+v, want a and b", vs)
	}
	for _, v := range vs {
		w := want[v.TripID]
		if int(v.Predictions) != len(w) || len(v.History) != len(w) {
			t.Fatalf("visit %s: %d predictions, history %v; want %v", v.TripID, v.Predictions, v.History, w)
		}
		for i := range w {
			if !v.History[i].EventTime.Equal(w[i].EventTime) || v.History[i].DelayS != w[i].DelayS {
				t.Errorf("visit %s: history %v, want %v", v.TripID, v.History, w)
				break
			}
		}
	}
	if vs, _ := l.takeVisits(); len(vs) != 0 || len(l.visits.history) != 0 {
		t.Errorf("the next batch starts with %v", vs)
	}
}
