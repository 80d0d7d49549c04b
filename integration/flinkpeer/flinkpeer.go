// Package flinkpeer runs the Flink SQL peer of the benchmark: the job a data
// engineer would write instead of ovstream (Main.java), Flink in one JVM
// (MiniCluster) reading a predictions topic of Apache Kafka once and
// upserting window rows into a PostgreSQL table of the shape of
// delay_aggregates (Table, TableDDL), and compares its rows with
// ovstream's (Compare).
//
// The jars come from Maven Central through the pom embedded here (Flink
// Version, its Kafka and JDBC connectors, the PostgreSQL driver), copied once
// with Main.java compiled by javac into a cache folder outside the
// repository (Classpath). Nothing is downloaded from anywhere else.
package flinkpeer

import (
	"bufio"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/consumer"
	"github.com/ovstream/ovstream/integration/realkafka"
)

//go:embed pom.xml
var pom []byte

//go:embed Main.java
var mainJava []byte

// Version is the Flink version of the peer: the pom's flink.version.
var Version = realkafka.PomProperty("flinkpeer", pom, "flink.version")

// Table is the table the peer upserts into.
const Table = "flink_delay_aggregates"

// TableDDL makes Table: the columns of delay_aggregates the peer can fill,
// with its primary key (the JDBC sink's upsert key). No distributions, no
// pipeline, no updated_at.
const TableDDL = `CREATE TABLE ` + Table + ` (
	window_start timestamptz      NOT NULL,
	window_end   timestamptz      NOT NULL,
	dimension    text             NOT NULL,
	dimension_id text             NOT NULL,
	operator     text             NULL,
	event_count  bigint           NOT NULL,
	mean_delay_s double precision NOT NULL,
	p90_delay_s  double precision NOT NULL,
	min_delay_s  double precision NOT NULL,
	max_delay_s  double precision NOT NULL,
	PRIMARY KEY (window_start, dimension, dimension_id))`

// CacheDir is the folder of the jars and the compiled Main:
// ${XDG_CACHE_HOME:-$HOME/.cache}/ovstream/flink-<Version>-<12 hex digits
// of the SHA-256 of pom.xml and Main.java>, so that a change of either
// makes a new one.
func CacheDir() (string, error) {
	return realkafka.PeerCacheDir("flink", Version, pom, mainJava)
}

// Classpath returns the JVM class path of the peer (the compiled Main, then
// every runtime jar of the pom), making the cache folder first unless a
// previous call completed it (realkafka.FillOnce): `mvn -q
// dependency:copy-dependencies` (about 75 jars, 150 MB, ~20-60 s the first
// time), then javac. The error names the install command when java, javac
// or mvn is missing.
func Classpath() (string, error) {
	dir, err := CacheDir()
	if err != nil {
		return "", err
	}
	cp := realkafka.PeerClasspath(dir)
	if _, err := os.Stat(filepath.Join(dir, "classes", "Main.class")); err == nil {
		return cp, nil
	}
	if err := checkTools(); err != nil {
		return "", err
	}
	err = realkafka.FillOnce(dir, func(work string) (string, error) {
		began := time.Now()
		jars, err := realkafka.BuildJavaPeer(work, "javac", "Flink "+Version, pom, mainJava, func(jarsDir string) []string {
			return []string{"dependency:copy-dependencies", "-DincludeScope=runtime", "-DoutputDirectory=" + jarsDir}
		})
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%d jars of Flink %s and Main in %v", len(jars), Version, time.Since(began).Round(time.Second)), nil
	})
	if err != nil {
		return "", fmt.Errorf("flinkpeer: %w", err)
	}
	return cp, nil
}

// checkTools returns an error naming the install command when java, javac
// or mvn is not on PATH.
func checkTools() error {
	if err := realkafka.CheckTools(); err != nil {
		return err
	}
	if _, err := exec.LookPath("javac"); err != nil {
		return errors.New("flinkpeer: javac not on PATH: the Flink peer compiles Main.java: apt-get install -y openjdk-17-jdk-headless (.ci/install-deps.sh does)")
	}
	return nil
}

// JDBCURL turns a PostgreSQL URL (postgres://user:password@host:port/db?...)
// into the JDBC URL of the PostgreSQL driver, the user and password as
// parameters (the JDBC table refuses a username without a password).
// Only host:port, the database, user, password and sslmode carry over.
func JDBCURL(databaseURL string) (string, error) {
	u, err := url.Parse(databaseURL)
	if err != nil {
		return "", fmt.Errorf("flinkpeer: database URL: %w", err)
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return "", fmt.Errorf("flinkpeer: database URL: scheme %q, want postgres", u.Scheme)
	}
	host := u.Host
	if host == "" {
		return "", errors.New("flinkpeer: database URL names no host")
	}
	q := url.Values{}
	if u.User != nil {
		q.Set("user", u.User.Username())
		if p, ok := u.User.Password(); ok {
			q.Set("password", p)
		}
	}
	if m := u.Query().Get("sslmode"); m != "" {
		q.Set("sslmode", m)
	}
	return "jdbc:postgresql://" + host + u.Path + "?" + q.Encode(), nil
}

// DefaultParallelism is the peer's parallelism unless Options say otherwise.
const DefaultParallelism = 2

// Options is one run of the peer.
type Options struct {
	Bootstrap   string        // Kafka bootstrap servers, comma-separated
	Topic       string        // the predictions topic
	DatabaseURL string        // PostgreSQL (postgres://...) holding Table, made with TableDDL
	Window      time.Duration // the tumbling window; default 5 minutes
	Lateness    time.Duration // the watermark's bound of out-of-orderness; default 10 minutes (the benchmark's --allowed-lateness)
	Parallelism int           // default DefaultParallelism
	// MaxDelay drops predictions with a larger |delay_s|, as run
	// dead-letters them as implausible (its --max-delay); default
	// consumer.DefaultMaxDelay.
	MaxDelay time.Duration
	// ExactlyOnce selects the exactly-once form: the XA sink, a checkpoint
	// every 10 s, the rows of each checkpoint committed once it completes
	// (the last at the final checkpoint, before the JVM exits). The server
	// needs prepared transactions: see CheckExactlyOnce.
	ExactlyOnce bool
	LogTo       io.Writer // the JVM's output, also kept in Result.Output
}

// CheckExactlyOnce returns nil when the PostgreSQL server of databaseURL
// lets the exactly-once form run at parallelism: each of its sink writers
// (one per parallel instance) prepares one transaction per checkpoint, and
// Flink takes one checkpoint at a time, so the server's
// max_prepared_transactions must be at least parallelism. Otherwise the
// error says why.
func CheckExactlyOnce(ctx context.Context, databaseURL string, parallelism int) error {
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return fmt.Errorf("flinkpeer: %w", err)
	}
	defer conn.Close(context.Background())
	var v string
	if err := conn.QueryRow(ctx, "SHOW max_prepared_transactions").Scan(&v); err != nil {
		return fmt.Errorf("flinkpeer: SHOW max_prepared_transactions: %w", err)
	}
	if n, err := strconv.Atoi(v); err != nil || n < parallelism {
		return fmt.Errorf("PostgreSQL's max_prepared_transactions is %s: the exactly-once (XA) form prepares a transaction per sink writer, %d at parallelism %d; start the server with -c max_prepared_transactions=16 (.ci/postgres.sh's private cluster does: one started before it did needs bash .ci/postgres.sh stop, then bash .ci/postgres.sh)",
			v, parallelism, parallelism)
	}
	return nil
}

// Result is what one run measured.
type Result struct {
	Elapsed         time.Duration // from starting the JVM to its exit
	UserCPU, SysCPU time.Duration // the JVM's, from its rusage
	MaxRSS          int64         // bytes, the largest VmHWM seen while it ran
	Output          string        // the JVM's output
}

// CPU is user plus system CPU time.
func (r *Result) CPU() time.Duration { return r.UserCPU + r.SysCPU }

// Run runs the peer once and waits for the JVM to exit: its job reads Topic
// from the earliest offsets to the end offsets at its start. The error holds
// the tail of the JVM's output when it exits non-zero.
func Run(ctx context.Context, o Options) (*Result, error) {
	if o.Window <= 0 {
		o.Window = 5 * time.Minute
	}
	if o.Lateness <= 0 {
		o.Lateness = 10 * time.Minute
	}
	if o.Parallelism <= 0 {
		o.Parallelism = DefaultParallelism
	}
	if o.MaxDelay <= 0 {
		o.MaxDelay = consumer.DefaultMaxDelay
	}
	jdbc, err := JDBCURL(o.DatabaseURL)
	if err != nil {
		return nil, err
	}
	cp, err := Classpath()
	if err != nil {
		return nil, err
	}
	// UTC: the JDBC driver writes TIMESTAMP values in the JVM's zone.
	cmd := exec.CommandContext(ctx, "java", "-Duser.timezone=UTC", "-Dorg.apache.logging.log4j.level=WARN",
		"-cp", cp, "Main", "--bootstrap", o.Bootstrap, "--topic", o.Topic, "--jdbc-url", jdbc, "--table", Table,
		"--window-seconds", strconv.Itoa(int(o.Window.Seconds())), "--lateness-seconds", strconv.Itoa(int(o.Lateness.Seconds())),
		"--parallelism", strconv.Itoa(o.Parallelism), "--exactly-once", strconv.FormatBool(o.ExactlyOnce),
		"--max-delay-seconds", strconv.Itoa(int(o.MaxDelay.Seconds())))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = cmd.Stdout
	r := &Result{}
	began := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("flinkpeer: %w", err)
	}
	// Peak RSS: VmHWM of /proc/PID/status, polled until exit (getrusage's
	// ru_maxrss of a child counts pages it shared with its parent before exec).
	var hwm atomic.Int64
	stop, polled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(polled)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			if kb := realkafka.ProcStatusKB(cmd.Process.Pid, "VmHWM:"); kb*1024 > hwm.Load() {
				hwm.Store(kb * 1024)
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	var all strings.Builder
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		all.WriteString(sc.Text())
		all.WriteByte('\n')
		if o.LogTo != nil {
			fmt.Fprintln(o.LogTo, sc.Text())
		}
	}
	err = cmd.Wait()
	r.Elapsed = time.Since(began)
	close(stop)
	<-polled
	r.MaxRSS, r.Output = hwm.Load(), all.String()
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.UserCPU, r.SysCPU = time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
	}
	if err != nil {
		return r, fmt.Errorf("flinkpeer: java Main: %v\n%s", err, tail(r.Output, 40))
	}
	return r, nil
}

// tail returns the last n lines of s that are not frames of a Java stack
// trace ("\tat ...", "\t... N more"): the exceptions' messages.
func tail(s string, n int) string {
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		if t := strings.TrimLeft(l, " \t"); !strings.HasPrefix(t, "at ") && !strings.HasPrefix(t, "... ") {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
