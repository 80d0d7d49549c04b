package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Quiet-machine discipline. A timed phase starts only
// once the machine's 1-minute load average (/proc/loadavg) is at most
// --max-load: the bench first waits up to --settle for it to fall (the
// bench's own phases raise it too: a 20 s phase on both cores lifts it by
// about 0.6-0.9, which decays with a time constant of one minute). A phase
// that still finds it above --max-load ends the trial's attempt at once, and
// the trial starts again, up to --load-retries more times; the last attempt
// runs whatever the load and the trial is marked loaded. The load average is
// recorded before and after every timed phase.

// loadRule is the quiet-machine rule.
type loadRule struct {
	max     float64       // the highest 1-minute load average a phase may start at; <= 0: no rule
	settle  time.Duration // how long to wait before a phase for the load to fall to max
	retries int           // attempts beyond the first of a trial that found the machine loaded
}

// loadedError ends an attempt whose phase found the machine loaded.
type loadedError struct {
	phase  string
	load   float64
	waited time.Duration
}

func (e *loadedError) Error() string {
	return fmt.Sprintf("1-minute load average %.2f before %s after waiting %v", e.load, e.phase, e.waited.Round(time.Second))
}

// phaseLoad is the load average (1/5/15 minutes) before and after one timed phase.
type phaseLoad struct {
	phase, before, after string
	waited               time.Duration // the wait for the load to fall first
}

// phaseClock applies the rule to the timed phases of one attempt of a
// trial and records their loads.
type phaseClock struct {
	rule       loadRule
	lastChance bool // the last attempt: run whatever the load
	loads      []phaseLoad
	maxLoad    float64 // the highest 1-minute load average any phase started at
	loaded     bool    // a phase started above rule.max
}

// start waits for the load to settle before phase (rule.settle at most),
// records the load average and returns a *loadedError if it stayed above
// rule.max, unless this is the last attempt. Call stop when the phase ends.
func (c *phaseClock) start(phase string) error {
	began := time.Now()
	l := load1()
	for c.rule.max > 0 && l > c.rule.max && time.Since(began) < c.rule.settle {
		time.Sleep(min(2*time.Second, c.rule.settle-time.Since(began)))
		l = load1()
	}
	waited := time.Since(began)
	if c.rule.max > 0 && l > c.rule.max {
		if !c.lastChance {
			return &loadedError{phase: phase, load: l, waited: waited}
		}
		c.loaded = true
	}
	c.maxLoad = max(c.maxLoad, l)
	c.loads = append(c.loads, phaseLoad{phase: phase, before: loadavg(), waited: waited})
	logf("%s: load average %s before (waited %v)", phase, c.loads[len(c.loads)-1].before, waited.Round(time.Second))
	return nil
}

// stop records the load average after the phase that start began.
func (c *phaseClock) stop() {
	pl := &c.loads[len(c.loads)-1]
	pl.after = loadavg()
	logf("%s: load average %s after", pl.phase, pl.after)
}

// before returns the load average recorded before phase, "" if none.
func (c *phaseClock) before(phase string) string {
	for _, pl := range c.loads {
		if pl.phase == phase {
			return pl.before
		}
	}
	return ""
}

// summary lists each phase's load average before -> after.
func (c *phaseClock) summary() string {
	var parts []string
	for _, pl := range c.loads {
		name, _, _ := strings.Cut(pl.phase, " ")
		parts = append(parts, fmt.Sprintf("%s %s -> %s", name, pl.before, pl.after))
	}
	return strings.Join(parts, ", ")
}

// load1 returns the 1-minute load average, 0 if unknown.
func load1() float64 {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// loadavg returns the first three fields of /proc/loadavg ("1.02/0.80/0.61").
func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return f[0] + "/" + f[1] + "/" + f[2]
}
