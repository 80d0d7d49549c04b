package main

import (
	"cmp"
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// splitHalves returns one --partitions value per instance of the split
// phase: the first half of each topic's partitions, then the rest (6 + 3
// partitions: predictions 0-2 and positions 0; predictions 3-5 and
// positions 1-2). spec is the broker's "name:N,name:N".
func splitHalves(spec string) [2]string {
	var halves [2][]string
	for _, tn := range strings.Split(spec, ",") {
		name, n, _ := strings.Cut(tn, ":")
		parts, _ := strconv.Atoi(n)
		for p := range parts {
			i := 0
			if p >= parts/2 {
				i = 1
			}
			halves[i] = append(halves[i], fmt.Sprintf("%s:%d", name, p))
		}
	}
	return [2]string{strings.Join(halves[0], ","), strings.Join(halves[1], ",")}
}

// splitResult is what the split phase (d) measured: two `ovstream run
// --drain` instances of one pipeline on disjoint halves of the partitions,
// started together on a fresh database.
type splitResult struct {
	elapsed   time.Duration // from starting both to both exited
	instances [2]*runResult
	parts     [2]string
	busy      float64
	load      string
	brokerCPU time.Duration
	rows      int64  // delay_aggregates rows, equal to (b)'s
	digest    string // md5 over them, sorted by key, equal to (b)'s
}

// cpu returns the CPU time (user + sys) of both instances.
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
func splitPhase(ctx context.Context, o options, b *broker, dbs *databases, runDB, tag string, logTo io.Writer) (*splitResult, error) {
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
	load, c0, bc0 := loadavg(), sampleCPU(), b.cpu()
	s, err := runSplit(o, splitDB, b.addr, logTo)
	if err != nil {
		return nil, err
	}
	s.busy, s.load, s.brokerCPU = busy(c0, sampleCPU()), load, b.cpu()-bc0
	logf("T_split %v, peak RSS %d MB and %d MB", s.elapsed.Round(time.Millisecond), s.instances[0].maxRSS>>20, s.instances[1].maxRSS>>20)
	if err := checkSplit(ctx, s, runDB, splitDB); err != nil {
		return nil, err
	}
	return s, nil
}

// runSplit is phase (d): the two instances side by side, each draining its
// half; the last to drain merges every window (README "split pipelines").
// T_split runs from starting the first to the exit of the last.
func runSplit(o options, dbURL, brokers string, logTo io.Writer) (*splitResult, error) {
	s := &splitResult{parts: splitHalves(topics)}
	var wg sync.WaitGroup
	var errs [2]error
	var logMu sync.Mutex
	began := time.Now()
	for i, parts := range s.parts {
		// Each instance serves its metrics on a free port, like (b) on the
		// default one, which only one process can hold.
		extra := append([]string{"--partitions", parts, "--metrics-addr", "127.0.0.1:0"}, o.runArgs...)
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
			return nil, fmt.Errorf("split instance %d (--partitions %s): %w", i+1, s.parts[i], err)
		}
	}
	return s, nil
}

// aggregatesDigest returns the count of delay_aggregates rows and an md5
// over their text, in key order, without updated_at (the time of the
// commit, which differs between runs).
func aggregatesDigest(ctx context.Context, dbURL string) (int64, string, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return 0, "", err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT row(pipeline, window_start, window_end, dimension, dimension_id, operator,
		event_count, mean_delay_s, p90_delay_s, min_delay_s, max_delay_s)::text
		FROM delay_aggregates ORDER BY pipeline, window_start, dimension, dimension_id`)
	if err != nil {
		return 0, "", err
	}
	defer rows.Close()
	h := md5.New()
	var n int64
	for rows.Next() {
		var line []byte
		if err := rows.Scan(&line); err != nil {
			return 0, "", err
		}
		h.Write(line)
		h.Write([]byte{'\n'})
		n++
	}
	if err := rows.Err(); err != nil {
		return 0, "", err
	}
	return n, fmt.Sprintf("%x", h.Sum(nil)), nil
}

// leftovers counts what a finished split drain must not leave: partials
// not merged, partitions still marked drained.
func leftovers(ctx context.Context, dbURL string) (partials, drained int64, err error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close(ctx)
	err = conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM delay_partials),
		(SELECT count(*) FROM stream_positions WHERE drained)`).Scan(&partials, &drained)
	return partials, drained, err
}

// errInexact is a split run whose results differ from one instance's: a
// bug, never retried as a disturbed trial.
var errInexact = errors.New("split run not exact")

// checkSplit requires the split run's delay_aggregates to equal (b)'s: the
// same row count and md5 over the rows in key order. It fills s.rows and
// s.digest.
func checkSplit(ctx context.Context, s *splitResult, runDB, splitDB string) error {
	type digest struct {
		n   int64
		sum string
		err error
	}
	var single, split digest
	var wg sync.WaitGroup
	for _, c := range []struct {
		db string
		d  *digest
	}{{runDB, &single}, {splitDB, &split}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.d.n, c.d.sum, c.d.err = aggregatesDigest(ctx, c.db)
		}()
	}
	wg.Wait()
	if err := cmp.Or(single.err, split.err); err != nil {
		return fmt.Errorf("digest of delay_aggregates: %w", err)
	}
	if single != split {
		return fmt.Errorf("%w: delay_aggregates of the split run: %d rows, md5 %s; of one instance: %d rows, md5 %s",
			errInexact, split.n, split.sum, single.n, single.sum)
	}
	partials, drained, err := leftovers(ctx, splitDB)
	if err != nil {
		return err
	}
	if partials != 0 || drained != 0 {
		return fmt.Errorf("%w: the drains left %d partials and %d partitions marked drained", errInexact, partials, drained)
	}
	s.rows, s.digest = split.n, split.sum
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
	for i, r := range s.instances {
		fmt.Fprintf(w, "%-14s %8.2f %11s %11s %8s %-14s --partitions %s: peak RSS %d MB; commits %d, p50 %v, p99 %v; CPU user %.1fs sys %.1fs\n",
			fmt.Sprintf("    instance %d", i+1), r.elapsed.Seconds(), "", "", "", "", s.parts[i], r.maxRSS>>20, len(r.commits),
			percentile(r.commits, 0.5).Round(time.Millisecond), percentile(r.commits, 0.99).Round(time.Millisecond),
			r.userCPU.Seconds(), r.sysCPU.Seconds())
	}
	fmt.Fprintf(w, "split: delay_aggregates equal (b)'s: %d rows, md5 %s; CPU per message %.2f µs (both instances, %.1fs) against %.2f µs for one instance (%.1fs), x%.2f; T_ovstream / T_split = %.2f\n",
		s.rows, s.digest, perMsg(s.cpu()), s.cpu().Seconds(), perMsg(singleCPU), singleCPU.Seconds(),
		s.cpu().Seconds()/singleCPU.Seconds(), single.elapsed.Seconds()/s.elapsed.Seconds())
}
