package gtfsstatic_test

import (
	"os"
	"testing"

	"github.com/MobilityData/gtfs-realtime-bindings/golang/gtfs"
	"google.golang.org/protobuf/proto"

	"github.com/ovstream/ovstream/feed/gtfsstatic"
)

// The agency as the oracle: Halifax's stop time updates that give both a
// delay and a time. For each whose trip and stop the static feed in force
// that day holds, the time minus the scheduled time Delay finds equals the
// delay Halifax Transit itself published: 11,413 of 11,638. The other 225
// are trips absent from trips.txt (154) and stops the trip does not serve
// in stop_times.txt (71).
func TestHalifaxAgencyDelaysAgree(t *testing.T) {
	s, err := gtfsstatic.Load("../../testdata/halifax-20251106/google_transit_trimmed.zip")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("../../testdata/halifax-20251106/TripUpdates_20251106T210414Z.pb")
	if err != nil {
		t.Fatal(err)
	}
	var msg gtfs.FeedMessage
	if err := proto.Unmarshal(b, &msg); err != nil {
		t.Fatal(err)
	}
	agree, other := 0, map[error]int{}
	for _, e := range msg.GetEntity() {
		tu := e.GetTripUpdate()
		if tu == nil {
			continue
		}
		for _, u := range tu.GetStopTimeUpdate() {
			arr := u.GetArrival()
			if arr == nil || arr.Delay == nil {
				continue
			}
			ev := gtfsstatic.Event{TripID: tu.GetTrip().GetTripId(), StartDate: tu.GetTrip().GetStartDate(),
				StopSequence: u.GetStopSequence(), HasStopSequence: u.StopSequence != nil, StopID: u.GetStopId(),
				Arrival: arr.GetTime()}
			m, err := s.Delay(ev)
			if err != nil {
				other[err]++
				continue
			}
			if m.DelayS != int64(arr.GetDelay()) {
				t.Fatalf("%+v: delay %d from the schedule, %d from the agency", ev, m.DelayS, arr.GetDelay())
			}
			// Without start_date the nearest service day is the same one.
			ev.StartDate = ""
			if m2, err := s.Delay(ev); err != nil || m2 != m {
				t.Fatalf("%+v without start_date: %+v, %v; with it %+v", ev, m2, err, m)
			}
			agree++
		}
	}
	if agree != 11413 || len(other) != 2 || other[gtfsstatic.ErrUnknownTrip] != 154 || other[gtfsstatic.ErrUnknownStop] != 71 {
		t.Fatalf("%d agree; other: %v", agree, other)
	}
}
