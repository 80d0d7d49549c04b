package rollup

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Bucket is the span the rows of a rollup are grouped by: a calendar unit in
// the query's time zone, fixed bins of a duration from Query.From, or the
// whole range (the zero Bucket). It is the interval given to ovs_bucket.
type Bucket struct {
	sql  string // the PostgreSQL interval; "" = the whole range
	name string
}

// Calendar buckets.
var (
	All   = Bucket{}
	Hour  = Bucket{"1 hour", "hour"}
	Day   = Bucket{"1 day", "day"}
	Week  = Bucket{"7 days", "week"} // from Monday
	Month = Bucket{"1 month", "month"}
	Year  = Bucket{"1 year", "year"}
)

// Every returns fixed bins of d (> 0, whole microseconds) starting at Query.From.
func Every(d time.Duration) Bucket {
	return Bucket{fmt.Sprintf("%d microseconds", d.Microseconds()), d.String()}
}

// ParseBucket reads a bucket: all; hour or 1h; day or 1d; week or 1w; month
// or 1mo; year or 1y; or any other Go duration (15m, 6h) for fixed bins from
// the range's start.
func ParseBucket(s string) (Bucket, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "all", "none":
		return All, nil
	case "hour", "1h", "hourly":
		return Hour, nil
	case "day", "1d", "daily":
		return Day, nil
	case "week", "1w", "weekly":
		return Week, nil
	case "month", "1mo", "monthly":
		return Month, nil
	case "year", "1y", "yearly":
		return Year, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 || d%time.Microsecond != 0 {
		return All, fmt.Errorf("bucket %q: want all, hour, day, week, month, year or a positive duration such as 15m", s)
	}
	return Every(d), nil
}

func (b Bucket) String() string {
	if b.sql == "" {
		return "all"
	}
	return b.name
}

// Interval is the ovs_bucket argument: nil for the whole range.
func (b Bucket) Interval() any {
	if b.sql == "" {
		return nil
	}
	return b.sql
}

// timeLayouts are the forms ParseTime accepts besides RFC 3339.
var timeLayouts = []string{"2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02 15:04:05", "2006-01-02 15:04", "2006-01-02"}

// ParseTime reads a range bound: RFC 3339 (with its offset), or a local
// date and time without one (2016-05-19, 2016-05-19T07:30) in loc.
func ParseTime(s string, loc *time.Location) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	for _, l := range timeLayouts {
		if t, err := time.ParseInLocation(l, s, loc); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("time %q: want RFC 3339 (2016-05-19T07:30:00+12:00) or a local date and time (2016-05-19, 2016-05-19T07:30)", s)
}

// ParseQuantiles reads a comma-separated list of quantiles in [0, 1].
func ParseQuantiles(s string) ([]float64, error) {
	var qs []float64
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		p, err := strconv.ParseFloat(f, 64)
		if err != nil || !(p >= 0 && p <= 1) {
			return nil, fmt.Errorf("quantile %q: want a number from 0 to 1", f)
		}
		qs = append(qs, p)
	}
	return qs, nil
}
