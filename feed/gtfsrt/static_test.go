package gtfsrt_test

import (
	"archive/zip"
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/MobilityData/gtfs-realtime-bindings/golang/gtfs"
	"google.golang.org/protobuf/proto"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/feed/gtfsrt"
	"github.com/ovstream/ovstream/feed/gtfsstatic"
)

const (
	halifaxStatic = td + "halifax-20251106/google_transit_trimmed.zip"
	halifaxTrips  = td + "halifax-20251106/TripUpdates_20251106T210414Z.pb"
)

// Skip reasons with the Halifax static feed.
var (
	skipTripMissing = gtfsrt.SkipTimeOnly + gtfsstatic.ErrUnknownTrip.Error()
	skipStopMissing = gtfsrt.SkipTimeOnly + gtfsstatic.ErrUnknownStop.Error()
)

// staticRow is one stop_times.txt row as the oracle reads it.
type staticRow struct {
	seq      int
	stop     string
	arr, dep string
}

// readCSV returns the rows of one file of a GTFS zip as maps column -> value.
func readCSV(t *testing.T, z *zip.ReadCloser, name string) []map[string]string {
	t.Helper()
	f, err := z.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]string
	for _, r := range recs[1:] {
		m := map[string]string{}
		for i, h := range recs[0] {
			m[h] = r[i]
		}
		out = append(out, m)
	}
	return out
}

// oracleSeconds reads " 5:49:00" or "25:10:00" by hand.
func oracleSeconds(t *testing.T, s string) int64 {
	parts := strings.Split(strings.TrimSpace(s), ":")
	if len(parts) != 3 {
		t.Fatalf("time %q", s)
	}
	var n int64
	for _, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil {
			t.Fatalf("time %q", s)
		}
		n = n*60 + int64(v)
	}
	return n
}

type predKey struct {
	trip, stop string
	seq        int64
}

// The Halifax pair with and without its static feed. Without it, the 5,403
// stop time updates that give no delay are skipped; with it, those with a
// predicted time get predicted - scheduled, and each such delay equals the
// one this test computes on its own from the zip's stop_times.txt,
// agency.txt and the trip's start_date (noon minus 12 h in the agency time
// zone), with encoding/csv and time.Date. (Every time-only update's trip is
// in trips.txt here; TestHalifaxStaticTripMissing removes some.)
func TestHalifaxStaticFeed(t *testing.T) {
	without, err := gtfsrt.Load([]string{td + "halifax-20251106"}, gtfsrt.Options{Operator: "HFX"})
	if err != nil {
		t.Fatal(err)
	}
	sched, err := gtfsstatic.Load(halifaxStatic)
	if err != nil {
		t.Fatal(err)
	}
	with, err := gtfsrt.Load([]string{td + "halifax-20251106"}, gtfsrt.Options{Operator: "HFX", Schedule: sched})
	if err != nil {
		t.Fatal(err)
	}

	// The oracle: the static feed read by hand.
	z, err := zip.OpenReader(halifaxStatic)
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	agency := readCSV(t, z, "agency.txt")
	loc, err := time.LoadLocation(agency[0]["agency_timezone"])
	if err != nil {
		t.Fatal(err)
	}
	inTrips := map[string]string{} // trip_id -> service_id
	for _, r := range readCSV(t, z, "trips.txt") {
		inTrips[r["trip_id"]] = r["service_id"]
	}
	stopTimes := map[string][]staticRow{}
	for _, r := range readCSV(t, z, "stop_times.txt") {
		seq, _ := strconv.Atoi(r["stop_sequence"])
		stopTimes[r["trip_id"]] = append(stopTimes[r["trip_id"]], staticRow{seq, r["stop_id"], r["arrival_time"], r["departure_time"]})
	}
	// 2025-11-06 is a Thursday inside calendar.txt's 20250825..20251116 for
	// every weekday service, and no calendar_dates.txt row removes it.
	for _, r := range readCSV(t, z, "calendar_dates.txt") {
		if r["date"] == "20251106" && r["exception_type"] == "2" {
			t.Fatalf("service %s removed on 2025-11-06: the oracle assumes none is", r["service_id"])
		}
	}

	b, err := os.ReadFile(halifaxTrips)
	if err != nil {
		t.Fatal(err)
	}
	var msg gtfs.FeedMessage
	if err := proto.Unmarshal(b, &msg); err != nil {
		t.Fatal(err)
	}
	want := map[predKey]int64{}
	var noTime, tripMissing, stopMissing int
	for _, e := range msg.GetEntity() {
		tu := e.GetTripUpdate()
		if tu == nil {
			continue
		}
		for _, u := range tu.GetStopTimeUpdate() {
			arr, dep := u.GetArrival(), u.GetDeparture()
			if (arr != nil && arr.Delay != nil) || (dep != nil && dep.Delay != nil) {
				continue
			}
			if arr.GetTime() == 0 && dep.GetTime() == 0 {
				noTime++
				continue
			}
			if tu.GetTrip().GetScheduleRelationship() != gtfs.TripDescriptor_SCHEDULED {
				t.Fatalf("time-only update of a %v trip: the oracle does not expect one", tu.GetTrip().GetScheduleRelationship())
			}
			tripID := tu.GetTrip().GetTripId()
			rows, ok := stopTimes[tripID]
			if _, known := inTrips[tripID]; !known {
				tripMissing++
				continue
			}
			if !ok {
				t.Fatalf("trip %s without stop times", tripID)
			}
			// The row at stop_sequence when it is the update's stop, else the
			// trip's one row with the update's stop_id.
			var row *staticRow
			for i := range rows {
				if rows[i].seq == int(u.GetStopSequence()) && rows[i].stop == u.GetStopId() {
					row = &rows[i]
				}
			}
			if row == nil {
				n := 0
				for i := range rows {
					if rows[i].stop == u.GetStopId() {
						row = &rows[i]
						n++
					}
				}
				if n > 1 {
					t.Fatalf("trip %s visits %s twice", tripID, u.GetStopId())
				}
			}
			if row == nil {
				stopMissing++
				continue
			}
			sd := tu.GetTrip().GetStartDate()
			y, _ := strconv.Atoi(sd[:4])
			m, _ := strconv.Atoi(sd[4:6])
			d, _ := strconv.Atoi(sd[6:])
			origin := time.Date(y, time.Month(m), d, 12, 0, 0, 0, loc).Add(-12 * time.Hour).Unix()
			predicted, sched := arr.GetTime(), row.arr
			if predicted == 0 {
				predicted, sched = dep.GetTime(), row.dep
			}
			want[predKey{tripID, u.GetStopId(), int64(u.GetStopSequence())}] = predicted - (origin + oracleSeconds(t, sched))
		}
	}
	// Measured once on this pair; the oracle above recounts them.
	if len(want) != 4936 || tripMissing != 0 || stopMissing != 34 || noTime != 433 || len(want)+tripMissing+stopMissing+noTime != 5403 {
		t.Fatalf("oracle: %d computable, %d trip missing, %d stop missing, %d without time", len(want), tripMissing, stopMissing, noTime)
	}

	if len(without.Predictions) != 11638 || without.Skipped[gtfsrt.SkipNoDelay] != 5403 {
		t.Fatalf("without the static feed: %d predictions, skipped %v", len(without.Predictions), without.Skipped)
	}
	if len(with.Predictions) != 11638+len(want) || len(with.Positions) != 291 {
		t.Fatalf("with the static feed: %d predictions, %d positions; want %d, 291", len(with.Predictions), len(with.Positions), 11638+len(want))
	}
	wantSkipped := map[string]int{gtfsrt.SkipNoDelay: noTime, skipStopMissing: stopMissing}
	if !equalCounts(with.Skipped, wantSkipped) {
		t.Fatalf("skipped %v, want %v", with.Skipped, wantSkipped)
	}
	if s := with.SkipSummary(); s != "433 no delay, 34 time only: stop not in the trip's stop_times.txt" {
		t.Fatalf("summary %q", s)
	}

	// Every prediction with the static feed: the 11,638 of before, same
	// delays, and the computed ones, each equal to the oracle.
	before := map[predKey]float64{}
	for _, p := range without.Predictions {
		before[predKey{p.TripID, p.StopID, p.StopSequence}] = p.DelayS
	}
	var computed []aggregate.Prediction
	for _, p := range with.Predictions {
		k := predKey{p.TripID, p.StopID, p.StopSequence}
		if d, ok := before[k]; ok {
			if p.DelayS != d {
				t.Fatalf("%v: delay %v, was %v without the static feed", k, p.DelayS, d)
			}
			continue
		}
		d, ok := want[k]
		if !ok {
			t.Fatalf("prediction %+v: the oracle computed none", p)
		}
		if p.DelayS != float64(d) {
			t.Fatalf("%v: delay %v, oracle %d", k, p.DelayS, d)
		}
		delete(want, k)
		computed = append(computed, p)
	}
	if len(want) != 0 {
		t.Fatalf("%d oracle delays without a prediction", len(want))
	}
	// A deterministic sample for the record: every 247th computed delay.
	for i := 0; i < len(computed); i += 247 {
		p := computed[i]
		t.Logf("trip %s stop %s seq %d: delay %v s", p.TripID, p.StopID, p.StopSequence, p.DelayS)
	}

	// By hand, from the files: trip 3789865 (route 320, service 214.0.3,
	// start_date 20251106), stop_times.txt "3789865,17:56:00,17:56:00,7610,9":
	// 17:56:00 AST (UTC-4) = 21:56:00Z = 1762466160, the predicted arrival,
	// so 0 s. The feed's stop_sequence 11 for stop 6108 is the file's 10
	// ("3789865,18:10:00,18:10:00,6108,10"); stop_id decides: 22:10:00Z =
	// 1762467000, predicted 1762467000, 0 s. Stop 1040 (the feed's
	// stop_sequence 10) is not on the trip in stop_times.txt: skipped.
	// Trip 3796237 (route 85, service 214.0.3, start_date 20251106),
	// "3796237,16:18:28,16:18:28,7228,13": 16:18:28 AST = 20:18:28Z =
	// 1762460308; predicted 1762460548, so 240 s late.
	for _, c := range []struct {
		trip, stop, line string
		seq              int64
		delay            float64
	}{{"3789865", "7610", "320", 9, 0}, {"3789865", "6108", "320", 11, 0}, {"3796237", "7228", "85", 13, 240}} {
		found := false
		for _, p := range computed {
			if p.TripID == c.trip && p.StopID == c.stop && p.StopSequence == c.seq {
				found = true
				if p.DelayS != c.delay || p.Line != c.line || p.Operator != "HFX" {
					t.Fatalf("by hand: %+v, want delay %v", p, c.delay)
				}
			}
			if p.TripID == "3789865" && p.StopID == "1040" {
				t.Fatalf("stop 1040 is not on trip 3789865 in stop_times.txt, yet %+v", p)
			}
		}
		if !found {
			t.Fatalf("no prediction for trip %s stop %s seq %d", c.trip, c.stop, c.seq)
		}
	}
}

// A trip that trips.txt lacks: its time-only updates are skipped under
// "time only: trip not in trips.txt", never guessed; its updates with a
// delay still count. The static feed is the Halifax one, unzipped into a
// folder without trip 3789865 in trips.txt.
func TestHalifaxStaticTripMissing(t *testing.T) {
	const gone = "3789865"
	z, err := zip.OpenReader(halifaxStatic)
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	dir := t.TempDir()
	for _, f := range z.File {
		r, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		if f.Name == "trips.txt" {
			var kept []string
			for _, line := range strings.SplitAfter(string(b), "\n") {
				if !strings.Contains(line, ","+gone+",") {
					kept = append(kept, line)
				}
			}
			if len(kept) != strings.Count(string(b), "\n") {
				t.Fatalf("trips.txt: removed %d lines, want 1", strings.Count(string(b), "\n")+1-len(kept))
			}
			b = []byte(strings.Join(kept, ""))
		}
		if err := os.WriteFile(filepath.Join(dir, f.Name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	full, err := gtfsstatic.Load(halifaxStatic)
	if err != nil {
		t.Fatal(err)
	}
	lacking, err := gtfsstatic.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	a, err := gtfsrt.Load([]string{halifaxTrips}, gtfsrt.Options{Operator: "HFX", Schedule: full})
	if err != nil {
		t.Fatal(err)
	}
	b, err := gtfsrt.Load([]string{halifaxTrips}, gtfsrt.Options{Operator: "HFX", Schedule: lacking})
	if err != nil {
		t.Fatal(err)
	}
	// The oracle: the trip's updates in the feed that give a time and no delay.
	raw, err := os.ReadFile(halifaxTrips)
	if err != nil {
		t.Fatal(err)
	}
	var msg gtfs.FeedMessage
	if err := proto.Unmarshal(raw, &msg); err != nil {
		t.Fatal(err)
	}
	timeOnly, withDelay := 0, 0
	for _, e := range msg.GetEntity() {
		if e.GetTripUpdate().GetTrip().GetTripId() != gone {
			continue
		}
		for _, u := range e.GetTripUpdate().GetStopTimeUpdate() {
			arr, dep := u.GetArrival(), u.GetDeparture()
			switch {
			case (arr != nil && arr.Delay != nil) || (dep != nil && dep.Delay != nil):
				withDelay++
			case arr.GetTime() != 0 || dep.GetTime() != 0:
				timeOnly++
			}
		}
	}
	if timeOnly == 0 || withDelay == 0 {
		t.Fatalf("trip %s: %d time-only updates, %d with delay; the test needs both", gone, timeOnly, withDelay)
	}
	if got := b.Skipped[skipTripMissing]; got != timeOnly {
		t.Fatalf("skipped as %q: %d, want %d; all: %v", skipTripMissing, got, timeOnly, b.Skipped)
	}
	count := func(ps []aggregate.Prediction) int {
		n := 0
		for _, p := range ps {
			if p.TripID == gone {
				n++
			}
		}
		return n
	}
	// With the whole feed, some of its time-only updates got a delay (2: the
	// third names stop 1040, which the trip does not serve); without the
	// trip, none did, and everything else is the same.
	na, nb := count(a.Predictions), count(b.Predictions)
	if na <= withDelay || nb != withDelay || len(b.Predictions) != len(a.Predictions)-(na-withDelay) {
		t.Fatalf("trip %s: %d predictions with it in trips.txt, %d without, want %d with delay; totals %d, %d",
			gone, na, nb, withDelay, len(a.Predictions), len(b.Predictions))
	}
}

// The names come from routes.txt and stops.txt, for every prediction whose
// route and stop the static feed holds.
func TestHalifaxStaticNames(t *testing.T) {
	sched, err := gtfsstatic.Load(halifaxStatic)
	if err != nil {
		t.Fatal(err)
	}
	res, err := gtfsrt.Load([]string{halifaxTrips}, gtfsrt.Options{Operator: "HFX", Schedule: sched})
	if err != nil {
		t.Fatal(err)
	}
	named := 0
	for _, p := range res.Predictions {
		if p.TripID == "3789865" && p.StopID == "7610" {
			// routes.txt "320,Halifax,320,Airport - Fall River Regional Exp,...";
			// stops.txt "7610,7610,Bridge Terminal Bay 10 (7610),...".
			if p.LineShortName != "320" || p.LineName != "Airport - Fall River Regional Exp" || p.StopName != "Bridge Terminal Bay 10 (7610)" {
				t.Fatalf("names %q %q %q", p.LineShortName, p.LineName, p.StopName)
			}
		}
		if p.LineName != "" && p.StopName != "" {
			named++
		}
	}
	t.Logf("%d of %d predictions named", named, len(res.Predictions))
	if named == 0 {
		t.Fatal("no prediction named")
	}
}

// Live polling maps with the static feed the same way.
func TestStreamWithStaticFeed(t *testing.T) {
	sched, err := gtfsstatic.Load(halifaxStatic)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(halifaxTrips)
	if err != nil {
		t.Fatal(err)
	}
	s := gtfsrt.NewStream(gtfsrt.Options{Operator: "HFX", Schedule: sched}, 0)
	res, _, err := s.Feed(b)
	if err != nil {
		t.Fatal(err)
	}
	load, err := gtfsrt.Load([]string{halifaxTrips}, gtfsrt.Options{Operator: "HFX", Schedule: sched})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Predictions) != 16574 || fmt.Sprint(res.Predictions) != fmt.Sprint(load.Predictions) || !equalCounts(res.Skipped, load.Skipped) {
		t.Fatalf("stream: %d predictions, skipped %v; load: %d, %v", len(res.Predictions), res.Skipped, len(load.Predictions), load.Skipped)
	}
	// The same snapshot again: nothing new.
	res, _, err = s.Feed(b)
	if err != nil || len(res.Predictions) != 0 {
		t.Fatalf("second feed: %v, %d predictions", err, len(res.Predictions))
	}
}

// Rules of the schedule path on a made-up feed over the Halifax schedule:
// only SCHEDULED trips are matched (an ADDED, DUPLICATED or CANCELED trip's
// times do not follow its trip_id's schedule); an update that names only
// its stop_sequence gets the stop_id of that stop_times.txt row; an update
// with a delay keeps it.
func TestStaticFeedRules(t *testing.T) {
	sched, err := gtfsstatic.Load(halifaxStatic)
	if err != nil {
		t.Fatal(err)
	}
	// Trip 3789865 stops at 7610 (stop_sequence 9) at 17:56:00 AST = 1762466160.
	const at = 1762466160
	timed := func(seq uint32, stop string, arrival int64) *gtfs.TripUpdate_StopTimeUpdate {
		u := &gtfs.TripUpdate_StopTimeUpdate{StopSequence: proto.Uint32(seq), Arrival: &gtfs.TripUpdate_StopTimeEvent{Time: proto.Int64(arrival)}}
		if stop != "" {
			u.StopId = proto.String(stop)
		}
		return u
	}
	entity := func(id string, rel gtfs.TripDescriptor_ScheduleRelationship, stus ...*gtfs.TripUpdate_StopTimeUpdate) *gtfs.FeedEntity {
		return &gtfs.FeedEntity{Id: proto.String(id), TripUpdate: &gtfs.TripUpdate{
			Trip: &gtfs.TripDescriptor{TripId: proto.String("3789865"), RouteId: proto.String("320"),
				StartDate: proto.String("20251106"), ScheduleRelationship: rel.Enum()},
			Timestamp:      proto.Uint64(1762463000),
			StopTimeUpdate: stus,
		}}
	}
	withDelay := timed(10, "6108", at+900)
	withDelay.Arrival.Delay = proto.Int32(-7)
	path := filepath.Join(t.TempDir(), "tu.pb")
	writeFeed(t, path, 1762463054,
		entity("a", gtfs.TripDescriptor_SCHEDULED, timed(9, "", at+60), withDelay),
		entity("b", gtfs.TripDescriptor_ADDED, timed(9, "7610", at)),
		entity("c", gtfs.TripDescriptor_DUPLICATED, timed(9, "7610", at)),
		entity("d", gtfs.TripDescriptor_CANCELED, timed(9, "7610", at)),
	)
	res, err := gtfsrt.Load([]string{path}, gtfsrt.Options{Operator: "HFX", Schedule: sched})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{gtfsrt.SkipTimeOnly + "trip ADDED": 1, gtfsrt.SkipTimeOnly + "trip DUPLICATED": 1, gtfsrt.SkipTimeOnly + "trip CANCELED": 1}
	if !equalCounts(res.Skipped, want) || len(res.Predictions) != 2 {
		t.Fatalf("skipped %v, %d predictions", res.Skipped, len(res.Predictions))
	}
	if p := res.Predictions[0]; p.StopID != "7610" || p.DelayS != 60 || p.StopSequence != 9 || p.StopName != "Bridge Terminal Bay 10 (7610)" {
		t.Fatalf("stop_sequence only: %+v", p)
	}
	if p := res.Predictions[1]; p.StopID != "6108" || p.DelayS != -7 {
		t.Fatalf("with a delay: %+v", p)
	}
}
