//go:build integration

package integration

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

const (
	predictionsTopic = "arrival_predictions"
	positionsTopic   = "vehicle_positions"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// ovstreamBin builds the ovstream binary once per test process, with the
// crash points compiled in.
func ovstreamBin(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ovstream-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "ovstream")
		out, err := exec.Command("go", "build", "-tags", "crashpoints", "-o", binPath, "../cmd/ovstream").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// startBroker starts the embedded broker on a free port with 6 + 3 partitions.
func startBroker(t testing.TB) string {
	t.Helper()
	b, err := embedded.Start(embedded.Config{Addr: "127.0.0.1:0",
		Topics: map[string]int32{predictionsTopic: 6, positionsTopic: 3}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b.Addr()
}

// loadFeeds reads GTFS-realtime files from testdata.
func loadFeeds(t testing.TB, operator string, paths ...string) *gtfsrt.Result {
	t.Helper()
	res, err := gtfsrt.Load(paths, gtfsrt.Options{Operator: operator})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// produceFeeds produces res into the broker at addr.
func produceFeeds(t testing.TB, addr string, res *gtfsrt.Result) {
	t.Helper()
	_, err := produce.GTFSRT(context.Background(), produce.Config{Brokers: []string{addr}}, res,
		produce.Topics{Predictions: predictionsTopic, Positions: positionsTopic})
	if err != nil {
		t.Fatal(err)
	}
}

// produceLines produces each line as one record of topic, as it is.
func produceLines(t testing.TB, addr, topic string, lines ...string) {
	t.Helper()
	_, err := produce.JSONL(context.Background(), produce.Config{Brokers: []string{addr}},
		strings.NewReader(strings.Join(lines, "\n")), topic, produce.KeyFields(topic == positionsTopic))
	if err != nil {
		t.Fatal(err)
	}
}

// proc is a running ovstream subprocess.
type proc struct {
	cmd  *exec.Cmd
	out  *bytes.Buffer
	done chan struct{}
	err  error
}

// startOvstream starts `ovstream ARGS...` with env added to the environment.
func startOvstream(t testing.TB, env []string, args ...string) *proc {
	t.Helper()
	return startWrapped(t, nil, env, args...)
}

// startWrapped is startOvstream under the command wrap (e.g. unshare ...),
// which runs `ovstream ARGS...` and ends with it.
func startWrapped(t testing.TB, wrap, env []string, args ...string) *proc {
	t.Helper()
	argv := append(append(slices.Clone(wrap), ovstreamBin(t)), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	p := &proc{cmd: cmd, out: &bytes.Buffer{}, done: make(chan struct{})}
	cmd.Stdout = &lockedWriter{w: p.out}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// wait waits for the process to end and returns its exit code.
func (p *proc) wait(t testing.TB, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Fatalf("ovstream did not end within %v; output:\n%s", timeout, p.output())
	}
	return p.cmd.ProcessState.ExitCode()
}

// kill sends SIGKILL and waits.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

func (p *proc) output() string {
	w := p.cmd.Stdout.(*lockedWriter)
	w.mu.Lock()
	defer w.mu.Unlock()
	return p.out.String()
}

type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// runArgs are the `run` arguments of the tests: fast flushes, and allowed
// lateness 10m so no event of the Auckland data is late (shared/data/README.md).
func runArgs(db, brokers string, extra ...string) []string {
	return append([]string{"run", "--database-url", db, "--brokers", brokers, "--metrics-addr", "",
		"--flush-interval", "100ms", "--allowed-lateness", "10m", "--log-level", "debug"}, extra...)
}

// drain runs `ovstream run --drain` to the end and fails the test unless it exits 0.
func drain(t testing.TB, db, brokers string, extra ...string) string {
	t.Helper()
	p := startOvstream(t, nil, runArgs(db, brokers, append([]string{"--drain"}, extra...)...)...)
	if code := p.wait(t, 3*time.Minute); code != 0 {
		t.Fatalf("run --drain exited %d:\n%s", code, p.output())
	}
	return p.output()
}

// dump returns the rows of query as sorted text lines, for exact comparison.
func dump(t testing.TB, db, query string) []string {
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
	dumpAggregates = `SELECT window_start, window_end, dimension, dimension_id, operator, event_count,
		mean_delay_s, p90_delay_s, min_delay_s, max_delay_s FROM delay_aggregates`
	// dumpDistributions: the stored distribution of each delay_aggregates
	// row, one line per distinct delay with its position in the arrays.
	dumpDistributions = `SELECT window_start, dimension, dimension_id, u.i, u.v, u.c
		FROM delay_aggregates CROSS JOIN LATERAL unnest(delay_values, delay_counts) WITH ORDINALITY AS u(v, c, i)`
	dumpDeadLetters = `SELECT topic, partition, "offset", encode(key, 'escape'), encode(value, 'escape'), reason, error FROM dead_letters`
	dumpVehicles    = `SELECT vehicle_id, trip_id, line, operator, lat, lon, bearing, speed_mps, observed_at,
		kafka_partition, kafka_offset FROM vehicle_latest`
	dumpTrips = `SELECT trip_id, line, stop_id, operator, vehicle_id, stop_sequence, delay_s, observed_at,
		kafka_partition, kafka_offset FROM trip_delay_latest`
)

// sameRows fails the test when a and b differ, showing the first differences.
func sameRows(t testing.TB, what string, a, b []string) {
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

// readTopic returns every record of topic as a read_committed consumer sees
// it, partition by partition in offset order. The partitions are read in
// parallel; one that does not reach its high water mark within a minute
// fails the test.
func readTopic(t testing.TB, addr, topic string) []*sarama.ConsumerMessage {
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

// extractTarGz unpacks a .tar.gz of testdata into a temporary folder.
func extractTarGz(t testing.TB, path string) string {
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

// sigterm is what a service manager sends to stop the service.
var sigterm = syscall.SIGTERM

// startBrokerProcess runs `ovstream broker` as its own process on addr
// ("127.0.0.1:0" = a free port) with 6 + 3 partitions and returns the
// address it listens on.
func startBrokerProcess(t testing.TB, addr, dataDir string) (string, *proc) {
	t.Helper()
	args := []string{"broker", "--addr", addr, "--topics", predictionsTopic + ":6," + positionsTopic + ":3"}
	if dataDir != "" {
		args = append(args, "--data-dir", dataDir)
	}
	p := startOvstream(t, nil, args...)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, line := range strings.Split(p.output(), "\n") {
			if a, ok := strings.CutPrefix(strings.TrimSpace(line), "broker listening on "); ok {
				return a, p
			}
		}
		select {
		case <-p.done:
			t.Fatalf("ovstream broker exited: %s", p.output())
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("ovstream broker did not start:\n%s", p.output())
	return "", nil
}

// produceCLI runs `ovstream produce ARGS...` against brokers and returns its output.
func produceCLI(t testing.TB, brokers string, args ...string) string {
	t.Helper()
	p := startOvstream(t, nil, append([]string{"produce", "--brokers", brokers}, args...)...)
	if code := p.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("produce exited %d:\n%s", code, p.output())
	}
	return p.output()
}
