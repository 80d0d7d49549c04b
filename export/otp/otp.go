package otp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/ovstream/ovstream/store"
)

// The files OTP's EmpiricalDelayCsvDataReader reads from the zip file or
// directory a build-config.json feed names (EmpiricalDelayCsvDataReader.java).
const (
	CalendarFile  = "empirical_delay_calendar.csv"
	TripTimesFile = "empirical_delay_trip_times.csv"
)

// OTP's bounds (TripTimeDelayCsvParser.java): a row with p50 or p90 outside
// [0, MaxDelayS] or stop_sequence outside [0, MaxStopSequence] is dropped.
const (
	MaxDelayS       = 5 * 3600
	MaxStopSequence = 10000
)

// DateLayout is the date format of the calendar file and of the service days
// of a Query (yyyy-MM-dd; OTP also reads yyyyMMdd).
const DateLayout = "2006-01-02"

// Calendar maps the days of the week to service ids. OTP's
// EmpiricalDelayCalendar allows one service id per day of the week, valid
// from a start to an end date; a service day's visits go to the service id
// of its day of the week.
type Calendar struct {
	Name       string
	ServiceIDs [7]string // Monday first
}

// Calendars are the calendars Export offers, the first the default: a
// weekday (Monday to Friday), Saturday and Sunday, as GTFS feeds usually
// cut their services; one per day of the week; one for all days.
var Calendars = []Calendar{
	{"weekday-saturday-sunday", [7]string{"weekday", "weekday", "weekday", "weekday", "weekday", "saturday", "sunday"}},
	{"day-of-week", [7]string{"monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"}},
	{"all-days", [7]string{"all_days", "all_days", "all_days", "all_days", "all_days", "all_days", "all_days"}},
}

// ParseCalendar returns the calendar of Calendars named name.
func ParseCalendar(name string) (Calendar, error) {
	var names []string
	for _, c := range Calendars {
		if c.Name == name {
			return c, nil
		}
		names = append(names, c.Name)
	}
	return Calendar{}, fmt.Errorf("unknown calendar %q: want %s", name, strings.Join(names, ", "))
}

// ParseDate parses a service day, yyyy-MM-dd; "" is the zero time.
func ParseDate(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	d, err := time.Parse(DateLayout, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is not a date yyyy-mm-dd", s)
	}
	return d, nil
}

// Query says which visits to export and how.
type Query struct {
	Pipeline string
	Operator string    // only the visits of this operator; "" all
	From, To time.Time // service days [From, To), dates at UTC midnight; zero: unbounded
	Calendar Calendar
	// MinVisits leaves out the (service id, trip, stop) groups with fewer
	// visits.
	MinVisits int64
	// ValidFrom and ValidTo are the calendar's start_date and end_date, the
	// service days on which OTP applies the delays; zero: the first service
	// day exported, and one year after the last.
	ValidFrom, ValidTo time.Time
}

// Args are the command's arguments as text, the flags of the same names.
type Args struct {
	Pipeline, Operator, From, To, ValidFrom, ValidTo, Calendar string
	MinVisits                                                  int64
}

// Query parses a into a valid Query, or says what is wrong, naming the flag.
func (a Args) Query() (Query, error) {
	q := Query{Pipeline: a.Pipeline, Operator: a.Operator, MinVisits: a.MinVisits}
	for _, d := range []struct {
		flag, s string
		t       *time.Time
	}{{"--from", a.From, &q.From}, {"--to", a.To, &q.To}, {"--valid-from", a.ValidFrom, &q.ValidFrom}, {"--valid-to", a.ValidTo, &q.ValidTo}} {
		var err error
		if *d.t, err = ParseDate(d.s); err != nil {
			return q, fmt.Errorf("%s: %v", d.flag, err)
		}
	}
	var err error
	if q.Calendar, err = ParseCalendar(a.Calendar); err != nil {
		return q, fmt.Errorf("--calendar: %v", err)
	}
	return q, q.Validate()
}

// Validate says what is wrong with q, naming the flag.
func (q Query) Validate() error {
	switch {
	case q.Pipeline == "":
		return errors.New("--pipeline is empty")
	case q.Calendar.Name == "":
		return errors.New("--calendar is empty")
	case q.MinVisits < 1:
		return fmt.Errorf("--min-visits %d: want 1 or more", q.MinVisits)
	case !q.From.IsZero() && !q.To.IsZero() && !q.From.Before(q.To):
		return fmt.Errorf("--from %s is not before --to %s", q.From.Format(DateLayout), q.To.Format(DateLayout))
	case !q.ValidFrom.IsZero() && !q.ValidTo.IsZero() && q.ValidTo.Before(q.ValidFrom):
		return fmt.Errorf("--valid-to %s is before --valid-from %s", q.ValidTo.Format(DateLayout), q.ValidFrom.Format(DateLayout))
	}
	return nil
}

// Row is one row of TripTimesFile: the quantiles of the delays of Visits
// visits.
type Row struct {
	ServiceID, TripID, StopID string
	StopSequence              int64
	P50, P90                  int64 // whole seconds in [0, MaxDelayS]
	Visits                    int64
}

// CalendarRow is one row of CalendarFile: ServiceID on Days (Monday first)
// from Start to End, both inclusive.
type CalendarRow struct {
	ServiceID  string
	Days       [7]bool
	Start, End time.Time
}

// Reasons a visit is in no row (Export.Skipped).
const (
	SkipNoStopSequence = "no stop_sequence or stop_id" // OTP orders a trip's stops by stop_sequence
	SkipStopSequence   = "stop_sequence above 10000"
	SkipFewVisits      = "fewer visits than --min-visits"
	SkipOverMaxDelay   = "p50 or p90 above 18000 s"
)

// Export is what Run found: the files' rows and the visits left out.
type Export struct {
	Calendar []CalendarRow
	Rows     []Row // by service id, trip, stop_sequence, stop
	// Visits counts the visits the rows summarize; Skipped the others of
	// the query's range, by reason (the Skip constants).
	Visits  int64
	Skipped map[string]int64
	// FirstDay and LastDay are the first and last service days of the
	// visits in the rows.
	FirstDay, LastDay time.Time
}

// ErrNoRows is returned by Run when no visit of the range makes a row.
var ErrNoRows = errors.New("no stop visit makes a row")

// groupsSQL groups the visits of $1 (operator $2 unless empty, service days
// in [$3, $4) where not NULL) by service id ($5 maps ISO day of the week
// 1-7 to it), trip, stop_sequence and stop, with the nearest-rank quantiles
// of the delays: percentile_disc(p) is the first delay, in ascending order,
// whose rank reaches p times the count. Visits without stop_sequence or
// stop_id form one group with a NULL trip_id.
const groupsSQL = `
WITH v AS (
	SELECT CASE WHEN stop_sequence IS NULL OR stop_id = '' THEN NULL ELSE trip_id END AS trip_id,
		($5::text[])[extract(isodow FROM start_date)::int] AS service_id, stop_id, stop_sequence, start_date, delay_s
	FROM stop_visits
	WHERE pipeline = $1 AND ($2 = '' OR operator = $2)
		AND ($3::date IS NULL OR start_date >= $3) AND ($4::date IS NULL OR start_date < $4)
)
SELECT service_id, trip_id, stop_id, stop_sequence, count(*),
	percentile_disc(0.5) WITHIN GROUP (ORDER BY delay_s), percentile_disc(0.9) WITHIN GROUP (ORDER BY delay_s),
	min(start_date), max(start_date)
FROM v GROUP BY 1, 2, 3, 4
ORDER BY service_id COLLATE "C", trip_id COLLATE "C", stop_sequence, stop_id COLLATE "C"`

// Run reads the visits of q from db and returns the rows of the files, or
// ErrNoRows (wrapped, with what was left out) when none.
func Run(ctx context.Context, db store.Querier, q Query) (*Export, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	date := func(t time.Time) any {
		if t.IsZero() {
			return nil
		}
		return t
	}
	rows, err := db.Query(ctx, groupsSQL, q.Pipeline, q.Operator, date(q.From), date(q.To), q.Calendar.ServiceIDs[:])
	if err != nil {
		return nil, fmt.Errorf("otp: read the stop visits of %q: %w", q.Pipeline, err)
	}
	defer rows.Close()
	e := &Export{Skipped: map[string]int64{}}
	for rows.Next() {
		var (
			r          Row
			trip       *string
			seq        *int64
			p50, p90   float64
			first, lst time.Time
		)
		if err := rows.Scan(&r.ServiceID, &trip, &r.StopID, &seq, &r.Visits, &p50, &p90, &first, &lst); err != nil {
			return nil, fmt.Errorf("otp: read the stop visits of %q: %w", q.Pipeline, err)
		}
		if trip == nil || seq == nil {
			e.Skipped[SkipNoStopSequence] += r.Visits
			continue
		}
		r.TripID, r.StopSequence = *trip, *seq
		r.P50, r.P90 = seconds(p50), seconds(p90)
		switch {
		case r.StopSequence < 0 || r.StopSequence > MaxStopSequence:
			e.Skipped[SkipStopSequence] += r.Visits
		case r.Visits < q.MinVisits:
			e.Skipped[SkipFewVisits] += r.Visits
		case r.P50 > MaxDelayS || r.P90 > MaxDelayS:
			e.Skipped[SkipOverMaxDelay] += r.Visits
		default:
			e.Rows = append(e.Rows, r)
			e.Visits += r.Visits
			if e.FirstDay.IsZero() || first.Before(e.FirstDay) {
				e.FirstDay = first
			}
			if lst.After(e.LastDay) {
				e.LastDay = lst
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("otp: read the stop visits of %q: %w", q.Pipeline, err)
	}
	if len(e.Rows) == 0 {
		return e, fmt.Errorf("%w of pipeline %q%s (left out: %s)", ErrNoRows, q.Pipeline, q.describe(), e.SkippedString())
	}
	e.Calendar = q.Calendar.rows(e.validity(q))
	return e, nil
}

// seconds rounds a delay to whole seconds, half away from zero, early
// arrivals to 0.
func seconds(d float64) int64 {
	return int64(math.Max(0, math.Round(d)))
}

// validity returns the calendar's start and end dates.
func (e *Export) validity(q Query) (time.Time, time.Time) {
	from, to := q.ValidFrom, q.ValidTo
	if from.IsZero() {
		from = e.FirstDay
	}
	if to.IsZero() {
		to = e.LastDay.AddDate(1, 0, 0)
	}
	return from, to
}

// rows returns one calendar row per service id of c, in order of first day.
func (c Calendar) rows(from, to time.Time) []CalendarRow {
	var out []CalendarRow
	index := map[string]int{}
	for day, id := range c.ServiceIDs {
		i, ok := index[id]
		if !ok {
			i = len(out)
			index[id] = i
			out = append(out, CalendarRow{ServiceID: id, Start: from, End: to})
		}
		out[i].Days[day] = true
	}
	return out
}

// describe says which visits the query reads, for messages.
func (q Query) describe() string {
	var s string
	if q.Operator != "" {
		s += fmt.Sprintf(", operator %q", q.Operator)
	}
	if !q.From.IsZero() {
		s += ", service days from " + q.From.Format(DateLayout)
	}
	if !q.To.IsZero() {
		s += ", service days before " + q.To.Format(DateLayout)
	}
	return s
}

// Summary says what e holds, for the line the command prints.
func (e *Export) Summary() string {
	return fmt.Sprintf("%d rows (%d service ids, service days %s to %s) from %d visits; left out: %s", len(e.Rows),
		len(e.Calendar), e.FirstDay.Format(DateLayout), e.LastDay.Format(DateLayout), e.Visits, e.SkippedString())
}

// SkippedString lists the visits left out by reason, "none" when none.
func (e *Export) SkippedString() string {
	var parts []string
	for _, reason := range []string{SkipNoStopSequence, SkipStopSequence, SkipFewVisits, SkipOverMaxDelay} {
		if n := e.Skipped[reason]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d visits %s", n, reason))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
