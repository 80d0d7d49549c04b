package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/feed/produce"
	"github.com/ovstream/ovstream/integration/realkafka"
)

// broker is the broker of one measurement: `ovstream broker` running as its
// own process, or one Apache Kafka node.
type broker struct {
	kind  string             // brokerEmbedded or brokerKafka
	cmd   *exec.Cmd          // ovstream broker (brokerEmbedded)
	kafka *realkafka.Cluster // Apache Kafka (brokerKafka)
	addr  string
}

// The brokers of --broker.
const (
	brokerEmbedded = "embedded" // ovstream broker: franz-go kfake, in memory
	brokerKafka    = "kafka"    // Apache Kafka realkafka.Version, one KRaft node
)

// brokerName is how the report names a broker kind.
func brokerName(kind string) string {
	if kind == brokerKafka {
		return "Apache Kafka " + realkafka.Version
	}
	return "embedded (kfake)"
}

// startBroker starts a broker of kind (brokerEmbedded, brokerKafka) with
// topics ("NAME:N,...").
func startBroker(bin, kind, topics string) (*broker, error) {
	if kind == brokerKafka {
		return startKafka(topics)
	}
	cmd := exec.Command(bin, "broker", "--addr", "127.0.0.1:0", "--topics", topics)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("broker: no address line: %v", err)
	}
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "broker listening on ")
	if !ok {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("broker: unexpected first line %q", line)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	return &broker{kind: brokerEmbedded, cmd: cmd, addr: addr}, nil
}

// startKafka starts one Apache Kafka node (1 GiB heap, C2 compiler) and
// creates topics on it.
func startKafka(topics string) (*broker, error) {
	c, err := realkafka.Start(realkafka.Options{HeapMB: 1024, FullJIT: true})
	if err != nil {
		return nil, err
	}
	for _, spec := range strings.Split(topics, ",") {
		name, n, _ := strings.Cut(spec, ":")
		parts, err := strconv.Atoi(n)
		if err == nil {
			err = c.CreateTopic(name, int32(parts), 1, nil)
		}
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("broker: topic %q: %w", spec, err)
		}
	}
	return &broker{kind: brokerKafka, kafka: c, addr: c.Bootstrap()}, nil
}

// pid is the broker's process id.
func (b *broker) pid() int {
	if b.kafka != nil {
		return b.kafka.Nodes[0].Pid()
	}
	return b.cmd.Process.Pid
}

// cpu returns the broker's CPU time so far.
func (b *broker) cpu() time.Duration { return procCPU(b.pid()) }

// rss returns the broker's resident memory now, bytes.
func (b *broker) rss() int64 { return realkafka.ProcStatusKB(b.pid(), "VmRSS:") * 1024 }

func (b *broker) stop() {
	if b.kafka != nil {
		b.kafka.Close()
		return
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = b.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = b.cmd.Process.Kill()
		<-done
	}
}

// produceAll produces every message next yields: sarama AsyncProducer,
// idempotent, acks=all, lz4, batches of up to 1 MiB.
func produceAll(ctx context.Context, addr string, next func() (produce.Message, bool)) (produce.Counts, error) {
	sc := produce.NewSaramaConfig("ovstream-bench")
	sc.Producer.Compression = sarama.CompressionLZ4
	sc.Producer.Flush.Bytes = 1 << 20
	sc.Producer.Flush.Frequency = 20 * time.Millisecond
	sc.Producer.MaxMessageBytes = 4 << 20
	sc.ChannelBufferSize = 8192
	return produce.Send(ctx, produce.Config{Brokers: []string{addr}, Sarama: sc}, next)
}

// readFetchBytes, when > 0, is T_read's Consumer.Fetch.Default (--read-fetch).
var readFetchBytes int32

// consumerConfig is the sarama configuration of ovstream's reader
// (consumer/source.go newSaramaConfig) on sarama's defaults, 1 MiB fetches
// included: the bare reader is fastest with them (docs/benchmarks-history.md
// "Results at 5M predictions", proposal C).
func consumerConfig() *sarama.Config {
	c := sarama.NewConfig()
	if readFetchBytes > 0 {
		c.Consumer.Fetch.Default = readFetchBytes
	}
	c.ClientID = "ovstream-bench-reader"
	c.Version = sarama.V2_1_0_0
	c.Consumer.IsolationLevel = sarama.ReadCommitted
	c.Consumer.Return.Errors = true
	return c
}

// readAll is T_read: one sarama ConsumePartition per partition of topics,
// from the oldest offset to the high water mark, counting messages and
// nothing else. It returns the count and the elapsed time, including the
// client's start-up.
func readAll(addr string, topics []string) (int64, time.Duration, error) {
	began := time.Now()
	n, err := eachPartition(addr, topics, nil)
	return n, time.Since(began), err
}

// visitor sees the messages of one partition, on that partition's reader
// goroutine: Visit each message in offset order, then Done once the high
// water mark is reached. An error from either stops the partition.
type visitor interface {
	Visit(m *sarama.ConsumerMessage) error
	Done() error
}

// eachPartition reads every partition of topics that holds records, from the
// oldest offset to the high water mark: one sarama ConsumePartition (the
// configuration of consumerConfig) and one goroutine each. With open nil it
// only counts (T_read); otherwise open(topic, partition) gives the visitor
// of a partition. It returns the messages read and the first error.
func eachPartition(addr string, topics []string, open func(topic string, partition int32) visitor) (int64, error) {
	client, err := sarama.NewClient([]string{addr}, consumerConfig())
	if err != nil {
		return 0, err
	}
	defer client.Close()
	cons, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		return 0, err
	}
	defer cons.Close()
	var total atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for _, topic := range topics {
		parts, err := client.Partitions(topic)
		if err != nil {
			return 0, err
		}
		for _, p := range parts {
			hw, err := client.GetOffset(topic, p, sarama.OffsetNewest)
			if err != nil {
				return 0, err
			}
			if hw == 0 {
				continue
			}
			pc, err := cons.ConsumePartition(topic, p, sarama.OffsetOldest)
			if err != nil {
				return 0, err
			}
			var v visitor
			if open != nil {
				v = open(topic, p)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer pc.AsyncClose()
				var n int64
				defer func() { total.Add(n) }()
				msgs, perrs := pc.Messages(), pc.Errors()
				for {
					select {
					case m := <-msgs:
						n++
						if v != nil {
							if err := v.Visit(m); err != nil {
								errs <- err
								return
							}
						}
						if m.Offset+1 >= hw {
							if v != nil {
								if err := v.Done(); err != nil {
									errs <- err
								}
							}
							return
						}
					case err := <-perrs:
						errs <- err
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	return total.Load(), nil
}

// runResult is what T_ovstream measured.
type runResult struct {
	elapsed    time.Duration
	maxRSS     int64 // bytes, the largest VmHWM seen while it ran
	userCPU    time.Duration
	sysCPU     time.Duration
	commits    []time.Duration
	latestRows int64 // trips + vehicles upserted over all commits
	windowRows int64
	summary    string
}

var (
	tookRe    = regexp.MustCompile(` took=(\S+)`)
	tripsRe   = regexp.MustCompile(` trips=(\d+)`)
	vehRe     = regexp.MustCompile(` vehicles=(\d+)`)
	windowsRe = regexp.MustCompile(` windows=(\d+)`)
)

// The pipeline and allowed lateness of (b); the Flink peer's watermark
// lags its event times by the same lateness.
const (
	benchPipeline = "bench"
	benchLateness = 10 * time.Minute
)

// runOvstream is T_ovstream: `ovstream run --drain` from process start to
// exit. Commit durations come from the debug log lines "committed ... took=".
func runOvstream(bin, dbURL, brokers string, extra, wrap []string, logTo io.Writer) (*runResult, error) {
	args := append([]string{bin, "run", "--drain", "--database-url", dbURL, "--brokers", brokers,
		"--pipeline", benchPipeline, "--allowed-lateness", benchLateness.String(), "--log-level", "debug"}, extra...)
	args = append(slices.Clone(wrap), args...)
	cmd := exec.Command(args[0], args[1:]...)
	var stdout strings.Builder
	cmd.Stdout = &stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	r := &runResult{}
	began := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	// Peak RSS: VmHWM of /proc/PID/status, polled until exit (a zombie has
	// none). Not getrusage's ru_maxrss: Linux counts in it the parent's
	// resident pages the child shared between fork and exec, here the bench's
	// own data set.
	var hwm atomic.Int64
	stopPoll := make(chan struct{})
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			if kb := realkafka.ProcStatusKB(cmd.Process.Pid, "VmHWM:"); kb*1024 > hwm.Load() {
				hwm.Store(kb * 1024)
			}
			select {
			case <-stopPoll:
				return
			case <-t.C:
			}
		}
	}()
	sc := bufio.NewScanner(stderr)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var tail []string
	for sc.Scan() {
		line := sc.Text()
		if logTo != nil {
			fmt.Fprintln(logTo, line)
		}
		if strings.Contains(line, "msg=committed ") {
			if m := tookRe.FindStringSubmatch(line); m != nil {
				if d, err := time.ParseDuration(m[1]); err == nil {
					r.commits = append(r.commits, d)
				}
			}
			r.latestRows += atoiMatch(tripsRe, line) + atoiMatch(vehRe, line)
			r.windowRows += atoiMatch(windowsRe, line)
			continue
		}
		tail = append(tail, line)
		if len(tail) > 40 {
			tail = tail[1:]
		}
	}
	err = cmd.Wait()
	r.elapsed = time.Since(began)
	close(stopPoll)
	<-polled
	r.maxRSS = hwm.Load()
	r.summary = stdout.String()
	if err != nil {
		return nil, fmt.Errorf("ovstream run --drain: %v\n%s\n%s", err, strings.Join(tail, "\n"), r.summary)
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.userCPU = time.Duration(ru.Utime.Nano())
		r.sysCPU = time.Duration(ru.Stime.Nano())
	}
	return r, nil
}

func atoiMatch(re *regexp.Regexp, s string) int64 {
	m := re.FindStringSubmatch(s)
	if m == nil {
		return 0
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}

// percentile returns the p-quantile (nearest rank) of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(p*float64(len(s))+0.999999) - 1
	return s[max(0, min(i, len(s)-1))]
}

// databases creates and drops the bench's databases.
type databases struct {
	admin string
	bin   string // the ovstream binary whose migrations make the schema
	// schemaSQL runs after the migrations (experiments on the schema)
	schemaSQL string
	made      []string
}

// fresh creates an empty database with ovstream's schema (`ovstream migrate
// up` of the binary under test) and returns its URL.
func (d *databases) fresh(ctx context.Context, name string) (string, error) {
	conn, err := pgx.Connect(ctx, d.admin)
	if err != nil {
		return "", fmt.Errorf("connect %s: %w", d.admin, err)
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
	if d.schemaSQL != "" {
		c, err := pgx.Connect(ctx, u.String())
		if err != nil {
			return "", err
		}
		_, err = c.Exec(ctx, d.schemaSQL)
		c.Close(ctx)
		if err != nil {
			return "", fmt.Errorf("--schema-sql: %w", err)
		}
	}
	return u.String(), nil
}

// logStatements makes the server log every statement on database name with
// its duration (the server log, e.g. /var/log/postgresql/): PostgreSQL's own
// view of a commit, without pg_stat_statements.
func (d *databases) logStatements(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, d.admin)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{name}.Sanitize()+" SET log_min_duration_statement = 0")
	return err
}

// serverStart returns pg_postmaster_start_time(): it changes when the server restarts.
func (d *databases) serverStart(ctx context.Context) (time.Time, error) {
	conn, err := pgx.Connect(ctx, d.admin)
	if err != nil {
		return time.Time{}, err
	}
	defer conn.Close(ctx)
	var t time.Time
	err = conn.QueryRow(ctx, "SELECT pg_postmaster_start_time()").Scan(&t)
	return t, err
}

// checkpoint forces a checkpoint, so that a timed phase does not pay for
// the dirty pages and WAL of the phase before it.
func (d *databases) checkpoint(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, d.admin)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CHECKPOINT")
	return err
}

// waitReady waits until the server accepts connections, at most for d.
func (d *databases) waitReady(ctx context.Context, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if _, err := d.serverStart(ctx); err == nil {
			return
		}
		time.Sleep(time.Second)
	}
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
	d.made = nil
}

// table is the content of one result table, read back after T_ovstream.
type table struct {
	name    string
	columns []string
	rows    [][]any
}

// resultTables are the tables T_write writes again: everything (b) left
// in the results, in the order of a commit.
var resultTables = []string{"delay_aggregates", "vehicle_latest", "trip_delay_latest", "stream_positions"}

func readTables(ctx context.Context, dbURL string) ([]table, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	var out []table
	for _, name := range resultTables {
		rows, err := conn.Query(ctx, "SELECT * FROM "+name)
		if err != nil {
			return nil, err
		}
		t := table{name: name}
		for _, f := range rows.FieldDescriptions() {
			t.columns = append(t.columns, f.Name)
		}
		for rows.Next() {
			v, err := rows.Values()
			if err != nil {
				rows.Close()
				return nil, err
			}
			t.rows = append(t.rows, v)
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// relationSize returns pg_total_relation_size of table in dbURL (heap, TOAST
// and indexes), as the run left it; of a partitioned table (delay_aggregates,
// migration 6), the sum over its partitions (pg_partition_tree lists none
// for a plain table).
func relationSize(ctx context.Context, dbURL, table string) (int64, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	var n int64
	err = conn.QueryRow(ctx, `SELECT coalesce((SELECT sum(pg_total_relation_size(relid))::bigint FROM pg_partition_tree($1::regclass)),
		pg_total_relation_size($1::regclass))`, table).Scan(&n)
	return n, err
}

// writeAll is T_write: the rows of tables into the empty tables of dbURL,
// one plain CopyFrom per table, in one transaction, committed.
func writeAll(ctx context.Context, dbURL string, tables []table) (int64, time.Duration, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close(ctx)
	// The partitions the rows need exist before the clock starts, as they
	// do for a commit (made once per day, ahead of its transaction).
	for _, t := range tables {
		for i, c := range t.columns {
			if t.name != "delay_aggregates" || c != "window_start" {
				continue
			}
			days := map[time.Time]bool{}
			for _, r := range t.rows {
				days[r[i].(time.Time).UTC().Truncate(24*time.Hour)] = true
			}
			for d := range days {
				if _, err := conn.Exec(ctx, "SELECT ovs_create_delay_partition($1)", d); err != nil {
					return 0, 0, fmt.Errorf("create the partition of %s: %w", d, err)
				}
			}
		}
	}
	began := time.Now()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer tx.Rollback(ctx)
	var n int64
	for _, t := range tables {
		c, err := tx.CopyFrom(ctx, pgx.Identifier{t.name}, t.columns, pgx.CopyFromRows(t.rows))
		if err != nil {
			return 0, 0, fmt.Errorf("copy %s: %w", t.name, err)
		}
		n += c
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, 0, err
	}
	return n, time.Since(began), nil
}
