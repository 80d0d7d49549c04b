package consumer

import (
	"testing"
	"time"
)

// classify's table: a window still open on both watermarks counts; a
// record consumed before the restart whose window the stored watermark
// closed was counted (or dead-lettered) then and is skipped; anything else
// whose window closed is late.
func TestClassify(t *testing.T) {
	end := time.Date(2026, 5, 19, 8, 5, 0, 0, time.UTC) // the record's window ends 08:05
	before, after := end.Add(-time.Second), end.Add(time.Second)
	none := time.Time{}
	for _, tc := range []struct {
		name              string
		offset, consumed  int64
		watermark, stored time.Time
		want              verdict
	}{
		{"open: no watermark yet", 10, 0, none, none, aggregateIt},
		{"open: both watermarks before its end", 10, 0, before, before, aggregateIt},
		{"late: the watermark reached its end", 10, 0, end, none, late},
		{"late: the watermark passed its end", 10, 0, after, before, late},
		{"replayed: consumed before, window stored", 10, 11, after, end, replayed},
		{"replayed: consumed before, stored watermark past its end", 10, 11, end, after, replayed},
		{"late: first read after the restart, window stored", 11, 11, before, end, late},
		{"open: consumed before, window not stored", 10, 11, before, before, aggregateIt},
		{"late: consumed before, closed by this run's watermark only", 10, 11, after, before, late},
	} {
		if got := classify(tc.offset, end, tc.watermark, tc.consumed, tc.stored); got != tc.want {
			t.Errorf("%s: classify = %d, want %d", tc.name, got, tc.want)
		}
	}
}
