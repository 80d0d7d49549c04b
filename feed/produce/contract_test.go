package produce

import (
	"reflect"
	"testing"
	"time"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/feed/gtfsrt"
)

// Conform keeps the events of the data contract in order, counts the others
// under the decoder's reason, and leaves the caller's arrays as they were.
func TestConform(t *testing.T) {
	at := time.Date(2016, 5, 18, 20, 0, 0, 0, time.UTC)
	pred := func(trip string, d float64) aggregate.Prediction {
		return aggregate.Prediction{TripID: trip, Line: "L", StopID: "S", Operator: "OP", DelayS: d, EventTime: at}
	}
	preds := []aggregate.Prediction{pred("a", 1), pred("b", 90000), pred("c", -86400), pred("", 5), pred("d", 2)}
	orig := append([]aggregate.Prediction(nil), preds...)
	res := &gtfsrt.Result{Predictions: preds, Positions: []aggregate.Position{
		{VehicleID: "v1", Lat: 1, Lon: 2, EventTime: at}, {VehicleID: "v2", Lat: 1, Lon: 181, EventTime: at}}}
	Conform(res)
	var trips []string
	for _, p := range res.Predictions {
		trips = append(trips, p.TripID)
	}
	if !reflect.DeepEqual(trips, []string{"a", "c", "d"}) || len(res.Positions) != 1 || res.Positions[0].VehicleID != "v1" {
		t.Errorf("kept %v and %d positions", trips, len(res.Positions))
	}
	want := map[string]int{SkipContract + "delay_s: out of range: |delay_s| > 86400": 1,
		SkipContract + "trip_id: must be a non-empty string": 1, SkipContract + "lon: out of range: |lon| > 180": 1}
	if !reflect.DeepEqual(res.Skipped, want) {
		t.Errorf("skipped %v, want %v", res.Skipped, want)
	}
	if !reflect.DeepEqual(preds, orig) {
		t.Error("Conform wrote to the caller's array")
	}
	ok := &gtfsrt.Result{Predictions: preds[:1]}
	Conform(ok)
	if len(ok.Skipped) != 0 || &ok.Predictions[0] != &preds[0] {
		t.Error("a result that conforms is not kept as it is")
	}
}
