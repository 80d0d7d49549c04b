package aggregate

import (
	"math/big"
	"time"
)

// minSec and maxSec bound, exclusively, the Unix seconds of the instants
// whose UnixNano surely fits in an int64 (years 1678 to 2262).
const (
	minSec = -(1<<63)/1_000_000_000 + 1
	maxSec = (1<<63-1)/1_000_000_000 - 1
)

// WindowStart returns the start of the tumbling window of the given size that
// holds t: floor(t / size) * size, aligned to the Unix epoch, in UTC
// (docs/design.md "Windows"). The window is [start, start+size): an event at exactly
// 12:05:00 belongs to [12:05, 12:10). Before 1970 it rounds down too (floor,
// not truncation toward zero). The offset of t plays no part: 02:30+02:00 and
// 02:30+01:00 are an hour apart and fall in different windows.
//
// size must be positive; for size <= 0 WindowStart returns t in UTC.
func WindowStart(t time.Time, size time.Duration) time.Time {
	if size <= 0 {
		return t.UTC().Round(0)
	}
	// Called twice per event (the run loop and the Windower): plain int64
	// arithmetic on the Unix time, no time.Time comparisons.
	if sec := t.Unix(); sec > minSec && sec < maxSec {
		ns := sec*1_000_000_000 + int64(t.Nanosecond())
		r := ns % int64(size)
		if r < 0 {
			r += int64(size)
		}
		if start := ns - r; start <= ns { // else it wrapped: near the lower end, the window starts before 1678
			return time.Unix(0, start).UTC()
		}
	}
	return windowStartBig(t, size)
}

// windowStartBig is WindowStart in arbitrary precision, for instants far
// from the epoch; size > 0.
func windowStartBig(t time.Time, size time.Duration) time.Time {
	t = t.UTC().Round(0)
	total := new(big.Int).Mul(big.NewInt(t.Unix()), big.NewInt(1e9))
	total.Add(total, big.NewInt(int64(t.Nanosecond())))
	r := new(big.Int).Mod(total, big.NewInt(int64(size))) // Euclidean: 0 <= r < size
	return t.Add(-time.Duration(r.Int64()))
}
