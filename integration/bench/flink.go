package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/ovstream/ovstream/integration/flinkpeer"
)

// Phase (f), --peer flink: the Flink SQL job users would write instead of
// ovstream (integration/flinkpeer): Flink in one JVM (MiniCluster,
// parallelism 2) reads the predictions topic from the earliest offsets to
// the end offsets at its start (the Kafka connector, bounded), four TUMBLE
// window queries (line, station, operator, network) with the built-in exact
// PERCENTILE, into a table of delay_aggregates' columns it can fill. In two
// forms (flinkForms), each on a fresh database after a checkpoint, timed
// from starting the JVM to its exit: T_flink, four INSERTs in one
// StatementSet through the SQL JDBC connector (at-least-once upserts), and,
// when the server allows prepared transactions, T_flink_xa, the rows through
// the JDBC connector's XA sink (exactly once, committed at checkpoints). Each
// form's rows must equal (b)'s (count, mean, min, max and operator bit for
// bit, P90 within flinkpeer.P90Tolerance).
//
// It does less than (b): no positions, no latest state, no distributions, no
// dead letters (what it cannot parse it drops), no offsets written with the
// rows. Flink's Kafka source cannot start against the embedded broker: the
// phase runs on Apache Kafka only.
const flinkDoesLess = "no distributions, no latest state, no dead letters, no offsets written with the data: at-least-once upserts (the XA form: inserts committed exactly once at checkpoints)"

// flinkForm is one form of the peer; name prefixes its figures (T_name,
// name_wall_ratio=).
type flinkForm struct {
	name string
	xa   bool // the exactly-once (XA) form
}

// flinkForms are the forms phase (f) can run: at-least-once, then XA.
var flinkForms = []flinkForm{{"flink", false}, {"flink_xa", true}}

// flinkResult is what phase (f) measured of one form.
type flinkResult struct {
	form flinkForm
	run  *flinkpeer.Result
	diff *flinkpeer.Diff
	busy float64
}

// flinkPhase is phase (f) of form on a fresh database, timed by clock; it
// requires the peer's rows to equal (b)'s, on runDB.
func flinkPhase(ctx context.Context, form flinkForm, b *broker, dbs *databases, runDB, tag string, maxDelay time.Duration, clock *phaseClock, logTo io.Writer) (*flinkResult, error) {
	db, err := dbs.fresh(ctx, "ovsbench_"+form.name+"_"+tag)
	if err != nil {
		return nil, fmt.Errorf("fresh database: %w", err)
	}
	if err := execOn(ctx, db, flinkpeer.TableDDL); err != nil {
		return nil, fmt.Errorf("flink table: %w", err)
	}
	// The jars and the compiled job are in the cache before the clock starts.
	if _, err := flinkpeer.Classpath(); err != nil {
		return nil, err
	}
	if err := dbs.checkpoint(ctx); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	if err := clock.start(form.phase()); err != nil {
		return nil, err
	}
	c0 := sampleCPU()
	r, err := flinkpeer.Run(ctx, flinkpeer.Options{Bootstrap: b.addr, Topic: predTopic, DatabaseURL: db,
		Window: eltWindow, Lateness: benchLateness, MaxDelay: maxDelay, ExactlyOnce: form.xa, LogTo: logTo})
	clock.stop()
	if err != nil {
		return nil, err
	}
	f := &flinkResult{form: form, run: r, busy: busy(c0, sampleCPU())}
	logf("T_%s %v, CPU %v, peak RSS %d MB", form.name, r.Elapsed.Round(time.Millisecond), r.CPU().Round(time.Millisecond), r.MaxRSS>>20)
	if f.diff, err = flinkpeer.Compare(ctx, flinkpeer.OvstreamSource(runDB, benchPipeline), flinkpeer.PeerSource(db)); err != nil {
		return nil, err
	}
	if !f.diff.OK() {
		return nil, fmt.Errorf("%w: the Flink peer (%s): %v", errInexact, form.name, f.diff)
	}
	return f, nil
}

func (f flinkForm) phase() string { return "(f) T_" + f.name }

// flinkRatios are one form's wall time, CPU time and peak RSS over (b)'s.
type flinkRatios struct{ wall, cpu, rss float64 }

func (f *flinkResult) ratios(b *runResult) flinkRatios {
	return flinkRatios{wall: f.run.Elapsed.Seconds() / b.elapsed.Seconds(),
		cpu: f.run.CPU().Seconds() / (b.userCPU + b.sysCPU).Seconds(),
		rss: float64(f.run.MaxRSS) / float64(b.maxRSS)}
}

// flinkMedians are the medians of each form's ratios over m's trials (NaN
// for a form that did not run), in flinkForms' order (t.flink's too).
func (m *measurement) flinkMedians() []flinkRatios {
	out := make([]flinkRatios, len(flinkForms))
	for i := range flinkForms {
		var wall, cpu, rss []float64
		for _, t := range m.trials {
			if i < len(t.flink) {
				r := t.flink[i].ratios(t.run)
				wall, cpu, rss = append(wall, r.wall), append(cpu, r.cpu), append(rss, r.rss)
			}
		}
		out[i] = flinkRatios{median(wall), median(cpu), median(rss)}
	}
	return out
}

// printFlinkMedians prints the final lines of phase (f): each form's median
// ratios, or why the XA form did not run (xaNot), and what the peer does less.
func printFlinkMedians(w io.Writer, m *measurement, xaNot string) {
	for i, r := range m.flinkMedians() {
		if flinkForms[i].xa && xaNot != "" {
			fmt.Fprintf(w, "flink_xa=not run: %s\n", xaNot)
			continue
		}
		n := flinkForms[i].name
		fmt.Fprintf(w, "%s_wall_ratio=%s\n%s_cpu_ratio=%s\n%s_rss_ratio=%s\n", n, fmtFigure(r.wall), n, fmtFigure(r.cpu), n, fmtFigure(r.rss))
	}
	fmt.Fprintf(w, "flink_does_less=%q\n", flinkDoesLess)
}

func (f *flinkResult) print(w io.Writer, t *trial, messages int64) {
	r, form := f.run, "SQL, at-least-once upserts"
	if f.form.xa {
		form = "XA exactly-once sink"
	}
	fmt.Fprintf(w, "%-14s %8.2f %11.0f %11s %7.0f%% %-14s peer: Flink %s %s, MiniCluster, parallelism 2; peak RSS %d MB; CPU user %.1fs sys %.1fs\n",
		f.form.phase(), r.Elapsed.Seconds(), rate(messages, r.Elapsed), "-", 100*f.busy, t.clock.before(f.form.phase()), flinkpeer.Version,
		form, r.MaxRSS>>20, r.UserCPU.Seconds(), r.SysCPU.Seconds())
	x := f.ratios(t.run)
	fmt.Fprintf(w, "%s: %v\n", f.form.name, f.diff)
	fmt.Fprintf(w, "%s: wall %.2f, CPU %.2f, peak RSS %.2f times (b)'s; it does less: %s\n", f.form.name, x.wall, x.cpu, x.rss, flinkDoesLess)
}

// flinkSummary is t's flink ratios for the trial's log line: ", flink_wall_ratio 4.20, ...".
func (t *trial) flinkSummary() string {
	var s string
	for _, f := range t.flink {
		s += fmt.Sprintf(", %s_wall_ratio %.2f", f.form.name, f.ratios(t.run).wall)
	}
	return s
}
