package aggregate

import (
	"testing"
	"time"
)

func TestWindowStart(t *testing.T) {
	utc := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	const w = 5 * time.Minute
	tests := []struct {
		in   string
		size time.Duration
		want string
	}{
		{"2026-05-04T12:05:00Z", w, "2026-05-04T12:05:00Z"},
		{"2026-05-04T12:04:59.999999999Z", w, "2026-05-04T12:00:00Z"},
		{"2026-05-04T12:09:59Z", w, "2026-05-04T12:05:00Z"},
		{"2026-05-04T14:07:00+02:00", w, "2026-05-04T12:05:00Z"},
		{"2026-05-04T12:07:00+05:30", w, "2026-05-04T06:35:00Z"},
		{"1970-01-01T00:00:00Z", w, "1970-01-01T00:00:00Z"},
		// Before the epoch: floor, not truncation toward zero.
		{"1969-12-31T23:59:59Z", w, "1969-12-31T23:55:00Z"},
		{"1969-12-31T23:55:00Z", w, "1969-12-31T23:55:00Z"},
		{"1969-12-31T23:54:59.5Z", w, "1969-12-31T23:50:00Z"},
		{"2026-05-04T12:34:56Z", time.Hour, "2026-05-04T12:00:00Z"},
		{"2026-05-04T12:34:56Z", 7 * time.Second, "2026-05-04T12:34:54Z"}, // 1777898096 = 7*253985442 + 2
		// Outside the int64 nanosecond range (years 1678..2262).
		{"9999-12-31T23:59:59Z", w, "9999-12-31T23:55:00Z"},
		{"0001-01-01T00:04:00Z", w, "0001-01-01T00:00:00Z"}, // -62135596800 is a multiple of 300
		{"1600-01-01T00:02:30Z", w, "1600-01-01T00:00:00Z"},
	}
	for _, tc := range tests {
		got := WindowStart(utc(tc.in), tc.size)
		if !got.Equal(utc(tc.want)) || got.Location() != time.UTC {
			t.Errorf("WindowStart(%s, %v) = %v, want %s", tc.in, tc.size, got, tc.want)
		}
	}
}

func TestWindowStartEvent1205(t *testing.T) {
	ev := time.Date(2026, 5, 4, 12, 5, 0, 0, time.UTC)
	start := WindowStart(ev, 5*time.Minute)
	end := start.Add(5 * time.Minute)
	if !start.Equal(ev) || !end.Equal(time.Date(2026, 5, 4, 12, 10, 0, 0, time.UTC)) {
		t.Fatalf("12:05:00 -> [%v, %v), want [12:05, 12:10)", start, end)
	}
}

func TestWindowStartDSTFallBack(t *testing.T) {
	ams, err := time.LoadLocation("Europe/Amsterdam")
	if err != nil {
		t.Fatal(err)
	}
	// 2026-10-25 02:30 happens twice in Amsterdam: first at +02:00 (CEST), then +01:00 (CET).
	first, _ := time.Parse(time.RFC3339, "2026-10-25T02:30:00+02:00")
	second, _ := time.Parse(time.RFC3339, "2026-10-25T02:30:00+01:00")
	if _, off := first.In(ams).Zone(); off != 2*3600 {
		t.Fatalf("first offset %d", off)
	}
	if _, off := second.In(ams).Zone(); off != 3600 {
		t.Fatalf("second offset %d", off)
	}
	a := WindowStart(first.In(ams), 5*time.Minute)
	b := WindowStart(second.In(ams), 5*time.Minute)
	if d := b.Sub(a); d != time.Hour {
		t.Fatalf("windows %v and %v are %v apart, want 1h", a, b, d)
	}
	if !a.Equal(time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC)) || !b.Equal(time.Date(2026, 10, 25, 1, 30, 0, 0, time.UTC)) {
		t.Fatalf("windows %v, %v", a, b)
	}
}

// TestWindowStartProperty checks start <= t < start+size and alignment on both
// sides of the epoch, against the big-number path.
func TestWindowStartProperty(t *testing.T) {
	sizes := []time.Duration{time.Second, 7 * time.Second, time.Minute, 5 * time.Minute, time.Hour, 24 * time.Hour, 1500 * time.Millisecond}
	base := time.Date(1969, 12, 31, 0, 0, 0, 0, time.UTC)
	for i := range int64(5000) {
		ts := base.Add(time.Duration(i*i*7919+i) * time.Millisecond / 3)
		for _, size := range sizes {
			s := WindowStart(ts, size)
			if s.After(ts) || !ts.Before(s.Add(size)) {
				t.Fatalf("WindowStart(%v, %v) = %v", ts, size, s)
			}
			if s.UnixNano()%int64(size) != 0 {
				t.Fatalf("WindowStart(%v, %v) = %v not aligned", ts, size, s)
			}
		}
	}
	minNano := time.Unix(0, -1<<63)
	for _, size := range sizes {
		if got := WindowStart(minNano, size); got.After(minNano) || !minNano.Before(got.Add(size)) {
			t.Fatalf("min: %v", got)
		}
	}
}

// TestWindowStartFastPathEqualsBig checks the int64 fast path of WindowStart
// against the arbitrary-precision computation, instant for instant and
// representation for representation (==, so map keys and equality hold),
// over spread-out instants, those at the ends of the fast path's range, and
// times in other zones and with a monotonic reading.
func TestWindowStartFastPathEqualsBig(t *testing.T) {
	sizes := []time.Duration{time.Nanosecond, 7 * time.Second, 5 * time.Minute, time.Hour, 24 * time.Hour}
	var ts []time.Time
	for _, sec := range []int64{minSec + 1, minSec + 2, maxSec - 1, maxSec - 2, -1, 0, 1} {
		for _, nsec := range []int64{0, 1, 999_999_999} {
			ts = append(ts, time.Unix(sec, nsec))
		}
	}
	x := uint64(1)
	for range 20000 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		ts = append(ts, time.Unix(int64(x%uint64(maxSec-minSec-2))+minSec+1, int64(x>>40)%1e9))
	}
	ams := time.FixedZone("UTC+2", 2*3600)
	ts = append(ts, time.Now(), time.Now().In(ams), time.Date(2026, 5, 4, 14, 7, 0, 0, ams))
	for _, in := range ts {
		for _, size := range sizes {
			if got, want := WindowStart(in, size), windowStartBig(in, size); got != want {
				t.Fatalf("WindowStart(%v, %v) = %#v, arbitrary precision %#v", in, size, got, want)
			}
		}
	}
}
