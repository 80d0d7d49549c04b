package main

import (
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// gcPercent is run's GOGC when the environment does not set one: the heap
// may grow to 4x the live heap between collections, and the memory limit
// (--memory-limit) bounds it. At 5M predictions this took ovstream's CPU
// from 22 s to 19-21 s at about 240 MB peak RSS (BENCHMARKS.md).
const gcPercent = 300

// defaultMemoryLimit is --memory-limit when GOMEMLIMIT is not set.
const defaultMemoryLimit = "224MiB"

// parseMemoryLimit reads a size the way the Go runtime reads GOMEMLIMIT
// (runtime package docs): a whole number of bytes with an optional suffix
// B, KiB, MiB, GiB or TiB, or "off" for no limit (returned as 0).
func parseMemoryLimit(s string) (int64, error) {
	if s == "off" {
		return 0, nil
	}
	num, mult := s, int64(1)
	for i, suffix := range []string{"TiB", "GiB", "MiB", "KiB", "B"} {
		if rest, ok := strings.CutSuffix(s, suffix); ok {
			num, mult = rest, int64(1)<<(10*(4-i))
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("--memory-limit %q: want a size such as 224MiB or 2GiB, or off", s)
	}
	return n * mult, nil
}

// tuneGC sets the garbage collector of a run: GOGC 300 unless the
// environment sets GOGC, and the soft memory limit (runtime/debug
// SetMemoryLimit) given by --memory-limit, whose default is GOMEMLIMIT when
// set. Under the limit the collector runs more often; it never spends more
// than about half the CPU on it (the runtime's GC CPU limiter), so a live
// heap above the limit slows a run down but does not stop it.
func tuneGC(limit int64) {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	if limit <= 0 {
		limit = math.MaxInt64 // "off", also over a GOMEMLIMIT in the environment
	}
	debug.SetMemoryLimit(limit)
}
