package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The instances mode (--instances 1,2,3): instead of the phases, how one
// pipeline scales across split instances against one broker and one
// PostgreSQL. The data is produced once per broker; then, per trial and per
// count N, N `ovstream run --drain` instances of one pipeline on disjoint
// blocks of the partitions (splitPartitions; one instance has them all, as
// (b)) run side by side on a fresh database, like phase (d), from starting
// the first to the exit of the last. One instance runs first in each
// trial: it is the reference, and every N's delay_aggregates must equal
// its rows (count and md5, as (d) checks), the drains leaving no partials.
// Measured per N: the wall time, each instance's CPU (user + sys, its
// rusage), the broker's CPU, and what PostgreSQL did (pgusage.go): every
// server process's CPU, the WAL inserted, the transactions, the checkpoints.
// The median trial (by wall time) of each N makes the final lines
//
//	instances=N wall=... cpu_per_msg_us=... pg_cpu=... wal_bytes=...

// instancesRun is one run of N instances.
type instancesRun struct {
	n          int
	split      *splitResult // the instances; rows and digest equal the reference's
	pg         pgUsage
	windows    int64 // distinct window_start in delay_aggregates
	resultRows int64 // rows of resultTables after the run
}

// commits returns the commits of all instances, as their log lines count them.
func (r *instancesRun) commits() int {
	n := 0
	for _, i := range r.split.instances {
		n += len(i.commits)
	}
	return n
}

// instanceCounts returns the counts of --instances in order, one first.
func instanceCounts(ns []int) []int {
	out := slices.Clone(ns)
	if !slices.Contains(out, 1) {
		out = append(out, 1)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// runInstances measures --instances on each broker of --broker and prints
// the figures.
func runInstances(ctx context.Context, o options, d *dataset, logTo io.Writer) error {
	ns := instanceCounts(o.instances)
	for k, kind := range o.brokers {
		m, runs, err := measureInstances(ctx, o, d, kind, ns, logTo)
		if err != nil {
			return err
		}
		prefix := ""
		if k > 0 {
			prefix = kind + "_"
		}
		printInstances(os.Stdout, m, runs, prefix)
	}
	return nil
}

// measureInstances produces the data on a broker of kind and runs each
// count of ns --trials times; runs[i] are the runs of ns[i].
func measureInstances(ctx context.Context, o options, d *dataset, kind string, ns []int, logTo io.Writer) (*measurement, [][]*instancesRun, error) {
	m := &measurement{predictions: o.predictions, broker: kind, loadRule: o.load}
	b, err := startBroker(o.bin, kind, topics)
	if err != nil {
		return nil, nil, err
	}
	defer b.stop()
	if err := m.produceOn(ctx, b, d); err != nil {
		return nil, nil, err
	}
	dbs := &databases{admin: o.adminURL, bin: o.bin, schemaSQL: o.schemaSQL}
	if !o.keep {
		defer dbs.dropAll(context.Background())
	}
	runs := make([][]*instancesRun, len(ns))
	for trial := range o.trials {
		var refDB string
		for i, n := range ns {
			name := fmt.Sprintf("ovsbench_inst_%d_%d_%d", os.Getpid(), trial, n)
			r, db, err := instancesOnce(ctx, o, b, dbs, name, n, refDB, m.messages, logTo)
			if err != nil {
				return nil, nil, err
			}
			if n == 1 {
				refDB = db
			}
			runs[i] = append(runs[i], r)
		}
		if !o.keep {
			dbs.dropAll(ctx)
		}
	}
	return m, runs, nil
}

// instancesOnce runs n instances on a fresh database name and checks their
// rows against refDB's (n > 1) or digests them (n = 1, the reference).
func instancesOnce(ctx context.Context, o options, b *broker, dbs *databases, name string, n int, refDB string, messages int64, logTo io.Writer) (*instancesRun, string, error) {
	db, err := dbs.fresh(ctx, name)
	if err != nil {
		return nil, "", fmt.Errorf("fresh database: %w", err)
	}
	if o.pgLog {
		if err := dbs.logStatements(ctx, name); err != nil {
			return nil, "", err
		}
	}
	if err := dbs.checkpoint(ctx); err != nil {
		return nil, "", fmt.Errorf("checkpoint: %w", err)
	}
	meter, err := newPGMeter(ctx, o.adminURL, name)
	if err != nil {
		return nil, "", err
	}
	defer meter.close()
	// The quiet-machine rule waits for the load to fall (--settle), then
	// runs whatever the load: the load before is printed with the figures.
	clock := &phaseClock{rule: o.load, lastChance: true}
	phase := fmt.Sprintf("instances=%d", n)
	if err := clock.start(phase); err != nil {
		return nil, "", err
	}
	p0, err := meter.sample(ctx)
	if err != nil {
		return nil, "", err
	}
	c0, bc0 := sampleCPU(), b.cpu()
	s, err := runSplit(o, n, db, b.addr, logTo)
	clock.stop()
	if err != nil {
		return nil, "", err
	}
	s.busy, s.load, s.brokerCPU = busy(c0, sampleCPU()), clock.before(phase), b.cpu()-bc0
	meter.waitIdle(ctx)
	p1, err := meter.sample(ctx)
	if err != nil {
		return nil, "", err
	}
	r := &instancesRun{n: n, split: s, pg: p1.minus(p0)}
	if n == 1 {
		s.rows, s.digest, err = digestAggregates(ctx, db)
	} else {
		err = checkSplit(ctx, s, refDB, db, fmt.Sprintf("%d instances", n))
	}
	if err != nil {
		return nil, "", err
	}
	if r.windows, r.resultRows, err = countResults(ctx, db); err != nil {
		return nil, "", err
	}
	logf("instances=%d: %v, CPU %.1fs (%.2f µs/msg), PostgreSQL CPU %s, WAL %.1f MB; delay_aggregates %d rows, md5 %s",
		n, s.elapsed.Round(time.Millisecond), s.cpu().Seconds(), perMessageUS(s.cpu(), messages), fmtCPU(r.pg.cpu),
		float64(r.pg.wal)/1e6, s.rows, s.digest)
	return r, db, nil
}

// digestAggregates returns the count of db's delay_aggregates rows and the
// md5 sameAggregates computes over them.
func digestAggregates(ctx context.Context, db string) (int64, string, error) {
	r, err := openAggRows(ctx, aggSource{db, splitColumns})
	if err != nil {
		return 0, "", fmt.Errorf("read delay_aggregates: %w", err)
	}
	defer r.close()
	for {
		if _, ok := r.next(); !ok {
			break
		}
	}
	if r.err != nil {
		return 0, "", fmt.Errorf("read delay_aggregates: %w", r.err)
	}
	return r.n, fmt.Sprintf("%x", r.h.Sum(nil)), nil
}

// countResults returns the distinct windows of db's delay_aggregates and
// the rows of its result tables.
func countResults(ctx context.Context, db string) (windows, rows int64, err error) {
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close(ctx)
	counts := make([]string, len(resultTables))
	for i, t := range resultTables {
		counts[i] = "(SELECT count(*) FROM " + t + ")"
	}
	err = conn.QueryRow(ctx, "SELECT (SELECT count(DISTINCT window_start) FROM delay_aggregates), "+
		strings.Join(counts, " + ")).Scan(&windows, &rows)
	return windows, rows, err
}

func perMessageUS(d time.Duration, messages int64) float64 {
	return d.Seconds() / float64(messages) * 1e6
}

// medianRun returns the run with the median wall time (the lower middle
// one for an even count).
func medianRun(rs []*instancesRun) *instancesRun {
	s := slices.Clone(rs)
	slices.SortFunc(s, func(a, b *instancesRun) int { return cmp.Compare(a.split.elapsed, b.split.elapsed) })
	return s[(len(s)-1)/2]
}

// printInstances prints every run's instances, the two tables of the
// median runs and the final lines, each prefixed with prefix.
func printInstances(w io.Writer, m *measurement, runs [][]*instancesRun, prefix string) {
	fmt.Fprintf(w, "\novstream bench --instances: %d predictions + %d positions = %d messages (%.0f MB JSON), partitions 6+3; broker %s; PostgreSQL on this machine; %d trial(s)\n",
		m.predictions, m.positions, m.messages, float64(m.bytes)/1e6, brokerName(m.broker), len(runs[0]))
	for _, rs := range runs {
		for t, r := range rs {
			s := r.split
			fmt.Fprintf(w, "%-14s %8.2f %11.0f trial %d, machine busy %.0f%%, load before %s; delay_aggregates %d rows, md5 %s\n",
				fmt.Sprintf("instances=%d", r.n), s.elapsed.Seconds(), rate(m.messages, s.elapsed), t+1, 100*s.busy, s.load, s.rows, s.digest)
			s.printInstances(w)
		}
	}
	med := make([]*instancesRun, len(runs))
	for i, rs := range runs {
		med[i] = medianRun(rs)
	}
	fmt.Fprintf(w, "\nCPU (median trial by wall time): ovstream = user + sys of each instance; PostgreSQL = every server process (/proc)\n")
	fmt.Fprintf(w, "%-3s %8s %10s %10s %8s %-24s %9s %9s %9s %-14s\n", "N", "wall s", "msgs/s", "CPU s", "µs/msg", "per instance s", "broker s", "PG CPU s", "PG µs/msg", "load before")
	for _, r := range med {
		s := r.split
		var per []string
		for _, i := range s.instances {
			per = append(per, fmt.Sprintf("%.1f", (i.userCPU+i.sysCPU).Seconds()))
		}
		pgPerMsg := "n/a"
		if r.pg.cpu >= 0 {
			pgPerMsg = fmt.Sprintf("%.2f", perMessageUS(r.pg.cpu, m.messages))
		}
		fmt.Fprintf(w, "%-3d %8.2f %10.0f %10.1f %8.2f %-24s %9.1f %9s %9s %-14s\n", r.n, s.elapsed.Seconds(), rate(m.messages, s.elapsed),
			s.cpu().Seconds(), perMessageUS(s.cpu(), m.messages), strings.Join(per, " + "), s.brokerCPU.Seconds(),
			strings.TrimSuffix(fmtCPU(r.pg.cpu), "s"), pgPerMsg, s.load)
	}
	fmt.Fprintf(w, "\nPostgreSQL (median trial): WAL = pg_current_wal_lsn() after - before; commits = ovstream's (its log); rows = tup_inserted + tup_updated + tup_deleted of the database (partials and merges included); xids = transactions that wrote; xacts = xact_commit\n")
	fmt.Fprintf(w, "%-3s %10s %8s %10s %11s %8s %11s %12s %12s %8s %9s %8s %9s %8s %5s\n", "N", "WAL MB", "B/msg", "B/result", "B/agg row", "commits",
		"rows/commit", "KB/commit", "KB/window", "windows", "xids", "xacts", "records", "FPI", "ckpt")
	for _, r := range med {
		commits := r.commits()
		wal := float64(r.pg.wal)
		fmt.Fprintf(w, "%-3d %10.1f %8.0f %10.0f %11.0f %8d %11.0f %12.1f %12.1f %8d %9d %8d %9d %8d %5d\n", r.n, wal/1e6,
			wal/float64(m.messages), wal/float64(r.resultRows), wal/float64(r.split.rows), commits,
			float64(r.pg.tuples)/float64(max(commits, 1)), wal/1e3/float64(max(commits, 1)), wal/1e3/float64(max(r.windows, 1)), r.windows,
			r.pg.xids, r.pg.xactCommits, r.pg.walRecords, r.pg.walFPI, r.pg.checkpoints)
	}
	fmt.Fprintf(w, "B/result: per row of %s after the run; B/agg row: per delay_aggregates row; KB/window: per distinct window_start\n", strings.Join(resultTables, ", "))
	for _, r := range med {
		fmt.Fprintf(w, "%sinstances=%d wall=%.2fs cpu_per_msg_us=%.2f pg_cpu=%s wal_bytes=%d\n", prefix, r.n, r.split.elapsed.Seconds(),
			perMessageUS(r.split.cpu(), m.messages), fmtCPU(r.pg.cpu), r.pg.wal)
	}
}
