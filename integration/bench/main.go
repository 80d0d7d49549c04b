// Command bench measures ovstream end to end against the two costs it cannot
// avoid, in one run on the same data (BENCHMARKS.md "Method"):
//
//	(a) T_read:     a bare sarama ConsumePartition reader over every partition that only counts;
//	(b) T_ovstream: `ovstream run --drain` on a fresh database, from process start to exit;
//	(c) T_write:    the rows (b) left in delay_aggregates, vehicle_latest, trip_delay_latest and
//	                stream_positions, written again into empty tables of the same schema by one
//	                plain CopyFrom per table in one transaction;
//	(d) T_split:    two `ovstream run --drain` instances of one pipeline on disjoint halves of
//	                the partitions of both topics, side by side on a fresh database, from
//	                starting both to both exited; their delay_aggregates must equal (b)'s
//	                (row count and md5 over the rows in key order) (--split=false skips it);
//	(e) T_elt:      the peer users would build instead ("ELT", elt.go): read the predictions,
//	                COPY the valid ones into a raw table, then one INSERT ... SELECT ... GROUP BY
//	                with percentile_cont(0.9); its rows must equal (b)'s (--elt=false skips it);
//	(f) T_flink:    with --peer flink, on Apache Kafka only: the Flink SQL job users would write
//	                (flink.go, integration/flinkpeer), from JVM start to exit; its rows must
//	                equal (b)'s (P90 within 1e-9 relative); then T_flink_xa, the same job
//	                through the JDBC connector's exactly-once (XA) sink, when the server
//	                allows prepared transactions (max_prepared_transactions);
//
// --instances 1,2,3 measures instead how one pipeline scales across split
// instances (instances.go): per count N, N instances like (d) on disjoint
// blocks of the partitions, their rows equal to one instance's, with each
// instance's CPU and PostgreSQL's CPU and WAL (docs/scaling.md).
//
// --trials times (default 3) on the data produced once, each phase started on
// a quiet machine (quiet.go: the load average before and after each phase is
// printed; a trial that found the machine loaded runs again). It prints the
// median trial's table, every trial's figures and their medians, and ends
// with the medians:
//
//	ratio=R        (T_read + T_write) / T_ovstream
//	limit_ratio=L  max(T_read, T_write) / T_ovstream (perfect overlap of reading and writing gives 1)
//	elt_ratio=E    T_elt / T_ovstream
//	split_ratio=S  T_ovstream / T_split
//
// and with --peer flink flink_wall_ratio=, flink_cpu_ratio= and
// flink_rss_ratio= (the Flink job's wall time, CPU time and peak RSS over
// (b)'s), the same of the XA form (flink_xa_wall_ratio=, ...) or a line
// flink_xa=not run: saying why.
//
// The data is the Auckland 48 h GTFS-realtime archive (../shared/data), mapped
// like `ovstream produce --operator AT`, repeated with event times shifted by
// 48 h per copy up to --predictions predictions, plus positions synthesized
// from the archive's vehicle ids (the archive holds trip updates only): one
// per vehicle per --position-every in which it reported. `ovstream broker`
// runs as its own process with 6 + 3 partitions; the messages are produced
// once per measured size, idempotent, lz4, batches of up to 1 MiB.
//
// Usage (from the repository root; `make bench` runs the first):
//
//	go run ./integration/bench                        # 5M predictions
//	go run ./integration/bench --predictions 500000   # quick iteration
//	go run ./integration/bench --scale 1,4,16 --base 312500
//	go run ./integration/bench --instances 1,2,3 --predictions 1000000 --trials 1
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ovstream/ovstream/integration/flinkpeer"
	"github.com/ovstream/ovstream/integration/realkafka"
)

const (
	predTopic = "arrival_predictions"
	posTopic  = "vehicle_positions"
	topics    = predTopic + ":6," + posTopic + ":3"
)

type options struct {
	predictions   int
	base          int
	serviceDays   bool
	scales        []int
	archive       string
	cache         string
	adminURL      string
	bin           string
	positionEvery time.Duration
	runArgs       []string
	maxDelay      time.Duration // (b)'s --max-delay: the peers drop what run sets aside as implausible
	wrap          []string
	goBench       bool
	keep          bool
	logFile       string
	trials        int
	pgLog         bool
	schemaSQL     string
	split         bool
	elt           bool
	flink         bool        // --peer flink: phase (f), on Apache Kafka only
	flinkForms    []flinkForm // the forms (f) runs: a prefix of flinkForms, without the XA form when flinkXANot says why
	flinkXANot    string
	load          loadRule
	burstKeys     []int // --burst-keys: the burst measurement instead of the phases (burst.go)
	burstAround   int
	burstNames    bool
	instances     []int    // --instances: the scaling of split instances instead of the phases (instances.go)
	brokers       []string // --broker: brokerEmbedded, brokerKafka or both, in that order
	live          liveOptions
}

func main() {
	var o options
	var scale, runArgs, wrap string
	flag.IntVar(&o.predictions, "predictions", 5_000_000, "predictions to produce and measure")
	flag.StringVar(&scale, "scale", "", "comma-separated multipliers of --base, one full measurement each (e.g. 1,4,16)")
	flag.IntVar(&o.base, "base", 312_500, "predictions at scale 1 (with --scale)")
	flag.StringVar(&o.archive, "archive", "../shared/data/auckland-20160519-48h-tripupdates-pb.tar.xz", "the Auckland 48 h archive (.tar.xz)")
	flag.StringVar(&o.cache, "cache", filepath.Join(os.TempDir(), "ovstream-bench"), "folder for the unpacked archive and the binary")
	flag.StringVar(&o.adminURL, "database-url", envOr("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/ovstream?sslmode=disable"),
		"PostgreSQL where the bench creates (and drops) its databases (env DATABASE_URL)")
	flag.StringVar(&o.bin, "bin", "", "ovstream binary (default: go build ./cmd/ovstream into --cache)")
	flag.DurationVar(&o.positionEvery, "position-every", 5*time.Minute, "one synthesized position per vehicle per this much time it reported (0 = none)")
	flag.StringVar(&runArgs, "run-args", "", "extra arguments for ovstream run, space-separated (e.g. \"--flush-interval 2s\")")
	flag.StringVar(&wrap, "wrap", "", "run ovstream under this command, space-separated (e.g. \"perf record -g -o perf.data --\"); peak RSS is then the wrapper's")
	flag.BoolVar(&o.serviceDays, "service-days", false, "give every prediction a start_date (its Auckland service day; the archive has none), so that the predictions form stop visits and their prediction history")
	flag.BoolVar(&o.goBench, "gobench", true, "run the hot-path Go benchmark for allocations per message")
	flag.BoolVar(&o.keep, "keep", false, "keep the bench databases")
	flag.StringVar(&o.logFile, "log", "", "append ovstream's log to this file")
	flag.BoolVar(&o.pgLog, "pg-log", false, "log every statement of (b), (d) and --instances with its duration in the server log (ALTER DATABASE ... SET log_min_duration_statement = 0 on the bench databases only)")
	flag.StringVar(&o.schemaSQL, "schema-sql", "", "SQL run on every fresh database after the migrations (experiments, e.g. \"DROP INDEX delay_aggregates_window_end\")")
	flag.Func("read-fetch", "T_read's sarama Consumer.Fetch.Default in bytes, to mirror an ovstream built with another (default: sarama's, 1 MiB)", func(v string) error {
		n, err := strconv.ParseInt(v, 10, 32)
		readFetchBytes = int32(n)
		return err
	})
	o.brokers = []string{brokerEmbedded}
	flag.Func("broker", "the broker: embedded (ovstream broker, the kfake broker), kafka (Apache Kafka "+realkafka.Version+
		" from Maven Central, one KRaft node; needs java and mvn) or both (every phase on each, one summary side by side)", func(v string) error {
		switch v {
		case brokerEmbedded, brokerKafka:
			o.brokers = []string{v}
		case "both":
			o.brokers = []string{brokerEmbedded, brokerKafka}
		default:
			return fmt.Errorf("want embedded, kafka or both")
		}
		return nil
	})
	flag.BoolVar(&o.live.on, "live", true, "also run the live phase (live.go): the producer at each --live-rates while ovstream run runs as a service; freshness per window row")
	flag.Func("live-rates", "comma-separated produce rates of the live phase, msgs/s (default 10000,50000)", func(v string) error {
		o.live.rates = nil
		for _, s := range strings.Split(v, ",") {
			k, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || k <= 0 {
				return fmt.Errorf("want positive integers, e.g. 10000,50000")
			}
			o.live.rates = append(o.live.rates, k)
		}
		return nil
	})
	o.live.rates = []int{10_000, 50_000}
	flag.Func("live-provisional", "comma-separated `intervals`: each live rate and the sustained search run once per value with run --provisional-interval set to it (0: no provisional rows; default 0,5s)", func(v string) error {
		o.live.provisional = nil
		for _, f := range strings.Split(v, ",") {
			d, err := time.ParseDuration(strings.TrimSpace(f))
			if err != nil || d < 0 {
				return fmt.Errorf("%q: want a duration >= 0", f)
			}
			o.live.provisional = append(o.live.provisional, d)
		}
		return nil
	})
	o.live.provisional = []time.Duration{0, 5 * time.Second}
	flag.IntVar(&o.live.windows, "live-windows", 1, "closable windows to wait for per live rate (with the default 5m windows, 5 minutes more each)")
	flag.DurationVar(&o.live.lead, "live-lead", 2*time.Minute+30*time.Second,
		"from the live producer's start to the first window with data becoming closable (at least the allowed lateness, 2m, plus 10s)")
	flag.StringVar(&o.live.profile, "live-profile", "", "a `folder` for a 10 s CPU profile of `ovstream run` (run --pprof) around the first window's closing, per live rate and broker")
	flag.BoolVar(&o.live.sustained, "sustained", false, "also search the highest sustained rate (sustained.go): live runs of --sustained-duration at doubling rates from --sustained-start, then bisection")
	flag.DurationVar(&o.live.sustainDuration, "sustained-duration", 2*time.Minute, "how long the lag must stay bounded at a rate")
	flag.IntVar(&o.live.sustainStart, "sustained-start", 10_000, "the first rate of the search, msgs/s")
	flag.IntVar(&o.live.sustainMax, "sustained-max", 400_000, "the highest rate the search tries, msgs/s")
	flag.IntVar(&o.live.sustainSteps, "sustained-steps", 2, "bisection steps after the doubling")
	flag.DurationVar(&o.live.sustainLagBound, "sustained-lag-bound", 15*time.Second, "the lag bound, as input time: rate x this many seconds of records")
	flag.Float64Var(&o.live.sustainRateShare, "sustained-rate-share", 0.97, "the share of the rate the producer must reach for the rate to count")
	flag.BoolVar(&o.split, "split", true, "also run (d): two instances of one pipeline on disjoint halves of the partitions (not under --wrap)")
	flag.BoolVar(&o.elt, "elt", true, "also run (e): the ELT peer (COPY into a raw table, then one INSERT ... SELECT ... GROUP BY)")
	flag.Func("peer", "also run this peer on the same data: flink (phase (f), the Flink SQL job of integration/flinkpeer; needs --broker kafka or both, java, javac and mvn)", func(v string) error {
		if v != "flink" {
			return fmt.Errorf("want flink")
		}
		o.flink = true
		return nil
	})
	flag.Func("burst-keys", "comma-separated key counts N: instead of the phases, measure peak RSS of ovstream run --drain when ONE window holds N new station ids, each on fresh data (burst.go)", func(v string) error {
		for _, s := range strings.Split(v, ",") {
			k, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || k <= 0 {
				return fmt.Errorf("want positive integers, e.g. 100000,400000")
			}
			o.burstKeys = append(o.burstKeys, k)
		}
		return nil
	})
	flag.Func("instances", "comma-separated instance counts N (e.g. 1,2,3): instead of the phases (the phase flags --peer, --split, --elt, --live, --wrap and --scale do not apply), N ovstream run --drain instances of one pipeline on disjoint blocks of the partitions, each count on a fresh database, every count's rows equal to one instance's (which always runs first); CPU per instance, PostgreSQL's CPU and WAL (instances.go)", func(v string) error {
		for _, s := range strings.Split(v, ",") {
			k, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil {
				return fmt.Errorf("want positive integers, e.g. 1,2,3")
			}
			if _, err := splitPartitions(topics, k); err != nil {
				return err
			}
			o.instances = append(o.instances, k)
		}
		return nil
	})
	flag.IntVar(&o.burstAround, "burst-around", 200_000, "with --burst-keys: archive predictions around the burst")
	flag.BoolVar(&o.burstNames, "burst-names", true, "with --burst-keys: the new stations have stop names")
	flag.IntVar(&o.trials, "trials", 3, "trials of the phases on the data produced once; every trial's figures and the medians are printed")
	flag.IntVar(&o.trials, "repeat", 3, "the same as --trials")
	flag.Float64Var(&o.load.max, "max-load", 1.5, "a timed phase starts only at a 1-minute load average up to this (0: no rule)")
	flag.DurationVar(&o.load.settle, "settle", 90*time.Second, "the longest wait before a phase for the load average to fall to --max-load")
	flag.IntVar(&o.load.retries, "load-retries", 2, "attempts beyond the first of a trial that found the machine loaded; the last one runs whatever the load")
	flag.Parse()
	if o.trials < 1 {
		fatalf("--trials %d: want at least 1", o.trials)
	}
	if o.live.lead < liveLateness+10*time.Second || o.live.windows < 1 {
		fatalf("--live-lead %v, --live-windows %d: want at least %v and 1", o.live.lead, o.live.windows, liveLateness+10*time.Second)
	}
	if scale != "" {
		for _, s := range strings.Split(scale, ",") {
			k, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || k <= 0 {
				fatalf("--scale %q: want positive integers", scale)
			}
			o.scales = append(o.scales, k)
		}
	}
	if o.flink && !slices.Contains(o.brokers, brokerKafka) {
		fatalf("--peer flink needs --broker kafka (or both): Flink's Kafka source cannot start against the embedded broker")
	}
	o.runArgs = strings.Fields(runArgs)
	var err error
	if o.maxDelay, err = runMaxDelay(o.runArgs); err != nil {
		fatalf("--run-args: %v", err)
	}
	o.wrap = strings.Fields(wrap)
	if err := run(o); err != nil {
		fatalf("%v", err)
	}
}

func run(o options) error {
	ctx := context.Background()
	if err := os.MkdirAll(o.cache, 0o755); err != nil {
		return err
	}
	if o.bin == "" {
		o.bin = filepath.Join(o.cache, "ovstream")
		logf("building %s", o.bin)
		if out, err := exec.Command("go", "build", "-o", o.bin, "./cmd/ovstream").CombinedOutput(); err != nil {
			return fmt.Errorf("go build ./cmd/ovstream (run from the repository root): %v\n%s", err, out)
		}
	}
	logf("unpacking %s", o.archive)
	dir, err := extractArchive(o.archive, o.cache)
	if err != nil {
		return err
	}
	t0 := time.Now()
	d, err := loadDataset(dir, o.positionEvery)
	if err != nil {
		return err
	}
	d.serviceDays = o.serviceDays
	logf("archive: %d files, %d predictions, %d synthesized positions per 48 h copy (%v)",
		d.files, len(d.predictions), len(d.positions), time.Since(t0).Round(time.Millisecond))

	var logTo io.Writer
	if o.logFile != "" {
		f, err := os.OpenFile(o.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		logTo = f
	}
	if len(o.burstKeys) > 0 {
		return runBursts(ctx, o, d, logTo)
	}
	if len(o.instances) > 0 {
		return runInstances(ctx, o, d, logTo)
	}
	if o.flink {
		o.flinkForms = flinkForms
		if err := flinkpeer.CheckExactlyOnce(ctx, o.adminURL, flinkpeer.DefaultParallelism); err != nil {
			o.flinkForms, o.flinkXANot = flinkForms[:1], err.Error()
			logf("phase (f) leaves out the Flink peer's XA form: %s", o.flinkXANot)
		}
	}
	allocs := "n/a"
	if o.goBench {
		allocs = hotPathAllocs()
	}

	sizes := []int{o.predictions}
	if len(o.scales) > 0 {
		sizes = nil
		for _, k := range o.scales {
			sizes = append(sizes, k*o.base)
		}
	}
	// results[k] are the measurements on o.brokers[k], one per size.
	results := make([][]*measurement, len(o.brokers))
	for k, kind := range o.brokers {
		for i, n := range sizes {
			m, err := measure(ctx, o, d, n, kind, logTo)
			if err != nil {
				return err
			}
			m.allocs = allocs
			if len(o.scales) > 0 {
				m.label = fmt.Sprintf("%dx", o.scales[i])
			}
			results[k] = append(results[k], m)
			m.print(os.Stdout)
		}
		if len(results[k]) > 1 {
			printScaling(os.Stdout, results[k])
		}
	}
	lasts := make([]*measurement, len(o.brokers))
	for k := range o.brokers {
		lasts[k] = results[k][len(results[k])-1]
	}
	if len(lasts) > 1 {
		printSideBySide(os.Stdout, lasts)
	}
	for k, m := range lasts {
		// The first broker's lines keep their names (ratio=...); the second's
		// are prefixed with its kind (kafka_ratio=...).
		prefix := ""
		if k > 0 {
			prefix = m.broker + "_"
		}
		for _, r := range m.live {
			fmt.Printf("%sfreshness_p99=%s rate=%d provisional=%s\n", prefix, fmtFresh(r.rowFreshness(0.99)), r.rate,
				fmtProvisional(r.provisional))
		}
		for _, s := range m.sustained {
			fmt.Printf("%ssustained_rate=%d provisional=%s\n", prefix, s.rate(), fmtProvisional(s.provisional))
		}
		if len(m.sustained) == 0 {
			fmt.Printf("%ssustained_rate=n/a (--sustained)\n", prefix)
		}
		md := m.medians()
		fmt.Printf("%sratio=%s\n%slimit_ratio=%s\n%selt_ratio=%s\n%ssplit_ratio=%s\n",
			prefix, fmtRatio(md.ratio, "--trials"), prefix, fmtRatio(md.limitRatio, "--trials"),
			prefix, fmtRatio(md.eltRatio, "--elt=false"), prefix, fmtRatio(md.splitRatio, "--split=false"))
		if o.flink && m.broker == brokerKafka {
			printFlinkMedians(os.Stdout, m, o.flinkXANot)
		}
	}
	return nil
}

var allocsRe = regexp.MustCompile(`(\d+(?:\.\d+)?) allocs/msg`)

// hotPathAllocs runs the Go benchmark of the hot path and returns its
// allocations per message.
func hotPathAllocs() string {
	cmd := exec.Command("go", "test", "-run", "^$", "-bench", "^BenchmarkHotPath$", "-benchtime", "3x", "./aggregate/")
	out, err := cmd.CombinedOutput()
	if err != nil {
		logf("hot-path benchmark failed: %v\n%s", err, out)
		return "n/a"
	}
	if m := allocsRe.FindSubmatch(out); m != nil {
		return string(m[1])
	}
	return "n/a"
}

func rate(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "bench %s: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, a...))
}

func fatalf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", a...)
	os.Exit(1)
}
