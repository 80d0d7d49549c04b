package consumer

import (
	"testing"
	"time"
)

func TestClosesWithin(t *testing.T) {
	t0 := time.Date(2016, 5, 18, 20, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		what            string
		first, wm, prev time.Time
		elapsed, d      time.Duration
		want            bool
	}{
		{"no open window", time.Time{}, t0, t0.Add(-time.Second), time.Second, time.Second, false},
		{"final already", t0, t0, t0.Add(-time.Second), time.Second, 0, true},
		{"watermark still", t0.Add(time.Second), t0, t0, time.Second, time.Hour, false},
		{"no batch before", t0.Add(time.Second), t0, time.Time{}, time.Second, time.Hour, false},
		{"wall-clock pace, 3 s left, within 4 s", t0.Add(3 * time.Second), t0, t0.Add(-5 * time.Second), 5 * time.Second, 4 * time.Second, true},
		{"wall-clock pace, 5 s left, not within 4 s", t0.Add(5 * time.Second), t0, t0.Add(-5 * time.Second), 5 * time.Second, 4 * time.Second, false},
		{"ten times the wall clock, 30 s left, within 4 s", t0.Add(30 * time.Second), t0, t0.Add(-50 * time.Second), 5 * time.Second, 4 * time.Second, true},
	} {
		if got := closesWithin(c.first, c.wm, c.prev, c.elapsed, c.d); got != c.want {
			t.Errorf("%s: closesWithin = %v, want %v", c.what, got, c.want)
		}
	}
}
