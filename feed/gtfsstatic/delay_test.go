package gtfsstatic_test

import (
	"archive/zip"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ovstream/ovstream/feed/gtfsstatic"
)

// A small feed in America/Halifax. WK runs Monday to Friday from
// 2025-10-20 to 2025-11-16, not on Tuesday 2025-11-11 (calendar_dates.txt
// removes it) and also on Saturday 2025-11-15 (added); SUN runs on Sundays
// from 2025-03-01 to 2025-11-30, so also on the days daylight saving time
// begins (2025-03-09) and ends (2025-11-02). stop_times.txt starts with a
// byte order mark and has GTFS times with a leading space and past 24:00:00.
var feed = map[string]string{
	"agency.txt": "agency_id,agency_name,agency_url,agency_timezone\nA,Agency,http://a.example,America/Halifax\n",
	"calendar.txt": "service_id,monday,tuesday,wednesday,thursday,friday,saturday,sunday,start_date,end_date\n" +
		"WK,1,1,1,1,1,0,0,20251020,20251116\nSUN,0,0,0,0,0,0,1,20250301,20251130\n",
	"calendar_dates.txt": "service_id,date,exception_type\nWK,20251111,2\nWK,20251115,1\n",
	"trips.txt":          "route_id,service_id,trip_id\nR1,WK,T1\nR1,SUN,TS\nR1,WK,TF\nR1,NOCAL,TN\n",
	"stop_times.txt": "\uFEFFtrip_id,arrival_time,departure_time,stop_id,stop_sequence\n" +
		"T1, 8:00:00, 8:00:00,A,1\n" +
		"T1,08:10:00,08:11:00,B,2\n" +
		"T1,08:30:00,08:30:00,A,3\n" +
		"T1,,,C,5\n" +
		"T1,25:10:00,25:10:00,D,6\n" +
		"TS,08:00:00,08:00:00,A,1\n" +
		"TF,06:00:00,06:00:00,A,1\n" +
		"TN,08:00:00,08:00:00,A,1\n" +
		"GHOST,08:00:00,08:00:00,A,1\n",
	"frequencies.txt": "trip_id,start_time,end_time,headway_secs\nTF,06:00:00,09:00:00,600\n",
	"routes.txt":      "route_id,route_short_name,route_long_name\nR1,1,First Line\n",
	"stops.txt":       "stop_id,stop_name\nA,\"Alpha, Main St\"\nB,Beta\n",
}

func writeDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func writeZip(t *testing.T, files map[string]string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gtfs.zip")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := zip.NewWriter(f)
	for name, body := range files {
		fw, err := w.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return path
}

// utc reads an instant like "2025-11-02T12:00:00Z".
func utc(t *testing.T, s string) int64 {
	t.Helper()
	tm, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return tm.Unix()
}

func TestDelay(t *testing.T) {
	dir := writeDir(t, feed)
	zipped := writeZip(t, feed)
	for _, path := range []string{dir, zipped} {
		s, err := gtfsstatic.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		if st := s.Stats(); st != (gtfsstatic.Stats{TimeZone: "America/Halifax", Trips: 4, StopTimes: 8, Services: 3}) {
			t.Fatalf("%s: stats %+v", path, st)
		}
		testDelay(t, s)
	}
}

func testDelay(t *testing.T, s *gtfsstatic.Schedule) {
	for _, c := range []struct {
		name      string
		e         gtfsstatic.Event
		delay     int64
		day, stop string
		departure bool
		err       error
	}{
		// 2025-11-06 is a Thursday in AST (UTC-4): 08:00:00 is 12:00:00Z.
		{name: "on time", e: gtfsstatic.Event{TripID: "T1", StartDate: "20251106", StopID: "A", StopSequence: 1, HasStopSequence: true,
			Arrival: utc(t, "2025-11-06T12:00:00Z")}, delay: 0, day: "20251106", stop: "A"},
		{name: "early", e: gtfsstatic.Event{TripID: "T1", StartDate: "20251106", StopID: "A", StopSequence: 1, HasStopSequence: true,
			Arrival: utc(t, "2025-11-06T11:59:00Z")}, delay: -60, day: "20251106", stop: "A"},
		// Daylight saving time ends on Sunday 2025-11-02 at 02:00 ADT: the
		// day starts at noon - 12 h = 00:00 AST = 04:00Z, not at midnight
		// ADT (03:00Z), so 08:00:00 is 12:00Z (08:00 AST).
		{name: "DST ends", e: gtfsstatic.Event{TripID: "TS", StartDate: "20251102", StopID: "A",
			Arrival: utc(t, "2025-11-02T12:00:00Z")}, delay: 0, day: "20251102", stop: "A"},
		// Daylight saving time begins on Sunday 2025-03-09 at 02:00 AST: noon
		// ADT is 15:00Z, minus 12 h is 03:00Z, so 08:00:00 is 11:00Z (08:00 ADT).
		{name: "DST begins", e: gtfsstatic.Event{TripID: "TS", StartDate: "20250309", StopID: "A",
			Arrival: utc(t, "2025-03-09T11:00:30Z")}, delay: 30, day: "20250309", stop: "A"},
		// 25:10:00 of Thursday is Friday 01:10 AST = 05:10Z.
		{name: "past 24:00", e: gtfsstatic.Event{TripID: "T1", StartDate: "20251106", StopID: "D",
			Arrival: utc(t, "2025-11-07T05:15:00Z")}, delay: 300, day: "20251106", stop: "D"},
		// No start_date: the day the trip runs whose scheduled time is nearest.
		{name: "nearest day", e: gtfsstatic.Event{TripID: "T1", StopID: "A", StopSequence: 1, HasStopSequence: true,
			Arrival: utc(t, "2025-11-07T12:05:00Z")}, delay: 300, day: "20251107", stop: "A"},
		// Saturday 01:20 AST is Friday's 25:20:00, not Saturday's (no service).
		{name: "nearest day past 24:00", e: gtfsstatic.Event{TripID: "T1", StopID: "D",
			Arrival: utc(t, "2025-11-08T05:20:00Z")}, delay: 600, day: "20251107", stop: "D"},
		// Monday 00:30 AST: Sunday's 25:10:00 does not exist (WK), Friday's is
		// two days off; nothing within 12 h.
		{name: "no day near", e: gtfsstatic.Event{TripID: "T1", StopID: "D",
			Arrival: utc(t, "2025-11-10T04:30:00Z")}, err: gtfsstatic.ErrNotInService},
		{name: "removed by calendar_dates", e: gtfsstatic.Event{TripID: "T1", StartDate: "20251111", StopID: "B",
			Arrival: utc(t, "2025-11-11T12:10:00Z")}, err: gtfsstatic.ErrNotInService},
		{name: "removed day, no start_date", e: gtfsstatic.Event{TripID: "T1", StopID: "B",
			Arrival: utc(t, "2025-11-11T12:10:00Z")}, err: gtfsstatic.ErrNotInService},
		{name: "added by calendar_dates", e: gtfsstatic.Event{TripID: "T1", StartDate: "20251115", StopID: "B",
			Arrival: utc(t, "2025-11-15T12:10:00Z")}, delay: 0, day: "20251115", stop: "B"},
		{name: "weekend", e: gtfsstatic.Event{TripID: "T1", StartDate: "20251108", StopID: "B",
			Arrival: utc(t, "2025-11-08T12:10:00Z")}, err: gtfsstatic.ErrNotInService},
		{name: "after end_date", e: gtfsstatic.Event{TripID: "T1", StartDate: "20251117", StopID: "B",
			Arrival: utc(t, "2025-11-17T12:10:00Z")}, err: gtfsstatic.ErrNotInService},
		// Departure only: 08:11:00 departure_time.
		{name: "departure", e: gtfsstatic.Event{TripID: "T1", StartDate: "20251106", StopID: "B",
			Departure: utc(t, "2025-11-06T12:12:00Z")}, delay: 60, day: "20251106", stop: "B", departure: true},
		{name: "arrival first", e: gtfsstatic.Event{TripID: "T1", StartDate: "20251106", StopID: "B",
			Arrival: utc(t, "2025-11-06T12:12:00Z"), Departure: utc(t, "2025-11-06T12:12:00Z")}, delay: 120, day: "20251106", stop: "B"},
		// Stop matching: stop_sequence with its stop, else stop_id.
		{name: "loop, second visit", e: gtfsstatic.Event{TripID: "T1", StartDate: "20251106", StopID: "A", StopSequence: 3, HasStopSequence: true,
			Arrival: utc(t, "2025-11-06T12:30:00Z")}, delay: 0, day: "20251106", stop: "A"},
		{name: "loop, no stop_sequence", e: gtfsstatic.Event{TripID: "T1", StartDate: "20251106", StopID: "A",
			Arrival: utc(t, "2025-11-06T12:30:00Z")}, err: gtfsstatic.ErrAmbiguousStop},
		{name: "stop_sequence of another stop", e: gtfsstatic.Event{TripID: "T1", StartDate: "20251106", StopID: "B", StopSequence: 1, HasStopSequence: true,
			Arrival: utc(t, "2025-11-06T12:10:00Z")}, delay: 0, day: "20251106", stop: "B"},
		{name: "stop_sequence only", e: gtfsstatic.Event{TripID: "T1", StartDate: "20251106", StopSequence: 2, HasStopSequence: true,
			Arrival: utc(t, "2025-11-06T12:10:00Z")}, delay: 0, day: "20251106", stop: "B"},
		{name: "unknown stop_sequence, known stop", e: gtfsstatic.Event{TripID: "T1", StartDate: "20251106", StopID: "B", StopSequence: 9, HasStopSequence: true,
			Arrival: utc(t, "2025-11-06T12:10:00Z")}, delay: 0, day: "20251106", stop: "B"},
		{name: "unknown stop", e: gtfsstatic.Event{TripID: "T1", StartDate: "20251106", StopID: "X",
			Arrival: utc(t, "2025-11-06T12:10:00Z")}, err: gtfsstatic.ErrUnknownStop},
		{name: "unknown stop_sequence only", e: gtfsstatic.Event{TripID: "T1", StartDate: "20251106", StopSequence: 4, HasStopSequence: true,
			Arrival: utc(t, "2025-11-06T12:10:00Z")}, err: gtfsstatic.ErrUnknownStop},
		{name: "no scheduled time", e: gtfsstatic.Event{TripID: "T1", StartDate: "20251106", StopID: "C",
			Arrival: utc(t, "2025-11-06T12:20:00Z")}, err: gtfsstatic.ErrNoScheduledTime},
		{name: "no predicted time", e: gtfsstatic.Event{TripID: "T1", StartDate: "20251106", StopID: "B"}, err: gtfsstatic.ErrNoTime},
		{name: "unknown trip", e: gtfsstatic.Event{TripID: "GHOST", StartDate: "20251106", StopID: "A",
			Arrival: utc(t, "2025-11-06T12:00:00Z")}, err: gtfsstatic.ErrUnknownTrip},
		{name: "frequency trip", e: gtfsstatic.Event{TripID: "TF", StartDate: "20251106", StopID: "A",
			Arrival: utc(t, "2025-11-06T10:00:00Z")}, err: gtfsstatic.ErrFrequencyTrip},
		{name: "service without calendar", e: gtfsstatic.Event{TripID: "TN", StartDate: "20251106", StopID: "A",
			Arrival: utc(t, "2025-11-06T12:00:00Z")}, err: gtfsstatic.ErrNotInService},
		{name: "bad start_date", e: gtfsstatic.Event{TripID: "T1", StartDate: "2025-11-06", StopID: "A", StopSequence: 1, HasStopSequence: true,
			Arrival: utc(t, "2025-11-06T12:00:00Z")}, err: gtfsstatic.ErrBadStartDate},
	} {
		m, err := s.Delay(c.e)
		if err != c.err {
			t.Errorf("%s: err %v, want %v", c.name, err, c.err)
			continue
		}
		if err != nil {
			continue
		}
		if m.DelayS != c.delay || m.ServiceDay != c.day || m.StopID != c.stop || m.Departure != c.departure ||
			m.Scheduled.Location() != time.UTC {
			t.Errorf("%s: %+v, want delay %d day %s stop %s departure %v", c.name, m, c.delay, c.day, c.stop, c.departure)
		}
	}
	if r, ok := s.Route("R1"); !ok || r != (gtfsstatic.Route{ShortName: "1", LongName: "First Line"}) {
		t.Errorf("route R1: %+v %v", r, ok)
	}
	if n, ok := s.StopName("A"); !ok || n != "Alpha, Main St" {
		t.Errorf("stop A: %q %v", n, ok)
	}
	if _, ok := s.StopName("C"); ok {
		t.Error("stop C has a name")
	}
}

// Load names the file, line and column of what it cannot read.
func TestLoadErrors(t *testing.T) {
	with := func(name, body string) map[string]string {
		m := map[string]string{}
		for k, v := range feed {
			m[k] = v
		}
		if body == "" {
			delete(m, name)
		} else {
			m[name] = body
		}
		return m
	}
	for _, c := range []struct {
		files map[string]string
		want  string
	}{
		{with("stop_times.txt", "trip_id,arrival_time,departure_time,stop_id\nT1,08:00:00,08:00:00,A\n"), "stop_times.txt: no column stop_sequence"},
		{with("stop_times.txt", "trip_id,arrival_time,departure_time,stop_id,stop_sequence\nT1,08:00:00,08:00:00,A,1\nT1,8:0:00,08:00:00,A,2\n"),
			`stop_times.txt line 3: arrival_time: "8:0:00": want H:MM:SS`},
		{with("stop_times.txt", "trip_id,arrival_time,departure_time,stop_id,stop_sequence\nT1,08:00:00,08:00:00,A,1\nT1,08:00:00,08:00:00,B,1\n"),
			"stop_times.txt: trip T1 has stop_sequence 1 twice"},
		{with("calendar.txt", "service_id,monday,tuesday,wednesday,thursday,friday,saturday,sunday,start_date,end_date\nWK,1,1,1,1,1,0,0,2025-10-20,20251116\n"),
			`calendar.txt line 2: start_date: date "2025-10-20": want YYYYMMDD`},
		{with("agency.txt", "agency_id,agency_timezone\nA,America/Halifax\nB,America/Toronto\n"), `agency.txt line 3: agency_timezone "America/Toronto"`},
		{with("agency.txt", "agency_id,agency_timezone\nA,Mars/Olympus\n"), `agency_timezone "Mars/Olympus"`},
		{with("trips.txt", ""), "trips.txt: missing"},
		{with("trips.txt", "route_id,service_id,trip_id\nR1,WK,T1\nR1,WK,T1\n"), `trips.txt line 3: trip_id "T1" empty or given twice`},
	} {
		_, err := gtfsstatic.Load(writeDir(t, c.files))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("err %v, want it to contain %q", err, c.want)
		}
	}
	if _, err := gtfsstatic.Load(filepath.Join(t.TempDir(), "nothing.zip")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing path: %v", err)
	}
}
