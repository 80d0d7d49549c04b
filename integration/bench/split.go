package main

import (
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"hash"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// splitPartitions returns one --partitions value per instance of n
// instances of one pipeline: each topic's partitions in n contiguous
// blocks, instance i taking partitions [i*N/n, (i+1)*N/n) of a topic of N
// (6 + 3 partitions in halves: predictions 0-2 and positions 0; predictions
// 3-5 and positions 1-2). spec is the broker's "name:N,name:N". An instance
// that would get no partition at all is an error.
func splitPartitions(spec string, n int) ([]string, error) {
	if n < 1 {
		return nil, fmt.Errorf("%d instances: want at least 1", n)
	}
	parts := make([][]string, n)
	for _, tn := range strings.Split(spec, ",") {
		name, count, _ := strings.Cut(tn, ":")
		size, err := strconv.Atoi(count)
		if err != nil {
			return nil, fmt.Errorf("%q: want name:N", tn)
		}
		for i := range n {
			for p := i * size / n; p < (i+1)*size/n; p++ {
				parts[i] = append(parts[i], fmt.Sprintf("%s:%d", name, p))
			}
		}
	}
	out := make([]string, n)
	for i, ps := range parts {
		if len(ps) == 0 {
			return nil, fmt.Errorf("%d instances of %s: instance %d would get no partition", n, spec, i+1)
		}
		out[i] = strings.Join(ps, ",")
	}
	return out, nil
}

// splitResult is what the split phase (d) measured: `ovstream run --drain`
// instances of one pipeline (two in (d), n with --instances) on disjoint
// blocks of the partitions, started together on a fresh database.
type splitResult struct {
	elapsed   time.Duration // from starting the first to the last exited
	instances []*runResult
	parts     []string // each instance's --partitions; "" for one instance: every partition
	busy      float64
	load      string
	brokerCPU time.Duration
	rows      int64  // delay_aggregates rows, equal to (b)'s
	digest    string // md5 over them, sorted by key, equal to (b)'s
}

// cpu returns the CPU time (user + sys) of all instances.
func (s *splitResult) cpu() time.Duration {
	var d time.Duration
	for _, r := range s.instances {
		d += r.userCPU + r.sysCPU
	}
	return d
}

// splitPhase is phase (d) on a fresh database, after a checkpoint ((c)
// left about as much WAL as (b) wrote, and (b) started without any); it
// requires the result to equal (b)'s, on runDB.
func splitPhase(ctx context.Context, o options, b *broker, dbs *databases, runDB, tag string, clock *phaseClock, logTo io.Writer) (*splitResult, error) {
	name := "ovsbench_split_" + tag
	splitDB, err := dbs.fresh(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("fresh database: %w", err)
	}
	if o.pgLog {
		if err := dbs.logStatements(ctx, name); err != nil {
			return nil, err
		}
	}
	if err := dbs.checkpoint(ctx); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	if err := clock.start("(d) T_split"); err != nil {
		return nil, err
	}
	c0, bc0 := sampleCPU(), b.cpu()
	s, err := runSplit(o, 2, splitDB, b.addr, logTo)
	clock.stop()
	if err != nil {
		return nil, err
	}
	s.busy, s.load, s.brokerCPU = busy(c0, sampleCPU()), clock.before("(d) T_split"), b.cpu()-bc0
	logf("T_split %v, peak RSS %d MB and %d MB", s.elapsed.Round(time.Millisecond), s.instances[0].maxRSS>>20, s.instances[1].maxRSS>>20)
	if err := checkSplit(ctx, s, runDB, splitDB, "the split run"); err != nil {
		return nil, err
	}
	return s, nil
}

// runSplit is phase (d): n instances side by side (splitPartitions), each
// draining its partitions; the last to drain merges every window
// (docs/design.md "Draining a split pipeline"). One instance gets no
// --partitions: it is (b). The time runs from starting the first to the
// exit of the last.
func runSplit(o options, n int, dbURL, brokers string, logTo io.Writer) (*splitResult, error) {
	parts, err := splitPartitions(topics, n)
	if err != nil {
		return nil, err
	}
	if n == 1 {
		parts = []string{""}
	}
	s := &splitResult{parts: parts, instances: make([]*runResult, n)}
	var wg sync.WaitGroup
	errs := make([]error, n)
	var logMu sync.Mutex
	began := time.Now()
	for i, parts := range s.parts {
		// Each instance serves its metrics on a free port, like (b) on the
		// default one, which only one process can hold.
		extra := []string{"--metrics-addr", "127.0.0.1:0"}
		if parts != "" {
			extra = append(extra, "--partitions", parts)
		}
		extra = append(extra, o.runArgs...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.instances[i], errs[i] = runOvstream(o.bin, dbURL, brokers, extra, nil, lockedWriter(logTo, &logMu))
		}()
	}
	wg.Wait()
	s.elapsed = time.Since(began)
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("instance %d of %d (--partitions %q): %w", i+1, n, s.parts[i], err)
		}
	}
	return s, nil
}

// aggSource is the delay_aggregates rows of one database that a comparison
// reads: the columns cols, as one row(...)::text each, in key order.
type aggSource struct{ db, cols string }

// splitColumns are the columns (d) and (b) must agree on: all but
// updated_at (the time of the commit) and the distributions.
const splitColumns = `pipeline, window_start, window_end, dimension, dimension_id, operator,
	event_count, mean_delay_s, p90_delay_s, min_delay_s, max_delay_s`

// sameAggregates requires the rows of a and b to be equal, row by row in key
// order, and returns their count and the md5 over their text (a line each).
// Otherwise it returns errInexact naming what, both counts and md5s and the
// first row that differs.
func sameAggregates(ctx context.Context, a, b aggSource, what string) (int64, string, error) {
	var its [2]*aggRows
	for i, s := range []aggSource{a, b} {
		r, err := openAggRows(ctx, s)
		if err != nil {
			return 0, "", fmt.Errorf("read delay_aggregates: %w", err)
		}
		defer r.close()
		its[i] = r
	}
	var first string
	for {
		la, oka := its[0].next()
		lb, okb := its[1].next()
		if !oka && !okb {
			break
		}
		if first == "" && (oka != okb || string(la) != string(lb)) {
			first = fmt.Sprintf("row %d: (b) %q, %s %q", max(its[0].n, its[1].n), la, what, lb)
		}
	}
	for _, r := range its {
		if r.err != nil {
			return 0, "", fmt.Errorf("read delay_aggregates: %w", r.err)
		}
	}
	sa, sb := fmt.Sprintf("%x", its[0].h.Sum(nil)), fmt.Sprintf("%x", its[1].h.Sum(nil))
	if first != "" {
		return 0, "", fmt.Errorf("%w: delay_aggregates of %s: %d rows, md5 %s; of one instance (b): %d rows, md5 %s; first difference at %s",
			errInexact, what, its[1].n, sb, its[0].n, sa, first)
	}
	return its[0].n, sa, nil
}

// aggRows reads one aggSource, hashing what it returns.
type aggRows struct {
	conn *pgx.Conn
	rows pgx.Rows
	h    hash.Hash
	n    int64
	err  error
}

func openAggRows(ctx context.Context, s aggSource) (*aggRows, error) {
	conn, err := pgx.Connect(ctx, s.db)
	if err != nil {
		return nil, err
	}
	rows, err := conn.Query(ctx, "SELECT row("+s.cols+")::text FROM delay_aggregates ORDER BY pipeline, window_start, dimension, dimension_id")
	if err != nil {
		conn.Close(ctx)
		return nil, err
	}
	return &aggRows{conn: conn, rows: rows, h: md5.New()}, nil
}

// next returns the next row's text, false at the end or on an error (r.err).
func (r *aggRows) next() ([]byte, bool) {
	if r.err != nil || !r.rows.Next() {
		if r.err == nil {
			r.err = r.rows.Err()
		}
		return nil, false
	}
	var line []byte
	if r.err = r.rows.Scan(&line); r.err != nil {
		return nil, false
	}
	r.h.Write(line)
	r.h.Write([]byte{'\n'})
	r.n++
	return line, true
}

func (r *aggRows) close() {
	r.rows.Close()
	r.conn.Close(context.Background())
}

// leftovers counts what a finished split drain must not leave: partials
// not merged, partitions still marked drained.
func leftovers(ctx context.Context, dbURL string) (partials, drained int64, err error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close(ctx)
	err = conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM delay_partial_windows),
		(SELECT count(*) FROM stream_positions WHERE drained)`).Scan(&partials, &drained)
	return partials, drained, err
}

// errInexact is a split run or ELT peer whose results differ from one
// instance's: a bug, never retried as a disturbed trial.
var errInexact = errors.New("results differ from one instance's")

// checkSplit requires the split run's delay_aggregates to equal (b)'s: the
// same rows in key order (so the same count and md5), and no partials or
// drained flags left. It fills s.rows and s.digest.
func checkSplit(ctx context.Context, s *splitResult, runDB, splitDB, what string) error {
	n, sum, err := sameAggregates(ctx, aggSource{runDB, splitColumns}, aggSource{splitDB, splitColumns}, what)
	if err != nil {
		return err
	}
	partials, drained, err := leftovers(ctx, splitDB)
	if err != nil {
		return err
	}
	if partials != 0 || drained != 0 {
		return fmt.Errorf("%w: the drains left %d partials and %d partitions marked drained", errInexact, partials, drained)
	}
	s.rows, s.digest = n, sum
	return nil
}

// lockedWriter serializes the lines two instances append to one log.
func lockedWriter(w io.Writer, mu *sync.Mutex) io.Writer {
	if w == nil {
		return nil
	}
	return writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return w.Write(p)
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func (s *splitResult) print(w io.Writer, messages int64, single *runResult) {
	perMsg := func(d time.Duration) float64 { return d.Seconds() / float64(messages) * 1e6 }
	singleCPU := single.userCPU + single.sysCPU
	fmt.Fprintf(w, "%-14s %8.2f %11.0f %11s %7.0f%% %-14s two instances of one pipeline, --drain each; broker CPU %.1fs\n",
		"(d) T_split", s.elapsed.Seconds(), rate(messages, s.elapsed), "-", 100*s.busy, s.load, s.brokerCPU.Seconds())
	s.printInstances(w)
	fmt.Fprintf(w, "split: delay_aggregates equal (b)'s: %d rows, md5 %s; CPU per message %.2f µs (both instances, %.1fs) against %.2f µs for one instance (%.1fs), x%.2f; T_ovstream / T_split = %.2f\n",
		s.rows, s.digest, perMsg(s.cpu()), s.cpu().Seconds(), perMsg(singleCPU), singleCPU.Seconds(),
		s.cpu().Seconds()/singleCPU.Seconds(), single.elapsed.Seconds()/s.elapsed.Seconds())
}

// printInstances prints a line per instance: its time, partitions, peak
// RSS, commits and CPU.
func (s *splitResult) printInstances(w io.Writer) {
	for i, r := range s.instances {
		parts := s.parts[i]
		if parts == "" {
			parts = "(all)"
		}
		fmt.Fprintf(w, "%-14s %8.2f %11s %11s %8s %-14s --partitions %s: peak RSS %d MB; commits %d, p50 %v, p99 %v; CPU user %.1fs sys %.1fs\n",
			fmt.Sprintf("    instance %d", i+1), r.elapsed.Seconds(), "", "", "", "", parts, r.maxRSS>>20, len(r.commits),
			percentile(r.commits, 0.5).Round(time.Millisecond), percentile(r.commits, 0.99).Round(time.Millisecond),
			r.userCPU.Seconds(), r.sysCPU.Seconds())
	}
}
