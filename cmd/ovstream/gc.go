package main

import (
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// gcPercent is run's GOGC when a memory limit is in force and the
// environment does not set GOGC: the heap may grow to 4x the live heap
// between collections, and the limit bounds it. This and the 224 MiB limit
// lowered ovstream's CPU (measured, docs/benchmarks-history.md "6. Fetch
// size, garbage collector, batches").
const gcPercent = 300

// defaultMemoryLimit is --memory-limit when neither the flag nor GOMEMLIMIT
// is given.
const defaultMemoryLimit = "224MiB"

// noLimit is the runtime's "no memory limit" (runtime/debug SetMemoryLimit).
const noLimit = math.MaxInt64

// parseMemoryLimit reads --memory-limit the way the Go runtime reads
// GOMEMLIMIT (runtime package docs): a whole number of bytes, 0 to
// math.MaxInt64, with an optional suffix B, KiB, MiB, GiB or TiB, or "off"
// for no limit (returned as noLimit).
func parseMemoryLimit(s string) (int64, error) {
	if s == "off" {
		return noLimit, nil
	}
	num, mult := s, int64(1)
	for i, suffix := range []string{"TiB", "GiB", "MiB", "KiB", "B"} {
		if rest, ok := strings.CutSuffix(s, suffix); ok {
			num, mult = rest, int64(1)<<(10*(4-i))
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || num[0] == '+' || n < 0 || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("--memory-limit %q: want a size such as 224MiB or 2GiB, or off", s)
	}
	return n * mult, nil
}

// memoryLimit returns the limit run sets, from --memory-limit when given,
// else 224 MiB; with GOMEMLIMIT in the environment and no flag it returns
// ok false: the runtime applied GOMEMLIMIT at start-up and refuses a
// malformed one before main.
func memoryLimit(flagValue string) (limit int64, ok bool, err error) {
	if flagValue == "" {
		if os.Getenv("GOMEMLIMIT") != "" {
			return 0, false, nil
		}
		flagValue = defaultMemoryLimit
	}
	limit, err = parseMemoryLimit(flagValue)
	return limit, err == nil, err
}

// tuneGC sets the garbage collector of a run: the soft memory limit
// (runtime/debug SetMemoryLimit) when set is true, and GOGC 300 when a limit
// is in force and the environment does not set GOGC. Near the limit the
// collector runs more often; it never takes more than about half the CPU for
// it (the runtime's GC CPU limiter), so a live heap above the limit slows a
// run down but does not stop it. With no limit, GOGC stays at the runtime's
// (100 unless GOGC says otherwise), so the heap stays within about twice
// the live heap.
func tuneGC(limit int64, set bool) {
	if set {
		debug.SetMemoryLimit(limit)
	}
	if debug.SetMemoryLimit(-1) < noLimit && os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
}
