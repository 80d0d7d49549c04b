//go:build integration

package harness

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5"
	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/feed/gtfsrt"
	"github.com/ovstream/ovstream/feed/produce"
)

// CrashSeed returns the test's random source: OVSTREAM_CRASH_SEED when set,
// else a new seed. The seed is logged at the start and again when the test
// fails, with the command that replays it.
func CrashSeed(t *testing.T) *rand.Rand {
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

// Dataset is what a schedule produces: arrival predictions of one real feed,
// records that break the data contract (each must become exactly one dead
// letter), and the Halifax vehicle positions.
type Dataset struct {
	name        string
	Lateness    string // --allowed-lateness under which no event of the data is late
	Predictions []aggregate.Prediction
	badPreds    []produce.Message
	positions   *gtfsrt.Result
	badPos      []produce.Message
}

// records is the number of records of the predictions topic.
func (d *Dataset) records() int { return len(d.Predictions) + len(d.badPreds) }

var (
	datasetsMu sync.Mutex
	datasets   = map[string]*Dataset{}
)

// badMessages are keyed (so their partition and offset are the same in every
// run) and each breaks the contract in its own way.
func badMessages() (preds, pos []produce.Message) {
	for i, line := range BadLines {
		preds = append(preds, produce.Message{Topic: PredictionsTopic, Key: []byte(fmt.Sprintf("bad-%d", i+1)), Value: []byte(line)})
	}
	preds = append(preds,
		produce.Message{Topic: PredictionsTopic, Key: []byte("bad-nul"),
			Value: []byte("{\"trip_id\":\"bad\u0000nul\",\"line\":\"L\",\"stop_id\":\"S\",\"operator\":\"AT\",\"delay_s\":5,\"event_time\":\"2016-05-18T20:01:00Z\"}")},
		produce.Message{Topic: PredictionsTopic, Key: []byte("bad-utf8"), Value: []byte("\xff\xfe{\"trip_id\":\"x\"}")},
		produce.Message{Topic: PredictionsTopic, Key: []byte("bad-nan"),
			Value: []byte(`{"trip_id":"bad-nan","line":"L","stop_id":"S","operator":"AT","delay_s":"NaN","event_time":"2016-05-18T20:01:00Z"}`)},
	)
	pos = []produce.Message{
		{Topic: PositionsTopic, Key: []byte("bad-v1"), Value: []byte(`{"vehicle_id":"bad-v1","lat":91,"lon":0,"event_time":"2025-11-06T21:00:00Z"}`)},
		{Topic: PositionsTopic, Key: []byte("bad-v2"), Value: []byte(`{"vehicle_id":"bad-v2","lat":44.6,"lon":-63.5,"event_time":"2025-11-06T21:00:00"}`)},
	}
	return preds, pos
}

// LoadDataset loads and caches a dataset: the predictions of the GTFS-realtime
// files under dir (operator AT) and the Halifax positions (operator HFX).
func LoadDataset(t *testing.T, name, dir, lateness string) *Dataset {
	t.Helper()
	datasetsMu.Lock()
	defer datasetsMu.Unlock()
	if d := datasets[name]; d != nil {
		return d
	}
	preds := LoadFeeds(t, "AT", dir)
	// Auckland's feed gives no service day: each prediction gets the
	// Auckland date of its event time, so that the predictions form stop
	// visits and the runs compare them too.
	akl, err := time.LoadLocation("Pacific/Auckland")
	if err != nil {
		t.Fatal(err)
	}
	for i := range preds.Predictions {
		p := &preds.Predictions[i]
		y, m, d := p.EventTime.In(akl).Date()
		p.StartDate = int32(y*10000 + int(m)*100 + d)
	}
	hfx := LoadFeeds(t, "HFX", RepoPath("testdata/halifax-20251106"))
	d := &Dataset{name: name, Lateness: lateness, Predictions: preds.Predictions,
		positions: &gtfsrt.Result{Positions: hfx.Positions}}
	d.badPreds, d.badPos = badMessages()
	if len(d.Predictions) == 0 || len(d.positions.Positions) == 0 {
		t.Fatalf("dataset %s: %d predictions, %d positions", name, len(d.Predictions), len(d.positions.Positions))
	}
	t.Logf("dataset %s: %d predictions, %d bad predictions, %d positions, %d bad positions",
		name, len(d.Predictions), len(d.badPreds), len(d.positions.Positions), len(d.badPos))
	datasets[name] = d
	return d
}

// Auckland2h is the 2-hour Auckland slice of testdata (120 snapshots, 49,140
// predictions). With allowed lateness 10m no event of it is late, whatever the
// interleaving (shared/data/README.md), so runs are comparable.
func Auckland2h(t *testing.T) *Dataset {
	t.Helper()
	datasetsMu.Lock()
	d := datasets["auckland-2h"]
	datasetsMu.Unlock()
	if d != nil {
		return d
	}
	return LoadDataset(t, "auckland-2h", ExtractTarGz(t, RepoPath("testdata/auckland-20160518-2h.tar.gz")), "10m")
}

// Feed produces a dataset in steps: the predictions in chunks (file order),
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
type Feed struct {
	addr  string
	Steps []feedStep

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
	Settle bool // wait settlePause after the previous step
	res    *gtfsrt.Result
	msgs   []produce.Message
}

const settlePause = 1500 * time.Millisecond // > the service's 1 s high-water poll

// NewFeed splits ds's predictions into chunks steps (at least 2) produced
// to the broker at addr, with the dataset's bad messages after the first
// half, so that every feed of ds gives the same offsets.
func NewFeed(ds *Dataset, addr string, chunks int) *Feed {
	f := &Feed{addr: addr, done: make(chan struct{}), stop: make(chan struct{})}
	// The bad predictions go after the first half of the predictions,
	// whatever the chunking, so that every feed gives the same offsets.
	mid := len(ds.Predictions) / 2
	chunks = max(2, min(chunks, len(ds.Predictions)))
	for half, preds := range [][]aggregate.Prediction{ds.Predictions[:mid], ds.Predictions[mid:]} {
		n := chunks / 2
		if half == 1 {
			n = chunks - chunks/2
			f.Steps = append(f.Steps, feedStep{msgs: ds.badPreds})
		}
		for i := 0; i < n; i++ {
			lo, hi := i*len(preds)/n, (i+1)*len(preds)/n
			f.Steps = append(f.Steps, feedStep{res: &gtfsrt.Result{Predictions: preds[lo:hi]}})
		}
	}
	f.Steps = append(f.Steps, feedStep{Settle: true, res: ds.positions, msgs: ds.badPos})
	f.limit = len(f.Steps)
	return f
}

// HoldBack keeps the last n steps from being produced until release.
func (f *Feed) HoldBack(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.limit = len(f.Steps) - n
}

// Release lets the feed produce every step, also those held back.
func (f *Feed) Release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.limit = len(f.Steps)
}

// Step produces the next step; false when there is none left or producing failed.
func (f *Feed) Step() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.next >= f.limit || f.err != nil {
		return false
	}
	s := f.Steps[f.next]
	if s.Settle {
		time.Sleep(time.Until(f.last.Add(settlePause)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := produce.Config{Brokers: []string{f.addr}}
	if s.res != nil {
		if _, err := produce.GTFSRT(ctx, cfg, s.res, produce.Topics{Predictions: PredictionsTopic, Positions: PositionsTopic}); err != nil {
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
	if f.next == len(f.Steps) {
		close(f.done)
	}
	return true
}

// Paced produces one step every interval in the background until all are produced.
func (f *Feed) Paced(interval time.Duration) {
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for f.Step() {
			select {
			case <-f.stop:
				return
			case <-time.After(interval):
			}
		}
	}()
}

// Async produces up to n steps in the background, gap apart.
func (f *Feed) Async(n int, gap time.Duration) {
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for k := 0; k < n && f.Step(); k++ {
			time.Sleep(gap)
		}
	}()
}

// All produces every remaining step now.
func (f *Feed) All(t testing.TB) {
	t.Helper()
	for f.Step() {
	}
	f.Wait(t, time.Minute)
}

// Wait waits until every step is produced and fails the test on a producer error.
func (f *Feed) Wait(t testing.TB, timeout time.Duration) {
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
	if next < len(f.Steps) {
		t.Fatalf("feed: %d of %d steps produced after %v", next, len(f.Steps), timeout)
	}
}

// Finished reports whether every step has been produced.
func (f *Feed) Finished() bool {
	select {
	case <-f.done:
		return true
	default:
		return false
	}
}

// Pause stops production (after the step in progress) until resume.
func (f *Feed) Pause() {
	f.mu.Lock()
	f.paused = true
}

// Resume lets a paused feed go on.
func (f *Feed) Resume() {
	f.paused = false
	f.mu.Unlock()
}

// Close stops the feed and waits for its goroutine.
func (f *Feed) Close() {
	if f.paused {
		f.Resume()
	}
	close(f.stop)
	f.wg.Wait()
}

// Reference holds the canonical dumps of an uninterrupted run.
type Reference struct {
	Tables map[string][]string // query -> sorted rows
}

var (
	referencesMu sync.Mutex
	references   = map[string]*Reference{}
)

// ResultTables are the tables G1, G4 and G5 compare, by canonical dump.
var ResultTables = []struct{ What, Sql string }{
	{"delay_aggregates", DumpAggregates},
	{"delay_aggregates distributions", DumpDistributions},
	{"dead_letters", DumpDeadLetters},
	{"trip_delay_latest", DumpTrips},
	{"vehicle_latest", DumpVehicles},
	{"stop_visits", DumpVisits},
}

// ReferenceFor runs ds once without interruption (every record produced
// first, then one `run --drain`) and keeps its tables; it checks them against
// the SQL oracle too. Computed once per dataset and test process.
func ReferenceFor(t *testing.T, ds *Dataset) *Reference {
	t.Helper()
	referencesMu.Lock()
	defer referencesMu.Unlock()
	if ref := references[ds.name]; ref != nil {
		return ref
	}
	started := time.Now()
	addr := StartBroker(t)
	f := NewFeed(ds, addr, 1)
	f.Steps[len(f.Steps)-1].Settle = false
	f.All(t)
	db := FreshDB(t)
	Drain(t, db, addr, "--allowed-lateness", ds.Lateness)
	ref := &Reference{Tables: map[string][]string{}}
	for _, q := range ResultTables {
		ref.Tables[q.Sql] = Dump(t, db, q.Sql)
	}
	CheckOracle(t, db, addr, ds)
	if t.Failed() {
		t.FailNow()
	}
	if len(ref.Tables[DumpVisits]) == 0 {
		t.Fatalf("reference of %s: no stop visits to compare", ds.name)
	}
	t.Logf("reference (uninterrupted run) of %s: %d delay_aggregates rows, %d dead letters, %d trips, %d vehicles, %d stop visits, in %v",
		ds.name, len(ref.Tables[DumpAggregates]), len(ref.Tables[DumpDeadLetters]), len(ref.Tables[DumpTrips]),
		len(ref.Tables[DumpVehicles]), len(ref.Tables[DumpVisits]), time.Since(started).Round(time.Millisecond))
	references[ds.name] = ref
	return ref
}

// CheckOracle loads the predictions topic into oracle_msgs of db and checks
// the drained tables of db: delay_aggregates and the distributions stored
// with its rows equal the SQL oracle; the dead
// letters are exactly the bad records (decode errors; nothing late, nothing
// in the future); every record is counted once or dead-lettered once; every
// stored position is at the high water mark.
func CheckOracle(t *testing.T, db, addr string, ds *Dataset) {
	t.Helper()
	n := LoadOracleInput(t, db, addr, PredictionsTopic)
	if n != ds.records() {
		t.Fatalf("the predictions topic holds %d records, want %d", n, ds.records())
	}
	got, want := Dump(t, db, DumpAggregates), Dump(t, db, OracleAggregates)
	if len(got) == 0 {
		t.Fatal("no delay_aggregates rows")
	}
	SameRows(t, "delay_aggregates vs SQL oracle", got, want)
	dists := Dump(t, db, DumpDistributions)
	SameRows(t, "stored distributions vs SQL oracle (GROUP BY window, dimension, id, delay)", dists, Dump(t, db, OracleDistributions))
	// Every row has its distribution: as many rows carry one as there are rows.
	if n := Dump(t, db, `SELECT count(*) FROM delay_aggregates WHERE delay_values IS NULL`); n[0] != "[0]" {
		t.Errorf("%s delay_aggregates rows without a distribution", n[0])
	}
	// Dead letters: each bad record exactly once; real records only for
	// decode errors (the 48 h archive has delays beyond 24 h); nothing late,
	// nothing in the future.
	if other := Dump(t, db, `SELECT reason, count(*) FROM dead_letters WHERE reason <> 'decode' GROUP BY reason`); len(other) > 0 {
		t.Errorf("dead letters other than decode errors: %v (no event of the data is late or in the future)", other)
	}
	for _, m := range append(append([]produce.Message{}, ds.badPreds...), ds.badPos...) {
		got := Dump(t, db, fmt.Sprintf(`SELECT count(*) FROM dead_letters WHERE topic = '%s' AND key = '\x%x'::bytea AND value = '\x%x'::bytea`,
			m.Topic, m.Key, m.Value))
		if got[0] != "[1]" {
			t.Errorf("bad record %s/%s: %s dead letters, want exactly 1", m.Topic, m.Key, got[0])
		}
	}
	// Every record of the predictions topic exactly once: counted in the
	// network rows, or dead-lettered.
	counted := Dump(t, db, `SELECT coalesce(sum(event_count), 0)::bigint FROM delay_aggregates WHERE dimension = 'network'`)
	dead := Dump(t, db, `SELECT count(*) FROM dead_letters WHERE topic = 'arrival_predictions'`)
	var c, d int
	Scan(t, counted[0], "[%d]", &c)
	Scan(t, dead[0], "[%d]", &d)
	if c+d != n {
		t.Errorf("%d events counted + %d dead letters = %d, want every record of the topic exactly once: %d", c, d, c+d, n)
	}
	// G3 at the end: every partition stored at its high water mark.
	hw := HighWaterMarks(t, addr)
	for _, row := range Dump(t, db, `SELECT topic, partition, next_offset, consumed_offset FROM stream_positions WHERE next_offset IS NOT NULL`) {
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

// HighWaterMarks returns the high water mark of every partition of both topics.
func HighWaterMarks(t *testing.T, addr string) map[aggregate.PartitionID]int64 {
	t.Helper()
	client, err := sarama.NewClient([]string{addr}, sarama.NewConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	hw, err := ReadHighWater(client)
	if err != nil {
		t.Fatal(err)
	}
	return hw
}

// ReadHighWater returns the newest offset of every partition of the
// predictions and positions topics.
func ReadHighWater(client sarama.Client) (map[aggregate.PartitionID]int64, error) {
	hw := map[aggregate.PartitionID]int64{}
	for _, topic := range []string{PredictionsTopic, PositionsTopic} {
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

// Scalar returns the one value of sql on db, retrying for up to a minute
// while PostgreSQL does not answer (a restart in progress).
func Scalar[T any](t *testing.T, db, sql string) T {
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

// Tail returns the last n lines of s.
func Tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// WaitStopped waits until p's state is T (stopped).
func WaitStopped(t *testing.T, p *Proc) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Cmd.Process.Pid))
		if err == nil {
			if i := strings.LastIndexByte(string(b), ')'); i > 0 && len(b) > i+2 && (b[i+2] == 'T' || b[i+2] == 't') {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("ovstream (pid %d) did not stop: %s", p.Cmd.Process.Pid, b)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// FreeAddr returns 127.0.0.1:PORT with a port that was free a moment ago.
func FreeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
