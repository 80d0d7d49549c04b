package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/feed/produce"
)

// The burst measurement (--burst-keys): peak RSS of
// `ovstream run --drain` over data where ONE 5-minute window holds N new
// station ids, against run's soft memory limit. The data is --burst-around
// predictions of the Auckland archive (and their synthesized positions) with
// N synthesized predictions inserted when the archive reaches the middle of
// the window of its middle prediction: one per station id "burst-stop-NNNNNNN"
// with a stop_name (--burst-names=false: none; names are kept per key),
// event times spread over that window, on 2,000 new trips of 100 new lines,
// whole-second delays from -300 to 900 s. The run must be exact: the
// window's station rows and event counts, every burst station's single-value
// row and the total of the network rows equal what the producer counted,
// decoding each prediction it sent with run's decoder.

const (
	burstWindow = 5 * time.Minute // run's default --window
	// burstLimit is run's default --memory-limit (cmd/ovstream/gc.go), the
	// limit the peak is compared with unless --run-args gives another.
	burstLimit = 224 << 20
)

// burstCounts is what the producer knows of the data it sent.
type burstCounts struct {
	window      time.Time // start (UTC) of the burst window
	keys        int       // burst predictions, one per new station
	named       bool      // with stop names
	delaySum    float64   // sum of their delays, seconds (whole: exact)
	valid       int64     // predictions run must aggregate (the decoder accepts them)
	inWindow    int64     // of those, in the burst window
	stations    map[string]bool
	predictions int
}

// burstGenerator is generator with the burst inserted.
type burstGenerator struct {
	g       *generator
	c       *burstCounts
	trigger time.Time // the burst goes out before the first prediction at or after it
	next    int       // burst predictions sent so far; -1: not started
	named   bool      // the burst stations have names
	held    *produce.Message
}

func newBurstGenerator(d *dataset, around, keys int, named bool) *burstGenerator {
	mid := around / 2
	at := d.predictions[mid%len(d.predictions)].EventTime.Add(time.Duration(mid/len(d.predictions)) * archiveSpan)
	start := aggregate.WindowStart(at, burstWindow)
	return &burstGenerator{
		g:       newGenerator(d, around, predTopic, posTopic),
		c:       &burstCounts{window: start, keys: keys, named: named, stations: map[string]bool{}},
		trigger: start.Add(burstWindow / 2),
		next:    -1,
		named:   named,
	}
}

// burstPrediction returns burst prediction i of n in the window starting
// at start, with a stop_name when named.
func burstPrediction(start time.Time, i, n int, named bool) aggregate.Prediction {
	p := aggregate.Prediction{
		TripID:          fmt.Sprintf("burst-trip-%d", i%2000),
		Line:            fmt.Sprintf("burst-line-%d", i%100),
		StopID:          fmt.Sprintf("burst-stop-%07d", i),
		Operator:        "AT",
		DelayS:          float64((i*7919)%1201 - 300),
		EventTime:       start.Add(time.Duration(int64(burstWindow) / int64(n) * int64(i)).Truncate(time.Microsecond)),
		StopSequence:    int64(i%50 + 1),
		HasStopSequence: true,
	}
	if named {
		p.StopName = fmt.Sprintf("Burst Road %d, stop %d", i/7, i%7)
	}
	return p
}

// nextMessage returns the next message, false when done.
func (b *burstGenerator) nextMessage() (produce.Message, bool) {
	if b.next >= 0 && b.next < b.c.keys {
		p := burstPrediction(b.c.window, b.next, b.c.keys, b.named)
		b.next++
		b.c.delaySum += p.DelayS
		return b.count(produce.Message{Topic: predTopic, Key: []byte(p.TripID), Value: produce.EncodePrediction(p)}), true
	}
	if b.held != nil {
		m := *b.held
		b.held = nil
		return b.count(m), true
	}
	m, ok := b.g.next()
	if !ok {
		return m, false
	}
	if b.next < 0 && m.Topic == predTopic {
		if p, err := aggregate.DecodePrediction(m.Value); err == nil && !p.EventTime.Before(b.trigger) {
			b.held, b.next = &m, 0
			return b.nextMessage()
		}
	}
	return b.count(m), true
}

// count adds a prediction the producer sends to the counts.
func (b *burstGenerator) count(m produce.Message) produce.Message {
	if m.Topic != predTopic {
		return m
	}
	b.c.predictions++
	p, err := aggregate.DecodePrediction(m.Value)
	if err != nil {
		return m // run dead-letters it
	}
	b.c.valid++
	if aggregate.WindowStart(p.EventTime, burstWindow).Equal(b.c.window) {
		b.c.inWindow++
		b.c.stations[p.StopID] = true
	}
	return m
}

// burstResult is one burst measurement.
type burstResult struct {
	keys     int
	messages int
	run      *runResult
	load     string // before the run
	limit    int64  // bytes
}

// runBursts measures each of o.burstKeys on fresh data, a broker and a
// database of its own, and prints the figures.
func runBursts(ctx context.Context, o options, d *dataset, logTo io.Writer) error {
	var results []burstResult
	for _, keys := range o.burstKeys {
		r, err := measureBurst(ctx, o, d, keys, logTo)
		if err != nil {
			return err
		}
		results = append(results, r)
	}
	fmt.Printf("\nburst: ONE %v window with N new station ids (stop names: %v) among %d archive predictions; `ovstream run --drain`, peak RSS (VmHWM) against --memory-limit\n",
		burstWindow, o.burstNames, o.burstAround)
	fmt.Printf("%10s %10s %10s %12s %10s %8s %10s %s\n", "keys", "messages", "seconds", "peak RSS MB", "limit MiB", "x limit", "CPU s", "load before")
	for _, r := range results {
		fmt.Printf("%10d %10d %10.2f %12d %10d %8.2f %10.1f %s\n", r.keys, r.messages, r.run.elapsed.Seconds(),
			r.run.maxRSS/1_000_000, r.limit>>20, float64(r.run.maxRSS)/float64(r.limit),
			(r.run.userCPU + r.run.sysCPU).Seconds(), r.load)
	}
	last := results[len(results)-1]
	fmt.Printf("burst_rss_ratio=%.2f\n", float64(last.run.maxRSS)/float64(last.limit))
	return nil
}

func measureBurst(ctx context.Context, o options, d *dataset, keys int, logTo io.Writer) (burstResult, error) {
	r := burstResult{keys: keys, limit: runMemoryLimit(o.runArgs)}
	b, err := startBroker(o.bin, o.brokers[0], topics)
	if err != nil {
		return r, err
	}
	defer b.stop()
	g := newBurstGenerator(d, o.burstAround, keys, o.burstNames)
	counts, err := produceAll(ctx, b.addr, g.nextMessage)
	if err != nil {
		return r, fmt.Errorf("produce: %w", err)
	}
	r.messages = counts.Produced(predTopic) + counts.Produced(posTopic)
	c := g.c
	logf("burst %d: produced %d messages (%d predictions, %d in the burst window %s, %d station ids there)",
		keys, r.messages, c.predictions, c.inWindow, c.window.Format(time.RFC3339), len(c.stations))

	dbs := &databases{admin: o.adminURL, bin: o.bin, schemaSQL: o.schemaSQL}
	if !o.keep {
		defer dbs.dropAll(context.Background())
	}
	dbURL, err := dbs.fresh(ctx, fmt.Sprintf("ovsbench_burst_%d_%d", os.Getpid(), keys))
	if err != nil {
		return r, fmt.Errorf("fresh database: %w", err)
	}
	r.load = loadavg()
	if r.run, err = runOvstream(o.bin, dbURL, b.addr, o.runArgs, o.wrap, logTo); err != nil {
		return r, err
	}
	logf("burst %d: T_ovstream %v, peak RSS %d MB (%.2f x the %d MiB limit), load before %s, after %s", keys,
		r.run.elapsed.Round(time.Millisecond), r.run.maxRSS/1_000_000, float64(r.run.maxRSS)/float64(r.limit), r.limit>>20, r.load, loadavg())
	return r, checkBurst(ctx, dbURL, c)
}

// checkBurst compares the rows the run left with the producer's counts.
func checkBurst(ctx context.Context, dbURL string, c *burstCounts) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var stationRows, stationEvents, networkEvents, total int64
	err = conn.QueryRow(ctx, `SELECT count(*), coalesce(sum(event_count), 0)::bigint,
		(SELECT coalesce(sum(event_count), 0)::bigint FROM delay_aggregates WHERE dimension = 'network' AND window_start = $1),
		(SELECT coalesce(sum(event_count), 0)::bigint FROM delay_aggregates WHERE dimension = 'network')
		FROM delay_aggregates WHERE dimension = 'station' AND window_start = $1`, c.window).
		Scan(&stationRows, &stationEvents, &networkEvents, &total)
	if err != nil {
		return err
	}
	var burstRows int64
	var burstSum float64
	var burstExact bool
	err = conn.QueryRow(ctx, `SELECT count(*), coalesce(sum(mean_delay_s), 0),
		coalesce(bool_and(event_count = 1 AND window_start = $1 AND min_delay_s = max_delay_s AND mean_delay_s = min_delay_s
			AND p90_delay_s = min_delay_s AND delay_values = ARRAY[min_delay_s] AND delay_counts = ARRAY[1::bigint]
			AND operator = 'AT'), false)
		FROM delay_aggregates WHERE dimension = 'station' AND dimension_id LIKE 'burst-stop-%'`, c.window).
		Scan(&burstRows, &burstSum, &burstExact)
	if err != nil {
		return err
	}
	var names, rightNames int64
	err = conn.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE name = format('Burst Road %s, stop %s',
			substr(dimension_id, 12)::int / 7, substr(dimension_id, 12)::int % 7))
		FROM names WHERE dimension = 'station' AND dimension_id LIKE 'burst-stop-%'`).Scan(&names, &rightNames)
	if err != nil {
		return err
	}
	wantNames := 0
	if c.named {
		wantNames = c.keys
	}
	var faults []string
	check := func(what string, got, want any) {
		if fmt.Sprint(got) != fmt.Sprint(want) {
			faults = append(faults, fmt.Sprintf("%s: %v, want %v", what, got, want))
		}
	}
	check("station rows in the burst window", stationRows, len(c.stations))
	check("events of the burst window's station rows", stationEvents, c.inWindow)
	check("events of the burst window's network row", networkEvents, c.inWindow)
	check("events of all network rows", total, c.valid)
	check("burst station rows", burstRows, c.keys)
	check("sum of the burst stations' delays", burstSum, c.delaySum)
	check("every burst station row holds its one delay", burstExact, c.keys > 0)
	check("burst station names", names, wantNames)
	check("burst station names as sent", rightNames, wantNames)
	if len(faults) > 0 {
		return fmt.Errorf("%w: burst of %d keys: %s", errBurstInexact, c.keys, strings.Join(faults, "; "))
	}
	logf("burst %d: exact (%d station rows and %d events in the burst window, %d events in all)", c.keys, stationRows, stationEvents, total)
	return nil
}

// errBurstInexact: the burst run's rows differ from the producer's counts.
var errBurstInexact = errors.New("burst: results differ from the data produced")

// runMemoryLimit returns the --memory-limit in args (bytes), else run's default.
func runMemoryLimit(args []string) int64 {
	for i, a := range args {
		v, ok := strings.CutPrefix(a, "--memory-limit=")
		if !ok && a == "--memory-limit" && i+1 < len(args) {
			v, ok = args[i+1], true
		}
		if !ok {
			continue
		}
		var n int64
		var unit string
		if _, err := fmt.Sscanf(v, "%d%s", &n, &unit); err == nil {
			switch unit {
			case "KiB":
				return n << 10
			case "MiB":
				return n << 20
			case "GiB":
				return n << 30
			}
		}
	}
	return burstLimit
}
