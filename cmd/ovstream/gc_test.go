package main

import "testing"

func TestParseMemoryLimit(t *testing.T) {
	for in, want := range map[string]int64{
		"224MiB": 224 << 20, "1GiB": 1 << 30, "512KiB": 512 << 10, "1000B": 1000,
		"4096": 4096, "2TiB": 2 << 40, "off": 0,
	} {
		got, err := parseMemoryLimit(in)
		if err != nil || got != want {
			t.Errorf("parseMemoryLimit(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "224MB", "-1MiB", "0", "MiB", "1.5GiB", "9999999TiB", "Off"} {
		if got, err := parseMemoryLimit(in); err == nil {
			t.Errorf("parseMemoryLimit(%q) = %d, want an error", in, got)
		}
	}
}
