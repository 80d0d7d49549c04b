package main

// The live phase: a producer writes the archive's predictions and
// positions at a fixed rate, event times moved onto the wall clock, while
// `ovstream run` runs as a service with its default flags but
// --provisional-interval, once per value of --live-provisional (0: off); the
// phase measures per finalized window row how long after its window became
// closable the row was visible in PostgreSQL (freshness), the consumer's lag,
// and the CPU of the broker, ovstream and PostgreSQL.
//
// Definitions (BENCHMARKS.md, "Live"):
//
//   - closable(W), for the window ending at W: the latest, over every
//     partition of both topics (at these rates every one holds the
//     watermark: none is idle), of the time the broker acknowledged the first
//     record of that partition with event time >= W + allowed lateness (the
//     producer's promise, franz-go kgo, acks=all: from then on a consumer can read it);
//   - visible(W): the first time a poll of PostgreSQL every livePoll saw a row
//     with window_end >= W (`SELECT max(window_end)`: a commit makes all rows
//     of a window visible at once, and windows are written in order), so
//     visible is late by at most one poll plus the query;
//   - freshness of a row of W: visible(W) - closable(W). Every row of one
//     window has the same freshness; p50, p99 and max are over rows.
//
// With the defaults (--window 5m, --allowed-lateness 2m) a window becomes
// closable once every 5 minutes of wall clock, and a window's rows need
// event times before W, then the allowed lateness to pass: the producer
// starts with event time = wall clock - delta, delta chosen so that the first
// window with data becomes closable --live-lead (2m30s) after the start.
// --live-windows N waits for N windows (5 minutes more each). With
// provisional rows on, each poll also reads their age: the database's now()
// minus provisional_positions.written_at, the last commit that wrote them.

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/ovstream/ovstream/integration/realkafka"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The defaults of `ovstream run` the live phase depends on.
const (
	liveWindow   = 5 * time.Minute
	liveLateness = 2 * time.Minute
	livePoll     = 50 * time.Millisecond
)

// liveOptions are the flags of the live phase.
type liveOptions struct {
	on      bool
	rates   []int
	windows int           // windows to wait for per rate
	lead    time.Duration // from the producer's start to the first closable window with data
	profile string        // a folder for CPU profiles of the service around the first window's closing, or ""
	// provisional: the run --provisional-interval of each live run (0: off);
	// every rate, and the sustained search, runs once per value.
	provisional []time.Duration
	// sustained: the rate search (sustained.go)
	sustained        bool
	sustainDuration  time.Duration
	sustainStart     int
	sustainMax       int
	sustainSteps     int
	sustainLagBound  time.Duration
	sustainRateShare float64
}

// liveWindowResult is one window's figures.
type liveWindowResult struct {
	end      time.Time
	closable time.Time
	visible  time.Time
	rows     int64
}

func (w liveWindowResult) freshness() time.Duration { return w.visible.Sub(w.closable) }

// liveResult is one live run at one rate.
type liveResult struct {
	rate      int
	duration  time.Duration // from the producer's start to its stop
	produced  int64
	failed    int64
	windows   []liveWindowResult
	lag       []lagSample
	cpu       cpuSplit
	load      string
	ovsRSS    int64
	converged bool // every window asked for was visible
	// provisional is the run's --provisional-interval (0: off); provAge
	// the age of the provisional rows at each poll once there are some:
	// the database's now() - provisional_positions.written_at, the last
	// commit that wrote them.
	provisional time.Duration
	provAge     []time.Duration
}

// provisionalAge returns the p-quantile (nearest rank) of r.provAge, -1
// when there is none.
func (r *liveResult) provisionalAge(p float64) time.Duration {
	if len(r.provAge) == 0 {
		return -1
	}
	a := slices.Clone(r.provAge)
	slices.Sort(a)
	return a[max(0, int(math.Ceil(p*float64(len(a))))-1)]
}

// fmtProvisional is a run's --provisional-interval as printed: "off" for 0.
func fmtProvisional(d time.Duration) string {
	if d == 0 {
		return "off"
	}
	return d.String()
}

// lagSample is the consumer's lag at one moment: the broker's high water
// marks minus the consumed offsets stored by the last commit, over every
// partition.
type lagSample struct {
	at  time.Duration // since the producer's start
	lag int64
}

// cpuSplit is the CPU time each process used during a live run.
type cpuSplit struct {
	broker, ovstream, postgres, bench time.Duration
	wall                              time.Duration
}

func (c cpuSplit) String() string {
	share := func(d time.Duration) float64 { return d.Seconds() / c.wall.Seconds() }
	return fmt.Sprintf("CPU (cores) broker %.2f, ovstream %.2f, PostgreSQL %.2f (our backends), producer %.2f",
		share(c.broker), share(c.ovstream), share(c.postgres), share(c.bench))
}

// achieved is the produce rate the producer reached, msgs/s.
func (r *liveResult) achieved() float64 { return rate(r.produced, r.duration) }

// rowFreshness returns the p-quantile (nearest rank) of the freshness over
// the rows of the visible windows.
func (r *liveResult) rowFreshness(p float64) time.Duration {
	ws := slices.Clone(r.windows)
	slices.SortFunc(ws, func(a, b liveWindowResult) int { return cmp.Compare(a.freshness(), b.freshness()) })
	var total int64
	for _, w := range ws {
		total += w.rows
	}
	if total == 0 {
		return -1
	}
	rank := int64(p*float64(total) + 0.999999)
	var seen int64
	for _, w := range ws {
		seen += w.rows
		if seen >= max(rank, 1) {
			return w.freshness()
		}
	}
	return ws[len(ws)-1].freshness()
}

// maxLag returns the largest lag sampled at or after from.
func (r *liveResult) maxLag(from time.Duration) int64 {
	var m int64
	for _, s := range r.lag {
		if s.at >= from {
			m = max(m, s.lag)
		}
	}
	return m
}

// liveRun is one live run: fresh topics on b, a fresh database, the service,
// the producer at rate msgs/s for windows closable windows (or, with
// duration > 0, for that long: the rate search).
type liveRun struct {
	o        options
	d        *dataset
	b        *broker
	dbs      *databases
	rate     int
	windows  int
	duration time.Duration
	tag      string
	logTo    io.Writer
	// provisional is the service's --provisional-interval, 0: off.
	provisional time.Duration
}

var metricsAddrRe = regexp.MustCompile(`msg="serving /metrics, /healthz and /readyz" addr=(\S+)`)

func (lr *liveRun) run(ctx context.Context) (*liveResult, error) {
	pred, pos := "live_"+lr.tag+"_"+predTopic, "live_"+lr.tag+"_"+posTopic
	if err := createTopics(ctx, lr.b.addr, map[string]int32{pred: 6, pos: 3}); err != nil {
		return nil, err
	}
	dbURL, err := lr.dbs.fresh(ctx, "ovsbench_live_"+lr.tag)
	if err != nil {
		return nil, err
	}
	// The service: default flags but the connections, the topics of this run
	// and a free port for /metrics.
	args := append([]string{"run", "--database-url", dbURL, "--brokers", lr.b.addr, "--pipeline", "live",
		"--topics", pred + "," + pos, "--metrics-addr", "127.0.0.1:0", "--provisional-interval", lr.provisional.String()},
		lr.o.runArgs...)
	if lr.o.live.profile != "" {
		args = append(args, "--pprof")
	}
	cmd := exec.Command(lr.o.bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGTERM)
		return cmd.Wait()
	}
	defer func() { _ = stop() }()
	addrc := make(chan string, 1)
	var tail []string
	var tailMu sync.Mutex
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if lr.logTo != nil {
				fmt.Fprintln(lr.logTo, line)
			}
			if m := metricsAddrRe.FindStringSubmatch(line); m != nil {
				select {
				case addrc <- m[1]:
				default:
				}
			}
			tailMu.Lock()
			tail = append(tail, line)
			if len(tail) > 30 {
				tail = tail[1:]
			}
			tailMu.Unlock()
		}
	}()
	fail := func(err error) error {
		_ = stop()
		tailMu.Lock()
		defer tailMu.Unlock()
		return fmt.Errorf("%w\novstream run's log:\n%s", err, strings.Join(tail, "\n"))
	}
	var metricsAddr string
	select {
	case metricsAddr = <-addrc:
	case <-time.After(time.Minute):
		return nil, fail(errors.New("live: ovstream run logged no metrics address within a minute"))
	}
	if err := waitReady(ctx, "http://"+metricsAddr+"/readyz", time.Minute); err != nil {
		return nil, fail(err)
	}

	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, fail(err)
	}
	defer conn.Close(context.Background())

	// Event times: wall clock - delta, so that the first window with data
	// (it ends at first) becomes closable lead after the start.
	began := time.Now()
	lead := lr.o.live.lead
	x := began.Add(lead - liveLateness)
	first := x.Truncate(liveWindow)
	delta := x.Sub(first)
	var ends []time.Time
	for k := range lr.windows {
		ends = append(ends, first.Add(time.Duration(k)*liveWindow))
	}
	if lr.duration > 0 {
		ends = nil
	}
	p, err := newLiveProducer(lr.b.addr, pred, pos, lr.d, delta, ends)
	if err != nil {
		return nil, fail(err)
	}
	res := &liveResult{rate: lr.rate, provisional: lr.provisional}
	profiled := make(chan struct{})
	if lr.o.live.profile != "" && len(ends) > 0 {
		// From 3 s before the first window can close (the producer's clock)
		// for 10 s: its closing, the window commit and the reading meanwhile.
		at := ends[0].Add(liveLateness + delta - 3*time.Second)
		file := filepath.Join(lr.o.live.profile, fmt.Sprintf("live-%s-%d.cpu.pb.gz", lr.b.kind, lr.rate))
		go func() { defer close(profiled); profileAt(ctx, metricsAddr, at, 10*time.Second, file) }()
	} else {
		close(profiled)
	}
	c0 := lr.cpuNow(ctx, conn, cmd.Process.Pid)
	pctx, cancelProduce := context.WithCancel(ctx)
	prodDone := make(chan error, 1)
	go func() { prodDone <- p.run(pctx, lr.rate) }()

	// Poll for visible windows and sample the lag until every window is
	// visible (or the duration passed).
	visible := map[time.Time]time.Time{}
	var deadline time.Time // the last window's closable moment (wall clock) plus 2 minutes
	if len(ends) > 0 {
		deadline = ends[len(ends)-1].Add(liveLateness + delta + 2*time.Minute)
	} else {
		deadline = began.Add(lr.duration)
	}
	poll := time.NewTicker(livePoll)
	defer poll.Stop()
	nextLag := began
	var perr error
loop:
	for {
		select {
		case <-ctx.Done():
			perr = ctx.Err()
			break loop
		case err := <-prodDone:
			prodDone <- err
			perr = fmt.Errorf("live producer stopped: %v", err)
			break loop
		case now := <-poll.C:
			var newest *time.Time
			if err := conn.QueryRow(ctx, `SELECT max(window_end) FROM delay_aggregates WHERE pipeline = 'live'`).Scan(&newest); err != nil {
				perr = err
				break loop
			}
			seen := time.Now()
			if lr.provisional > 0 {
				var age *time.Duration
				if err := conn.QueryRow(ctx, `SELECT now() - max(written_at) FROM provisional_positions WHERE pipeline = 'live'`).Scan(&age); err != nil {
					perr = err
					break loop
				}
				if age != nil {
					res.provAge = append(res.provAge, *age)
				}
			}
			if newest != nil {
				for _, e := range ends {
					if _, ok := visible[e]; !ok && !newest.Before(e) {
						visible[e] = seen
					}
				}
			}
			if now.After(nextLag) {
				nextLag = nextLag.Add(time.Second)
				lag, err := consumerLag(ctx, conn, lr.b.addr, []string{pred, pos})
				if err == nil {
					res.lag = append(res.lag, lagSample{at: now.Sub(began), lag: lag})
				}
			}
			if len(ends) > 0 && len(visible) == len(ends) {
				res.converged = true
				break loop
			}
			if now.After(deadline) {
				res.converged = lr.duration > 0
				break loop
			}
		}
	}
	<-profiled // the service and the producer run until the profile is taken
	cancelProduce()
	if err := <-prodDone; err != nil && !errors.Is(err, context.Canceled) && perr == nil {
		perr = err
	}
	res.duration = p.elapsed()
	c1 := lr.cpuNow(ctx, conn, cmd.Process.Pid)
	res.cpu = c1.minus(c0)
	res.ovsRSS = realkafka.ProcStatusKB(cmd.Process.Pid, "VmHWM:") * 1024
	res.produced, res.failed = p.counts()
	if perr != nil {
		return nil, fail(perr)
	}
	if err := stop(); err != nil {
		return nil, fail(fmt.Errorf("ovstream run after SIGTERM: %v", err))
	}
	// Rows per window, and each window's closable time from the producer.
	rows := map[time.Time]int64{}
	r, err := conn.Query(ctx, `SELECT window_end, count(*) FROM delay_aggregates WHERE pipeline = 'live' GROUP BY window_end`)
	if err != nil {
		return nil, err
	}
	var e time.Time
	var n int64
	if _, err := pgx.ForEachRow(r, []any{&e, &n}, func() error { rows[e.UTC()] = n; return nil }); err != nil {
		return nil, err
	}
	for _, end := range ends {
		v, ok := visible[end]
		if !ok {
			continue
		}
		c, err := p.closable(end.Add(liveLateness))
		if err != nil {
			return nil, fmt.Errorf("live: window ending %s: %w", end.Format(time.TimeOnly), err)
		}
		res.windows = append(res.windows, liveWindowResult{end: end, closable: c, visible: v, rows: rows[end.UTC()]})
	}
	if len(ends) > 0 && !res.converged {
		return res, fmt.Errorf("live at %d msgs/s: %d of %d windows visible by %s (ovstream fell behind?)", lr.rate,
			len(res.windows), len(ends), deadline.Format(time.TimeOnly))
	}
	return res, nil
}

// profileAt writes a CPU profile of the service at metricsAddr (run --pprof)
// taken from at for d into file, and logs where; a failure is logged, not
// fatal (the figures do not depend on it).
func profileAt(ctx context.Context, metricsAddr string, at time.Time, d time.Duration, file string) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(time.Until(at)):
	}
	err := func() error {
		req, err := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", metricsAddr, int(d.Seconds())), nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %s", resp.Status)
		}
		f, err := os.Create(file)
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, resp.Body); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}()
	if err != nil {
		logf("live: CPU profile %s: %v", file, err)
		return
	}
	logf("live: CPU profile of ovstream run from %s for %v: %s (go tool pprof %s)", at.Format("15:04:05"), d, file, file)
}

// cpuNow samples the CPU time of the broker, the service (pid), our
// PostgreSQL backends and the bench itself.
func (lr *liveRun) cpuNow(ctx context.Context, conn *pgx.Conn, pid int) cpuSplit {
	c := cpuSplit{broker: lr.b.cpu(), ovstream: procCPU(pid), bench: selfCPU(), wall: time.Duration(time.Now().UnixNano())}
	rows, err := conn.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database()`)
	if err == nil {
		var p int
		_, _ = pgx.ForEachRow(rows, []any{&p}, func() error { c.postgres += procCPU(p); return nil })
	}
	return c
}

// minus returns the CPU used between b and c. PostgreSQL's share counts the
// backends connected at both samples (ovstream's pool keeps its
// connections), not the server's shared processes (WAL writer,
// checkpointer), which other databases use too.
func (c cpuSplit) minus(b cpuSplit) cpuSplit {
	return cpuSplit{broker: c.broker - b.broker, ovstream: c.ovstream - b.ovstream, postgres: max(0, c.postgres-b.postgres),
		bench: c.bench - b.bench, wall: c.wall - b.wall}
}

// waitReady polls url until it answers 200.
func waitReady(ctx context.Context, url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("live: %s not ready within %v (last: %v)", url, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// createTopics creates topics (name -> partitions, replication factor 1) on
// the broker at addr, kfake or Kafka alike.
func createTopics(ctx context.Context, addr string, topics map[string]int32) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for name, n := range topics {
		resp, err := adm.CreateTopic(ctx, n, 1, nil, name)
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			return fmt.Errorf("create topic %s: %w", name, err)
		}
	}
	return nil
}

// consumerLag is the sum over the partitions of topics of the high water
// mark minus the consumed offset stored by the last commit (0 for a
// partition without a stored position).
func consumerLag(ctx context.Context, conn *pgx.Conn, addr string, topics []string) (int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topics...)
	if err != nil {
		return 0, err
	}
	var stored int64
	if err := conn.QueryRow(ctx, `SELECT coalesce(sum(coalesce(consumed_offset, next_offset)), 0)::bigint FROM stream_positions
		WHERE pipeline = 'live'`).Scan(&stored); err != nil {
		return 0, err
	}
	var hw int64
	ends.Each(func(o kadm.ListedOffset) { hw += o.Offset })
	return hw - stored, nil
}

// fmtFresh formats a freshness in seconds, "n/a" when no window was measured.
func fmtFresh(d time.Duration) string {
	if d < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", d.Seconds())
}

// printLive prints the live phase's table: one line per rate.
func printLive(w io.Writer, rs []*liveResult) {
	if len(rs) == 0 {
		return
	}
	fmt.Fprintf(w, "\nlive: `ovstream run` as a service (default flags), event times on the wall clock; freshness = visible in PostgreSQL (poll every %v) - closable (the last partition's first acknowledged record at or past window end + %v)\n",
		livePoll, liveLateness)
	fmt.Fprintln(w, "provisional: run --provisional-interval; prov age = the database's now() - provisional_positions.written_at at each poll (p50/max s)")
	fmt.Fprintf(w, "%9s %11s %9s %8s %8s %8s %8s %7s %13s %10s %10s %-14s %s\n", "rate", "provisional", "achieved", "windows", "rows",
		"p50 s", "p99 s", "max s", "prov age", "max lag", "peak RSS", "load", "CPU")
	for _, r := range rs {
		var rows int64
		for _, x := range r.windows {
			rows += x.rows
		}
		fmt.Fprintf(w, "%9d %11s %9.0f %8d %8d %8s %8s %7s %13s %10d %7d MB %-14s %s\n", r.rate, fmtProvisional(r.provisional),
			r.achieved(), len(r.windows), rows, fmtFresh(r.rowFreshness(0.5)), fmtFresh(r.rowFreshness(0.99)), fmtFresh(r.rowFreshness(1)),
			fmtFresh(r.provisionalAge(0.5))+"/"+fmtFresh(r.provisionalAge(1)), r.maxLag(0), r.ovsRSS>>20, r.load, r.cpu)
		for _, x := range r.windows {
			fmt.Fprintf(w, "          window ending %s: %d rows, closable %s, visible %s: %.3f s\n", x.end.Format(time.TimeOnly), x.rows,
				x.closable.Format("15:04:05.000"), x.visible.Format("15:04:05.000"), x.freshness().Seconds())
		}
	}
}
