package gtfsrt_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/MobilityData/gtfs-realtime-bindings/golang/gtfs"
	"google.golang.org/protobuf/proto"

	"github.com/ovstream/ovstream/feed/gtfsrt"
)

const td = "../../testdata/"

func TestAucklandPeak(t *testing.T) {
	res, err := gtfsrt.Load([]string{td + "auckland-20160519-peak10min"}, gtfsrt.Options{Operator: "AT"})
	if err != nil {
		t.Fatal(err)
	}
	// 6,501 stop time updates in 10 snapshots; the README of the data measured
	// 4,610 once (trip, stop, timestamp) is emitted once.
	if res.Files != 10 || len(res.Predictions) != 4610 || len(res.Positions) != 0 {
		t.Fatalf("files %d, predictions %d, positions %d; want 10, 4610, 0", res.Files, len(res.Predictions), len(res.Positions))
	}
	if want := map[string]int{gtfsrt.SkipDuplicatePrediction: 1891}; !equalCounts(res.Skipped, want) {
		t.Fatalf("skipped %v, want %v", res.Skipped, want)
	}
	first := res.Predictions[0]
	if first.TripID != "15455002274-20160512154122_v40.34" || first.Line != "45502-20160512154122_v40.34" ||
		first.StopID != "2170" || first.Operator != "AT" || first.DelayS != 17 || first.VehicleID != "2916" ||
		!first.HasStopSequence || first.StopSequence != 18 || !first.EventTime.Equal(time.Unix(1463601613, 0)) {
		t.Fatalf("first prediction %+v", first)
	}
	// Event times come from the trip updates, within the 10 minutes of the sample (give or take a minute).
	for _, p := range res.Predictions {
		if p.EventTime.Location() != time.UTC {
			t.Fatalf("event time %v not in UTC", p.EventTime)
		}
	}
}

func TestAucklandWithoutOperatorIsRefused(t *testing.T) {
	_, err := gtfsrt.Load([]string{td + "auckland-20160519-peak10min"}, gtfsrt.Options{})
	if !errors.Is(err, gtfsrt.ErrNoOperator) {
		t.Fatalf("err = %v, want ErrNoOperator", err)
	}
	// The first file in header order is the one refused.
	if !strings.Contains(err.Error(), "tripUpdates_1463601620.pb") || !strings.Contains(err.Error(), "--operator") {
		t.Fatalf("error does not name the file and the flag: %v", err)
	}
}

func TestOVapi(t *testing.T) {
	// The feed's own operators win over the option.
	res, err := gtfsrt.Load([]string{td + "nl-ovapi-20141130/tripUpdates_20141130T224623Z.pb"}, gtfsrt.Options{Operator: "IGNORED"})
	if err != nil {
		t.Fatal(err)
	}
	// 60,074 stop time updates: 59,298 with an arrival delay, 648 with only a
	// departure delay, 128 with neither. The 35 second visits of loop trips
	// (same trip and stop, other stop_sequence) are kept.
	if res.Files != 1 || len(res.Predictions) != 59946 {
		t.Fatalf("files %d, predictions %d; want 1, 59946", res.Files, len(res.Predictions))
	}
	if want := map[string]int{gtfsrt.SkipNoDelay: 128}; !equalCounts(res.Skipped, want) {
		t.Fatalf("skipped %v, want %v", res.Skipped, want)
	}
	ops := map[string]int{}
	lines := map[string]bool{}
	for _, p := range res.Predictions {
		ops[p.Operator]++
		lines[p.Line] = true
		if !strings.HasPrefix(p.Line, p.Operator+":") {
			t.Fatalf("line %q does not start with operator %q", p.Line, p.Operator)
		}
		if !p.EventTime.Equal(time.Date(2014, 11, 30, 22, 46, 23, 0, time.UTC)) {
			t.Fatalf("event time %v, want the header's 2014-11-30T22:46:23Z", p.EventTime)
		}
	}
	var names []string
	for op := range ops {
		names = append(names, op)
	}
	slices.Sort(names)
	if got := strings.Join(names, ","); got != "ARR,CXX,EBS,HTM,QBUZZ,RET,SYNTUS,VTN" {
		t.Fatalf("operators %s", got)
	}
	if len(lines) != 630 {
		t.Fatalf("%d operator:line pairs, want 630", len(lines))
	}
	first := res.Predictions[0]
	if first.TripID != "8803145" || first.Operator != "CXX" || first.Line != "CXX:L019" || first.StopID != "36992" ||
		first.DelayS != 0 || first.StopSequence != 1 {
		t.Fatalf("first prediction %+v", first)
	}
	// Departure delay only: the second trip's first stop.
	for _, p := range res.Predictions {
		if p.TripID == "17457509" && p.StopID == "295579" {
			if p.DelayS != 124 || p.Operator != "QBUZZ" || p.Line != "QBUZZ:d028" {
				t.Fatalf("departure-only prediction %+v", p)
			}
		}
	}
}

func TestOVapiArrivalDelays(t *testing.T) {
	// Cross-check of the data README: 59,298 stop time updates with an arrival delay.
	b, err := os.ReadFile(td + "nl-ovapi-20141130/tripUpdates_20141130T224623Z.pb")
	if err != nil {
		t.Fatal(err)
	}
	var msg gtfs.FeedMessage
	if err := proto.Unmarshal(b, &msg); err != nil {
		t.Fatal(err)
	}
	stus, arrival, departureOnly := 0, 0, 0
	for _, e := range msg.GetEntity() {
		for _, s := range e.GetTripUpdate().GetStopTimeUpdate() {
			stus++
			if s.GetArrival() != nil && s.GetArrival().Delay != nil {
				arrival++
			} else if s.GetDeparture() != nil && s.GetDeparture().Delay != nil {
				departureOnly++
			}
		}
	}
	if stus != 60074 || arrival != 59298 || arrival+departureOnly != 59946 {
		t.Fatalf("stop time updates %d, arrival delay %d, departure only %d", stus, arrival, departureOnly)
	}
}

func TestHalifax(t *testing.T) {
	res, err := gtfsrt.Load([]string{td + "halifax-20251106"}, gtfsrt.Options{Operator: "HFX"})
	if err != nil {
		t.Fatal(err)
	}
	// 17,041 stop time updates, 11,638 with an arrival delay, none with only a
	// departure delay, the rest with times only; 291 vehicle positions.
	if res.Files != 2 || len(res.Predictions) != 11638 || len(res.Positions) != 291 {
		t.Fatalf("files %d, predictions %d, positions %d", res.Files, len(res.Predictions), len(res.Positions))
	}
	if want := map[string]int{gtfsrt.SkipNoDelay: 5403}; !equalCounts(res.Skipped, want) {
		t.Fatalf("skipped %v, want %v", res.Skipped, want)
	}
	p := res.Positions[0]
	if p.VehicleID != "2526" || p.Lat != 44.81045 || p.Lon != -63.59964 || p.SpeedMPS == nil || *p.SpeedMPS != 22.352 ||
		p.Bearing != nil || p.TripID != "3789838" || p.Line != "320" || p.Operator != "HFX" ||
		!p.EventTime.Equal(time.Unix(1762462969, 0)) {
		t.Fatalf("first position %+v", p)
	}
	if b := res.Positions[1].Bearing; b == nil || *b != 45 {
		t.Fatalf("second position bearing %v, want 45", b)
	}
	// VehiclePositions (header 21:02:59) comes before TripUpdates (21:04:14).
	_, err = gtfsrt.Load([]string{td + "halifax-20251106"}, gtfsrt.Options{})
	if !errors.Is(err, gtfsrt.ErrNoOperator) || !strings.Contains(err.Error(), "VehiclePositions_20251106T210259Z.pb") {
		t.Fatalf("without operator: %v", err)
	}
}

// writeFeed writes a FeedMessage with the given header timestamp.
func writeFeed(t *testing.T, path string, headerTS uint64, entities ...*gtfs.FeedEntity) {
	t.Helper()
	msg := &gtfs.FeedMessage{
		Header: &gtfs.FeedHeader{GtfsRealtimeVersion: proto.String("2.0"), Timestamp: proto.Uint64(headerTS)},
		Entity: entities,
	}
	b, err := proto.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func stu(stop string, seq uint32, arr, dep *int32) *gtfs.TripUpdate_StopTimeUpdate {
	s := &gtfs.TripUpdate_StopTimeUpdate{StopSequence: proto.Uint32(seq)}
	if stop != "" {
		s.StopId = proto.String(stop)
	}
	if arr != nil {
		s.Arrival = &gtfs.TripUpdate_StopTimeEvent{Delay: arr}
	}
	if dep != nil {
		s.Departure = &gtfs.TripUpdate_StopTimeEvent{Delay: dep, Time: proto.Int64(1)}
	}
	return s
}

func tripEntity(id, trip, route string, ts uint64, stus ...*gtfs.TripUpdate_StopTimeUpdate) *gtfs.FeedEntity {
	tu := &gtfs.TripUpdate{Trip: &gtfs.TripDescriptor{TripId: proto.String(trip), RouteId: proto.String(route)}, StopTimeUpdate: stus}
	if ts != 0 {
		tu.Timestamp = proto.Uint64(ts)
	}
	return &gtfs.FeedEntity{Id: proto.String(id), TripUpdate: tu}
}

func TestRules(t *testing.T) {
	dir := t.TempDir()
	i := func(v int32) *int32 { return &v }
	// Named so that path order and header order disagree.
	writeFeed(t, filepath.Join(dir, "a", "later.pb"), 2000,
		tripEntity("e1", "T1", "R1", 0, stu("S1", 1, i(30), nil)),  // header time 2000: new
		tripEntity("e2", "T2", "R2", 900, stu("S1", 1, i(5), nil)), // repeat of the earlier file: dropped
	)
	writeFeed(t, filepath.Join(dir, "b", "sub", "earlier.pb"), 1000,
		tripEntity("e2", "T2", "R2", 900,
			stu("S1", 1, i(5), i(7)), // arrival wins
			stu("S2", 2, nil, i(-3)), // departure when no arrival
			stu("S3", 3, nil, nil),   // no delay
			stu("", 4, i(1), nil),    // no stop_id
			stu("S1", 5, i(9), nil),  // loop: same stop, later visit
		),
		tripEntity("e3", "T3", "", 900, stu("S1", 1, i(1), nil)), // no route_id
	)
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("not a feed"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := gtfsrt.Load([]string{dir}, gtfsrt.Options{Operator: "OP"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range res.Predictions {
		got = append(got, fmt.Sprintf("%s/%s/%s/%g", p.TripID, p.StopID, p.EventTime.Format(time.RFC3339), p.DelayS))
	}
	want := []string{
		"T2/S1/1970-01-01T00:15:00Z/5",
		"T2/S2/1970-01-01T00:15:00Z/-3",
		"T2/S1/1970-01-01T00:15:00Z/9",
		"T1/S1/1970-01-01T00:33:20Z/30",
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("predictions\n got %v\nwant %v", got, want)
	}
	wantSkip := map[string]int{gtfsrt.SkipNoDelay: 1, gtfsrt.SkipNoStopID: 1, gtfsrt.SkipNoLine: 1, gtfsrt.SkipDuplicatePrediction: 1}
	if !equalCounts(res.Skipped, wantSkip) {
		t.Fatalf("skipped %v, want %v", res.Skipped, wantSkip)
	}
	if res.Files != 2 {
		t.Fatalf("files %d, want 2 (notes.txt is not *.pb)", res.Files)
	}

	// A file given by name that is not a FeedMessage is refused, naming it.
	bad := filepath.Join(dir, "bad.pb")
	if err := os.WriteFile(bad, []byte{0xff, 0xff, 0xff}, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := gtfsrt.Load([]string{bad}, gtfsrt.Options{Operator: "OP"}); err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("bad file: %v", err)
	}
	if _, err := gtfsrt.Load([]string{filepath.Join(dir, "missing")}, gtfsrt.Options{}); err == nil {
		t.Fatal("missing path: no error")
	}
	if _, err := gtfsrt.Load([]string{t.TempDir()}, gtfsrt.Options{}); err == nil {
		t.Fatal("empty folder: no error")
	}
}

func equalCounts(got, want map[string]int) bool {
	for k, v := range got {
		if v != want[k] {
			return false
		}
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}
