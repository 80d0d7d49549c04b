package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

// measurement is everything measured at one size: the data produced once,
// then one or more trials of (a), (b), (c) on it.
type measurement struct {
	label                  string
	broker                 string // brokerEmbedded or brokerKafka
	predictions, positions int
	messages               int64
	bytes                  int64
	produce                time.Duration
	brokerRSS              int64
	trials                 []*trial
	allocs                 string
	loadRule               loadRule
	live                   []*liveResult      // the live phase, one per --live-rates
	sustained              []*sustainedResult // --sustained, one per --live-provisional value; else nil
	sustainDuration        time.Duration
}

// trial is one sequence of the phases.
type trial struct {
	clock     *phaseClock // the load average before and after each phase
	read      time.Duration
	readMsgs  int64
	readBusy  float64
	run       *runResult
	runBusy   float64
	brokerCPU time.Duration
	write     time.Duration
	writeRows int64
	writeBusy float64
	writeCPU  time.Duration // the bench's own CPU time (the CopyFrom client)
	tableRows map[string]int
	split     *splitResult   // (d), nil with --split=false
	elt       *eltResult     // (e), nil with --elt=false
	flink     []*flinkResult // (f), one per form run (o.flinkForms), in their order
	// aggBytes is pg_total_relation_size of delay_aggregates after (b):
	// heap, TOAST and indexes.
	aggBytes int64
	// visitBytes is the same of stop_visits (with --service-days: the
	// stop visits and their prediction history).
	visitBytes int64
}

func (t *trial) ratio() float64 { return (t.read + t.write).Seconds() / t.run.elapsed.Seconds() }

func (t *trial) limitRatio() float64 { return max(t.read, t.write).Seconds() / t.run.elapsed.Seconds() }

func (t *trial) eltRatio() float64 { return t.elt.elapsed.Seconds() / t.run.elapsed.Seconds() }

func (t *trial) splitRatio() float64 { return t.run.elapsed.Seconds() / t.split.elapsed.Seconds() }

// median returns the trial whose ratio is the median (the lower middle one
// for an even count).
func (m *measurement) median() *trial {
	ts := slices.Clone(m.trials)
	slices.SortFunc(ts, func(a, b *trial) int { return cmp.Compare(a.ratio(), b.ratio()) })
	return ts[(len(ts)-1)/2]
}

func measure(ctx context.Context, o options, d *dataset, n int, kind string, logTo io.Writer) (*measurement, error) {
	m := &measurement{predictions: n, loadRule: o.load, broker: kind, sustainDuration: o.live.sustainDuration}
	b, err := startBroker(o.bin, kind, topics)
	if err != nil {
		return nil, err
	}
	defer b.stop()
	if err := m.produceOn(ctx, b, d); err != nil {
		return nil, err
	}
	dbs := &databases{admin: o.adminURL, bin: o.bin, schemaSQL: o.schemaSQL}
	if !o.keep {
		defer dbs.dropAll(context.Background())
	}
	for i := range o.trials {
		t, err := quietTrial(ctx, o, b, dbs, m, i, logTo)
		if err != nil {
			return nil, err
		}
		m.trials = append(m.trials, t)
	}
	if o.live.on {
		for _, r := range o.live.rates {
			for _, prov := range o.live.provisional {
				lr := &liveRun{o: o, d: d, b: b, dbs: dbs, rate: r, windows: o.live.windows,
					tag: fmt.Sprintf("%d_%d_%d_%d", os.Getpid(), n, r, prov.Milliseconds()), logTo: logTo, provisional: prov}
				before := loadavg()
				logf("live at %d msgs/s on %s, provisional rows %s: waiting for %d window(s), about %v", r, brokerName(kind),
					fmtProvisional(prov), o.live.windows, (o.live.lead + time.Duration(o.live.windows-1)*liveWindow).Round(time.Second))
				res, err := lr.run(ctx)
				if err != nil {
					return nil, err
				}
				res.load = before + " -> " + loadavg()
				logf("live at %d msgs/s, provisional rows %s: freshness p50 %s s, p99 %s s, max %s s over %d window(s); provisional age p50 %s s, max %s s",
					r, fmtProvisional(prov), fmtFresh(res.rowFreshness(0.5)), fmtFresh(res.rowFreshness(0.99)), fmtFresh(res.rowFreshness(1)),
					len(res.windows), fmtFresh(res.provisionalAge(0.5)), fmtFresh(res.provisionalAge(1)))
				m.live = append(m.live, res)
			}
		}
	}
	if o.live.sustained {
		for _, prov := range o.live.provisional {
			s, err := sustainedSearch(ctx, o, d, b, dbs, n, prov, logTo)
			if err != nil {
				return nil, err
			}
			m.sustained = append(m.sustained, s)
		}
	}
	return m, nil
}

// produceOn produces m.predictions predictions of d and their positions on
// b, once, before any timing, and records what it produced.
func (m *measurement) produceOn(ctx context.Context, b *broker, d *dataset) error {
	logf("broker pid %d on %s; producing %d predictions", b.pid(), b.addr, m.predictions)
	g := newGenerator(d, m.predictions, predTopic, posTopic)
	t0 := time.Now()
	counts, err := produceAll(ctx, b.addr, g.next)
	if err != nil {
		return fmt.Errorf("produce: %w", err)
	}
	m.produce = time.Since(t0)
	m.positions = g.positions
	m.messages = int64(counts.Produced(predTopic) + counts.Produced(posTopic))
	m.bytes = g.bytes
	m.brokerRSS = b.rss()
	logf("produced %d messages (%d predictions, %d positions, %.0f MB JSON) in %v; broker RSS %d MB",
		m.messages, counts.Produced(predTopic), counts.Produced(posTopic), float64(m.bytes)/1e6,
		m.produce.Round(time.Millisecond), m.brokerRSS>>20)
	return nil
}

// quietTrial runs trial i until it is measured on a quiet machine (at most
// 1 + --load-retries attempts, the last one whatever the load) without a
// PostgreSQL restart (at most 3 attempts).
func quietTrial(ctx context.Context, o options, b *broker, dbs *databases, m *measurement, i int, logTo io.Writer) (*trial, error) {
	restarts, loadedTries := 0, 0
	for attempt := 1; ; attempt++ {
		// A trial during which PostgreSQL restarted (the crash tests of
		// other sessions on a shared machine do that) measured nothing: run
		// it again.
		clock := &phaseClock{rule: o.load, lastChance: loadedTries >= o.load.retries}
		before, _ := dbs.serverStart(ctx)
		t, err := runTrial(ctx, o, b, dbs, m, fmt.Sprintf("%d_%d_%d_%d", os.Getpid(), m.predictions, i, attempt), clock, logTo)
		after, _ := dbs.serverStart(ctx)
		if !o.keep {
			dbs.dropAll(context.Background())
		}
		var loaded *loadedError
		switch {
		case errors.As(err, &loaded):
			loadedTries++
			logf("trial %d, attempt %d: %v, above --max-load %.2f: the trial starts again (%d of %d attempts left)",
				i+1, attempt, err, o.load.max, o.load.retries+1-loadedTries, o.load.retries+1)
			continue
		case err == nil && before.Equal(after) && !before.IsZero():
			if clock.loaded {
				logf("trial %d: the machine never got quiet: in %d attempts the 1-minute load average stayed above --max-load %.2f (up to %.2f in this one, after waiting up to %v per phase); its figures are noisy",
					i+1, loadedTries+1, o.load.max, clock.maxLoad, o.load.settle)
			}
			logf("trial %d: ratio %.2f, limit_ratio %.2f%s%s%s; load before -> after: %s", i+1, t.ratio(), t.limitRatio(),
				optRatio(" elt_ratio", t.elt != nil, t.eltRatio), optRatio(" split_ratio", t.split != nil, t.splitRatio),
				t.flinkSummary(), clock.summary())
			return t, nil
		}
		if err != nil && before.Equal(after) {
			// Not a restart of PostgreSQL: the same server start before and
			// after, or no server reached at all (a wrong --database-url,
			// refused credentials). Another attempt would fail the same way.
			return nil, err
		}
		restarts++
		if restarts == 3 || errors.Is(err, errInexact) {
			if err == nil {
				err = errors.New("PostgreSQL restarted during each attempt")
			}
			return nil, err
		}
		logf("trial %d disturbed (PostgreSQL started at %v, then %v; error: %v): once more", i+1,
			before.Format(time.TimeOnly), after.Format(time.TimeOnly), err)
		dbs.waitReady(ctx, time.Minute)
	}
}

// optRatio formats ", name X" when ok.
func optRatio(name string, ok bool, f func() float64) string {
	if !ok {
		return ""
	}
	return fmt.Sprintf(",%s %.2f", name, f())
}

// runTrial measures (a), (b), (c) and, unless --split=false or --elt=false,
// (d) and (e) once; clock starts each timed phase (the quiet-machine rule).
func runTrial(ctx context.Context, o options, b *broker, dbs *databases, m *measurement, tag string, clock *phaseClock, logTo io.Writer) (*trial, error) {
	var err error
	t := &trial{tableRows: map[string]int{}, clock: clock}
	// (a) T_read
	if err := clock.start("(a) T_read"); err != nil {
		return nil, err
	}
	c0 := sampleCPU()
	t.readMsgs, t.read, err = readAll(b.addr, []string{predTopic, posTopic})
	clock.stop()
	if err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	t.readBusy = busy(c0, sampleCPU())
	if t.readMsgs != m.messages {
		return nil, fmt.Errorf("read %d messages, produced %d", t.readMsgs, m.messages)
	}
	logf("T_read %v", t.read.Round(time.Millisecond))

	// (b) T_ovstream
	runDB, err := dbs.fresh(ctx, "ovsbench_run_"+tag)
	if err != nil {
		return nil, fmt.Errorf("fresh database: %w", err)
	}
	if o.pgLog {
		if err := dbs.logStatements(ctx, "ovsbench_run_"+tag); err != nil {
			return nil, err
		}
	}
	if err := clock.start("(b) T_ovstream"); err != nil {
		return nil, err
	}
	c0 = sampleCPU()
	bc0 := b.cpu()
	t.run, err = runOvstream(o.bin, runDB, b.addr, o.runArgs, o.wrap, logTo)
	clock.stop()
	if err != nil {
		return nil, err
	}
	t.runBusy = busy(c0, sampleCPU())
	t.brokerCPU = b.cpu() - bc0
	logf("T_ovstream %v, peak RSS %d MB, %d commits", t.run.elapsed.Round(time.Millisecond), t.run.maxRSS>>20, len(t.run.commits))

	if t.aggBytes, err = relationSize(ctx, runDB, "delay_aggregates"); err != nil {
		return nil, fmt.Errorf("size of delay_aggregates: %w", err)
	}
	if t.visitBytes, err = relationSize(ctx, runDB, "stop_visits"); err != nil {
		return nil, fmt.Errorf("size of stop_visits: %w", err)
	}

	// (c) T_write
	tables, err := readTables(ctx, runDB)
	if err != nil {
		return nil, fmt.Errorf("read results: %w", err)
	}
	for _, tb := range tables {
		t.tableRows[tb.name] = len(tb.rows)
	}
	copyDB, err := dbs.fresh(ctx, "ovsbench_copy_"+tag)
	if err != nil {
		return nil, fmt.Errorf("fresh database: %w", err)
	}
	runtime.GC()
	if err := clock.start("(c) T_write"); err != nil {
		return nil, err
	}
	c0 = sampleCPU()
	self0 := selfCPU()
	t.writeRows, t.write, err = writeAll(ctx, copyDB, tables)
	clock.stop()
	if err != nil {
		return nil, fmt.Errorf("write: %w", err)
	}
	t.writeCPU = selfCPU() - self0
	t.writeBusy = busy(c0, sampleCPU())
	logf("T_write %v (%d rows)", t.write.Round(time.Millisecond), t.writeRows)
	if o.split {
		if t.split, err = splitPhase(ctx, o, b, dbs, runDB, tag, clock, logTo); err != nil {
			return nil, err
		}
	}
	if o.elt {
		if t.elt, err = eltPhase(ctx, b, dbs, runDB, tag, o.maxDelay, clock); err != nil {
			return nil, err
		}
	}
	if b.kind == brokerKafka {
		for _, form := range o.flinkForms {
			f, err := flinkPhase(ctx, form, b, dbs, runDB, tag, o.maxDelay, clock, logTo)
			if err != nil {
				return nil, err
			}
			t.flink = append(t.flink, f)
		}
	}
	return t, nil
}

func (m *measurement) print(w io.Writer) {
	t := m.median()
	r := t.run
	label := ""
	if m.label != "" {
		label = " [" + m.label + "]"
	}
	fmt.Fprintf(w, "\novstream bench%s: %d predictions + %d positions = %d messages (%.0f MB JSON), partitions 6+3, lz4; broker %s; %d CPUs, %s\n",
		label, m.predictions, m.positions, m.messages, float64(m.bytes)/1e6, brokerName(m.broker), runtime.NumCPU(), runtime.Version())
	fmt.Fprintf(w, "produce (not timed in R): %v, %.0f msgs/s; broker RSS after produce %d MB\n",
		m.produce.Round(time.Millisecond), rate(m.messages, m.produce), m.brokerRSS>>20)
	if len(m.trials) > 1 {
		fmt.Fprintf(w, "%d trials on the same data; the table shows the median trial (by ratio); all ratios:", len(m.trials))
		for _, t := range m.trials {
			fmt.Fprintf(w, " %.2f", t.ratio())
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "%-14s %8s %11s %11s %8s %-14s %s\n", "phase", "seconds", "msgs/s", "rows/s", "CPU busy", "load 1/5/15", "notes")
	fmt.Fprintf(w, "%-14s %8.2f %11.0f %11s %7.0f%% %-14s %d messages counted\n", "(a) T_read", t.read.Seconds(),
		rate(t.readMsgs, t.read), "-", 100*t.readBusy, t.clock.before("(a) T_read"), t.readMsgs)
	fmt.Fprintf(w, "%-14s %8.2f %11.0f %11.0f %7.0f%% %-14s peak RSS %d MB; commits %d, p50 %v, p99 %v; CPU user %.1fs sys %.1fs; broker CPU %.1fs\n",
		"(b) T_ovstream", r.elapsed.Seconds(), rate(m.messages, r.elapsed), rate(t.writeRows, r.elapsed), 100*t.runBusy, t.clock.before("(b) T_ovstream"),
		r.maxRSS>>20, len(r.commits), percentile(r.commits, 0.5).Round(time.Millisecond),
		percentile(r.commits, 0.99).Round(time.Millisecond), r.userCPU.Seconds(), r.sysCPU.Seconds(), t.brokerCPU.Seconds())
	fmt.Fprintf(w, "%-14s %8.2f %11s %11.0f %7.0f%% %-14s %d rows (%s); client CPU %.1fs\n", "(c) T_write", t.write.Seconds(), "-",
		rate(t.writeRows, t.write), 100*t.writeBusy, t.clock.before("(c) T_write"), t.writeRows, t.tableSummary(), t.writeCPU.Seconds())
	if t.split != nil {
		t.split.print(w, m.messages, r)
	}
	if t.elt != nil {
		t.elt.print(w, r, t.clock.before("(e) T_elt"))
	}
	for _, f := range t.flink {
		f.print(w, t, int64(m.predictions))
	}
	fmt.Fprintf(w, "result rows per message: %.3f (delay_aggregates rows per prediction %.3f); latest-state rows upserted by (b) over all commits: %d\n",
		float64(t.writeRows)/float64(m.messages), float64(t.tableRows["delay_aggregates"])/float64(m.predictions), r.latestRows)
	if n := t.tableRows["delay_aggregates"]; n > 0 {
		fmt.Fprintf(w, "delay_aggregates after (b): %.1f MB with indexes and TOAST, %.0f bytes per row\n",
			float64(t.aggBytes)/1e6, float64(t.aggBytes)/float64(n))
	}
	if t.visitBytes > 0 {
		fmt.Fprintf(w, "stop_visits after (b): %.1f MB with indexes and TOAST\n", float64(t.visitBytes)/1e6)
	}
	fmt.Fprintf(w, "allocations per message, hot path (go test -bench BenchmarkHotPath ./aggregate/): %s\n", m.allocs)
	fmt.Fprintf(w, "T_read + T_write = %.2fs; T_ovstream = %.2fs; ratio %.2f; limit_ratio %.2f\n",
		(t.read + t.write).Seconds(), r.elapsed.Seconds(), t.ratio(), t.limitRatio())
	fmt.Fprintf(w, "load average before -> after each phase: %s\n", t.clock.summary())
	m.printTrials(w)
	printLive(w, m.live)
	for _, s := range m.sustained {
		s.print(w, m.sustainDuration)
	}
}

func (t *trial) tableSummary() string {
	var parts []string
	for _, name := range resultTables {
		parts = append(parts, fmt.Sprintf("%s %d", name, t.tableRows[name]))
	}
	return strings.Join(parts, ", ")
}

func printScaling(w io.Writer, ms []*measurement) {
	fmt.Fprintf(w, "\nscaling curve (median trials)\n%-6s %12s %12s %12s %12s %12s %13s %8s\n",
		"scale", "predictions", "messages", "T_ovstream", "msgs/s", "peak RSS MB", "s per 1M msgs", "ratio")
	for _, m := range ms {
		t := m.median()
		fmt.Fprintf(w, "%-6s %12d %12d %11.2fs %12.0f %12d %13.2f %8.2f\n", m.label, m.predictions, m.messages,
			t.run.elapsed.Seconds(), rate(m.messages, t.run.elapsed), t.run.maxRSS>>20,
			t.run.elapsed.Seconds()/float64(m.messages)*1e6, t.ratio())
	}
}
