package gtfsstatic

import (
	"errors"
	"sort"
	"time"
)

// Why Delay finds no delay. Delay returns these values themselves, never
// wrapped, so a caller can count by err.Error().
var (
	ErrUnknownTrip     = errors.New("trip not in trips.txt")
	ErrUnknownStop     = errors.New("stop not in the trip's stop_times.txt")
	ErrAmbiguousStop   = errors.New("stop visited twice by the trip, no matching stop_sequence")
	ErrNoScheduledTime = errors.New("no scheduled time at the stop")
	ErrFrequencyTrip   = errors.New("frequency-based trip (frequencies.txt)")
	ErrBadStartDate    = errors.New("start_date not YYYYMMDD")
	ErrNotInService    = errors.New("trip not in service on the day (calendar)")
	ErrNoTime          = errors.New("no predicted time")
)

// Event is the realtime side of one GTFS-realtime StopTimeUpdate.
type Event struct {
	TripID string
	// StartDate is TripDescriptor.start_date, YYYYMMDD, "" when absent.
	StartDate string
	// StopSequence, when HasStopSequence, matches stop_times.txt
	// stop_sequence; else StopID matches stop_id.
	StopSequence    uint32
	HasStopSequence bool
	StopID          string
	// Arrival and Departure are StopTimeEvent.time (POSIX seconds), 0 when absent.
	Arrival, Departure int64
}

// maxOffDay bounds |predicted - scheduled| when Delay picks the service day
// itself: a trip that does not run on the day of a prediction is not
// matched to the day before or after.
const maxOffDay = 12 * time.Hour

// Match is the scheduled side Delay found for an Event.
type Match struct {
	DelayS     int64     // predicted - scheduled, seconds; negative = early
	StopID     string    // stop_id of the matched stop_times.txt row
	ServiceDay string    // YYYYMMDD
	Scheduled  time.Time // the scheduled arrival (or departure), UTC
	Departure  bool      // true when the departure times were compared
}

// Delay returns predicted time - scheduled time for e, per the GTFS-realtime
// reference (StopTimeEvent: time is an absolute POSIX time, a delay is
// relative to the GTFS schedule; StopTimeUpdate: stop_sequence or stop_id
// names the stop, stop_sequence must be given when the trip visits the stop
// twice). See stop for how the two are reconciled.
//
// The arrival time is compared with arrival_time; when the update has no
// arrival time or the stop no arrival_time, the departure time with
// departure_time. The service day is e.StartDate when given (the trip must
// run that day); else, among the days the trip runs, the one whose
// scheduled time is nearest the predicted time (ties: the earlier day),
// and less than 12 h from it. err is one of the Err values above.
func (s *Schedule) Delay(e Event) (Match, error) {
	tr, st, err := s.tripStop(e)
	if err != nil {
		return Match{}, err
	}
	m := Match{StopID: s.stopIDs[st.stop]}
	var predicted int64
	var secs int32
	switch {
	case e.Arrival != 0 && st.arr >= 0:
		predicted, secs = e.Arrival, st.arr
	case e.Departure != 0 && st.dep >= 0:
		predicted, secs, m.Departure = e.Departure, st.dep, true
	case e.Arrival == 0 && e.Departure == 0:
		return Match{}, ErrNoTime
	default:
		return Match{}, ErrNoScheduledTime
	}
	d, err := s.serviceDay(tr, e.StartDate, time.Unix(predicted, 0), secs)
	if err != nil {
		return Match{}, err
	}
	m.ServiceDay = d.String()
	m.Scheduled = d.origin(s.loc).Add(time.Duration(secs) * time.Second).UTC()
	m.DelayS = predicted - m.Scheduled.Unix()
	return m, nil
}

// tripStop finds e's trip and its stop time at e's stop (stop);
// ErrUnknownTrip, ErrFrequencyTrip or stop's errors when there is none.
func (s *Schedule) tripStop(e Event) (*trip, stopTime, error) {
	ti, ok := s.trips[e.TripID]
	if !ok {
		return nil, stopTime{}, ErrUnknownTrip
	}
	tr := &s.tripList[ti]
	st, err := s.stop(tr, e)
	if err != nil {
		return nil, stopTime{}, err
	}
	if tr.frequency {
		return nil, stopTime{}, ErrFrequencyTrip
	}
	return tr, st, nil
}

// serviceDay returns the service day of a trip tr at a stop whose
// scheduled time is secs after the day's origin: startDate (YYYYMMDD) when
// given, the trip running that day; else, among the days the trip runs, the
// one whose scheduled time is nearest at (ties: the earlier day), and less
// than 12 h from it. err is ErrBadStartDate or ErrNotInService.
func (s *Schedule) serviceDay(tr *trip, startDate string, at time.Time, secs int32) (day, error) {
	if startDate != "" {
		d, err := parseDate(startDate)
		if err != nil {
			return 0, ErrBadStartDate
		}
		if !s.cal.runs(tr.service, d) {
			return 0, ErrNotInService
		}
		return d, nil
	}
	d0 := localDay(at.Add(-time.Duration(secs)*time.Second), s.loc)
	var d day
	found := false
	var best time.Duration
	for c := d0 - 1; c <= d0+1; c++ {
		if !s.cal.runs(tr.service, c) {
			continue
		}
		diff := at.Sub(c.origin(s.loc).Add(time.Duration(secs) * time.Second)).Abs()
		if !found || diff < best {
			d, best, found = c, diff, true
		}
	}
	if !found || best >= maxOffDay {
		return 0, ErrNotInService
	}
	return d, nil
}

// Scheduled returns the scheduled side of e, an update that gives a delay
// and no time (its Arrival and Departure are ignored): the stop (as Delay
// finds it), the service day and the scheduled arrival, or departure when
// departure is true (each falling back on the other when the stop has no
// such time). The service day is e.StartDate when given, else the day the
// trip runs whose scheduled time is nearest near (the caller's estimate of
// the scheduled time, such as the prediction's time minus its delay), less
// than 12 h from it. Match.DelayS is left 0; err is one of the Err values.
func (s *Schedule) Scheduled(e Event, departure bool, near time.Time) (Match, error) {
	tr, st, err := s.tripStop(e)
	if err != nil {
		return Match{}, err
	}
	m := Match{StopID: s.stopIDs[st.stop]}
	var secs int32
	switch {
	case departure && st.dep >= 0, !departure && st.arr < 0 && st.dep >= 0:
		secs, m.Departure = st.dep, true
	case st.arr >= 0:
		secs = st.arr
	default:
		return Match{}, ErrNoScheduledTime
	}
	d, err := s.serviceDay(tr, e.StartDate, near, secs)
	if err != nil {
		return Match{}, err
	}
	m.ServiceDay = d.String()
	m.Scheduled = d.origin(s.loc).Add(time.Duration(secs) * time.Second).UTC()
	return m, nil
}

// stop finds e's stop among the trip's stop times: by stop_sequence when
// given and the row there has e's stop_id (or e has none); else by stop_id
// when the trip visits that stop once. A stop_sequence that points at
// another stop is not trusted: in the Halifax feed of 2025-11-06, 1,712
// updates name a stop_sequence whose stop_times.txt row has another stop,
// and for all of them the agency's own delay matches the stop_id's row,
// not the stop_sequence's.
func (s *Schedule) stop(tr *trip, e Event) (stopTime, error) {
	sts := s.stopTimes[tr.first : tr.first+tr.n]
	if e.HasStopSequence {
		i := sort.Search(len(sts), func(i int) bool { return sts[i].seq >= e.StopSequence })
		if i < len(sts) && sts[i].seq == e.StopSequence && (e.StopID == "" || s.stopIDs[sts[i].stop] == e.StopID) {
			return sts[i], nil
		}
	}
	if e.StopID == "" {
		return stopTime{}, ErrUnknownStop
	}
	found := -1
	for i := range sts {
		if s.stopIDs[sts[i].stop] == e.StopID {
			if found >= 0 {
				return stopTime{}, ErrAmbiguousStop
			}
			found = i
		}
	}
	if found < 0 {
		return stopTime{}, ErrUnknownStop
	}
	return sts[found], nil
}
