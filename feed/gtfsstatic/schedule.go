package gtfsstatic

import (
	"cmp"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"time"
	_ "time/tzdata" // agency time zones on machines without a zoneinfo database
)

// Schedule is a loaded static GTFS feed. It is read-only after Load, so one
// Schedule may serve several goroutines.
type Schedule struct {
	loc       *time.Location
	cal       *calendar
	trips     map[string]int32 // trip_id -> index into tripList
	tripList  []trip
	stopTimes []stopTime // per trip, in stop_sequence order: tripList[i].first ...
	stopIDs   []string   // interned stop_id values of stop_times.txt
	routes    map[string]Route
	stopNames map[string]string
}

type trip struct {
	id        string
	service   int32
	route     string
	frequency bool  // listed in frequencies.txt
	first, n  int32 // its stop times: stopTimes[first : first+n]
}

// stopTime is one row of stop_times.txt; arr and dep are seconds since the
// service day's origin (see day.origin), -1 when empty.
type stopTime struct {
	seq      uint32
	arr, dep int32
	stop     int32 // index into stopIDs
}

// Route holds the names of a route (routes.txt).
type Route struct {
	ShortName string // route_short_name, e.g. "1"; may be ""
	LongName  string // route_long_name, e.g. "Spring Garden"; may be ""
}

// Stats describes a loaded Schedule.
type Stats struct {
	TimeZone  string // the agency time zone, e.g. "America/Halifax"
	Trips     int    // trips in trips.txt
	StopTimes int    // rows of stop_times.txt kept (those of known trips)
	Services  int    // service_id values
}

// Load reads the static GTFS feed at path: a zip file or a folder holding
// agency.txt, trips.txt, stop_times.txt and calendar.txt and/or
// calendar_dates.txt (routes.txt, stops.txt and frequencies.txt are
// optional). Errors name the file and line: a missing column, a time that
// is not H:MM:SS, a date that is not YYYYMMDD, agencies with different time
// zones, an unknown time zone.
func Load(path string) (*Schedule, error) {
	fsys, closeFeed, err := openFeed(path)
	if err != nil {
		return nil, fmt.Errorf("gtfsstatic: %w", err)
	}
	defer func() { _ = closeFeed() }() // a feed read, not written: closing loses nothing
	s := &Schedule{trips: make(map[string]int32), routes: make(map[string]Route), stopNames: make(map[string]string)}
	wrap := func(err error) error { return fmt.Errorf("gtfsstatic: %s: %w", path, err) }

	if s.loc, err = agencyZone(fsys); err != nil {
		return nil, wrap(err)
	}
	if s.cal, err = loadCalendar(fsys); err != nil {
		return nil, wrap(err)
	}
	err = each(fsys, "trips.txt", false, []string{"route_id", "service_id", "trip_id"}, func(t *table) error {
		id := t.get("trip_id")
		if _, dup := s.trips[id]; dup || id == "" {
			return t.errorf("trip_id %q empty or given twice", id)
		}
		s.trips[id] = int32(len(s.tripList))
		s.tripList = append(s.tripList, trip{id: id, service: s.cal.service(t.get("service_id")), route: t.get("route_id")})
		return nil
	})
	if err != nil {
		return nil, wrap(err)
	}
	if err := s.loadStopTimes(fsys); err != nil {
		return nil, wrap(err)
	}
	err = each(fsys, "frequencies.txt", true, []string{"trip_id"}, func(t *table) error {
		if i, ok := s.trips[t.get("trip_id")]; ok {
			s.tripList[i].frequency = true
		}
		return nil
	})
	if err != nil {
		return nil, wrap(err)
	}
	err = each(fsys, "routes.txt", true, []string{"route_id"}, func(t *table) error {
		s.routes[t.get("route_id")] = Route{ShortName: t.get("route_short_name"), LongName: t.get("route_long_name")}
		return nil
	})
	if err != nil {
		return nil, wrap(err)
	}
	err = each(fsys, "stops.txt", true, []string{"stop_id"}, func(t *table) error {
		if name := t.get("stop_name"); name != "" {
			s.stopNames[t.get("stop_id")] = name
		}
		return nil
	})
	if err != nil {
		return nil, wrap(err)
	}
	return s, nil
}

// agencyZone returns the time zone of agency.txt; every agency must name
// the same one (GTFS reference, agency.txt agency_timezone).
func agencyZone(fsys fs.FS) (*time.Location, error) {
	var zone string
	err := each(fsys, "agency.txt", false, []string{"agency_timezone"}, func(t *table) error {
		z := t.get("agency_timezone")
		if z == "" || (zone != "" && z != zone) {
			return t.errorf("agency_timezone %q: want one non-empty time zone for every agency (have %q)", z, zone)
		}
		zone = z
		return nil
	})
	if err != nil {
		return nil, err
	}
	if zone == "" {
		return nil, fmt.Errorf("agency.txt: no agency")
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		return nil, fmt.Errorf("agency.txt: agency_timezone %q: %w", zone, err)
	}
	return loc, nil
}

// loadStopTimes reads stop_times.txt, keeping the rows of known trips, and
// orders each trip's rows by stop_sequence.
func (s *Schedule) loadStopTimes(fsys fs.FS) error {
	type row struct {
		trip int32
		st   stopTime
	}
	var rows []row
	stopIdx := make(map[string]int32)
	err := each(fsys, "stop_times.txt", false, []string{"trip_id", "arrival_time", "departure_time", "stop_id", "stop_sequence"}, func(t *table) error {
		ti, ok := s.trips[t.get("trip_id")]
		if !ok {
			return nil // a trip trips.txt does not hold: nothing can refer to it
		}
		seq, err := strconv.ParseUint(t.get("stop_sequence"), 10, 32)
		if err != nil {
			return t.errorf("stop_sequence %q: want a non-negative integer", t.get("stop_sequence"))
		}
		st := stopTime{seq: uint32(seq)}
		if st.arr, err = parseTime(t.get("arrival_time")); err != nil {
			return t.errorf("arrival_time: %v", err)
		}
		if st.dep, err = parseTime(t.get("departure_time")); err != nil {
			return t.errorf("departure_time: %v", err)
		}
		id := t.get("stop_id")
		si, ok := stopIdx[id]
		if !ok {
			si = int32(len(s.stopIDs))
			stopIdx[id] = si
			s.stopIDs = append(s.stopIDs, id)
		}
		st.stop = si
		rows = append(rows, row{ti, st})
		return nil
	})
	if err != nil {
		return err
	}
	slices.SortFunc(rows, func(a, b row) int {
		if c := cmp.Compare(a.trip, b.trip); c != 0 {
			return c
		}
		return cmp.Compare(a.st.seq, b.st.seq)
	})
	s.stopTimes = make([]stopTime, len(rows))
	for i, r := range rows {
		s.stopTimes[i] = r.st
		tr := &s.tripList[r.trip]
		if tr.n == 0 {
			tr.first = int32(i)
		} else if s.stopTimes[i-1].seq == r.st.seq {
			return fmt.Errorf("stop_times.txt: trip %s has stop_sequence %d twice", tr.id, r.st.seq)
		}
		tr.n++
	}
	return nil
}

// parseTime reads a GTFS time, H:MM:SS or HH:MM:SS, hours possibly past 24
// (seconds since the service day's origin); "" is -1.
func parseTime(s string) (int32, error) {
	if s == "" {
		return -1, nil
	}
	bad := fmt.Errorf("%q: want H:MM:SS", s)
	n := len(s)
	if n < 7 || n > 10 || s[n-3] != ':' || s[n-6] != ':' {
		return 0, bad
	}
	num := func(d string) int {
		v := 0
		for i := 0; i < len(d); i++ {
			if d[i] < '0' || d[i] > '9' {
				return -1
			}
			v = v*10 + int(d[i]-'0')
		}
		return v
	}
	h, m, sec := num(s[:n-6]), num(s[n-5:n-3]), num(s[n-2:])
	if h < 0 || m < 0 || m > 59 || sec < 0 || sec > 59 {
		return 0, bad
	}
	return int32(h*3600 + m*60 + sec), nil
}

// Stats returns the size of the schedule.
func (s *Schedule) Stats() Stats {
	return Stats{TimeZone: s.loc.String(), Trips: len(s.tripList), StopTimes: len(s.stopTimes), Services: len(s.cal.services)}
}

// Location returns the agency time zone.
func (s *Schedule) Location() *time.Location { return s.loc }

// RouteOf returns the route_id of a trip in trips.txt.
func (s *Schedule) RouteOf(tripID string) (string, bool) {
	i, ok := s.trips[tripID]
	if !ok {
		return "", false
	}
	return s.tripList[i].route, true
}

// Route returns the names of a route in routes.txt.
func (s *Schedule) Route(routeID string) (Route, bool) {
	r, ok := s.routes[routeID]
	return r, ok
}

// StopName returns stop_name of a stop in stops.txt ("" and false when absent or empty).
func (s *Schedule) StopName(stopID string) (string, bool) {
	n, ok := s.stopNames[stopID]
	return n, ok
}
