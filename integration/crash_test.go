//go:build integration

package integration

// The crash-injection and oracle suite (G1-G6, docs/design.md "Guarantees the
// tests assert"): the
// ovstream binary, built with -tags crashpoints, runs as a subprocess against
// the embedded broker (TCP) and the real PostgreSQL while the test breaks it in
// the ways production breaks: SIGKILL at every crash point and at seeded
// random moments, PostgreSQL restarts, killed connections, SIGSTOP, broker
// restarts. Each schedule ends with a final `run --drain`; then every result
// table must equal the one of an uninterrupted run over the same topic, and
// delay_aggregates must equal the SQL oracle, row for row. A schedule that did
// not crash after real commits fails, so nothing passes vacuously.
//
// Randomness comes from one seed, printed by each test; OVSTREAM_CRASH_SEED
// replays it. `make crash` runs the long version (-crash.long).

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/feed/gtfsrt"
	"github.com/ovstream/ovstream/feed/produce"
)

var (
	crashLong  = flag.Bool("crash.long", false, "TestCrashRandomKills: the long schedule (make crash): -crash.kills kills over the GTFS-realtime files in -crash.data")
	crashData  = flag.String("crash.data", "", "folder of GTFS-realtime TripUpdates files for -crash.long (make crash unpacks the Auckland 48 h archive there)")
	crashKills = flag.Int("crash.kills", 0, "SIGKILLs of TestCrashRandomKills (default 24; 200 with -crash.long)")
)

// crashSeed returns the test's random source: OVSTREAM_CRASH_SEED when set,
// else a new seed. The seed is logged at the start and again when the test
// fails, with the command that replays it.
func crashSeed(t *testing.T) *rand.Rand {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("OVSTREAM_CRASH_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("OVSTREAM_CRASH_SEED=%q: not an unsigned integer", s)
		}
		seed = v
	}
	replay := fmt.Sprintf("OVSTREAM_CRASH_SEED=%d go test -count=1 -tags integration -run '^%s$' ./integration/", seed, t.Name())
	t.Logf("seed %d (replay: %s)", seed, replay)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("FAILED with seed %d; replay: %s", seed, replay)
		}
	})
	h := fnv.New64a()
	h.Write([]byte(t.Name()))
	return rand.New(rand.NewPCG(seed, h.Sum64()))
}

// ---------------------------------------------------------------------------
// Data: real predictions, a few contract-breaking records, real positions.

// dataset is what a schedule produces: arrival predictions of one real feed,
// records that break the data contract (each must become exactly one dead
// letter), and the Halifax vehicle positions.
type dataset struct {
	name        string
	lateness    string // --allowed-lateness under which no event of the data is late
	predictions []aggregate.Prediction
	badPreds    []produce.Message
	positions   *gtfsrt.Result
	badPos      []produce.Message
}

// records is the number of records of the predictions topic.
func (d *dataset) records() int { return len(d.predictions) + len(d.badPreds) }

var (
	datasetsMu sync.Mutex
	datasets   = map[string]*dataset{}
)

// badMessages are keyed (so their partition and offset are the same in every
// run) and each breaks the contract in its own way.
func badMessages() (preds, pos []produce.Message) {
	for i, line := range badLines {
		preds = append(preds, produce.Message{Topic: predictionsTopic, Key: []byte(fmt.Sprintf("bad-%d", i+1)), Value: []byte(line)})
	}
	preds = append(preds,
		produce.Message{Topic: predictionsTopic, Key: []byte("bad-nul"),
			Value: []byte("{\"trip_id\":\"bad\u0000nul\",\"line\":\"L\",\"stop_id\":\"S\",\"operator\":\"AT\",\"delay_s\":5,\"event_time\":\"2016-05-18T20:01:00Z\"}")},
		produce.Message{Topic: predictionsTopic, Key: []byte("bad-utf8"), Value: []byte("\xff\xfe{\"trip_id\":\"x\"}")},
		produce.Message{Topic: predictionsTopic, Key: []byte("bad-nan"),
			Value: []byte(`{"trip_id":"bad-nan","line":"L","stop_id":"S","operator":"AT","delay_s":"NaN","event_time":"2016-05-18T20:01:00Z"}`)},
	)
	pos = []produce.Message{
		{Topic: positionsTopic, Key: []byte("bad-v1"), Value: []byte(`{"vehicle_id":"bad-v1","lat":91,"lon":0,"event_time":"2025-11-06T21:00:00Z"}`)},
		{Topic: positionsTopic, Key: []byte("bad-v2"), Value: []byte(`{"vehicle_id":"bad-v2","lat":44.6,"lon":-63.5,"event_time":"2025-11-06T21:00:00"}`)},
	}
	return preds, pos
}

// loadDataset loads and caches a dataset: the predictions of the GTFS-realtime
// files under dir (operator AT) and the Halifax positions (operator HFX).
func loadDataset(t *testing.T, name, dir, lateness string) *dataset {
	t.Helper()
	datasetsMu.Lock()
	defer datasetsMu.Unlock()
	if d := datasets[name]; d != nil {
		return d
	}
	preds := loadFeeds(t, "AT", dir)
	hfx := loadFeeds(t, "HFX", "../testdata/halifax-20251106")
	d := &dataset{name: name, lateness: lateness, predictions: preds.Predictions,
		positions: &gtfsrt.Result{Positions: hfx.Positions}}
	d.badPreds, d.badPos = badMessages()
	if len(d.predictions) == 0 || len(d.positions.Positions) == 0 {
		t.Fatalf("dataset %s: %d predictions, %d positions", name, len(d.predictions), len(d.positions.Positions))
	}
	t.Logf("dataset %s: %d predictions, %d bad predictions, %d positions, %d bad positions",
		name, len(d.predictions), len(d.badPreds), len(d.positions.Positions), len(d.badPos))
	datasets[name] = d
	return d
}

// auckland2h is the 2-hour Auckland slice of testdata (120 snapshots, 49,140
// predictions). With allowed lateness 10m no event of it is late, whatever the
// interleaving (shared/data/README.md), so runs are comparable.
func auckland2h(t *testing.T) *dataset {
	t.Helper()
	datasetsMu.Lock()
	d := datasets["auckland-2h"]
	datasetsMu.Unlock()
	if d != nil {
		return d
	}
	return loadDataset(t, "auckland-2h", extractTarGz(t, "../testdata/auckland-20160518-2h.tar.gz"), "10m")
}

// ---------------------------------------------------------------------------
// The feed: the dataset produced step by step while ovstream runs.

// feed produces a dataset in steps: the predictions in chunks (file order),
// the bad predictions after half of them, then, after a pause longer than the
// service's high-water poll, the positions and the bad positions. Chunking
// does not change the order of any partition, so every feed of a dataset
// leaves the same records at the same offsets as the reference run's.
//
// The positions come last and after a pause on purpose: they are from 2025,
// the predictions from 2016, and the watermark is taken over both topics. A
// position seen while every prediction partition counts as idle would raise
// the watermark to 2025 and make the rest of the predictions late, a mix of
// eras that real feeds never have.
type feed struct {
	addr  string
	steps []feedStep

	mu     sync.Mutex // held while a step is produced; pause() takes it
	paused bool       // mu is held by pause (test goroutine only)
	next   int
	limit  int       // steps from here on wait for release
	last   time.Time // when the previous step was produced
	err    error
	done   chan struct{} // closed once every step is produced
	stop   chan struct{}
	wg     sync.WaitGroup
}

type feedStep struct {
	settle bool // wait settlePause after the previous step
	res    *gtfsrt.Result
	msgs   []produce.Message
}

const settlePause = 1500 * time.Millisecond // > the service's 1 s high-water poll

func newFeed(ds *dataset, addr string, chunks int) *feed {
	f := &feed{addr: addr, done: make(chan struct{}), stop: make(chan struct{})}
	// The bad predictions go after the first half of the predictions,
	// whatever the chunking, so that every feed gives the same offsets.
	mid := len(ds.predictions) / 2
	chunks = max(2, min(chunks, len(ds.predictions)))
	for half, preds := range [][]aggregate.Prediction{ds.predictions[:mid], ds.predictions[mid:]} {
		n := chunks / 2
		if half == 1 {
			n = chunks - chunks/2
			f.steps = append(f.steps, feedStep{msgs: ds.badPreds})
		}
		for i := 0; i < n; i++ {
			lo, hi := i*len(preds)/n, (i+1)*len(preds)/n
			f.steps = append(f.steps, feedStep{res: &gtfsrt.Result{Predictions: preds[lo:hi]}})
		}
	}
	f.steps = append(f.steps, feedStep{settle: true, res: ds.positions, msgs: ds.badPos})
	f.limit = len(f.steps)
	return f
}

// holdBack keeps the last n steps from being produced until release.
func (f *feed) holdBack(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.limit = len(f.steps) - n
}

func (f *feed) release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.limit = len(f.steps)
}

// step produces the next step; false when there is none left or producing failed.
func (f *feed) step() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.next >= f.limit || f.err != nil {
		return false
	}
	s := f.steps[f.next]
	if s.settle {
		time.Sleep(time.Until(f.last.Add(settlePause)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := produce.Config{Brokers: []string{f.addr}}
	if s.res != nil {
		if _, err := produce.GTFSRT(ctx, cfg, s.res, produce.Topics{Predictions: predictionsTopic, Positions: positionsTopic}); err != nil {
			f.err = fmt.Errorf("feed step %d: %w", f.next, err)
			return false
		}
	}
	if len(s.msgs) > 0 {
		i := 0
		_, err := produce.Send(ctx, cfg, func() (produce.Message, bool) {
			if i == len(s.msgs) {
				return produce.Message{}, false
			}
			i++
			return s.msgs[i-1], true
		})
		if err != nil {
			f.err = fmt.Errorf("feed step %d: %w", f.next, err)
			return false
		}
	}
	f.last = time.Now()
	f.next++
	if f.next == len(f.steps) {
		close(f.done)
	}
	return true
}

// paced produces one step every interval in the background until all are produced.
func (f *feed) paced(interval time.Duration) {
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for f.step() {
			select {
			case <-f.stop:
				return
			case <-time.After(interval):
			}
		}
	}()
}

// async produces up to n steps in the background, gap apart.
func (f *feed) async(n int, gap time.Duration) {
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for k := 0; k < n && f.step(); k++ {
			time.Sleep(gap)
		}
	}()
}

// all produces every remaining step now.
func (f *feed) all(t testing.TB) {
	t.Helper()
	for f.step() {
	}
	f.wait(t, time.Minute)
}

// wait waits until every step is produced and fails the test on a producer error.
func (f *feed) wait(t testing.TB, timeout time.Duration) {
	t.Helper()
	select {
	case <-f.done:
	case <-time.After(timeout):
	}
	f.mu.Lock()
	err, next := f.err, f.next
	f.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if next < len(f.steps) {
		t.Fatalf("feed: %d of %d steps produced after %v", next, len(f.steps), timeout)
	}
}

func (f *feed) finished() bool {
	select {
	case <-f.done:
		return true
	default:
		return false
	}
}

// pause stops production (after the step in progress) until resume.
func (f *feed) pause() {
	f.mu.Lock()
	f.paused = true
}

func (f *feed) resume() {
	f.paused = false
	f.mu.Unlock()
}

func (f *feed) close() {
	if f.paused {
		f.resume()
	}
	close(f.stop)
	f.wg.Wait()
}

// ---------------------------------------------------------------------------
// The reference: an uninterrupted run over the same records.

// reference holds the canonical dumps of an uninterrupted run.
type reference struct {
	tables map[string][]string // query -> sorted rows
}

var (
	referencesMu sync.Mutex
	references   = map[string]*reference{}
)

// resultTables are the tables G1, G4 and G5 compare, by canonical dump.
var resultTables = []struct{ what, sql string }{
	{"delay_aggregates", dumpAggregates},
	{"delay_aggregates distributions", dumpDistributions},
	{"dead_letters", dumpDeadLetters},
	{"trip_delay_latest", dumpTrips},
	{"vehicle_latest", dumpVehicles},
}

// referenceFor runs ds once without interruption (every record produced
// first, then one `run --drain`) and keeps its tables; it checks them against
// the SQL oracle too. Computed once per dataset and test process.
func referenceFor(t *testing.T, ds *dataset) *reference {
	t.Helper()
	referencesMu.Lock()
	defer referencesMu.Unlock()
	if ref := references[ds.name]; ref != nil {
		return ref
	}
	started := time.Now()
	addr := startBroker(t)
	f := newFeed(ds, addr, 1)
	f.steps[len(f.steps)-1].settle = false
	f.all(t)
	db := freshDB(t)
	drain(t, db, addr, "--allowed-lateness", ds.lateness)
	ref := &reference{tables: map[string][]string{}}
	for _, q := range resultTables {
		ref.tables[q.sql] = dump(t, db, q.sql)
	}
	checkOracle(t, db, addr, ds)
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("reference (uninterrupted run) of %s: %d delay_aggregates rows, %d dead letters, %d trips, %d vehicles, in %v",
		ds.name, len(ref.tables[dumpAggregates]), len(ref.tables[dumpDeadLetters]), len(ref.tables[dumpTrips]),
		len(ref.tables[dumpVehicles]), time.Since(started).Round(time.Millisecond))
	references[ds.name] = ref
	return ref
}

// checkOracle loads the predictions topic into oracle_msgs of db and checks
// the drained tables of db: delay_aggregates and the distributions stored
// with its rows equal the SQL oracle; the dead
// letters are exactly the bad records (decode errors; nothing late, nothing
// in the future); every record is counted once or dead-lettered once; every
// stored position is at the high water mark.
func checkOracle(t *testing.T, db, addr string, ds *dataset) {
	t.Helper()
	n := loadOracleInput(t, db, addr, predictionsTopic)
	if n != ds.records() {
		t.Fatalf("the predictions topic holds %d records, want %d", n, ds.records())
	}
	got, want := dump(t, db, dumpAggregates), dump(t, db, oracleAggregates)
	if len(got) == 0 {
		t.Fatal("no delay_aggregates rows")
	}
	sameRows(t, "delay_aggregates vs SQL oracle", got, want)
	dists := dump(t, db, dumpDistributions)
	sameRows(t, "stored distributions vs SQL oracle (GROUP BY window, dimension, id, delay)", dists, dump(t, db, oracleDistributions))
	// Every row has its distribution: as many rows carry one as there are rows.
	if n := dump(t, db, `SELECT count(*) FROM delay_aggregates WHERE delay_values IS NULL`); n[0] != "[0]" {
		t.Errorf("%s delay_aggregates rows without a distribution", n[0])
	}
	// Dead letters: each bad record exactly once; real records only for
	// decode errors (the 48 h archive has delays beyond 24 h); nothing late,
	// nothing in the future.
	if other := dump(t, db, `SELECT reason, count(*) FROM dead_letters WHERE reason <> 'decode' GROUP BY reason`); len(other) > 0 {
		t.Errorf("dead letters other than decode errors: %v (no event of the data is late or in the future)", other)
	}
	for _, m := range append(append([]produce.Message{}, ds.badPreds...), ds.badPos...) {
		got := dump(t, db, fmt.Sprintf(`SELECT count(*) FROM dead_letters WHERE topic = '%s' AND key = '\x%x'::bytea AND value = '\x%x'::bytea`,
			m.Topic, m.Key, m.Value))
		if got[0] != "[1]" {
			t.Errorf("bad record %s/%s: %s dead letters, want exactly 1", m.Topic, m.Key, got[0])
		}
	}
	// Every record of the predictions topic exactly once: counted in the
	// network rows, or dead-lettered.
	counted := dump(t, db, `SELECT coalesce(sum(event_count), 0)::bigint FROM delay_aggregates WHERE dimension = 'network'`)
	dead := dump(t, db, `SELECT count(*) FROM dead_letters WHERE topic = 'arrival_predictions'`)
	var c, d int
	scan(t, counted[0], "[%d]", &c)
	scan(t, dead[0], "[%d]", &d)
	if c+d != n {
		t.Errorf("%d events counted + %d dead letters = %d, want every record of the topic exactly once: %d", c, d, c+d, n)
	}
	// G3 at the end: every partition stored at its high water mark.
	hw := highWaterMarks(t, addr)
	for _, row := range dump(t, db, `SELECT topic, partition, next_offset, consumed_offset FROM stream_positions WHERE next_offset IS NOT NULL`) {
		var topic string
		var part int32
		var next, consumed int64
		if _, err := fmt.Sscanf(row, "[%s %d %d %d]", &topic, &part, &next, &consumed); err != nil {
			t.Fatalf("stream_positions row %s: %v", row, err)
		}
		tp := aggregate.PartitionID{Topic: topic, Partition: part}
		if next != hw[tp] || consumed != hw[tp] {
			t.Errorf("after the drain %s is stored at next %d, consumed %d; high water mark %d", tp, next, consumed, hw[tp])
		}
		delete(hw, tp)
	}
	if len(hw) > 0 {
		t.Errorf("no stored position for %v", hw)
	}
}

// highWaterMarks returns the high water mark of every partition of both topics.
func highWaterMarks(t *testing.T, addr string) map[aggregate.PartitionID]int64 {
	t.Helper()
	client, err := sarama.NewClient([]string{addr}, sarama.NewConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	hw, err := readHighWater(client)
	if err != nil {
		t.Fatal(err)
	}
	return hw
}

func readHighWater(client sarama.Client) (map[aggregate.PartitionID]int64, error) {
	hw := map[aggregate.PartitionID]int64{}
	for _, topic := range []string{predictionsTopic, positionsTopic} {
		parts, err := client.Partitions(topic)
		if err != nil {
			return nil, err
		}
		for _, p := range parts {
			off, err := client.GetOffset(topic, p, sarama.OffsetNewest)
			if err != nil {
				return nil, err
			}
			hw[aggregate.PartitionID{Topic: topic, Partition: p}] = off
		}
	}
	return hw, nil
}

// ---------------------------------------------------------------------------
// The positions monitor: G3 while the schedule runs.

// monitor samples stream_positions every 100 ms, and after each disruption,
// and records every violation of G3: a stored offset that moved backwards,
// passed the high water mark, or a next_offset past its consumed_offset.
// Database or broker errors (a restart in progress) skip the sample.
type monitor struct {
	db, addr string

	mu         sync.Mutex
	conn       *pgx.Conn
	client     sarama.Client
	last       map[aggregate.PartitionID][2]int64
	violations []string
	samples    int
	stop, done chan struct{}
}

func startMonitor(t *testing.T, db, addr string) *monitor {
	m := &monitor{db: db, addr: addr, last: map[aggregate.PartitionID][2]int64{},
		stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		for {
			select {
			case <-m.stop:
				return
			case <-time.After(100 * time.Millisecond):
				_ = m.sample()
			}
		}
	}()
	t.Cleanup(m.close)
	return m
}

func (m *monitor) close() {
	select {
	case <-m.stop:
		return
	default:
	}
	close(m.stop)
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.conn != nil {
		m.conn.Close(context.Background())
	}
	if m.client != nil {
		m.client.Close()
	}
}

// sample reads the positions, then the high water marks (which only grow, so
// a stored offset above them is a real violation), and checks them.
func (m *monitor) sample() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if m.conn == nil || m.conn.IsClosed() {
		conn, err := pgx.Connect(ctx, m.db)
		if err != nil {
			return err
		}
		m.conn = conn
	}
	rows, err := m.conn.Query(ctx, `SELECT topic, partition, next_offset, consumed_offset FROM stream_positions WHERE next_offset IS NOT NULL`)
	if err != nil {
		m.conn.Close(ctx)
		m.conn = nil
		return err
	}
	pos := map[aggregate.PartitionID][2]int64{}
	var tp aggregate.PartitionID
	var next, consumed int64
	if _, err := pgx.ForEachRow(rows, []any{&tp.Topic, &tp.Partition, &next, &consumed}, func() error {
		pos[tp] = [2]int64{next, consumed}
		return nil
	}); err != nil {
		m.conn.Close(ctx)
		m.conn = nil
		return err
	}
	if m.client == nil {
		cfg := sarama.NewConfig()
		cfg.Metadata.Retry.Max = 1
		client, err := sarama.NewClient([]string{m.addr}, cfg)
		if err != nil {
			return err
		}
		m.client = client
	}
	hw, err := readHighWater(m.client)
	if err != nil {
		m.client.Close()
		m.client = nil
		return err
	}
	m.samples++
	for tp, p := range pos {
		prev, seen := m.last[tp]
		switch {
		case seen && (p[0] < prev[0] || p[1] < prev[1]):
			m.violations = append(m.violations, fmt.Sprintf("%s moved backwards: next %d -> %d, consumed %d -> %d", tp, prev[0], p[0], prev[1], p[1]))
		case p[0] > hw[tp] || p[1] > hw[tp]:
			m.violations = append(m.violations, fmt.Sprintf("%s stored next %d, consumed %d past the high water mark %d", tp, p[0], p[1], hw[tp]))
		case p[0] > p[1]:
			m.violations = append(m.violations, fmt.Sprintf("%s stored next %d past consumed %d", tp, p[0], p[1]))
		}
		m.last[tp] = p
	}
	return nil
}

// check takes a sample now (retrying while the database or broker is away)
// and fails the test on any violation so far.
func (m *monitor) check(t *testing.T, when string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := m.sample()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("G3 check %s: %v", when, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.violations) > 0 {
		t.Fatalf("G3 violated (found by the check %s): %s", when, strings.Join(m.violations, "; "))
	}
}

// ---------------------------------------------------------------------------
// The rig: one schedule against one database and broker.

type rig struct {
	t       *testing.T
	rng     *rand.Rand
	ds      *dataset
	ref     *reference
	db      string
	brokers string
	feed    *feed
	mon     *monitor
	env     []string // added to every incarnation's environment
	// flags are added to the run flags of every incarnation and of the
	// final drain: --takeover by default, since an incarnation restarted
	// after a kill would otherwise wait for its predecessor's lease (15 s).
	flags []string
	// finalDrain, when set, replaces finish's one `run --drain` over every
	// partition (e.g. by the drains of a split pipeline) and returns their output.
	finalDrain func() string
	// instanceFlags, when set, gives instance i of a split pipeline's
	// layout its own run flags (startInstance).
	instanceFlags func(i int) []string

	incarnations int
	kills        int       // SIGKILLs, by the test or at a crash point
	afterCommits int       // kills that came after a commit of the same incarnation
	since        time.Time // the last commit when the current incarnation started
	last         *proc
}

// newRig makes a fresh database and a feed of ds in chunks into the broker at brokers.
func newRig(t *testing.T, rng *rand.Rand, ds *dataset, brokers string, chunks int) *rig {
	t.Helper()
	return newRigOn(t, rng, ds, brokers, chunks, freshDB(t))
}

// newRigOn is newRig on the database db.
func newRigOn(t *testing.T, rng *rand.Rand, ds *dataset, brokers string, chunks int, db string) *rig {
	t.Helper()
	r := &rig{t: t, rng: rng, ds: ds, ref: referenceFor(t, ds), db: db, brokers: brokers,
		flags: []string{"--takeover"}}
	r.feed = newFeed(ds, brokers, chunks)
	t.Cleanup(r.feed.close)
	r.mon = startMonitor(t, r.db, brokers)
	t.Cleanup(func() {
		if t.Failed() && r.last != nil {
			t.Logf("output of the last ovstream run (tail):\n%s", tail(r.last.output(), 60))
		}
	})
	return r
}

// args are the run flags of every incarnation: commit on every tick.
func (r *rig) args(extra ...string) []string {
	flags := append([]string{"--flush-interval", "50ms", "--allowed-lateness", r.ds.lateness, "--log-level", "info"}, r.flags...)
	return runArgs(r.db, r.brokers, append(flags, extra...)...)
}

// start starts an incarnation of the service.
func (r *rig) start(env ...string) *proc {
	r.t.Helper()
	return r.startWith(env)
}

// startWith starts an incarnation with env and extra run flags.
func (r *rig) startWith(env []string, extra ...string) *proc {
	r.t.Helper()
	r.incarnations++
	r.since = r.lastCommit()
	p := startOvstream(r.t, append(append([]string{}, r.env...), env...), r.args(extra...)...)
	r.last = p
	return p
}

// scalar returns the one value of sql on db, retrying for up to a minute
// while PostgreSQL does not answer (a restart in progress).
func scalar[T any](t *testing.T, db, sql string) T {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		v, err := func() (v T, err error) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			conn, err := pgx.Connect(ctx, db)
			if err != nil {
				return v, err
			}
			defer conn.Close(ctx)
			err = conn.QueryRow(ctx, sql).Scan(&v)
			return v, err
		}()
		if err == nil {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", sql, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// lastCommit returns max(stream_positions.updated_at): it moves with every
// commit (each upserts every assigned partition) and with nothing else.
func (r *rig) lastCommit() time.Time {
	r.t.Helper()
	return scalar[time.Time](r.t, r.db, `SELECT coalesce(max(updated_at), 'epoch') FROM stream_positions`)
}

// positionsSum returns the sum of every stored next_offset: progress.
func (r *rig) positionsSum() int64 {
	r.t.Helper()
	return scalar[int64](r.t, r.db, `SELECT coalesce(sum(next_offset), 0)::bigint FROM stream_positions`)
}

// storedConsumed returns every partition's stored consumed_offset.
func (r *rig) storedConsumed() map[aggregate.PartitionID]int64 {
	r.t.Helper()
	rows := scalar[[]string](r.t, r.db, `SELECT coalesce(array_agg(topic || ' ' || partition || ' ' || consumed_offset), '{}') FROM stream_positions WHERE consumed_offset IS NOT NULL`)
	out := map[aggregate.PartitionID]int64{}
	for _, row := range rows {
		var tp aggregate.PartitionID
		var off int64
		scan(r.t, row, "%s %d %d", &tp.Topic, &tp.Partition, &off)
		out[tp] = off
	}
	return out
}

// waitConsumedTo waits until p's commits stored every partition as consumed
// up to hw at least: p reads and commits what was written after hw was taken.
func (r *rig) waitConsumedTo(p *proc, hw map[aggregate.PartitionID]int64, timeout time.Duration, when string) {
	r.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		r.alive(p, when)
		stored, behind := r.storedConsumed(), []string{}
		for tp, off := range hw {
			if stored[tp] < off {
				behind = append(behind, fmt.Sprintf("%s %d < %d", tp, stored[tp], off))
			}
		}
		if len(behind) == 0 {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("not consumed and committed within %v %s: %v; output:\n%s", timeout, when, behind, tail(p.output(), 60))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// alive fails the test when p has exited.
func (r *rig) alive(p *proc, when string) {
	r.t.Helper()
	select {
	case <-p.done:
		r.t.Fatalf("ovstream exited %s (%v); it must ride it out. Output:\n%s", when, p.err, tail(p.output(), 60))
	default:
	}
}

// waitCommits waits until p made n more commits (and is still running).
func (r *rig) waitCommits(p *proc, n int, timeout time.Duration, when string) {
	r.t.Helper()
	deadline := time.Now().Add(timeout)
	prev := r.lastCommit()
	for seen := 0; seen < n; {
		r.alive(p, when)
		if time.Now().After(deadline) {
			r.t.Fatalf("%d of %d commits within %v %s; output:\n%s", seen, n, timeout, when, tail(p.output(), 60))
		}
		time.Sleep(20 * time.Millisecond)
		if c := r.lastCommit(); c.After(prev) {
			seen++
			prev = c
		}
	}
}

// waitProgress waits until p commits again and its commits move the stored
// positions forward, or have stored everything the topics hold (when the feed
// has no more records for it, that is all the progress there can be).
func (r *rig) waitProgress(p *proc, timeout time.Duration, when string) {
	r.t.Helper()
	deadline := time.Now().Add(timeout)
	prevCommit, prevSum := r.lastCommit(), r.positionsSum()
	for {
		r.alive(p, when)
		if r.lastCommit().After(prevCommit) && (r.positionsSum() > prevSum || r.storedAll()) {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("no commit that moved the stored positions within %v %s; output:\n%s", timeout, when, tail(p.output(), 60))
		}
		time.Sleep(30 * time.Millisecond)
	}
}

// storedAll tells whether every record of the topics is stored as consumed.
func (r *rig) storedAll() bool {
	r.t.Helper()
	stored := r.storedConsumed()
	for tp, hw := range highWaterMarks(r.t, r.brokers) {
		if stored[tp] < hw {
			return false
		}
	}
	return true
}

// kill SIGKILLs p and checks G3.
func (r *rig) kill(p *proc) {
	r.t.Helper()
	p.kill()
	r.killed("after SIGKILL")
}

// killed records a kill of the current incarnation and checks G3.
func (r *rig) killed(when string) {
	r.t.Helper()
	r.kills++
	if r.lastCommit().After(r.since) {
		r.afterCommits++
	}
	r.mon.check(r.t, fmt.Sprintf("%s of incarnation %d", when, r.incarnations))
}

// signal sends sig to p.
func (r *rig) signal(p *proc, sig syscall.Signal) {
	r.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		r.t.Fatalf("signal %v: %v", sig, err)
	}
}

// stopGracefully sends SIGTERM and requires exit 0.
func (r *rig) stopGracefully(p *proc) {
	r.t.Helper()
	r.signal(p, syscall.SIGTERM)
	if code := p.wait(r.t, time.Minute); code != 0 {
		r.t.Fatalf("SIGTERM: exit %d, want 0; output:\n%s", code, tail(p.output(), 60))
	}
	r.mon.check(r.t, "after SIGTERM")
}

// finish produces what is left, requires that the schedule crashed after
// real commits (windows and positions stored, and at least minAfterCommits
// kills after a commit of the killed incarnation), runs the final drain and
// checks everything: G3 throughout, the result tables against the
// uninterrupted run, delay_aggregates against the SQL oracle.
func (r *rig) finish(minAfterCommits int) {
	t := r.t
	t.Helper()
	r.feed.wait(t, 5*time.Minute)
	windows := dump(t, r.db, `SELECT count(*) FROM delay_aggregates`)[0]
	stored := r.positionsSum()
	t.Logf("before the final drain: %d incarnations, %d kills (%d after a commit of their incarnation), %s window rows written, stored offsets sum %d",
		r.incarnations, r.kills, r.afterCommits, windows, stored)
	if windows == "[0]" || stored == 0 {
		t.Fatalf("the schedule wrote no window (%s rows) or stored no position (sum %d) before the final drain: it proves nothing", windows, stored)
	}
	if r.afterCommits < minAfterCommits {
		t.Fatalf("only %d kills came after a commit of their incarnation, want at least %d: the schedule proves too little", r.afterCommits, minAfterCommits)
	}
	drainStart := time.Now()
	var out string
	if r.finalDrain != nil {
		out = r.finalDrain()
	} else {
		out = drain(t, r.db, r.brokers, append([]string{"--flush-interval", "50ms", "--allowed-lateness", r.ds.lateness}, r.flags...)...)
	}
	t.Logf("final drain took %v", time.Since(drainStart).Round(time.Millisecond))
	if time.Since(drainStart) > 5*time.Second {
		t.Logf("slow final drain; its output:\n%s", out)
	}
	r.mon.check(t, "after the final drain")
	r.mon.close()
	if r.mon.samples < 3 {
		t.Fatalf("the positions monitor took %d samples", r.mon.samples)
	}
	rows := 0
	for _, q := range resultTables {
		got := dump(t, r.db, q.sql)
		sameRows(t, q.what+" (after the schedule vs uninterrupted run)", got, r.ref.tables[q.sql])
		rows += len(got)
	}
	checkOracle(t, r.db, r.brokers, r.ds)
	if t.Failed() {
		t.Logf("final drain output (tail):\n%s", tail(out, 40))
		t.FailNow()
	}
	t.Logf("after the final drain: %d rows compared with the uninterrupted run and %d with the SQL oracle: 0 differences; %d G3 samples",
		rows, len(r.ref.tables[dumpAggregates]), r.mon.samples)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// sleepOrExit sleeps d, or fails the test when p exits meanwhile.
func (r *rig) sleepOrExit(p *proc, d time.Duration, when string) {
	r.t.Helper()
	select {
	case <-p.done:
		r.t.Fatalf("ovstream exited %s (%v); output:\n%s", when, p.err, tail(p.output(), 60))
	case <-time.After(d):
	}
}

// ---------------------------------------------------------------------------
// Crash points.

// crashPlan says how the schedule drives each crash point: the N of
// OVSTREAM_CRASHPOINT=NAME:N for three rounds (round 0 is always N=1). For
// shutdown, N is always 1: the crash comes from the final commit after SIGTERM.
var crashPlan = map[string]func(rng *rand.Rand, round int) int{
	"after_consume": func(rng *rand.Rand, round int) int { return []int{1, 50 + rng.IntN(400), 700 + rng.IntN(1300)}[round] },
	"before_begin":  func(rng *rand.Rand, round int) int { return []int{1, 2 + rng.IntN(4), 6 + rng.IntN(10)}[round] },
	"mid_commit":    func(rng *rand.Rand, round int) int { return []int{1, 2 + rng.IntN(4), 6 + rng.IntN(10)}[round] },
	"before_commit": func(rng *rand.Rand, round int) int { return []int{1, 2 + rng.IntN(4), 6 + rng.IntN(10)}[round] },
	"after_commit":  func(rng *rand.Rand, round int) int { return []int{1, 2 + rng.IntN(4), 6 + rng.IntN(10)}[round] },
	"shutdown":      func(*rand.Rand, int) int { return 1 },
}

// drivenElsewhere are crash points of other commands than run, each driven
// by the test named.
var drivenElsewhere = map[string]string{"replay_acked": "TestDLQReplayKilledAndRerun"}

// requiredCrashPoints are the points the suite must cover: after
// a record is consumed, before BEGIN, in the middle of the commit, before
// and after COMMIT, and at shutdown.
var requiredCrashPoints = []string{"after_consume", "before_begin", "mid_commit", "before_commit", "after_commit", "shutdown"}

// binaryCrashPoints lists the crash points the test binary knows.
func binaryCrashPoints(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command(ovstreamBin(t), "crashpoints").CombinedOutput()
	if err != nil {
		t.Fatalf("ovstream crashpoints: %v\n%s", err, out)
	}
	return strings.Fields(string(out))
}

// The binary built with -tags crashpoints lists every crash point the issue
// asks for, and the crash schedule knows how to drive every point it lists;
// a binary built without the tag has no crash points at all.
func TestCrashPointsKnown(t *testing.T) {
	points := binaryCrashPoints(t)
	known := map[string]bool{}
	for _, p := range points {
		known[p] = true
		if crashPlan[p] == nil && drivenElsewhere[p] == "" {
			t.Errorf("the binary knows crash point %q, which TestCrashPoints does not drive: add it to crashPlan", p)
		}
	}
	for _, p := range requiredCrashPoints {
		if !known[p] {
			t.Errorf("crash point %q is missing from `ovstream crashpoints` (it lists %v)", p, points)
		}
	}
	plain := filepath.Join(t.TempDir(), "ovstream")
	if out, err := exec.Command("go", "build", "-o", plain, "../cmd/ovstream").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(plain, "crashpoints").CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), `unknown command "crashpoints"`) {
		t.Errorf("a binary built without -tags crashpoints must not know the crashpoints command: %v\n%s", err, out)
	}
}

// Every crash point, at several N, each followed by a restart: the
// N-th time the point is reached the process dies by SIGKILL (for shutdown:
// during the final commit after SIGTERM). Then a final drain; the tables
// equal the uninterrupted run and the SQL oracle, and no stored position ever
// moved backwards or passed the high water mark.
func TestCrashPoints(t *testing.T) {
	t.Parallel()
	rng := crashSeed(t)
	ds := auckland2h(t)
	points := binaryCrashPoints(t)
	type item struct {
		point string
		n     int
	}
	var plan []item
	for round := 0; round < 3; round++ {
		for _, p := range points {
			if drivenElsewhere[p] != "" {
				continue
			}
			f := crashPlan[p]
			if f == nil {
				t.Fatalf("no plan for crash point %q (see TestCrashPointsKnown)", p)
			}
			if p == "shutdown" && round == 2 {
				continue
			}
			plan = append(plan, item{p, f(rng, round)})
		}
	}
	rng.Shuffle(len(plan)-1, func(i, j int) { plan[i+1], plan[j+1] = plan[j+1], plan[i+1] })
	// Each incarnation gets 3 feed steps while it runs; the last two steps
	// are the bad predictions and the positions.
	const perIncarnation = 3
	r := newRig(t, rng, ds, startBroker(t), perIncarnation*len(plan)-2)
	t.Logf("plan: %v", plan)

	reached := map[string]int{}
	for i, it := range plan {
		p := r.start(fmt.Sprintf("OVSTREAM_CRASHPOINT=%s:%d", it.point, it.n))
		r.feed.async(perIncarnation, 60*time.Millisecond) // fresh records for this incarnation
		if it.point == "shutdown" {
			r.waitCommits(p, 1+rng.IntN(4), time.Minute, "before SIGTERM")
			r.signal(p, syscall.SIGTERM)
		}
		select {
		case <-p.done:
		case <-time.After(90 * time.Second):
			p.kill()
			t.Fatalf("step %d: crash point %s:%d not reached within 90s; output:\n%s", i, it.point, it.n, tail(p.output(), 40))
		}
		ws, _ := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
		want := fmt.Sprintf("crashpoint: %s reached %d time(s): SIGKILL", it.point, it.n)
		if !ws.Signaled() || ws.Signal() != syscall.SIGKILL || !strings.Contains(p.output(), want) {
			t.Fatalf("step %d: %s:%d: the process ended with %v, want SIGKILL after %q; output:\n%s",
				i, it.point, it.n, p.cmd.ProcessState, want, tail(p.output(), 40))
		}
		reached[it.point]++
		r.killed(fmt.Sprintf("after crash point %s:%d", it.point, it.n))
	}
	for _, p := range points {
		if reached[p] == 0 && drivenElsewhere[p] == "" {
			t.Errorf("crash point %s never fired", p)
		}
	}
	// At least the kills at N > 1 of the commit points and at shutdown
	// came after commits of their incarnation.
	r.finish(len(plan) / 3)
}

// At least 24 SIGKILLs (200 with -crash.long, over the whole 48 h archive)
// at seeded random moments of a live feed, each followed by a restart, then
// a final drain: the tables equal the uninterrupted run and the SQL oracle.
func TestCrashRandomKills(t *testing.T) {
	t.Parallel()
	rng := crashSeed(t)
	kills, ds := 24, (*dataset)(nil)
	if *crashLong {
		if *crashData == "" {
			t.Fatal("-crash.long needs -crash.data DIR: the unpacked Auckland 48 h archive (make crash does this)")
		}
		// 15m: the archive's worst real lag is 579 s; a restart may briefly
		// leave a freshly written partition out of the watermark for up to a
		// chunk's span.
		ds, kills = loadDataset(t, "auckland-48h", *crashData, "15m"), 200
	} else {
		ds = auckland2h(t)
	}
	if *crashKills > 0 {
		kills = *crashKills
	}
	// Incarnations live 100 ms - 1 s (startup to first commit is ~0.2 s):
	// some die before their first commit, most after several. The feed lasts
	// about as long as the kills.
	const meanLife = 550 * time.Millisecond
	chunks := 3 * kills
	interval := meanLife / 3
	r := newRig(t, rng, ds, startBroker(t), chunks)
	t.Logf("%d kills; %d predictions in %d chunks, one every %v", kills, len(ds.predictions), chunks, interval)
	r.feed.paced(interval)
	for r.kills < kills || !r.feed.finished() {
		p := r.start()
		life := time.Duration(100+rng.IntN(900)) * time.Millisecond
		r.sleepOrExit(p, life, fmt.Sprintf("in incarnation %d before its kill", r.incarnations))
		r.kill(p)
		if r.kills%50 == 0 {
			t.Logf("%d kills, %d after a commit of their incarnation", r.kills, r.afterCommits)
		}
	}
	r.finish(kills / 2)
}

// ---------------------------------------------------------------------------
// PostgreSQL restarts and killed connections.

// terminateBackends terminates every connection of ovstream (application
// name "ovstream") to db and returns how many there were.
func terminateBackends(t *testing.T, db string) int {
	t.Helper()
	return int(scalar[int64](t, db, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = 'ovstream' AND datname = current_database() AND pid <> pg_backend_pid()`))
}

// failures counts the retried failures the service logged.
func failures(p *proc) int {
	out := p.output()
	return strings.Count(out, "failed; retrying") + strings.Count(out, "COMMIT outcome unknown")
}

// One service process lives through killed connections (twice) and two
// PostgreSQL restarts without exiting, committing again after each; SIGTERM
// then ends it with exit 0, and a final drain gives the exact tables. The
// server restarted is a private cluster of the test's own.
func TestCrashPostgresRestarts(t *testing.T) {
	t.Parallel()
	rng := crashSeed(t)
	ds := auckland2h(t)
	pg := startPrivatePG(t)
	r := newRigOn(t, rng, ds, startBroker(t), 50, pg.freshDB())
	r.feed.paced(200 * time.Millisecond)
	p := r.start()
	r.waitProgress(p, time.Minute, "before the first disruption")
	for i := 1; i <= 2; i++ {
		r.sleepOrExit(p, time.Duration(100+rng.IntN(400))*time.Millisecond, "before killing its connections")
		before := failures(p)
		if n := terminateBackends(t, r.db); n == 0 {
			t.Fatalf("no connection of ovstream to terminate")
		}
		r.waitCommits(p, 2, time.Minute, fmt.Sprintf("after its connections were killed (%d)", i))
		if failures(p) == before {
			t.Fatalf("killed connections (%d): the service logged no failed and retried operation; output:\n%s", i, tail(p.output(), 40))
		}
		r.mon.check(t, fmt.Sprintf("after killed connections (%d)", i))
	}
	for i := 1; i <= 2; i++ {
		r.sleepOrExit(p, time.Duration(200+rng.IntN(800))*time.Millisecond, "before the PostgreSQL restart")
		before := failures(p)
		pg.restart()
		r.alive(p, fmt.Sprintf("through PostgreSQL restart %d", i))
		r.waitProgress(p, 2*time.Minute, fmt.Sprintf("after PostgreSQL restart %d", i))
		if failures(p) == before {
			t.Fatalf("PostgreSQL restart %d: the service logged no failed and retried operation; output:\n%s", i, tail(p.output(), 40))
		}
		r.mon.check(t, fmt.Sprintf("after PostgreSQL restart %d", i))
	}
	r.feed.wait(t, 2*time.Minute)
	r.waitCommits(p, 2, time.Minute, "after the feed ended")
	r.stopGracefully(p)
	// One process, no kill: the disruptions themselves are what came after commits.
	r.finish(0)
}

// SIGSTOP for much longer than the flush interval, then SIGCONT, three times
// (once with the connections killed while stopped); then SIGKILL while
// stopped and a restart. The service goes on each time; the tables are exact.
func TestCrashSigstop(t *testing.T) {
	t.Parallel()
	rng := crashSeed(t)
	ds := auckland2h(t)
	r := newRig(t, rng, ds, startBroker(t), 40)
	r.feed.paced(150 * time.Millisecond)
	p := r.start()
	r.waitProgress(p, time.Minute, "before the first SIGSTOP")
	for i := 1; i <= 3; i++ {
		r.signal(p, syscall.SIGSTOP)
		waitStopped(t, p)
		if i == 2 {
			if n := terminateBackends(t, r.db); n == 0 {
				t.Fatal("no connection of ovstream to terminate")
			}
		}
		time.Sleep(time.Duration(500+rng.IntN(1000)) * time.Millisecond) // >= 10 flush intervals
		r.signal(p, syscall.SIGCONT)
		r.waitProgress(p, time.Minute, fmt.Sprintf("after SIGCONT %d", i))
		r.mon.check(t, fmt.Sprintf("after SIGSTOP/SIGCONT %d", i))
	}
	r.signal(p, syscall.SIGSTOP)
	waitStopped(t, p)
	time.Sleep(time.Duration(200+rng.IntN(500)) * time.Millisecond)
	r.kill(p)
	p = r.start()
	r.waitProgress(p, time.Minute, "after the restart")
	r.feed.wait(t, 2*time.Minute)
	r.waitCommits(p, 2, time.Minute, "after the feed ended")
	r.stopGracefully(p)
	r.finish(1)
}

// warnings counts the warnings p logged.
func warnings(p *proc) int { return strings.Count(p.output(), "level=WARN") }

// waitStopped waits until p's state is T (stopped).
func waitStopped(t *testing.T, p *proc) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
		if err == nil {
			if i := strings.LastIndexByte(string(b), ')'); i > 0 && len(b) > i+2 && (b[i+2] == 'T' || b[i+2] == 't') {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("ovstream (pid %d) did not stop: %s", p.cmd.Process.Pid, b)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// ---------------------------------------------------------------------------
// Broker restarts.

// brokerProc runs `ovstream broker --data-dir DIR` on a fixed address, so
// clients reconnect to the same place after a restart.
type brokerProc struct {
	t    *testing.T
	dir  string
	addr string
	p    *proc
}

func startBrokerProc(t *testing.T, dir, addr string) *brokerProc {
	t.Helper()
	b := &brokerProc{t: t, dir: dir, addr: addr}
	b.start()
	return b
}

func (b *brokerProc) start() {
	b.t.Helper()
	b.p = startOvstream(b.t, nil, "broker", "--data-dir", b.dir, "--addr", b.addr,
		"--topics", fmt.Sprintf("%s:6,%s:3", predictionsTopic, positionsTopic))
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(b.p.output(), "broker listening on") {
		select {
		case <-b.p.done:
			b.t.Fatalf("broker exited: %v\n%s", b.p.err, b.p.output())
		default:
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("broker not listening within 30s:\n%s", b.p.output())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// freeAddr returns 127.0.0.1:PORT with a port that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// The broker (a subprocess with --data-dir on a fixed port) is restarted
// three times under a running service: SIGTERM, SIGKILL, and SIGKILL with the
// service killed while the broker is down and started again after it. The
// service reconnects and goes on; the tables are exact.
func TestCrashBrokerRestart(t *testing.T) {
	t.Parallel()
	rng := crashSeed(t)
	ds := auckland2h(t)
	addr := freeAddr(t)
	b := startBrokerProc(t, t.TempDir(), addr)
	r := newRig(t, rng, ds, addr, 40)
	r.feed.paced(200 * time.Millisecond)
	p := r.start()
	r.waitProgress(p, time.Minute, "before the first broker restart")
	for i, how := range []string{"SIGTERM", "SIGKILL", "SIGKILL with the service killed meanwhile"} {
		r.sleepOrExit(p, time.Duration(200+rng.IntN(600))*time.Millisecond, "before the broker restart")
		r.feed.pause()
		warned := warnings(p)
		if how == "SIGTERM" {
			_ = b.p.cmd.Process.Signal(syscall.SIGTERM)
			if code := b.p.wait(t, 30*time.Second); code != 0 {
				t.Fatalf("broker: SIGTERM: exit %d\n%s", code, b.p.output())
			}
		} else {
			b.p.kill()
		}
		down := time.Duration(300+rng.IntN(1200)) * time.Millisecond
		if i == 2 {
			r.sleepOrExit(p, down/2, "while the broker is down")
			p.kill() // its G3 check below, once the broker is back
			time.Sleep(down / 2)
		} else {
			r.sleepOrExit(p, down, "while the broker is down")
		}
		b.start()
		r.feed.resume()
		if i == 2 {
			r.killed("after SIGKILL while the broker was down")
			p = r.start()
		} else {
			// The broker process died, and its connections with it; sarama
			// may reconnect without a word, so warnings are only logged.
			t.Logf("broker restart %d (%s): down for %v, %d warnings from the service", i+1, how, down, warnings(p)-warned)
		}
		// Records written after the restart are read and committed.
		r.feed.step()
		back := time.Now()
		r.waitConsumedTo(p, highWaterMarks(t, addr), 2*time.Minute, fmt.Sprintf("after broker restart %d (%s)", i+1, how))
		t.Logf("broker restart %d: records written after it committed %v after it was back", i+1, time.Since(back).Round(time.Millisecond))
		r.mon.check(t, fmt.Sprintf("after broker restart %d", i+1))
	}
	r.feed.wait(t, 2*time.Minute)
	r.waitCommits(p, 2, time.Minute, "after the feed ended")
	r.stopGracefully(p)
	r.finish(1)
}
