package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"time"
)

// medians are the medians over the trials of one size (the mean of the two
// middle values for an even count); NaN for a phase that did not run.
type medians struct {
	read, run, write, elt, split                  time.Duration
	ratio, limitRatio, eltRatio, splitRatio, load float64
	flink                                         []flinkRatios // phase (f)'s forms (flinkForms), NaN when not run
}

// medians returns the medians of m's trials, each figure on its own.
func (m *measurement) medians() medians {
	fig := func(f func(*trial) float64) float64 {
		var v []float64
		for _, t := range m.trials {
			if x := f(t); !math.IsNaN(x) {
				v = append(v, x)
			}
		}
		return median(v)
	}
	secs := func(f func(*trial) float64) time.Duration {
		return time.Duration(fig(f) * float64(time.Second))
	}
	elt := func(t *trial, f func() float64) float64 {
		if t.elt == nil {
			return math.NaN()
		}
		return f()
	}
	split := func(t *trial, f func() float64) float64 {
		if t.split == nil {
			return math.NaN()
		}
		return f()
	}
	return medians{
		read:       secs(func(t *trial) float64 { return t.read.Seconds() }),
		run:        secs(func(t *trial) float64 { return t.run.elapsed.Seconds() }),
		write:      secs(func(t *trial) float64 { return t.write.Seconds() }),
		elt:        secs(func(t *trial) float64 { return elt(t, func() float64 { return t.elt.elapsed.Seconds() }) }),
		split:      secs(func(t *trial) float64 { return split(t, func() float64 { return t.split.elapsed.Seconds() }) }),
		ratio:      fig((*trial).ratio),
		limitRatio: fig((*trial).limitRatio),
		eltRatio:   fig(func(t *trial) float64 { return elt(t, t.eltRatio) }),
		splitRatio: fig(func(t *trial) float64 { return split(t, t.splitRatio) }),
		load:       fig(func(t *trial) float64 { return t.clock.maxLoad }),
		flink:      m.flinkMedians(),
	}
}

// median returns the median of v, NaN when v is empty.
func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// printTrials prints every trial's times and ratios, then their medians.
func (m *measurement) printTrials(w io.Writer) {
	fmt.Fprintf(w, "\n%-7s %9s %8s %11s %8s %8s %8s %7s %12s %10s %12s\n", "trial", "max load", "T_read", "T_ovstream",
		"T_write", "T_elt", "T_split", "ratio", "limit_ratio", "elt_ratio", "split_ratio")
	loaded := 0
	for i, t := range m.trials {
		name := fmt.Sprint(i + 1)
		if t.clock.loaded {
			name += "*"
			loaded++
		}
		var elt, split time.Duration = -1, -1
		eltR, splitR := math.NaN(), math.NaN()
		if t.elt != nil {
			elt, eltR = t.elt.elapsed, t.eltRatio()
		}
		if t.split != nil {
			split, splitR = t.split.elapsed, t.splitRatio()
		}
		m.printFigures(w, name, t.clock.maxLoad, t.read, t.run.elapsed, t.write, elt, split, t.ratio(), t.limitRatio(), eltR, splitR)
	}
	md := m.medians()
	m.printFigures(w, "median", md.load, md.read, md.run, md.write, md.elt, md.split, md.ratio, md.limitRatio, md.eltRatio, md.splitRatio)
	fmt.Fprintf(w, "max load: the highest 1-minute load average a phase of the trial started at (--max-load %.2f)\n", m.loadRule.max)
	if loaded > 0 {
		fmt.Fprintf(w, "* %d of %d trials ran on a machine that never got quiet (load above --max-load after waiting): noisy figures\n",
			loaded, len(m.trials))
	}
}

func (m *measurement) printFigures(w io.Writer, name string, load float64, read, run, write, elt, split time.Duration, ratio, limit, eltR, splitR float64) {
	sec, r := fmtSeconds, fmtFigure
	fmt.Fprintf(w, "%-7s %9.2f %8s %11s %8s %8s %8s %7s %12s %10s %12s\n", name, load, sec(read), sec(run), sec(write),
		sec(elt), sec(split), r(ratio), r(limit), r(eltR), r(splitR))
}

// fmtSeconds formats a phase's time, "-" for one that did not run.
func fmtSeconds(d time.Duration) string {
	if d < 0 || math.IsNaN(d.Seconds()) {
		return "-"
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

// fmtFigure formats a ratio of a table, "-" for NaN (its phase did not run).
func fmtFigure(x float64) string {
	if math.IsNaN(x) {
		return "-"
	}
	return fmt.Sprintf("%.2f", x)
}

// fmtRatio formats a final ratio, or says which flag left its phase out.
func fmtRatio(x float64, skippedBy string) string {
	if math.IsNaN(x) {
		return "n/a (" + skippedBy + ")"
	}
	return fmt.Sprintf("%.2f", x)
}

// printSideBySide prints the medians of one measurement per broker (--broker
// both) in one table, a column per broker, then each broker's load.
func printSideBySide(w io.Writer, ms []*measurement) {
	sec, ratio := fmtSeconds, fmtFigure
	var mds []medians
	fmt.Fprintf(w, "\nmedians side by side (%d predictions, %d trials each)\n%-14s", ms[0].predictions, len(ms[0].trials), "")
	for _, m := range ms {
		mds = append(mds, m.medians())
		fmt.Fprintf(w, " %22s", brokerName(m.broker))
	}
	fmt.Fprintln(w)
	type row struct {
		name string
		f    func(md medians, m *measurement) string
	}
	rows := []row{
		{"T_read", func(md medians, _ *measurement) string { return sec(md.read) }},
		{"T_ovstream", func(md medians, _ *measurement) string { return sec(md.run) }},
		{"T_write", func(md medians, _ *measurement) string { return sec(md.write) }},
		{"T_split", func(md medians, _ *measurement) string { return sec(md.split) }},
		{"T_elt", func(md medians, _ *measurement) string { return sec(md.elt) }},
		{"ratio", func(md medians, _ *measurement) string { return ratio(md.ratio) }},
		{"limit_ratio", func(md medians, _ *measurement) string { return ratio(md.limitRatio) }},
		{"elt_ratio", func(md medians, _ *measurement) string { return ratio(md.eltRatio) }},
		{"split_ratio", func(md medians, _ *measurement) string { return ratio(md.splitRatio) }},
	}
	for i, form := range flinkForms {
		rows = append(rows, row{form.name + "_wall", func(md medians, _ *measurement) string { return ratio(md.flink[i].wall) }},
			row{form.name + "_cpu", func(md medians, _ *measurement) string { return ratio(md.flink[i].cpu) }},
			row{form.name + "_rss", func(md medians, _ *measurement) string { return ratio(md.flink[i].rss) }})
	}
	rows = append(rows, []row{
		{"peak RSS", func(_ medians, m *measurement) string { return fmt.Sprintf("%d MB", m.median().run.maxRSS>>20) }},
		{"broker RSS", func(_ medians, m *measurement) string { return fmt.Sprintf("%d MB", m.brokerRSS>>20) }},
		{"max load", func(md medians, _ *measurement) string { return fmt.Sprintf("%.2f", md.load) }},
	}...)
	for _, r := range rows {
		fmt.Fprintf(w, "%-14s", r.name)
		for i, m := range ms {
			fmt.Fprintf(w, " %22s", r.f(mds[i], m))
		}
		fmt.Fprintln(w)
	}
}
