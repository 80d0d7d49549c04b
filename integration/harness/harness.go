//go:build integration

package harness

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/broker/embedded"
	"github.com/ovstream/ovstream/feed/gtfsrt"
	"github.com/ovstream/ovstream/feed/produce"
)

// The topics of the tests' embedded broker (StartBroker).
const (
	PredictionsTopic = "arrival_predictions"
	PositionsTopic   = "vehicle_positions"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// OvstreamBin builds the ovstream binary once per test process, with the
// crash points compiled in.
func OvstreamBin(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ovstream-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "ovstream")
		out, err := exec.Command("go", "build", "-tags", "crashpoints", "-o", binPath, RepoPath("cmd/ovstream")).CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// StartBroker starts the embedded broker on a free port with 6 + 3 partitions.
func StartBroker(t testing.TB) string {
	t.Helper()
	b, err := embedded.Start(embedded.Config{Addr: "127.0.0.1:0",
		Topics: map[string]int32{PredictionsTopic: 6, PositionsTopic: 3}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b.Addr()
}

// LoadFeeds reads GTFS-realtime files from testdata.
func LoadFeeds(t testing.TB, operator string, paths ...string) *gtfsrt.Result {
	t.Helper()
	res, err := gtfsrt.Load(paths, gtfsrt.Options{Operator: operator})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// ProduceFeeds produces res into the broker at addr.
func ProduceFeeds(t testing.TB, addr string, res *gtfsrt.Result) {
	t.Helper()
	_, err := produce.GTFSRT(context.Background(), produce.Config{Brokers: []string{addr}}, res,
		produce.Topics{Predictions: PredictionsTopic, Positions: PositionsTopic})
	if err != nil {
		t.Fatal(err)
	}
}

// ProduceLines produces each line as one record of topic, as it is.
func ProduceLines(t testing.TB, addr, topic string, lines ...string) {
	t.Helper()
	_, err := produce.JSONL(context.Background(), produce.Config{Brokers: []string{addr}},
		strings.NewReader(strings.Join(lines, "\n")), topic, produce.KeyFields(topic == PositionsTopic))
	if err != nil {
		t.Fatal(err)
	}
}

// Proc is a running ovstream subprocess.
type Proc struct {
	Cmd  *exec.Cmd
	out  *bytes.Buffer
	Done chan struct{}
	Err  error
}

// StartOvstream starts `ovstream ARGS...` with env added to the environment.
func StartOvstream(t testing.TB, env []string, args ...string) *Proc {
	t.Helper()
	return StartWrapped(t, nil, env, args...)
}

// StartWrapped is StartOvstream under the command wrap (e.g. unshare ...),
// which runs `ovstream ARGS...` and ends with it.
func StartWrapped(t testing.TB, wrap, env []string, args ...string) *Proc {
	t.Helper()
	argv := append(append(slices.Clone(wrap), OvstreamBin(t)), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	p := &Proc{Cmd: cmd, out: &bytes.Buffer{}, Done: make(chan struct{})}
	cmd.Stdout = &LockedWriter{W: p.out}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.Err = cmd.Wait(); close(p.Done) }()
	t.Cleanup(func() {
		select {
		case <-p.Done:
		default:
			_ = cmd.Process.Kill()
			<-p.Done
		}
	})
	return p
}

// Wait waits for the process to end and returns its exit code.
func (p *Proc) Wait(t testing.TB, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.Done:
	case <-time.After(timeout):
		_ = p.Cmd.Process.Kill()
		<-p.Done
		t.Fatalf("ovstream did not end within %v; output:\n%s", timeout, p.Output())
	}
	return p.Cmd.ProcessState.ExitCode()
}

// Kill sends SIGKILL and waits.
func (p *Proc) Kill() {
	_ = p.Cmd.Process.Signal(syscall.SIGKILL)
	<-p.Done
}

// Output is what the process has written to stdout and stderr so far.
func (p *Proc) Output() string {
	w := p.Cmd.Stdout.(*LockedWriter)
	w.mu.Lock()
	defer w.mu.Unlock()
	return p.out.String()
}

// LockedWriter is a buffer that a child process and the test write and read
// from different goroutines.
type LockedWriter struct {
	mu sync.Mutex
	W  *bytes.Buffer
}

// Write appends b to the buffer under its lock.
func (l *LockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.W.Write(b)
}

// RunArgs are the `run` arguments of the tests: fast flushes, and allowed
// lateness 10m so no event of the Auckland data is late (shared/data/README.md).
func RunArgs(db, brokers string, extra ...string) []string {
	return append([]string{"run", "--database-url", db, "--brokers", brokers, "--metrics-addr", "",
		"--flush-interval", "100ms", "--allowed-lateness", "10m", "--log-level", "debug"}, extra...)
}

// Drain runs `ovstream run --drain` to the end and fails the test unless it exits 0.
func Drain(t testing.TB, db, brokers string, extra ...string) string {
	t.Helper()
	p := StartOvstream(t, nil, RunArgs(db, brokers, append([]string{"--drain"}, extra...)...)...)
	if code := p.Wait(t, 3*time.Minute); code != 0 {
		t.Fatalf("run --drain exited %d:\n%s", code, p.Output())
	}
	return p.Output()
}

// Dump returns the rows of query as sorted text lines, for exact comparison.
func Dump(t testing.TB, db, query string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, query)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	var out []string
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%v", vals))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// Canonical dumps of the result tables (timestamps of the write excluded).
const (
	DumpAggregates = `SELECT window_start, window_end, dimension, dimension_id, operator, event_count,
		mean_delay_s, p90_delay_s, min_delay_s, max_delay_s FROM delay_aggregates`
	// DumpDistributions: the stored distribution of each delay_aggregates
	// row, one line per distinct delay with its position in the arrays.
	DumpDistributions = `SELECT window_start, dimension, dimension_id, u.i, u.v, u.c
		FROM delay_aggregates CROSS JOIN LATERAL unnest(delay_values, delay_counts) WITH ORDINALITY AS u(v, c, i)`
	DumpDeadLetters = `SELECT topic, partition, "offset", encode(key, 'escape'), encode(value, 'escape'), reason, error FROM dead_letters`
	DumpVehicles    = `SELECT vehicle_id, trip_id, line, operator, lat, lon, bearing, speed_mps, observed_at,
		kafka_partition, kafka_offset FROM vehicle_latest`
	DumpTrips = `SELECT trip_id, line, stop_id, operator, vehicle_id, stop_sequence, delay_s, observed_at,
		kafka_partition, kafka_offset FROM trip_delay_latest`
	// DumpVisits: every stop visit, its last prediction (with its Kafka
	// position) and its prediction history.
	DumpVisits = `SELECT trip_id, start_date, stop_key, line, operator, stop_id, stop_sequence, arrival_time,
		arrival_predicted, delay_s, predictions, last_event_time, last_partition, last_offset, prediction_times,
		prediction_delays FROM stop_visits`
)

// SameRows fails the test when a and b differ, showing the first differences.
func SameRows(t testing.TB, what string, a, b []string) {
	t.Helper()
	inA := map[string]int{}
	for _, r := range a {
		inA[r]++
	}
	var onlyB []string
	for _, r := range b {
		if inA[r] > 0 {
			inA[r]--
		} else {
			onlyB = append(onlyB, r)
		}
	}
	var onlyA []string
	for r, n := range inA {
		for ; n > 0; n-- {
			onlyA = append(onlyA, r)
		}
	}
	if len(onlyA)+len(onlyB) == 0 {
		return
	}
	sort.Strings(onlyA)
	t.Errorf("%s: %d rows vs %d rows; %d only in the first, %d only in the second", what, len(a), len(b), len(onlyA), len(onlyB))
	for i := 0; i < len(onlyA) && i < 5; i++ {
		t.Errorf("  only first:  %s", onlyA[i])
	}
	for i := 0; i < len(onlyB) && i < 5; i++ {
		t.Errorf("  only second: %s", onlyB[i])
	}
}

// ReadTopic returns every record of topic as a read_committed consumer sees
// it, partition by partition in offset order. The partitions are read in
// parallel; one that does not reach its high water mark within a minute
// fails the test.
func ReadTopic(t testing.TB, addr, topic string) []*sarama.ConsumerMessage {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V2_8_0_0
	cfg.Consumer.IsolationLevel = sarama.ReadCommitted
	cfg.Consumer.Fetch.Default = 8 << 20
	cfg.Consumer.MaxWaitTime = 50 * time.Millisecond
	client, err := sarama.NewClient([]string{addr}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	cons, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	parts, err := client.Partitions(topic)
	if err != nil {
		t.Fatal(err)
	}
	// The high water marks are read one by one: sarama's Broker.Open marks
	// the broker opened before it takes the lock the dial holds, so a
	// concurrent first request on a fresh connection can fail with
	// ErrNotConnected (sarama v1.61.1 broker.go, Open).
	hws := make([]int64, len(parts))
	for i, p := range parts {
		if hws[i], err = client.GetOffset(topic, p, sarama.OffsetNewest); err != nil {
			t.Fatalf("high water mark of %s/%d: %v", topic, p, err)
		}
	}
	msgs := make([][]*sarama.ConsumerMessage, len(parts))
	errs := make([]error, len(parts))
	var wg sync.WaitGroup
	for i, p := range parts {
		wg.Go(func() {
			hw := hws[i]
			if hw == 0 {
				return
			}
			pc, err := cons.ConsumePartition(topic, p, sarama.OffsetOldest)
			if err != nil {
				errs[i] = err
				return
			}
			defer pc.Close()
			timeout := time.After(time.Minute)
			for {
				select {
				case m := <-pc.Messages():
					msgs[i] = append(msgs[i], m)
					if m.Offset+1 >= hw {
						return
					}
				case <-timeout:
					errs[i] = fmt.Errorf("%s/%d: read %d records below high water %d in a minute", topic, p, len(msgs[i]), hw)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	var out []*sarama.ConsumerMessage
	for _, m := range msgs {
		out = append(out, m...)
	}
	return out
}

// ExtractTarGz unpacks a .tar.gz of testdata into a temporary folder.
func ExtractTarGz(t testing.TB, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return dir
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(h.Name)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// Sigterm is what a service manager sends to stop the service.
var Sigterm = syscall.SIGTERM

// StartBrokerProcess runs `ovstream broker` as its own process on addr
// ("127.0.0.1:0" = a free port) with 6 + 3 partitions and returns the
// address it listens on.
func StartBrokerProcess(t testing.TB, addr, dataDir string) (string, *Proc) {
	t.Helper()
	args := []string{"broker", "--addr", addr, "--topics", PredictionsTopic + ":6," + PositionsTopic + ":3"}
	if dataDir != "" {
		args = append(args, "--data-dir", dataDir)
	}
	p := StartOvstream(t, nil, args...)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, line := range strings.Split(p.Output(), "\n") {
			if a, ok := strings.CutPrefix(strings.TrimSpace(line), "broker listening on "); ok {
				return a, p
			}
		}
		select {
		case <-p.Done:
			t.Fatalf("ovstream broker exited: %s", p.Output())
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("ovstream broker did not start:\n%s", p.Output())
	return "", nil
}

// ProduceCLI runs `ovstream produce ARGS...` against brokers and returns its output.
func ProduceCLI(t testing.TB, brokers string, args ...string) string {
	t.Helper()
	p := StartOvstream(t, nil, append([]string{"produce", "--brokers", brokers}, args...)...)
	if code := p.Wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("produce exited %d:\n%s", code, p.Output())
	}
	return p.Output()
}
