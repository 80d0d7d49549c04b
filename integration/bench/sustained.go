package main

// The highest sustained rate (--sustained): the largest
// produce rate at which the consumer's lag stays bounded for
// --sustained-duration (2m), with the CPU of the broker, ovstream and
// PostgreSQL at that rate. Each rate is one live run (live.go) on fresh
// topics and a fresh database: the producer at that rate, `ovstream run` as
// a service with its default flags.
//
// Bounded: the producer reached at least --sustained-rate-share (0.97) of the
// rate (below it, the producer or the broker is the limit, and the rate does
// not count as sustained), and no lag sample (1 a second: high water marks
// minus the consumed offsets the last commit stored) of the last two thirds
// of the run exceeds --sustained-lag-bound (15s) of input, rate x 15 s: a
// commit every --flush-interval (5s) stores the consumed offsets, so a
// keeping-up run's lag stays under one interval of input plus a commit's
// duration; a run that falls behind grows past any bound.
//
// The search doubles from --sustained-start until a rate is not sustained
// (or --sustained-max), then bisects --sustained-steps times between the
// last sustained rate and the first that was not.

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"
)

// sustainedTry is one rate of the search.
type sustainedTry struct {
	res       *liveResult
	bound     int64 // the lag bound at this rate, records
	lagLate   int64 // the largest lag of the last two thirds
	sustained bool
	why       string // why not, or ""
}

// sustainedResult is the search.
type sustainedResult struct {
	provisional time.Duration // the runs' --provisional-interval, 0: off
	tries       []sustainedTry
	best        *sustainedTry // nil: not even --sustained-start
}

func sustainedSearch(ctx context.Context, o options, d *dataset, b *broker, dbs *databases, n int, prov time.Duration,
	logTo io.Writer) (*sustainedResult, error) {
	s := &sustainedResult{provisional: prov}
	try := func(rate int) (bool, error) {
		lr := &liveRun{o: o, d: d, b: b, dbs: dbs, rate: rate, duration: o.live.sustainDuration,
			tag: fmt.Sprintf("s%d_%d_%d_%d", os.Getpid(), n, rate, prov.Milliseconds()), logTo: logTo, provisional: prov}
		before := loadavg()
		logf("sustained: %d msgs/s for %v on %s, provisional rows %s", rate, o.live.sustainDuration, brokerName(b.kind),
			fmtProvisional(prov))
		res, err := lr.run(ctx)
		if err != nil {
			return false, err
		}
		res.load = before + " -> " + loadavg()
		t := sustainedTry{res: res, bound: int64(float64(rate) * o.live.sustainLagBound.Seconds()),
			lagLate: res.maxLag(o.live.sustainDuration / 3)}
		switch {
		case res.achieved() < o.live.sustainRateShare*float64(rate):
			t.why = fmt.Sprintf("the producer reached %.0f msgs/s, under %.0f%% of the rate", res.achieved(), 100*o.live.sustainRateShare)
		case t.lagLate > t.bound:
			t.why = fmt.Sprintf("lag %d > %d (%v of input)", t.lagLate, t.bound, o.live.sustainLagBound)
		default:
			t.sustained = true
		}
		logf("sustained: %d msgs/s: achieved %.0f, lag of the last two thirds up to %d (bound %d): %s", rate, res.achieved(),
			t.lagLate, t.bound, verdict(t))
		s.tries = append(s.tries, t)
		return t.sustained, nil
	}
	good, bad := 0, 0
	for rate := o.live.sustainStart; rate <= o.live.sustainMax; rate *= 2 {
		ok, err := try(rate)
		if err != nil {
			return nil, err
		}
		if !ok {
			bad = rate
			break
		}
		good = rate
	}
	for range o.live.sustainSteps {
		if good == 0 || bad == 0 || bad-good <= good/20 {
			break
		}
		mid := (good + bad) / 2
		ok, err := try(mid)
		if err != nil {
			return nil, err
		}
		if ok {
			good = mid
		} else {
			bad = mid
		}
	}
	for i := range s.tries {
		if t := &s.tries[i]; t.sustained && (s.best == nil || t.res.rate > s.best.res.rate) {
			s.best = t
		}
	}
	return s, nil
}

func verdict(t sustainedTry) string {
	if t.sustained {
		return "sustained"
	}
	return "not sustained: " + t.why
}

// rate returns the highest sustained rate, 0 for none.
func (s *sustainedResult) rate() int {
	if s == nil || s.best == nil {
		return 0
	}
	return s.best.res.rate
}

func (s *sustainedResult) print(w io.Writer, duration time.Duration) {
	if s == nil {
		return
	}
	fmt.Fprintf(w, "\nsustained rate: the largest produce rate whose lag stays bounded for %v (`ovstream run` as a service, default flags; --provisional-interval %s)\n",
		duration, fmtProvisional(s.provisional))
	fmt.Fprintf(w, "%9s %9s %12s %12s %-14s %s\n", "rate", "achieved", "late max lag", "bound", "load", "verdict; CPU")
	for _, t := range s.tries {
		fmt.Fprintf(w, "%9d %9.0f %12d %12d %-14s %s; %s\n", t.res.rate, t.res.achieved(), t.lagLate, t.bound, t.res.load, verdict(t), t.res.cpu)
	}
	if s.best != nil {
		fmt.Fprintf(w, "highest sustained: %d msgs/s; %s\n", s.best.res.rate, s.best.res.cpu)
	} else {
		fmt.Fprintln(w, "highest sustained: none of the rates tried")
	}
}
