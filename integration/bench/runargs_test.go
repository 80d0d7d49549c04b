package main

import (
	"testing"
	"time"
)

// The peers drop what run sets aside as implausible: the bound they use is
// the --max-delay of --run-args, in each spelling run's flags accept, or
// run's default.
func TestRunMaxDelay(t *testing.T) {
	for _, c := range []struct {
		args []string
		want time.Duration
	}{
		{nil, 12 * time.Hour},
		{[]string{"--flush-interval", "2s"}, 12 * time.Hour},
		{[]string{"--max-delay", "1h"}, time.Hour},
		{[]string{"--max-delay=90m"}, 90 * time.Minute},
		{[]string{"-max-delay", "2h", "--flush-interval", "1s"}, 2 * time.Hour},
		{[]string{"--max-delay", "1h", "--max-delay", "3h"}, 3 * time.Hour}, // the last wins, as in pflag
		{[]string{"max-delay", "1h"}, 12 * time.Hour},                       // not a flag: an argument
	} {
		got, err := runMaxDelay(c.args)
		if err != nil || got != c.want {
			t.Errorf("runMaxDelay(%q) = %v, %v; want %v", c.args, got, err, c.want)
		}
	}
	for _, args := range [][]string{{"--max-delay"}, {"--max-delay", "soon"}, {"--max-delay="}} {
		if _, err := runMaxDelay(args); err == nil {
			t.Errorf("runMaxDelay(%q): no error", args)
		}
	}
}
