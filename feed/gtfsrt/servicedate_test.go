package gtfsrt_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/MobilityData/gtfs-realtime-bindings/golang/gtfs"
	"google.golang.org/protobuf/proto"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/feed/gtfsrt"
	"github.com/ovstream/ovstream/feed/gtfsstatic"
)

// rawSide is what the oracle reads from a FeedMessage for one stop time
// update: the TripDescriptor's start_date and the StopTimeEvent times.
type rawSide struct {
	startDate    string
	arrival, dep int64
}

// rawSides reads the files of dir with the protobuf bindings directly,
// keyed by trip, stop, stop_sequence and timestamp as the once-only rule.
func rawSides(t *testing.T, dir string) map[[4]string]rawSide {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*rip*pdates*.pb"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no TripUpdates in %s: %v", dir, err)
	}
	out := map[[4]string]rawSide{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var msg gtfs.FeedMessage
		if err := proto.Unmarshal(b, &msg); err != nil {
			t.Fatal(err)
		}
		for _, e := range msg.GetEntity() {
			tu := e.GetTripUpdate()
			ts := tu.GetTimestamp()
			if ts == 0 {
				ts = msg.GetHeader().GetTimestamp()
			}
			for _, u := range tu.GetStopTimeUpdate() {
				k := [4]string{tu.GetTrip().GetTripId(), u.GetStopId(), time.Unix(int64(u.GetStopSequence()), 0).String(), time.Unix(int64(ts), 0).UTC().String()}
				out[k] = rawSide{tu.GetTrip().GetStartDate(), u.GetArrival().GetTime(), u.GetDeparture().GetTime()}
			}
		}
	}
	return out
}

// Every prediction of the bundled feeds carries the start_date and the
// predicted time its stop time update gives, as the protobuf bindings read
// them without the loader: Auckland's converted snapshots have no
// start_date, the other feeds have one for every trip; every update emitted
// gives a time.
func TestServiceDateAndArrivalTimeOfBundledFeeds(t *testing.T) {
	sched, err := gtfsstatic.Load(halifaxStatic)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dir                     string
		opt                     gtfsrt.Options
		n, withDate, withArrive int
	}{
		{td + "nl-ovapi-20141130", gtfsrt.Options{}, 59946, 59946, 59946},
		{td + "auckland-20160519-peak10min", gtfsrt.Options{Operator: "AT"}, 4610, 0, 4610},
		{td + "halifax-20251106", gtfsrt.Options{Operator: "HFX"}, 11638, 11638, 11638},
		{td + "halifax-20251106", gtfsrt.Options{Operator: "HFX", Schedule: sched}, 16574, 16574, 16574},
	} {
		res, err := gtfsrt.Load([]string{c.dir}, c.opt)
		if err != nil {
			t.Fatal(err)
		}
		raw := rawSides(t, c.dir)
		withDate, withArrive := 0, 0
		for _, p := range res.Predictions {
			r, ok := raw[[4]string{p.TripID, p.StopID, time.Unix(p.StopSequence, 0).String(), p.EventTime.String()}]
			if !ok {
				// an update without stop_id that the static feed gave one
				continue
			}
			want, _ := aggregate.ParseServiceDate(r.startDate)
			wantAt := r.arrival
			if wantAt == 0 {
				wantAt = r.dep
			}
			if p.StartDate != want || p.ArrivalTime.Unix() != wantAt || (wantAt == 0) != p.ArrivalTime.IsZero() {
				t.Fatalf("%s: %+v: want start_date %q, time %d", c.dir, p, r.startDate, wantAt)
			}
			if p.StartDate != 0 {
				withDate++
			}
			if !p.ArrivalTime.IsZero() {
				withArrive++
			}
		}
		if len(res.Predictions) != c.n || withDate != c.withDate || withArrive != c.withArrive {
			t.Errorf("%s (static %v): %d predictions, %d with start_date, %d with arrival_time; want %d, %d, %d",
				c.dir, c.opt.Schedule != nil, len(res.Predictions), withDate, withArrive, c.n, c.withDate, c.withArrive)
		}
	}
}

// An update that gives a delay and no time gets arrival_time = scheduled
// time + delay from the static feed, and the service day the schedule
// matched when the realtime feed has none; without a static feed, for a
// trip not running as scheduled, or with a start_date that is not YYYYMMDD
// (which is left out), it has no arrival_time.
func TestArrivalTimeFromSchedule(t *testing.T) {
	sched, err := gtfsstatic.Load(halifaxStatic)
	if err != nil {
		t.Fatal(err)
	}
	// Trip 3789865 stops at 7610 (stop_sequence 9) at 17:56:00 AST = 1762466160.
	const at = 1762466160
	delayed := func(d int32, departure bool) *gtfs.TripUpdate_StopTimeUpdate {
		u := &gtfs.TripUpdate_StopTimeUpdate{StopSequence: proto.Uint32(9), StopId: proto.String("7610")}
		if departure {
			u.Departure = &gtfs.TripUpdate_StopTimeEvent{Delay: proto.Int32(d)}
		} else {
			u.Arrival = &gtfs.TripUpdate_StopTimeEvent{Delay: proto.Int32(d)}
		}
		return u
	}
	entity := func(id, startDate string, rel gtfs.TripDescriptor_ScheduleRelationship, u *gtfs.TripUpdate_StopTimeUpdate) *gtfs.FeedEntity {
		td := &gtfs.TripDescriptor{TripId: proto.String("3789865"), RouteId: proto.String("320"), ScheduleRelationship: rel.Enum()}
		if startDate != "" {
			td.StartDate = proto.String(startDate)
		}
		return &gtfs.FeedEntity{Id: proto.String(id), TripUpdate: &gtfs.TripUpdate{Trip: td,
			Timestamp: proto.Uint64(1762463000 + uint64(len(id))), StopTimeUpdate: []*gtfs.TripUpdate_StopTimeUpdate{u}}}
	}
	path := filepath.Join(t.TempDir(), "tu.pb")
	writeFeed(t, path, 1762463054,
		entity("a", "20251106", gtfs.TripDescriptor_SCHEDULED, delayed(120, false)),
		entity("bb", "", gtfs.TripDescriptor_SCHEDULED, delayed(-30, false)),
		entity("ccc", "", gtfs.TripDescriptor_SCHEDULED, delayed(45, true)),
		entity("dddd", "20251106", gtfs.TripDescriptor_ADDED, delayed(60, false)),
		entity("eeeee", "2025-11-06", gtfs.TripDescriptor_SCHEDULED, delayed(60, false)),
	)
	want := []struct {
		date int32
		at   int64 // 0: no arrival_time
	}{
		{20251106, at + 120},
		{20251106, at - 30}, // the day from the schedule
		{20251106, at + 45}, // 7610's departure time is its arrival time in stop_times.txt
		{20251106, 0},       // ADDED: not matched to the schedule
		{0, 0},              // a malformed start_date matches no day (as gtfsstatic.ErrBadStartDate)
	}
	for _, withSchedule := range []bool{true, false} {
		opt := gtfsrt.Options{Operator: "HFX"}
		if withSchedule {
			opt.Schedule = sched
		}
		res, err := gtfsrt.Load([]string{path}, opt)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Predictions) != len(want) {
			t.Fatalf("%d predictions, want %d", len(res.Predictions), len(want))
		}
		for i, p := range res.Predictions {
			w := want[i]
			if !withSchedule {
				w.at = 0
				if i == 1 || i == 2 {
					w.date = 0 // no start_date in the feed, no schedule to give one
				}
			}
			if p.StartDate != w.date || (w.at == 0) != p.ArrivalTime.IsZero() || (w.at != 0 && p.ArrivalTime.Unix() != w.at) {
				t.Errorf("schedule %v, prediction %d: start_date %d, arrival_time %v; want %d, %d",
					withSchedule, i, p.StartDate, p.ArrivalTime, w.date, w.at)
			}
		}
	}
}
