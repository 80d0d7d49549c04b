package gtfsstatic

import (
	"fmt"
	"io/fs"
	"time"
)

// day is a civil date as days since 1970-01-01 (no time zone).
type day int32

// parseDate reads a GTFS date, YYYYMMDD.
func parseDate(s string) (day, error) {
	if len(s) != 8 {
		return 0, fmt.Errorf("date %q: want YYYYMMDD", s)
	}
	n := 0
	for i := 0; i < 8; i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("date %q: want YYYYMMDD", s)
		}
		n = n*10 + int(c-'0')
	}
	y, m, d := n/10000, time.Month(n/100%100), n%100
	t := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	if t.Year() != y || t.Month() != m || t.Day() != d {
		return 0, fmt.Errorf("date %q: no such day", s)
	}
	return day(t.Unix() / 86400), nil
}

func (d day) date() (int, time.Month, int) {
	return time.Unix(int64(d)*86400, 0).UTC().Date()
}

func (d day) weekday() time.Weekday { return time.Weekday((int64(d)%7 + 7 + 4) % 7) } // 1970-01-01 was a Thursday

func (d day) String() string {
	y, m, dd := d.date()
	return fmt.Sprintf("%04d%02d%02d", y, m, dd)
}

// localDay returns the civil date of t in loc.
func localDay(t time.Time, loc *time.Location) day {
	y, m, d := t.In(loc).Date()
	return day(time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix() / 86400)
}

// origin returns the instant GTFS times of service day d count from: noon
// minus 12 h in loc (GTFS reference, stop_times.txt arrival_time). It is
// midnight except on the days daylight saving time begins or ends.
func (d day) origin(loc *time.Location) time.Time {
	y, m, dd := d.date()
	return time.Date(y, m, dd, 12, 0, 0, 0, loc).Add(-12 * time.Hour)
}

// service is one service_id: calendar.txt's weekly pattern and range, and
// calendar_dates.txt's exceptions.
type service struct {
	weekdays   [7]bool // by time.Weekday
	start, end day     // inclusive; start > end when calendar.txt has no row
}

// calendar answers whether a service runs on a day.
type calendar struct {
	ids        map[string]int32 // service_id -> index
	services   []service
	exceptions map[serviceDay]bool // true: added (exception_type 1), false: removed (2)
}

type serviceDay struct {
	service int32
	day     day
}

// runs tells whether service s runs on day d: calendar_dates.txt first,
// then calendar.txt (GTFS reference, calendar_dates.txt).
func (c *calendar) runs(s int32, d day) bool {
	if added, ok := c.exceptions[serviceDay{s, d}]; ok {
		return added
	}
	sv := &c.services[s]
	return d >= sv.start && d <= sv.end && sv.weekdays[d.weekday()]
}

// service returns the index of service_id id, adding it when new.
func (c *calendar) service(id string) int32 {
	if i, ok := c.ids[id]; ok {
		return i
	}
	i := int32(len(c.services))
	c.ids[id] = i
	c.services = append(c.services, service{start: 1, end: 0})
	return i
}

// loadCalendar reads calendar.txt and calendar_dates.txt; either may be
// absent, not both (GTFS reference).
func loadCalendar(fsys fs.FS) (*calendar, error) {
	c := &calendar{ids: make(map[string]int32), exceptions: make(map[serviceDay]bool)}
	days := [7]struct {
		col string
		wd  time.Weekday
	}{{"monday", time.Monday}, {"tuesday", time.Tuesday}, {"wednesday", time.Wednesday},
		{"thursday", time.Thursday}, {"friday", time.Friday}, {"saturday", time.Saturday}, {"sunday", time.Sunday}}
	rows := 0
	err := each(fsys, "calendar.txt", true, []string{"service_id", "monday", "tuesday", "wednesday", "thursday",
		"friday", "saturday", "sunday", "start_date", "end_date"}, func(t *table) error {
		rows++
		sv := &c.services[c.service(t.get("service_id"))]
		for _, d := range days {
			switch t.get(d.col) {
			case "1":
				sv.weekdays[d.wd] = true
			case "0":
			default:
				return t.errorf("%s %q: want 0 or 1", d.col, t.get(d.col))
			}
		}
		var err error
		if sv.start, err = parseDate(t.get("start_date")); err != nil {
			return t.errorf("start_date: %v", err)
		}
		if sv.end, err = parseDate(t.get("end_date")); err != nil {
			return t.errorf("end_date: %v", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = each(fsys, "calendar_dates.txt", true, []string{"service_id", "date", "exception_type"}, func(t *table) error {
		rows++
		d, err := parseDate(t.get("date"))
		if err != nil {
			return t.errorf("date: %v", err)
		}
		k := serviceDay{c.service(t.get("service_id")), d}
		switch t.get("exception_type") {
		case "1":
			c.exceptions[k] = true
		case "2":
			c.exceptions[k] = false
		default:
			return t.errorf("exception_type %q: want 1 or 2", t.get("exception_type"))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if rows == 0 {
		return nil, fmt.Errorf("neither calendar.txt nor calendar_dates.txt has a row")
	}
	return c, nil
}
