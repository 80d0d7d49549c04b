package realkafka

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Options configures a Cluster.
type Options struct {
	Nodes int // KRaft nodes, each a combined broker+controller; default 1
	// HeapMB is each JVM's -Xmx in MiB; default 320.
	HeapMB int
	// SASL adds a SASL_SSL listener (SCRAM-SHA-512, TLS from PEM files the
	// harness generates, see TLS) next to PLAINTEXT; the user is created at
	// format time with --add-scram.
	SASL *SASL
	// ACLs turns on Kafka's StandardAuthorizer (KRaft): the PLAINTEXT and
	// controller listeners' principal (User:ANONYMOUS) and the SASL user are
	// super users, any other principal may do only what an ACL grants it.
	ACLs bool
	// Config adds or overrides broker settings (server.properties keys).
	Config map[string]string
	// Dir is the parent of the cluster's folder; "" = os.TempDir(). The
	// folder is removed by Close unless KeepDir.
	Dir     string
	KeepDir bool
	// Ready bounds the wait for readiness of a start or restart; default 90 s.
	Ready time.Duration
	// FullJIT runs the brokers with the C2 compiler (a benchmark); by
	// default they stop at C1, which costs less CPU in short tests.
	FullJIT bool
}

// SASL is the user of the SASL_SSL listener.
type SASL struct {
	User, Password string
}

// Node is one KRaft node (broker+controller) of a Cluster.
type Node struct {
	ID       int32
	Port     int    // PLAINTEXT listener
	SASLPort int    // SASL_SSL listener (0 without Options.SASL)
	CtrlPort int    // CONTROLLER listener
	Dir      string // the node's folder: server.properties, data/, node.log
	LogPath  string // the JVM's output (log4j2 console appender), appended to across restarts

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Cluster is a running Kafka of Options.Nodes nodes on 127.0.0.1.
type Cluster struct {
	Nodes     []*Node
	ClusterID string
	Jars      string // the classpath folder (Jars)
	TLS       *TLS   // the generated CA and server certificate (with Options.SASL)
	opts      Options
	dir       string
	closeOnce sync.Once
}

// Start formats and starts a cluster and waits until it is ready: metadata
// answers with every broker and a FindCoordinator for a group succeeds
// (which creates __consumer_offsets). On error everything started is
// stopped again. The caller must Close it (StartT does so with t.Cleanup).
func Start(opts Options) (c *Cluster, err error) {
	if opts.Nodes <= 0 {
		opts.Nodes = 1
	}
	if opts.HeapMB <= 0 {
		opts.HeapMB = 320
	}
	if opts.Ready <= 0 {
		opts.Ready = 90 * time.Second
	}
	if _, err := exec.LookPath("java"); err != nil {
		return nil, fmt.Errorf("realkafka: no java on PATH: %s", InstallHint)
	}
	jars, err := Jars()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(opts.Dir, "ovstream-kafka-")
	if err != nil {
		return nil, fmt.Errorf("realkafka: %w", err)
	}
	c = &Cluster{Jars: jars, opts: opts, dir: dir}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, c.Logs(60))
			c.Close()
		}
	}()
	// A cluster ID as Kafka's Uuid.randomUuid makes it: base64url of 16
	// random bytes, never starting with '-' (kafka-storage's argument parser
	// took such an ID for an option: "argument --cluster-id/-t: expected one
	// argument", every test of a run failed, 1 start in 64).
	for c.ClusterID == "" || strings.HasPrefix(c.ClusterID, "-") {
		var id [16]byte
		_, _ = rand.Read(id[:])
		c.ClusterID = base64.RawURLEncoding.EncodeToString(id[:])
	}
	perNode := 2
	if opts.SASL != nil {
		perNode = 3
		if c.TLS, err = NewTLS(dir); err != nil {
			return c, err
		}
	}
	ports, err := freePorts(perNode * opts.Nodes)
	if err != nil {
		return c, err
	}
	for i := range opts.Nodes {
		n := &Node{ID: int32(i + 1), Port: ports[perNode*i], CtrlPort: ports[perNode*i+1],
			Dir: filepath.Join(dir, fmt.Sprintf("node%d", i+1))}
		if opts.SASL != nil {
			n.SASLPort = ports[perNode*i+2]
		}
		n.LogPath = filepath.Join(n.Dir, "node.log")
		c.Nodes = append(c.Nodes, n)
	}
	// Each format is a JVM of its own (~3-5 s on 2 cores): all at once.
	errs := make([]error, len(c.Nodes))
	var wg sync.WaitGroup
	for i, n := range c.Nodes {
		wg.Go(func() { errs[i] = c.format(n) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return c, err
	}
	for _, n := range c.Nodes {
		if err := c.launch(n); err != nil {
			return c, err
		}
	}
	return c, c.WaitReady(opts.Ready)
}

// Bootstrap is the PLAINTEXT bootstrap list, comma-separated.
func (c *Cluster) Bootstrap() string {
	var a []string
	for _, n := range c.Nodes {
		a = append(a, n.Addr())
	}
	return strings.Join(a, ",")
}

// SASLBootstrap is the SASL_SSL bootstrap list ("" without Options.SASL).
func (c *Cluster) SASLBootstrap() string {
	var a []string
	for _, n := range c.Nodes {
		if n.SASLPort != 0 {
			a = append(a, "127.0.0.1:"+strconv.Itoa(n.SASLPort))
		}
	}
	return strings.Join(a, ",")
}

// Addr is the node's PLAINTEXT address.
func (n *Node) Addr() string { return "127.0.0.1:" + strconv.Itoa(n.Port) }

// Node returns the node of id (1-based), or nil.
func (c *Cluster) Node(id int32) *Node {
	for _, n := range c.Nodes {
		if n.ID == id {
			return n
		}
	}
	return nil
}

func (c *Cluster) properties(n *Node) string {
	N := len(c.Nodes)
	var voters []string
	for _, o := range c.Nodes {
		voters = append(voters, fmt.Sprintf("%d@127.0.0.1:%d", o.ID, o.CtrlPort))
	}
	listeners := fmt.Sprintf("PLAINTEXT://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d", n.Port, n.CtrlPort)
	advertised := fmt.Sprintf("PLAINTEXT://127.0.0.1:%d", n.Port)
	kv := [][2]string{
		{"process.roles", "broker,controller"},
		{"node.id", strconv.Itoa(int(n.ID))},
		{"controller.quorum.voters", strings.Join(voters, ",")},
		{"controller.listener.names", "CONTROLLER"},
		{"inter.broker.listener.name", "PLAINTEXT"},
		{"listener.security.protocol.map", "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL"},
		{"log.dirs", filepath.Join(n.Dir, "data")},
		// 2 cores: few internal partitions (default 50 each), few threads.
		{"offsets.topic.num.partitions", "3"},
		{"offsets.topic.replication.factor", strconv.Itoa(N)},
		{"transaction.state.log.num.partitions", "3"},
		{"transaction.state.log.replication.factor", strconv.Itoa(N)},
		{"transaction.state.log.min.isr", strconv.Itoa(min(2, N))},
		{"share.coordinator.state.topic.num.partitions", "1"},
		{"share.coordinator.state.topic.replication.factor", strconv.Itoa(N)},
		{"share.coordinator.state.topic.min.isr", strconv.Itoa(min(2, N))},
		{"group.initial.rebalance.delay.ms", "0"},
		// auto.create.topics.enable keeps Kafka's default, true, as most
		// brokers run it (kfake's default is false): ovstream's readers
		// must not create a missing topic (TestRealKafkaMissingTopic).
		{"num.partitions", "1"},
		{"default.replication.factor", strconv.Itoa(N)},
		{"num.network.threads", "2"},
		{"num.io.threads", "2"},
		{"background.threads", "2"},
		{"num.recovery.threads.per.data.dir", "1"},
		{"log.cleaner.threads", "1"},
		{"log.cleaner.dedupe.buffer.size", strconv.Itoa(4 << 20)},
		{"replica.lag.time.max.ms", "10000"},
	}
	if c.opts.SASL != nil {
		listeners += fmt.Sprintf(",SASL_SSL://127.0.0.1:%d", n.SASLPort)
		advertised += fmt.Sprintf(",SASL_SSL://127.0.0.1:%d", n.SASLPort)
		kv = append(kv,
			[2]string{"sasl.enabled.mechanisms", "SCRAM-SHA-512"},
			[2]string{"listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config",
				"org.apache.kafka.common.security.scram.ScramLoginModule required;"},
			[2]string{"listener.name.sasl_ssl.ssl.keystore.type", "PEM"},
			[2]string{"listener.name.sasl_ssl.ssl.keystore.location", c.TLS.ServerKeyStore},
		)
	}
	if c.opts.ACLs {
		super := "User:ANONYMOUS"
		if c.opts.SASL != nil {
			super += ";User:" + c.opts.SASL.User
		}
		kv = append(kv,
			[2]string{"authorizer.class.name", "org.apache.kafka.metadata.authorizer.StandardAuthorizer"},
			[2]string{"super.users", super})
	}
	kv = append(kv, [2]string{"listeners", listeners}, [2]string{"advertised.listeners", advertised})
	for k, v := range c.opts.Config {
		kv = append(kv, [2]string{k, v})
	}
	var b strings.Builder
	for _, p := range kv {
		fmt.Fprintf(&b, "%s=%s\n", p[0], p[1])
	}
	return b.String()
}

// log4j2 configuration of every JVM: INFO to stdout (the node's log file),
// the request logger quiet.
const log4j2 = `status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = OUT
logger.request.name = kafka.request.logger
logger.request.level = warn
logger.state.name = state.change.logger
logger.state.level = warn
`

func (c *Cluster) format(n *Node) error {
	if err := os.MkdirAll(n.Dir, 0o755); err != nil {
		return fmt.Errorf("realkafka: %w", err)
	}
	if err := os.WriteFile(filepath.Join(n.Dir, "server.properties"), []byte(c.properties(n)), 0o644); err != nil {
		return fmt.Errorf("realkafka: %w", err)
	}
	if err := os.WriteFile(filepath.Join(n.Dir, "log4j2.properties"), []byte(log4j2), 0o644); err != nil {
		return fmt.Errorf("realkafka: %w", err)
	}
	args := []string{"kafka.tools.StorageTool", "format", "-t", c.ClusterID, "-c", filepath.Join(n.Dir, "server.properties")}
	if c.opts.SASL != nil {
		args = append(args, "--add-scram",
			fmt.Sprintf("SCRAM-SHA-512=[name=%s,password=%s]", c.opts.SASL.User, c.opts.SASL.Password))
	}
	out, err := c.Java(context.Background(), 128, n.Dir, args...)
	if err != nil {
		return fmt.Errorf("realkafka: format node %d: %v\n%s", n.ID, err, redact(out, c.opts.SASL))
	}
	return nil
}

// redact hides the SASL password in text the harness prints.
func redact(s string, sasl *SASL) string {
	if sasl == nil || sasl.Password == "" {
		return s
	}
	return strings.ReplaceAll(s, sasl.Password, "<password>")
}

// javaArgs are the JVM flags of every Java process: a small heap, one GC
// thread, C1 only unless Options.FullJIT (these JVMs live seconds to
// minutes; C2 would cost CPU).
func (c *Cluster) javaArgs(heapMB int, dir string) []string {
	args := []string{fmt.Sprintf("-Xmx%dm", heapMB), "-Xms32m", "-XX:+UseSerialGC",
		"-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true",
		"-Dlog4j2.configurationFile=" + filepath.Join(dir, "log4j2.properties"),
		"-cp", filepath.Join(c.Jars, "*")}
	if !c.opts.FullJIT {
		args = append(args, "-XX:TieredStopAtLevel=1")
	}
	return args
}

// Java runs a Java main class (a Kafka tool: StorageTool, TopicCommand,
// ConsumerGroupCommand, ...) from the cluster's jars to its end and returns
// its output (stdout and stderr). dir holds the log4j2 configuration
// ("" = the first node's).
func (c *Cluster) Java(ctx context.Context, heapMB int, dir string, args ...string) (string, error) {
	if dir == "" {
		dir = c.Nodes[0].Dir
	}
	cmd := exec.CommandContext(ctx, "java", append(c.javaArgs(heapMB, dir), args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Tool runs a Kafka tool's main class (TopicCommand, ...) from the jars of
// Version (Jars) to its end, against any broker, no Cluster needed (e.g.
// ovstream's embedded broker), and returns its output. dir receives the
// log4j2 configuration.
func Tool(ctx context.Context, dir string, args ...string) (string, error) {
	jars, err := Jars()
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "log4j2.properties"), []byte(log4j2), 0o644); err != nil {
		return "", fmt.Errorf("realkafka: %w", err)
	}
	return (&Cluster{Jars: jars}).Java(ctx, 128, dir, args...)
}

// launch starts the node's JVM (kafka.Kafka) in a process group of its own,
// killed with SIGKILL if the test process dies (Pdeathsig), so no JVM
// outlives a crashed or timed-out test (checked: after a test binary's
// timeout panic the JVM is gone at once; its data folder stays behind in
// TMPDIR, since no cleanup ran). Pdeathsig fires when the forking OS thread
// ends, which Go threads do only when a goroutine locked to one exits: the
// harness never locks threads.
func (c *Cluster) launch(n *Node) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		return fmt.Errorf("realkafka: node %d is running", n.ID)
	}
	logf, err := os.OpenFile(n.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("realkafka: %w", err)
	}
	defer logf.Close()
	fmt.Fprintf(logf, "=== realkafka: starting node %d at %s ===\n", n.ID, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command("java", append(c.javaArgs(c.opts.HeapMB, n.Dir), "kafka.Kafka", filepath.Join(n.Dir, "server.properties"))...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("realkafka: start node %d: %w", n.ID, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	n.cmd, n.done = cmd, done
	return nil
}

// Kill sends SIGKILL to the node's process group and waits until it is gone.
// Its log dirs stay as they are (nothing flushed): Restart starts it again
// on them.
func (n *Node) Kill() {
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.cmd = nil
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
}

// Pid is the process id of the node's JVM, 0 when it is not running.
func (n *Node) Pid() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return 0
	}
	return n.cmd.Process.Pid
}

// Running tells whether the node's JVM was started and has not ended.
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return false
	}
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

// Restart starts a killed node again on the same log dirs and ports and
// waits until the cluster is ready with it.
func (c *Cluster) Restart(n *Node) error {
	if err := c.launch(n); err != nil {
		return err
	}
	if err := c.WaitReady(c.opts.Ready); err != nil {
		return fmt.Errorf("%w\n%s", err, c.Logs(60))
	}
	return nil
}

// Client returns a franz-go client on the PLAINTEXT listeners of the
// running nodes; opts add to it. The caller closes it.
func (c *Cluster) Client(opts ...kgo.Opt) (*kgo.Client, error) {
	var seeds []string
	for _, n := range c.Nodes {
		if n.Running() {
			seeds = append(seeds, n.Addr())
		}
	}
	return kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...), kgo.MetadataMinAge(100 * time.Millisecond)}, opts...)...)
}

// WaitReady waits until metadata lists every running node as a broker and a
// FindCoordinator of a group succeeds, polling every 200 ms; it fails after
// timeout with the last answer, or at once when a node's JVM ended.
func (c *Cluster) WaitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	want := 0
	for _, n := range c.Nodes {
		if n.Running() {
			want++
		}
	}
	last := errors.New("no answer yet")
	for time.Now().Before(deadline) {
		for _, n := range c.Nodes {
			n.mu.Lock()
			cmd, done := n.cmd, n.done
			n.mu.Unlock()
			if cmd == nil {
				continue
			}
			select {
			case <-done:
				return fmt.Errorf("realkafka: node %d exited (%v) before the cluster was ready", n.ID, cmd.ProcessState)
			default:
			}
		}
		if last = c.probe(want); last == nil {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("realkafka: cluster not ready within %v: %w", timeout, last)
}

func (c *Cluster) probe(want int) error {
	cl, err := c.Client(kgo.DialTimeout(2*time.Second), kgo.RequestRetries(0))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	adm := kadm.NewClient(cl)
	md, err := adm.BrokerMetadata(ctx)
	if err != nil {
		return err
	}
	if len(md.Brokers) < want {
		return fmt.Errorf("metadata lists %d of %d brokers", len(md.Brokers), want)
	}
	for _, r := range adm.FindGroupCoordinators(ctx, "realkafka-ready") {
		if r.Err != nil {
			return fmt.Errorf("FindCoordinator: %w", r.Err)
		}
	}
	return nil
}

// CreateTopic creates topic with partitions and replication factor rf
// (0 = the node count) and configs, and waits until every partition has a
// leader in the metadata.
func (c *Cluster) CreateTopic(topic string, partitions int32, rf int16, configs map[string]string) error {
	if rf == 0 {
		rf = int16(len(c.Nodes))
	}
	cl, err := c.Client()
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := map[string]*string{}
	for k, v := range configs {
		cfg[k] = &v
	}
	adm := kadm.NewClient(cl)
	resp, err := adm.CreateTopic(ctx, partitions, rf, cfg, topic)
	if err != nil {
		return fmt.Errorf("realkafka: create topic %s: %w", topic, err)
	}
	if resp.Err != nil {
		return fmt.Errorf("realkafka: create topic %s: %w", topic, resp.Err)
	}
	for ctx.Err() == nil {
		md, err := adm.Metadata(ctx, topic)
		if err == nil {
			t := md.Topics[topic]
			ok := t.Err == nil && len(t.Partitions) == int(partitions)
			for _, p := range t.Partitions {
				ok = ok && p.Err == nil && p.Leader >= 0
			}
			if ok {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("realkafka: topic %s: partitions without a leader after 30 s", topic)
}

// Leader returns the node id leading topic/partition and its leader epoch,
// as the metadata says.
func (c *Cluster) Leader(topic string, partition int32) (leader, epoch int32, err error) {
	cl, err := c.Client()
	if err != nil {
		return -1, -1, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	md, err := kadm.NewClient(cl).Metadata(ctx, topic)
	if err != nil {
		return -1, -1, err
	}
	t, ok := md.Topics[topic]
	if !ok || t.Err != nil {
		return -1, -1, fmt.Errorf("realkafka: metadata of %s: %v", topic, t.Err)
	}
	p, ok := t.Partitions[partition]
	if !ok || p.Err != nil && !errors.Is(p.Err, kerr.LeaderNotAvailable) {
		return -1, -1, fmt.Errorf("realkafka: metadata of %s/%d: %v", topic, partition, p.Err)
	}
	return p.Leader, p.LeaderEpoch, nil
}

// Logs returns the last lines lines of every node's log, for a failure message.
func (c *Cluster) Logs(lines int) string {
	var b strings.Builder
	for _, n := range c.Nodes {
		data, err := os.ReadFile(n.LogPath)
		if err != nil {
			continue
		}
		all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		fmt.Fprintf(&b, "--- node %d (%s), last %d lines ---\n", n.ID, n.LogPath, min(lines, len(all)))
		b.WriteString(strings.Join(all[max(0, len(all)-lines):], "\n"))
		b.WriteString("\n")
	}
	return redact(b.String(), c.opts.SASL)
}

// Close kills every node's JVM and removes the cluster's folder (unless
// Options.KeepDir). It is safe to call more than once.
func (c *Cluster) Close() {
	c.closeOnce.Do(func() {
		for _, n := range c.Nodes {
			n.Kill()
		}
		if !c.opts.KeepDir {
			_ = os.RemoveAll(c.dir)
		}
	})
}

// Dir is the cluster's folder.
func (c *Cluster) Dir() string { return c.dir }

// freePorts returns n distinct free TCP ports of 127.0.0.1 (all held open
// until every one is chosen, so none repeats).
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("realkafka: free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
