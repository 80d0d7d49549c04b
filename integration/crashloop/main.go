// Command crashloop measures how long an ovstream instance must live after a
// restart to make progress (docs/benchmarks-history.md "Progress under
// repeated crashes"), and what repeated SIGKILLs at a fixed interval do.
//
// A restart seeks every partition to its stored next_offset (the committable
// offset: the smallest offset still in an open window) and seeds the
// watermark from the stored one, S. The first window it can write is the
// oldest open one, ending at E = the first window end after S; it closes
// when every active partition delivered an event time >= E + allowed
// lateness L. So partition p must read N_p records: from next_offset up to
// and including the first record whose event time reaches E + L. The bound:
//
//	T_progress = T0 + P * max_p N_p / R + tick + C  ~  T0 + (W + L) * D / R + C
//
// with T0 the start-up (process start to "watermark seeded"; it includes the
// wait for a killed owner's lease, up to --lease, unless --takeover), P partitions
// read at R/P records/s each, tick <= 100 ms (the eager commit: consumer
// run.go starts a commit at the first tick that finds a closed window, not
// after the flush interval), C the commit's duration, W the window, D the
// records per second of event time.
//
// What it does: an in-process kfake broker (the embedded broker's kfake)
// whose responses are paced to --bandwidth bytes/s (0: no limit; a slow
// network, so that R is set and the same in every run), the GTFS-realtime
// files of --data produced keyed by trip id, and `ovstream run` as a
// subprocess against a fresh database per setting:
//
//  1. For each --settings W/L: a first instance runs until it wrote windows
//     and --warmup passed (its read rate R is measured from its metrics),
//     then SIGKILL. Then --samples times: read the stored state, compute E
//     and N_p from the data, restart, poll stream_positions every 20 ms until
//     a next_offset moves (and /metrics for the watermark), SIGKILL at once
//     (the state for the next sample). Each sample is printed with the
//     formula's terms next to the measured ones.
//  2. With --kill-factors (multiples of the measured median T_progress of
//     --kill-setting) or --kills: a fresh database, the first instance as
//     above, then --restarts times: start, SIGKILL after K, and count the
//     windows and next_offset the lifetime committed.
//
// Usage (from the repository root):
//
//	go run ./integration/crashloop --run-args --takeover              # 2 h slice of testdata, 256 KiB/s
//	go run ./integration/crashloop --data ../shared/data/auckland-20160519-48h-tripupdates-pb.tar.xz \
//	    --bandwidth 0 --fetch-bytes 131072 --batch-messages 256 --warmup 300ms --run-args --takeover
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	predTopic  = "arrival_predictions"
	pipeline   = "crashloop"
	partitions = 6
	tick       = 50 * time.Millisecond // half of consumer's 100 ms tick: the mean wait for the eager commit
)

type setting struct{ w, l time.Duration }

func (s setting) String() string { return short(s.w) + "/" + short(s.l) }

// short writes whole minutes as "5m".
func short(d time.Duration) string {
	if d%time.Minute == 0 {
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	}
	return d.String()
}

type options struct {
	data, cache, adminURL, bin string
	settings                   []setting
	samples, restarts, batch   int
	bandwidth                  int64
	fetchBytes                 int
	warmup                     time.Duration
	killSetting                setting
	killFactors                []float64
	kills                      []time.Duration
	keep                       bool
	runArgs                    []string
}

func main() {
	var o options
	var settings, killSetting, factors, kills string
	flag.StringVar(&o.data, "data", "testdata/auckland-20160518-2h.tar.gz", "GTFS-realtime TripUpdates: a folder or a .tar.gz/.tar.xz archive")
	flag.StringVar(&o.cache, "cache", filepath.Join(os.TempDir(), "ovstream-crashloop"), "folder for unpacked data, the binary and the logs")
	flag.StringVar(&o.adminURL, "database-url", envOr("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"), "PostgreSQL where databases are created and dropped")
	flag.StringVar(&o.bin, "bin", "", "ovstream binary (default: go build ./cmd/ovstream into --cache)")
	flag.StringVar(&settings, "settings", "5m/2m,5m/10m,15m/2m", "window/allowed-lateness pairs to measure")
	flag.IntVar(&o.samples, "samples", 3, "restarts measured per setting")
	flag.Int64Var(&o.bandwidth, "bandwidth", 256<<10, "bytes/s the broker sends to all its clients together; 0 = no limit")
	flag.IntVar(&o.batch, "batch-messages", 32, "records per produce request at most (32: record batches of about 7 KB, under --fetch-bytes)")
	flag.IntVar(&o.fetchBytes, "fetch-bytes", 16<<10, "ovstream --fetch-bytes (small, so that a paced fetch returns records steadily)")
	flag.DurationVar(&o.warmup, "warmup", 3*time.Second, "how long the first instance of a setting runs after it wrote its first windows")
	flag.StringVar(&killSetting, "kill-setting", "5m/2m", "setting of the repeated-kill experiment")
	flag.StringVar(&factors, "kill-factors", "0.5,2", "kill intervals as multiples of the measured median time to progress of --kill-setting ('' = none)")
	flag.StringVar(&kills, "kills", "", "kill intervals, e.g. 1s,4s (added to --kill-factors)")
	flag.IntVar(&o.restarts, "restarts", 8, "restarts per kill interval")
	flag.BoolVar(&o.keep, "keep", false, "keep the databases")
	var runArgs string
	flag.StringVar(&runArgs, "run-args", "", "more `ovstream run` flags, space-separated (e.g. --takeover: no wait for the killed owner's lease)")
	flag.Parse()
	var err error
	if o.settings, err = parseSettings(settings); err != nil {
		fatalf("--settings: %v", err)
	}
	ks, err := parseSettings(killSetting)
	if err != nil || len(ks) != 1 {
		fatalf("--kill-setting %q: want one W/L", killSetting)
	}
	o.killSetting = ks[0]
	o.runArgs = strings.Fields(runArgs)
	for _, f := range splitList(factors) {
		v, err := strconv.ParseFloat(f, 64)
		if err != nil || v <= 0 {
			fatalf("--kill-factors %q: want positive numbers", factors)
		}
		o.killFactors = append(o.killFactors, v)
	}
	for _, k := range splitList(kills) {
		d, err := time.ParseDuration(k)
		if err != nil || d <= 0 {
			fatalf("--kills %q: want positive durations", kills)
		}
		o.kills = append(o.kills, d)
	}
	if err := run(context.Background(), o); err != nil {
		fatalf("%v", err)
	}
}

// env is what every experiment shares.
type env struct {
	o      options
	addr   string
	thr    *throttle
	stamps map[int32][]stamp
	end    time.Time // the data's last event time
	dbs    *databases
	runs   int
}

func run(ctx context.Context, o options) error {
	if err := os.MkdirAll(o.cache, 0o755); err != nil {
		return err
	}
	if o.bin == "" {
		o.bin = filepath.Join(o.cache, "ovstream")
		if out, err := exec.Command("go", "build", "-o", o.bin, "./cmd/ovstream").CombinedOutput(); err != nil {
			return fmt.Errorf("go build ./cmd/ovstream (run from the repository root): %v\n%s", err, out)
		}
	}
	preds, err := loadPredictions(o.data, o.cache)
	if err != nil {
		return err
	}
	e := &env{o: o, thr: &throttle{}, dbs: &databases{admin: o.adminURL, bin: o.bin}}
	cluster, addr, err := startBroker(partitions, e.thr)
	if err != nil {
		return err
	}
	defer cluster.Close()
	e.addr = addr
	if err := produceAll(ctx, addr, preds, o.batch); err != nil {
		return err
	}
	if e.stamps, err = readBack(addr); err != nil {
		return err
	}
	for _, ss := range e.stamps {
		for _, s := range ss {
			if s.t.After(e.end) {
				e.end = s.t
			}
		}
	}
	if !o.keep {
		defer e.dbs.dropAll(context.Background())
	}
	e.thr.rate.Store(o.bandwidth)
	logf("data %s: %d predictions, event times to %s; broker %s, bandwidth %s, --fetch-bytes %d, --batch-messages %d; ovstream %s %s",
		o.data, len(preds), e.end.Format(time.RFC3339), addr, rate(o.bandwidth), o.fetchBytes, o.batch, o.bin, strings.Join(o.runArgs, " "))

	medians := map[setting]time.Duration{}
	for _, s := range o.settings {
		samples, r, err := e.measure(ctx, s)
		if err != nil {
			return fmt.Errorf("setting %s: %w", s, err)
		}
		printSamples(s, r, samples)
		if len(samples) > 0 {
			totals := make([]time.Duration, len(samples))
			for i, sm := range samples {
				totals[i] = sm.total
			}
			slices.Sort(totals)
			medians[s] = totals[len(totals)/2]
		}
	}
	kills := slices.Clone(o.kills)
	if b, ok := medians[o.killSetting]; ok {
		for _, f := range o.killFactors {
			kills = append(kills, time.Duration(f*float64(b)).Round(10*time.Millisecond))
		}
	} else if len(o.killFactors) > 0 {
		return fmt.Errorf("--kill-factors need --kill-setting %s among --settings", o.killSetting)
	}
	for _, k := range kills {
		if err := e.killEvery(ctx, o.killSetting, k, medians[o.killSetting]); err != nil {
			return fmt.Errorf("kill every %v: %w", k, err)
		}
	}
	return nil
}

func (e *env) args(db string, s setting) []string {
	return append([]string{"--database-url", db, "--brokers", e.addr, "--pipeline", pipeline, "--topics", predTopic + ",",
		"--window", s.w.String(), "--allowed-lateness", s.l.String(), "--metrics-addr", "127.0.0.1:0",
		"--log-level", "debug", "--fetch-bytes", strconv.Itoa(e.o.fetchBytes)}, e.o.runArgs...)
}

func (e *env) start(db string, s setting) (*proc, error) {
	e.runs++
	return startRun(e.o.bin, filepath.Join(e.o.cache, fmt.Sprintf("run-%03d.log", e.runs)), e.args(db, s))
}

// warmUp runs the first instance on a fresh database until it wrote windows
// and o.warmup passed since, then kills it; it returns the database and the
// instance's read rate R (records/s, from its metrics over the warm-up).
func (e *env) warmUp(ctx context.Context, s setting) (string, *pgx.Conn, float64, error) {
	name := fmt.Sprintf("crashloop_%d_%d", os.Getpid(), e.runs+1)
	db, err := e.dbs.fresh(ctx, name)
	if err != nil {
		return "", nil, 0, err
	}
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		return "", nil, 0, err
	}
	p, err := e.start(db, s)
	if err != nil {
		return "", nil, 0, err
	}
	defer p.kill()
	var first time.Time
	var t0, t1 time.Time
	var c0, c1 float64
	addr := ""
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) || p.exited() {
			return "", nil, 0, fmt.Errorf("first instance wrote no window (log %s)", p.logPath)
		}
		if addr == "" {
			addr = metricsAddr(p.logPath)
			continue
		}
		if _, c, err := scrape(addr); err == nil && c > 0 {
			if t0.IsZero() {
				t0, c0 = time.Now(), c
			}
			if c > c1 { // the rate over whole steps: records arrive a fetch at a time
				t1, c1 = time.Now(), c
			}
		}
		st, err := readStored(ctx, conn)
		if err != nil {
			return "", nil, 0, err
		}
		if first.IsZero() && st.windows > 0 {
			first = time.Now()
		}
		if !first.IsZero() && time.Since(first) >= e.o.warmup && c1 > c0 {
			p.kill()
			return db, conn, (c1 - c0) / t1.Sub(t0).Seconds(), settle(ctx, conn)
		}
	}
}

// sample is one measured restart.
type sample struct {
	seed, e      time.Time // seeded watermark, end of the oldest open window
	nSum, nMax   int64     // records to read: sum over partitions, partitions * max
	density      float64   // records per second of event time in [E-W, E+L)
	t0           time.Duration
	read         time.Duration // "watermark seeded" -> watermark >= E (metrics, 20 ms polls)
	eager        time.Duration // watermark >= E -> the commit that wrote E began
	commit       time.Duration // that commit's duration (its log line)
	inflight     bool          // a periodic commit was running when the watermark passed E
	total        time.Duration // process start -> a stored next_offset moved
	effectiveR   float64       // records consumed / read
	periodicDone int           // commits without windows before it
}

func (e *env) measure(ctx context.Context, s setting) ([]sample, float64, error) {
	db, conn, r, err := e.warmUp(ctx, s)
	if err != nil {
		return nil, 0, err
	}
	defer conn.Close(ctx)
	logf("%s: first instance read %.0f records/s", s, r)
	var out []sample
	for i := 0; i < e.o.samples; i++ {
		st, err := readStored(ctx, conn)
		if err != nil {
			return nil, 0, err
		}
		sm := sample{seed: st.seed}
		sm.e = st.seed.Truncate(s.w).Add(s.w)
		if sm.e.Add(s.l + s.w).After(e.end) {
			logf("%s: data ends before window %s closes; %d samples", s, sm.e.Format("15:04"), len(out))
			break
		}
		sm.nSum, sm.nMax = e.toRead(st.next, sm.e.Add(s.l))
		sm.density = e.density(sm.e.Add(-s.w), sm.e.Add(s.l))
		if err := e.restart(ctx, db, conn, s, st, &sm); err != nil {
			return nil, 0, err
		}
		out = append(out, sm)
	}
	return out, r, nil
}

// toRead returns, for a restart at next, the records each partition reads
// until its max event time reaches until: their sum and partitions * the
// largest (the partitions share the read rate).
func (e *env) toRead(next map[int32]int64, until time.Time) (sum, most int64) {
	for p, ss := range e.stamps {
		i := sort.Search(len(ss), func(i int) bool { return ss[i].offset >= next[p] })
		n := int64(0)
		for ; i < len(ss); i++ {
			n++
			if !ss[i].t.Before(until) {
				break
			}
		}
		sum += n
		most = max(most, n)
	}
	return sum, most * int64(len(e.stamps))
}

// density returns the records per second of event time in [from, to).
func (e *env) density(from, to time.Time) float64 {
	n := 0
	for _, ss := range e.stamps {
		for _, s := range ss {
			if !s.t.Before(from) && s.t.Before(to) {
				n++
			}
		}
	}
	return float64(n) / to.Sub(from).Seconds()
}

// restart starts an instance, waits until a stored next_offset moves, kills
// it and fills in sm from the polls and its log.
func (e *env) restart(ctx context.Context, db string, conn *pgx.Conn, s setting, before stored, sm *sample) error {
	p, err := e.start(db, s)
	if err != nil {
		return err
	}
	defer p.kill()
	var tWM time.Time
	var consumedAtWM float64
	addr := ""
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) || p.exited() {
			return fmt.Errorf("no progress within 5 minutes (log %s)", p.logPath)
		}
		if addr == "" {
			addr = metricsAddr(p.logPath)
		} else if wm, c, err := scrape(addr); err == nil && tWM.IsZero() && wm >= float64(sm.e.Unix()) {
			tWM, consumedAtWM = time.Now(), c
		}
		st, err := readStored(ctx, conn)
		if err != nil {
			return err
		}
		if st.sumNext > before.sumNext {
			sm.total = time.Since(p.started)
			if e.loggedCommit(p) {
				break
			}
			logf("%s: next_offset moved without a commit of this instance (the killed one's COMMIT landed late); polling on", s)
			before = st
		}
	}
	p.kill()
	if err := settle(ctx, conn); err != nil {
		return err
	}
	lines, err := readLog(p.logPath)
	if err != nil {
		return err
	}
	var seeded time.Time
	for _, l := range lines {
		switch {
		case l.msg == "watermark seeded":
			seeded = l.at
		case l.msg == "committed" && sm.commit == 0:
			took, _ := time.ParseDuration(l.fields["took"])
			began := l.at.Add(-took)
			if l.fields["windows"] == "0" {
				sm.periodicDone++
				sm.inflight = sm.inflight || (!tWM.IsZero() && began.Before(tWM) && l.at.After(tWM))
				continue
			}
			sm.commit = took
			if !tWM.IsZero() {
				sm.eager = began.Sub(tWM)
			}
		}
	}
	if seeded.IsZero() || sm.commit == 0 {
		return fmt.Errorf("log %s: no start-up or no commit with windows", p.logPath)
	}
	sm.t0 = seeded.Sub(p.started)
	if !tWM.IsZero() {
		sm.read = tWM.Sub(seeded)
		sm.effectiveR = consumedAtWM / sm.read.Seconds()
	}
	return nil
}

// loggedCommit waits up to 2 s for p's log to show a commit that wrote
// windows: the commit is visible in the database before the loop logs it.
func (e *env) loggedCommit(p *proc) bool {
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		lines, _ := readLog(p.logPath)
		for _, l := range lines {
			if l.msg == "committed" && l.fields["windows"] != "0" {
				return true
			}
		}
	}
	return false
}

func printSamples(s setting, r float64, samples []sample) {
	fmt.Printf("\nsetting W/L = %s, R = %.0f records/s (first instance)\n", s, r)
	fmt.Printf("%-5s %-5s %7s %7s %6s | %6s %7s %7s %6s %6s | %7s %7s %7s | %6s\n",
		"S", "E", "N_sum", "P*maxN", "D/s", "T0", "read", "N/R", "eager", "C", "total", "formula", "coarse", "R_eff")
	for _, sm := range samples {
		predRead := time.Duration(float64(sm.nMax) / r * float64(time.Second))
		formula := sm.t0 + predRead + tick + sm.commit
		coarse := sm.t0 + time.Duration((s.w+s.l).Seconds()*sm.density/r*float64(time.Second)) + tick + sm.commit
		fl := ""
		if sm.inflight {
			fl = " (a periodic commit was in flight)"
		}
		fmt.Printf("%-5s %-5s %7d %7d %6.1f | %6s %7s %7s %6s %6s | %7s %7s %7s | %6.0f%s\n",
			sm.seed.Format("15:04"), sm.e.Format("15:04"), sm.nSum, sm.nMax, sm.density,
			ms(sm.t0), msOr(sm.read), ms(predRead), msOr(sm.eager), ms(sm.commit), ms(sm.total), ms(formula), ms(coarse),
			sm.effectiveR, fl)
	}
}

// killEvery runs o.restarts lifetimes of k each from a state with open
// windows and prints what each lifetime committed.
func (e *env) killEvery(ctx context.Context, s setting, k, bound time.Duration) error {
	db, conn, r, err := e.warmUp(ctx, s)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	before, err := readStored(ctx, conn)
	if err != nil {
		return err
	}
	var windows []string
	progressed := 0
	first := before
	for i := 0; i < e.o.restarts; i++ {
		p, err := e.start(db, s)
		if err != nil {
			return err
		}
		select {
		case <-p.done:
			return fmt.Errorf("ovstream exited before the kill (log %s)", p.logPath)
		case <-time.After(time.Until(p.started.Add(k))):
		}
		p.kill()
		if err := settle(ctx, conn); err != nil {
			return err
		}
		after, err := readStored(ctx, conn)
		if err != nil {
			return err
		}
		if after.sumNext > before.sumNext {
			progressed++
		}
		windows = append(windows, strconv.FormatInt(after.windows-before.windows, 10))
		before = after
	}
	fmt.Printf("\nkill every %s (%.2f x measured T_progress %s; %s, R %.0f records/s): %d of %d lifetimes moved next_offset; "+
		"windows written per lifetime: %s; next_offset sum %d -> %d; watermark %s -> %s\n",
		ms(k), k.Seconds()/max(bound.Seconds(), 1e-9), ms(bound), s, r, progressed, e.o.restarts,
		strings.Join(windows, " "), first.sumNext, before.sumNext,
		first.seed.Format("01-02 15:04:05"), before.seed.Format("01-02 15:04:05"))
	return nil
}

func parseSettings(s string) ([]setting, error) {
	var out []setting
	for _, item := range splitList(s) {
		a, b, ok := strings.Cut(item, "/")
		w, err1 := time.ParseDuration(a)
		l, err2 := time.ParseDuration(b)
		if !ok || err1 != nil || err2 != nil || w <= 0 || l < 0 {
			return nil, fmt.Errorf("%q: want WINDOW/LATENESS, e.g. 5m/2m", item)
		}
		out = append(out, setting{w, l})
	}
	return out, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', 2, 64) + "s"
}

// msOr is ms, or "n/a" for a time the polls did not see (the watermark
// metric was not read between its passing E and the commit).
func msOr(d time.Duration) string {
	if d == 0 {
		return "n/a"
	}
	return ms(d)
}

func rate(b int64) string {
	if b <= 0 {
		return "unlimited"
	}
	return fmt.Sprintf("%d KiB/s", b>>10)
}

func envOr(key, def string) string { return cmp.Or(os.Getenv(key), def) }

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "crashloop: "+format+"\n", args...)
	os.Exit(1)
}
