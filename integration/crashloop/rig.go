package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/feed/gtfsrt"
	"github.com/ovstream/ovstream/feed/produce"
)

// ---------------------------------------------------------------------------
// The broker: kfake in this process, its responses paced to a byte rate.

// throttle paces the responses the broker sends that carry records (at
// least bulkBytes), over all its connections together, to rate bytes/s (0: no
// limit): a slow link between broker and consumer. Small responses (metadata,
// offsets, empty fetches) pass at once, as on a link with fair queuing; a
// FIFO link would queue them behind the records as well.
type throttle struct {
	rate atomic.Int64
	mu   sync.Mutex
	next time.Time // when the bytes reserved so far are sent
}

func (t *throttle) wait(n int) {
	r := t.rate.Load()
	if r <= 0 {
		return
	}
	t.mu.Lock()
	now := time.Now()
	if t.next.Before(now) {
		t.next = now
	}
	t.next = t.next.Add(time.Duration(float64(n) / float64(r) * float64(time.Second)))
	until := t.next
	t.mu.Unlock()
	time.Sleep(time.Until(until))
}

type throttledConn struct {
	net.Conn
	t *throttle
}

// bulkBytes is the smallest response the throttle paces.
const bulkBytes = 2 << 10

func (c throttledConn) Write(b []byte) (int, error) {
	if len(b) < bulkBytes {
		return c.Conn.Write(b)
	}
	written := 0
	for len(b) > 0 {
		n := min(len(b), 8<<10)
		c.t.wait(n)
		m, err := c.Conn.Write(b[:n])
		written += m
		if err != nil {
			return written, err
		}
		b = b[n:]
	}
	return written, nil
}

type throttledListener struct {
	net.Listener
	t *throttle
}

func (l throttledListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return throttledConn{Conn: c, t: l.t}, nil
}

// startBroker starts a one-node kfake cluster on 127.0.0.1 with the
// predictions topic (partitions partitions) behind t.
func startBroker(partitions int32, t *throttle) (*kfake.Cluster, string, error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, predTopic),
		kfake.ListenFn(func(network, address string) (net.Listener, error) {
			ln, err := net.Listen(network, address)
			if err != nil {
				return nil, err
			}
			return throttledListener{Listener: ln, t: t}, nil
		}))
	if err != nil {
		return nil, "", err
	}
	return c, c.ListenAddrs()[0], nil
}

// ---------------------------------------------------------------------------
// Data.

// loadPredictions maps the GTFS-realtime files under path (a folder, or a
// .tar.gz/.tar.xz archive unpacked into cache) like `ovstream produce
// --operator AT`.
func loadPredictions(path, cache string) ([]aggregate.Prediction, error) {
	dir := path
	if strings.HasSuffix(path, ".tar.gz") || strings.HasSuffix(path, ".tar.xz") {
		dir = filepath.Join(cache, strings.TrimSuffix(strings.TrimSuffix(filepath.Base(path), ".gz"), ".xz"))
		if m, _ := filepath.Glob(filepath.Join(dir, "*.pb")); len(m) == 0 {
			if m, _ := filepath.Glob(filepath.Join(dir, "*", "*.pb")); len(m) == 0 {
				if err := os.MkdirAll(dir, 0o755); err != nil {
					return nil, err
				}
				if out, err := exec.Command("tar", "-xaf", path, "-C", dir).CombinedOutput(); err != nil {
					return nil, fmt.Errorf("unpack %s: %v: %s", path, err, out)
				}
			}
		}
	}
	res, err := gtfsrt.Load([]string{dir}, gtfsrt.Options{Operator: "AT"})
	if err != nil {
		return nil, err
	}
	return res.Predictions, nil
}

// produceAll produces preds keyed by trip id (as `ovstream produce`), at
// most batch records per produce request, so that record batches stay under
// ovstream's --fetch-bytes and a paced fetch returns records steadily.
func produceAll(ctx context.Context, addr string, preds []aggregate.Prediction, batch int) error {
	sc := produce.NewSaramaConfig("ovstream-crashloop")
	sc.Producer.Flush.MaxMessages = batch
	i := 0
	counts, err := produce.Send(ctx, produce.Config{Brokers: []string{addr}, Sarama: sc}, func() (produce.Message, bool) {
		if i == len(preds) {
			return produce.Message{}, false
		}
		p := preds[i]
		i++
		return produce.Message{Topic: predTopic, Key: []byte(p.TripID), Value: produce.EncodePrediction(p)}, true
	})
	if err != nil {
		return err
	}
	if n := counts.Produced(predTopic); n != len(preds) {
		return fmt.Errorf("produced %d of %d predictions", n, len(preds))
	}
	return nil
}

// stamp is the event time of one record; zero when the record does not
// decode (a dead letter: it does not move the watermark).
type stamp struct {
	offset int64
	t      time.Time
}

// readBack reads every partition of the predictions topic to its high water
// mark and returns each record's event time, in offset order.
func readBack(addr string) (map[int32][]stamp, error) {
	sc := sarama.NewConfig()
	sc.Consumer.IsolationLevel = sarama.ReadCommitted
	sc.Version = sarama.V2_8_0_0
	client, err := sarama.NewClient([]string{addr}, sc)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	cons, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		return nil, err
	}
	defer cons.Close()
	parts, err := client.Partitions(predTopic)
	if err != nil {
		return nil, err
	}
	out := map[int32][]stamp{}
	for _, p := range parts {
		hw, err := client.GetOffset(predTopic, p, sarama.OffsetNewest)
		if err != nil {
			return nil, err
		}
		if hw == 0 {
			out[p] = nil
			continue
		}
		pc, err := cons.ConsumePartition(predTopic, p, sarama.OffsetOldest)
		if err != nil {
			return nil, err
		}
		for m := range pc.Messages() {
			s := stamp{offset: m.Offset}
			if pred, err := aggregate.DecodePrediction(m.Value); err == nil {
				s.t = pred.EventTime
			}
			out[p] = append(out[p], s)
			if m.Offset+1 >= hw {
				break
			}
		}
		pc.Close()
	}
	return out, nil
}

// ---------------------------------------------------------------------------
// PostgreSQL.

type databases struct {
	admin, bin string
	made       []string
}

// fresh creates an empty database with ovstream's schema and returns its URL.
func (d *databases) fresh(ctx context.Context, name string) (string, error) {
	conn, err := pgx.Connect(ctx, d.admin)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	id := pgx.Identifier{name}.Sanitize()
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+id+" WITH (FORCE)"); err != nil {
		return "", err
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+id); err != nil {
		return "", err
	}
	d.made = append(d.made, name)
	u, err := url.Parse(d.admin)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	if out, err := exec.CommandContext(ctx, d.bin, "migrate", "--database-url", u.String(), "up").CombinedOutput(); err != nil {
		return "", fmt.Errorf("ovstream migrate up: %v: %s", err, out)
	}
	return u.String(), nil
}

func (d *databases) dropAll(ctx context.Context) {
	conn, err := pgx.Connect(ctx, d.admin)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	for _, name := range d.made {
		_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	}
}

// stored is what stream_positions and delay_aggregates hold for the pipeline.
type stored struct {
	next    map[int32]int64
	sumNext int64
	windows int64     // distinct window_start in delay_aggregates
	seed    time.Time // the watermark a restart seeds (store.SeedWatermark)
}

func readStored(ctx context.Context, conn *pgx.Conn) (stored, error) {
	s := stored{next: map[int32]int64{}}
	rows, err := conn.Query(ctx, `SELECT partition, next_offset FROM stream_positions
		WHERE pipeline = $1 AND topic = $2 AND next_offset IS NOT NULL`, pipeline, predTopic)
	if err != nil {
		return s, err
	}
	var p int32
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&p, &n}, func() error {
		s.next[p] = n
		s.sumNext += n
		return nil
	}); err != nil {
		return s, err
	}
	var seed *time.Time
	err = conn.QueryRow(ctx, `SELECT
		(SELECT count(DISTINCT window_start) FROM delay_aggregates WHERE pipeline = $1),
		GREATEST((SELECT min(watermark) FROM stream_positions WHERE pipeline = $1),
		         (SELECT max(window_end) FROM delay_aggregates WHERE pipeline = $1))`, pipeline).Scan(&s.windows, &seed)
	if seed != nil {
		s.seed = seed.UTC()
	}
	return s, err
}

// settle waits until no other session uses the database: a SIGKILLed
// instance's COMMIT in flight may still complete after the process is gone.
func settle(ctx context.Context, conn *pgx.Conn) error {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
	}
	return errors.New("the killed instance's sessions did not end within 10 s")
}

// ---------------------------------------------------------------------------
// ovstream run, its log and its metrics.

type proc struct {
	cmd     *exec.Cmd
	started time.Time
	logPath string
	done    chan struct{}
}

func startRun(bin, logPath string, args []string) (*proc, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, append([]string{"run"}, args...)...)
	cmd.Stderr, cmd.Stdout = f, io.Discard
	p := &proc{cmd: cmd, logPath: logPath, done: make(chan struct{})}
	p.started = time.Now()
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	go func() { _ = cmd.Wait(); f.Close(); close(p.done) }()
	return p, nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL and waits for the process to end.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// logLine is one line of ovstream's text log.
type logLine struct {
	at     time.Time
	msg    string
	fields map[string]string
}

var (
	lineRE  = regexp.MustCompile(`^time=(\S+) level=\S+ msg=("(?:[^"\\]|\\.)*"|\S+)(.*)$`)
	fieldRE = regexp.MustCompile(`(\w+)=("(?:[^"\\]|\\.)*"|\S+)`)
)

func readLog(path string) ([]logLine, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []logLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := lineRE.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			continue
		}
		l := logLine{at: at, msg: strings.Trim(m[2], `"`), fields: map[string]string{}}
		for _, f := range fieldRE.FindAllStringSubmatch(m[3], -1) {
			l.fields[f[1]] = strings.Trim(f[2], `"`)
		}
		out = append(out, l)
	}
	return out, sc.Err()
}

// metricsAddr returns the address of the /metrics endpoint from the log, "" until logged.
func metricsAddr(path string) string {
	lines, _ := readLog(path)
	for _, l := range lines {
		if strings.HasPrefix(l.msg, "serving /metrics") {
			return l.fields["addr"]
		}
	}
	return ""
}

var httpClient = &http.Client{Timeout: time.Second}

// scrape returns the watermark (Unix seconds) and the records consumed.
func scrape(addr string) (wm float64, consumed float64, err error) {
	resp, err := httpClient.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	found := 0
	for sc.Scan() {
		line := sc.Text()
		name, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		switch name {
		case "ovstream_watermark_timestamp_seconds":
			wm, _ = strconv.ParseFloat(value, 64)
			found++
		case `ovstream_consumed_messages_total{topic="` + predTopic + `"}`:
			consumed, _ = strconv.ParseFloat(value, 64)
			found++
		}
	}
	if found < 2 {
		return 0, 0, errors.New("metrics: series missing")
	}
	return wm, consumed, sc.Err()
}
