package main

import (
	"math"
	"runtime/debug"
	"testing"
)

func TestParseMemoryLimit(t *testing.T) {
	for in, want := range map[string]int64{
		"224MiB": 224 << 20, "1GiB": 1 << 30, "512KiB": 512 << 10, "1000B": 1000,
		"4096": 4096, "2TiB": 2 << 40, "0": 0, "9223372036854775807": math.MaxInt64,
		"8388607TiB": 8388607 << 40, "off": math.MaxInt64,
	} {
		got, err := parseMemoryLimit(in)
		if err != nil || got != want {
			t.Errorf("parseMemoryLimit(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "224MB", "-1MiB", "MiB", "1.5GiB", "8388608TiB", "Off", " 1MiB", "+1MiB"} {
		if got, err := parseMemoryLimit(in); err == nil {
			t.Errorf("parseMemoryLimit(%q) = %d, want an error", in, got)
		}
	}
}

// The limit comes from the flag, else GOMEMLIMIT (left to the runtime), else
// 224 MiB; GOGC becomes 300 only under a limit and without GOGC set.
func TestMemoryLimitAndGC(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(math.MaxInt64))
	cases := []struct {
		flag, envLimit, envGOGC string
		wantLimit               int64
		wantGOGC                int
	}{
		{"", "", "", 224 << 20, 300},
		{"", "1GiB", "", 5 << 20, 300}, // left as the runtime had it (5 MiB here)
		{"1GiB", "2GiB", "", 1 << 30, 300},
		{"off", "", "", math.MaxInt64, 100},
		{"", "", "50", 224 << 20, 100},
	}
	for _, c := range cases {
		t.Setenv("GOMEMLIMIT", c.envLimit)
		t.Setenv("GOGC", c.envGOGC)
		debug.SetMemoryLimit(math.MaxInt64)
		if c.envLimit != "" {
			debug.SetMemoryLimit(5 << 20)
		}
		debug.SetGCPercent(100)
		limit, set, err := memoryLimit(c.flag)
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		tuneGC(limit, set)
		if got := debug.SetMemoryLimit(-1); got != c.wantLimit {
			t.Errorf("%+v: memory limit %d, want %d", c, got, c.wantLimit)
		}
		if got := debug.SetGCPercent(100); got != c.wantGOGC {
			t.Errorf("%+v: GOGC %d, want %d", c, got, c.wantGOGC)
		}
	}
}
