package produce_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ovstream/ovstream/feed/gtfsrt"
	"github.com/ovstream/ovstream/feed/gtfsstatic"
	"github.com/ovstream/ovstream/feed/produce"
)

// Live polling with the agency's static feed: the Halifax TripUpdates
// served over HTTP give the 16,574 predictions of `produce --gtfs-static`
// on the file, with the same skip counts, and the records carry the names.
func TestPollWithStaticFeed(t *testing.T) {
	body, err := os.ReadFile("../../testdata/halifax-20251106/TripUpdates_20251106T210414Z.pb")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(body) }))
	defer srv.Close()
	sched, err := gtfsstatic.Load("../../testdata/halifax-20251106/google_transit_trimmed.zip")
	if err != nil {
		t.Fatal(err)
	}
	addr := startBroker(t, map[string]int32{"arrival_predictions": 6, "vehicle_positions": 3})
	var reports []produce.PollReport
	err = produce.Poll(context.Background(), produce.PollConfig{
		URLs: []string{srv.URL + "/tu"}, Interval: time.Millisecond, Polls: 2,
		Options:  gtfsrt.Options{Operator: "HFX", Schedule: sched},
		Topics:   produce.Topics{Predictions: "arrival_predictions", Positions: "vehicle_positions"},
		Producer: produce.Config{Brokers: []string{addr}},
		Progress: func(r produce.PollReport) { reports = append(reports, r) },
	})
	if err != nil {
		t.Fatal(err)
	}
	f := reports[0].Fetches[0]
	res := gtfsrt.Result{Skipped: f.Skipped}
	if f.Predictions != 16574 || res.SkipSummary() != "433 no delay, 34 time only: stop not in the trip's stop_times.txt" {
		t.Fatalf("first poll: %d predictions, skipped %s", f.Predictions, res.SkipSummary())
	}
	if n := reports[1].Fetches[0].Predictions; n != 0 {
		t.Fatalf("second poll of the same snapshot: %d new predictions", n)
	}
	recs := readTopic(t, addr, "arrival_predictions")
	named := 0
	for _, r := range recs {
		if strings.Contains(r.value, `"line_name":`) && strings.Contains(r.value, `"stop_name":`) {
			named++
		}
	}
	if len(recs) != 16574 || named == 0 {
		t.Fatalf("%d records, %d named", len(recs), named)
	}
}
