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
// window INSERTs (line, station, operator, network) in one StatementSet with
// the built-in exact PERCENTILE, the JDBC connector upserting into a table of
// delay_aggregates' columns it can fill. Timed from starting the JVM to its
// exit, on a fresh database, after a checkpoint; its rows must equal (b)'s
// (count, mean, min, max and operator bit for bit, P90 within
// flinkpeer.P90Tolerance).
//
// It does less than (b): no positions, no latest state, no distributions, no
// dead letters (what it cannot parse it drops), no offsets written with the
// rows (at-least-once upserts). Flink's Kafka source cannot start against
// the embedded broker: the phase runs on Apache Kafka only.
const flinkDoesLess = "no distributions, no latest state, no dead letters, no offsets written with the data: at-least-once upserts"

// flinkResult is what phase (f) measured.
type flinkResult struct {
	run  *flinkpeer.Result
	diff *flinkpeer.Diff
	busy float64
}

// flinkPhase is phase (f) on a fresh database, timed by clock; it requires
// the peer's rows to equal (b)'s, on runDB.
func flinkPhase(ctx context.Context, b *broker, dbs *databases, runDB, tag string, clock *phaseClock, logTo io.Writer) (*flinkResult, error) {
	db, err := dbs.fresh(ctx, "ovsbench_flink_"+tag)
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
	if err := clock.start("(f) T_flink"); err != nil {
		return nil, err
	}
	c0 := sampleCPU()
	r, err := flinkpeer.Run(ctx, flinkpeer.Options{Bootstrap: b.addr, Topic: predTopic, DatabaseURL: db,
		Window: eltWindow, Lateness: benchLateness, LogTo: logTo})
	clock.stop()
	if err != nil {
		return nil, err
	}
	f := &flinkResult{run: r, busy: busy(c0, sampleCPU())}
	logf("T_flink %v, CPU %v, peak RSS %d MB", r.Elapsed.Round(time.Millisecond), r.CPU().Round(time.Millisecond), r.MaxRSS>>20)
	if f.diff, err = flinkpeer.Compare(ctx, flinkpeer.OvstreamSource(runDB, benchPipeline), flinkpeer.PeerSource(db)); err != nil {
		return nil, err
	}
	if !f.diff.OK() {
		return nil, fmt.Errorf("%w: the Flink peer: %v", errInexact, f.diff)
	}
	return f, nil
}

func (t *trial) flinkWallRatio() float64 {
	return t.flink.run.Elapsed.Seconds() / t.run.elapsed.Seconds()
}

func (t *trial) flinkCPURatio() float64 {
	return t.flink.run.CPU().Seconds() / (t.run.userCPU + t.run.sysCPU).Seconds()
}

func (t *trial) flinkRSSRatio() float64 { return float64(t.flink.run.MaxRSS) / float64(t.run.maxRSS) }

func (f *flinkResult) print(w io.Writer, t *trial, messages int64, load string) {
	r := f.run
	fmt.Fprintf(w, "%-14s %8.2f %11.0f %11s %7.0f%% %-14s peer: Flink %s SQL, MiniCluster, parallelism 2; peak RSS %d MB; CPU user %.1fs sys %.1fs\n",
		"(f) T_flink", r.Elapsed.Seconds(), rate(messages, r.Elapsed), "-", 100*f.busy, load, flinkpeer.Version,
		r.MaxRSS>>20, r.UserCPU.Seconds(), r.SysCPU.Seconds())
	fmt.Fprintf(w, "flink: %v\n", f.diff)
	fmt.Fprintf(w, "flink: wall %.2f, CPU %.2f, peak RSS %.2f times (b)'s; it does less: %s\n",
		t.flinkWallRatio(), t.flinkCPURatio(), t.flinkRSSRatio(), flinkDoesLess)
}
