//go:build integration

package realkafka_test

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/ovstream/ovstream/integration/harness"
	"github.com/ovstream/ovstream/integration/realkafka"
)

// The SCRAM-SHA-512 user of the shared node's SASL_SSL listener, made at
// format time (StorageTool --add-scram).
const (
	saslUser     = "ovstream"
	saslPassword = "Rk-Scram512-7f3a9c" // searched for in every output
)

// sharedKafkaCluster is a Kafka the real-broker tests share, started on
// first use (a JVM start costs seconds on 2 cores, a cluster's a minute and
// more); each test makes topics of its own on it.
type sharedKafkaCluster struct {
	once sync.Once
	c    *realkafka.Cluster
	err  error
}

var (
	// shared is the single KRaft node, with a SASL_SSL listener.
	shared sharedKafkaCluster
	// shared3 is the three-node KRaft cluster (each node broker+controller,
	// 256 MiB heaps) of the cluster tests. A test that stops a node starts it
	// again before it ends.
	shared3 sharedKafkaCluster
)

// TestMain stops the shared node and cluster when the tests end (their JVMs
// also die with the test process: realkafka sets Pdeathsig).
func TestMain(m *testing.M) {
	code := m.Run()
	for _, s := range []*sharedKafkaCluster{&shared, &shared3} {
		if s.c != nil {
			s.c.Close()
		}
	}
	os.Exit(code)
}

// get returns the shared Kafka, starting it with opts on first use; a test
// that fails logs the tail of its nodes' logs.
func (s *sharedKafkaCluster) get(t *testing.T, opts realkafka.Options) *realkafka.Cluster {
	t.Helper()
	s.once.Do(func() {
		began := time.Now()
		s.c, s.err = realkafka.Start(opts)
		t.Logf("Kafka %s, %d node(s), started in %v", realkafka.Version, max(opts.Nodes, 1), time.Since(began).Round(time.Millisecond))
	})
	if s.err != nil {
		t.Fatal(s.err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("Kafka logs:\n%s", s.c.Logs(60))
		}
	})
	return s.c
}

// sharedKafka returns the shared single node.
func sharedKafka(t *testing.T) *realkafka.Cluster {
	t.Helper()
	return shared.get(t, realkafka.Options{SASL: &realkafka.SASL{User: saslUser, Password: saslPassword}, ACLs: true})
}

// sharedCluster returns the shared three-node cluster.
func sharedCluster(t *testing.T) *realkafka.Cluster {
	t.Helper()
	return shared3.get(t, realkafka.Options{Nodes: 3, HeapMB: 256, Ready: 3 * time.Minute}) // 2 loaded cores: a start took 100 s
}

// kafkaTopics creates the test's own predictions (6 partitions) and
// positions (3) topics, prefix_predictions and prefix_positions, with
// replication factor rf (0: every node) and configs.
func kafkaTopics(t *testing.T, c *realkafka.Cluster, prefix string, configs map[string]string) (pred, pos string) {
	t.Helper()
	pred, pos = prefix+"_predictions", prefix+"_positions"
	for name, n := range map[string]int32{pred: 6, pos: 3} {
		if err := c.CreateTopic(name, n, 0, configs); err != nil {
			t.Fatal(err)
		}
	}
	return pred, pos
}

// produceAuckland runs `ovstream produce` of the Auckland peak sample into
// the topics and checks it reports its 4610 predictions.
func produceAuckland(t *testing.T, brokers, pred, pos string, extra ...string) {
	t.Helper()
	out := harness.ProduceCLI(t, brokers, append([]string{"--operator", "AT", "--predictions-topic", pred, "--positions-topic", pos,
		"--gtfs-rt", "../../testdata/auckland-20160519-peak10min"}, extra...)...)
	if !strings.Contains(out, "4610") {
		t.Fatalf("produce of the Auckland peak does not report 4610 predictions:\n%s", out)
	}
}

// aggregatesEqualOracle loads every record of pred into oracle_msgs and
// fails unless delay_aggregates and the stored distributions equal the SQL
// oracle row for row; it returns the number of rows compared.
func aggregatesEqualOracle(t *testing.T, db, brokers, pred string, wantRecords int) int {
	t.Helper()
	if n := harness.LoadOracleInput(t, db, strings.Split(brokers, ",")[0], pred); n != wantRecords {
		t.Fatalf("topic %s holds %d records, want %d", pred, n, wantRecords)
	}
	got := harness.Dump(t, db, harness.DumpAggregates)
	if len(got) == 0 {
		t.Fatal("no delay_aggregates rows")
	}
	harness.SameRows(t, "delay_aggregates vs SQL oracle", got, harness.Dump(t, db, harness.OracleAggregates))
	harness.SameRows(t, "stored distributions vs SQL oracle", harness.Dump(t, db, harness.DumpDistributions), harness.Dump(t, db, harness.OracleDistributions))
	return len(got)
}

// `ovstream produce` of the Auckland peak into Apache Kafka, then
// `ovstream run --drain`: delay_aggregates equals the SQL oracle over the
// records the topic holds, 0 rows differ, and the drain logs no warning or
// error (no request refused, no failed group commit). Then 5 more records, and Kafka's
// own ConsumerGroupCommand (kafka-consumer-groups.sh) --describe of the
// pipeline's group: CURRENT-OFFSET of every partition is
// stream_positions.next_offset, and LAG is the lag `ovstream status` shows.
func TestRealKafkaDrainEqualsSQLOracle(t *testing.T) {
	c := sharedKafka(t)
	pred, pos := kafkaTopics(t, c, "drain", nil)
	db := harness.FreshDB(t)
	produceAuckland(t, c.Bootstrap(), pred, pos)
	dout := harness.Drain(t, db, c.Bootstrap(), "--pipeline", "rk_drain", "--topics", pred+","+pos)
	for _, l := range strings.Split(dout, "\n") {
		if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
			t.Errorf("a clean drain on Kafka logged: %s", l)
		}
	}
	rows := aggregatesEqualOracle(t, db, c.Bootstrap(), pred, 4610)
	t.Logf("%d delay_aggregates rows equal the oracle", rows)
	consumerGroupCommandShowsLag(t, c, db, pred, "rk_drain")
}

var realkafkaArchive = flag.String("realkafka.archive", "", "TestRealKafkaRunKilledEqualsSQLOracle: the Auckland 48 h archive "+
	"(.tar.xz); its first morning peak, 3 hours, replaces the 10-minute peak sample")

// killsFiles returns the GTFS-realtime files of the kills test: the
// Auckland peak (10 files), or with -realkafka.archive 3 hours of the 48 h
// archive, its first morning peak (files in feed-time order,
// tripUpdates_<unix time>.pb).
func killsFiles(t *testing.T) []string {
	t.Helper()
	if *realkafkaArchive == "" {
		files, err := filepath.Glob("../../testdata/auckland-20160519-peak10min/*.pb")
		if err != nil || len(files) != 10 {
			t.Fatalf("the Auckland peak: %d files, want 10 (%v)", len(files), err)
		}
		return files
	}
	dir := t.TempDir()
	if out, err := exec.Command("tar", "-xJf", *realkafkaArchive, "-C", dir).CombinedOutput(); err != nil {
		t.Fatalf("unpack %s: %v\n%s", *realkafkaArchive, err, out)
	}
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			var ts int64
			if _, e := fmt.Sscanf(filepath.Base(path), "tripUpdates_%d.pb", &ts); e == nil {
				files = append(files, path)
			}
		}
		return err
	})
	if err != nil || len(files) == 0 {
		t.Fatalf("no tripUpdates_*.pb in %s: %v", *realkafkaArchive, err)
	}
	stamp := func(p string) int64 {
		var ts int64
		harness.Scan(t, filepath.Base(p), "tripUpdates_%d.pb", &ts)
		return ts
	}
	slices.SortFunc(files, func(a, b string) int { return cmp.Compare(stamp(a), stamp(b)) })
	// The archive starts at midnight in Auckland: 07:00-10:00 is the first
	// morning peak.
	from, to := stamp(files[0])+7*3600, stamp(files[0])+10*3600
	var peak []string
	for _, f := range files {
		if ts := stamp(f); ts >= from && ts < to {
			peak = append(peak, f)
		}
	}
	t.Logf("-realkafka.archive: 07:00-10:00 Auckland time, %d of %d files", len(peak), len(files))
	return peak
}

// The same against Apache Kafka with `ovstream run` SIGKILLed at seeded
// random moments and started again, while `ovstream produce` writes the
// Auckland peak a fifth (two feed minutes) at a time between the kills
// (with -realkafka.archive: the 3 hours of the 48 h archive's first morning
// peak, a fifth at a time); a
// final drain: delay_aggregates equals the SQL oracle, 0 rows differ (no
// record lost, none counted twice).
func TestRealKafkaRunKilledEqualsSQLOracle(t *testing.T) {
	c := sharedKafka(t)
	rng := harness.CrashSeed(t)
	pred, pos := kafkaTopics(t, c, "kills", nil)
	db := harness.FreshDB(t)
	// Lateness 1m (not 10m): windows close, and offsets are stored, while
	// the sample flows in, so kills land between commits. --takeover: the
	// killed instance's lease still lives, and the next one would wait it out.
	args := harness.RunArgs(db, c.Bootstrap(), "--pipeline", "rk_kills", "--topics", pred+","+pos, "--allowed-lateness", "1m", "--takeover")
	files := killsFiles(t)
	produced, kills := 0, 0
	var progress []int64
	step := (len(files) + 4) / 5 // 5 rounds
	for i := 0; i < len(files); i += step {
		p := harness.StartOvstream(t, nil, args...)
		out := harness.ProduceCLI(t, c.Bootstrap(), append([]string{"--operator", "AT", "--predictions-topic", pred,
			"--positions-topic", pos, "--gtfs-rt"}, files[i:min(i+step, len(files))]...)...)
		var n int
		if _, err := fmt.Sscanf(out[strings.Index(out, "produced "):], "produced %d predictions", &n); err != nil {
			t.Fatalf("produce output: %v\n%s", err, out)
		}
		produced += n
		time.Sleep(time.Duration(200+rng.IntN(1800)) * time.Millisecond)
		select {
		case <-p.Done:
			t.Fatalf("kill %d: run ended on its own (exit %d):\n%s", kills+1, p.Cmd.ProcessState.ExitCode(), harness.Tail(p.Output(), 30))
		default:
		}
		p.Kill()
		kills++
		var stored int64
		for _, n := range harness.StoredNext(t, db, "rk_kills") {
			stored += n
		}
		progress = append(progress, stored)
	}
	harness.Drain(t, db, c.Bootstrap(), "--pipeline", "rk_kills", "--topics", pred+","+pos, "--allowed-lateness", "1m", "--takeover")
	rows := aggregatesEqualOracle(t, db, c.Bootstrap(), pred, produced)
	t.Logf("%d SIGKILLs of run (offsets stored at each: %v); %d records; %d delay_aggregates rows equal the oracle",
		kills, progress, produced, rows)
}

// consumerGroupCommandShowsLag produces 5 more records into pred after a
// drain of pipeline, then checks ConsumerGroupCommand --describe --group
// pipeline against stream_positions and `ovstream status`.
func consumerGroupCommandShowsLag(t *testing.T, c *realkafka.Cluster, db, pred, pipeline string) {
	t.Helper()
	var more []string
	for i := range 5 {
		more = append(more, fmt.Sprintf(`{"trip_id":"late-%d","line":"L","stop_id":"S","operator":"AT","delay_s":%d,"event_time":"2016-05-19T08:00:00Z"}`, i, i))
	}
	harness.ProduceLines(t, c.Bootstrap(), pred, more...)

	stored := harness.StoredNext(t, db, pipeline)
	st := harness.Status(t, db, c.Bootstrap(), pipeline)
	statusLag := map[string]int64{}
	for _, p := range st.Partitions {
		if p.Lag == nil {
			t.Fatalf("status: lag of %s/%d unknown", p.Topic, p.Partition)
		}
		statusLag[fmt.Sprintf("%s/%d", p.Topic, p.Partition)] = *p.Lag
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := c.Java(ctx, 128, "", "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
		"--bootstrap-server", c.Bootstrap(), "--describe", "--group", pipeline)
	if err != nil {
		t.Fatalf("ConsumerGroupCommand: %v\n%s", err, out)
	}
	rows := 0
	var toolLag int64
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		// GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID
		if len(f) < 6 || f[0] != pipeline {
			continue
		}
		key := f[1] + "/" + f[2]
		cur, err1 := strconv.ParseInt(f[3], 10, 64)
		lag, err2 := strconv.ParseInt(f[5], 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("ConsumerGroupCommand line %q: CURRENT-OFFSET or LAG not a number", line)
		}
		rows++
		toolLag += lag
		if want, ok := stored[key]; !ok || cur != want {
			t.Errorf("%s: CURRENT-OFFSET %d, stream_positions.next_offset %d (stored: %v)", key, cur, want, ok)
		}
		if want, ok := statusLag[key]; !ok || lag != want {
			t.Errorf("%s: LAG %d, ovstream status shows %d", key, lag, want)
		}
	}
	if rows != 9 || len(stored) != 9 {
		t.Fatalf("ConsumerGroupCommand shows %d partitions, stream_positions %d; want 9 each:\n%s", rows, len(stored), out)
	}
	if toolLag != 5 || st.Lag() != 5 {
		t.Errorf("total lag: ConsumerGroupCommand %d, status %d; want the 5 records produced after the drain", toolLag, st.Lag())
	}
	t.Logf("9 partitions: CURRENT-OFFSET = next_offset, LAG = status lag, total 5")
}

// rideThroughBrokerLoss runs `ovstream run` on the Auckland peak in topics
// prefix_* of c while a broker is lost: the first 5 files are produced, run
// starts and stores offsets, then lose() kills a node and returns it,
// whileDown(rest) runs (rest produces the last 5 files; whileDown may call
// it), the node restarts on its log dirs, and rest runs unless it ran.
// run must ride through (never exit before the SIGTERM that ends it, then
// exit 0); a drain then finishes, and delay_aggregates must equal the SQL
// oracle. It returns the rows compared and the output of the run.
func rideThroughBrokerLoss(t *testing.T, c *realkafka.Cluster, prefix string, configs map[string]string,
	lose func(pred string) *realkafka.Node, whileDown func(rest func())) (int, string) {
	t.Helper()
	pred, pos := kafkaTopics(t, c, prefix, configs)
	db := harness.FreshDB(t)
	files, err := filepath.Glob("../../testdata/auckland-20160519-peak10min/*.pb")
	if err != nil || len(files) != 10 {
		t.Fatalf("the Auckland peak: %d files, want 10 (%v)", len(files), err)
	}
	produced := 0
	produce := func(fs ...string) {
		t.Helper()
		out := harness.ProduceCLI(t, c.Bootstrap(), append([]string{"--operator", "AT", "--predictions-topic", pred,
			"--positions-topic", pos, "--gtfs-rt"}, fs...)...)
		var n int
		if _, err := fmt.Sscanf(out[strings.Index(out, "produced "):], "produced %d predictions", &n); err != nil {
			t.Fatalf("produce output: %v\n%s", err, out)
		}
		produced += n
	}
	restDone := false
	rest := func() {
		t.Helper()
		if !restDone {
			restDone = true
			produce(files[5:]...)
		}
	}
	produce(files[:5]...)
	pipeline := "rk_" + prefix
	run := harness.StartOvstream(t, nil, harness.RunArgs(db, c.Bootstrap(), "--pipeline", pipeline, "--topics", pred+","+pos,
		"--allowed-lateness", "1m")...)
	harness.WaitFor(t, time.Minute, "offsets stored before the broker is lost", func() bool {
		for _, n := range harness.StoredNext(t, db, pipeline) {
			if n > 0 {
				return true
			}
		}
		return false
	})
	n := lose(pred)
	whileDown(rest)
	began := time.Now()
	if err := c.Restart(n); err != nil {
		t.Fatal(err)
	}
	t.Logf("node %d restarted and the cluster ready in %v", n.ID, time.Since(began).Round(time.Millisecond))
	rest()
	// Every record of the topic consumed before the SIGTERM, so the run
	// itself got past the loss (the drain after it only finalizes windows).
	hw := harness.HighWaters(t, c.Nodes[0].Addr(), nil, pred)
	harness.WaitFor(t, 2*time.Minute, "run consumed every record after the broker came back", func() bool {
		consumed := harness.StoredConsumedOf(t, db, pipeline)
		for k, h := range hw {
			if consumed[k] < h {
				return false
			}
		}
		return true
	})
	select {
	case <-run.Done:
		t.Fatalf("run exited during the broker loss (exit %d):\n%s", run.Cmd.ProcessState.ExitCode(), harness.Tail(run.Output(), 40))
	default:
	}
	_ = run.Cmd.Process.Signal(harness.Sigterm)
	if code := run.Wait(t, time.Minute); code != 0 {
		t.Fatalf("run after SIGTERM: exit %d\n%s", code, harness.Tail(run.Output(), 40))
	}
	harness.Drain(t, db, c.Bootstrap(), "--pipeline", pipeline, "--topics", pred+","+pos, "--allowed-lateness", "1m")
	// The group-offset mirror recovered from the loss (its commits failed
	// or met COORDINATOR_LOAD_IN_PROGRESS meanwhile): the group holds the
	// stored offsets again.
	stored := harness.StoredNext(t, db, pipeline)
	if got, _ := harness.GroupOffsets(t, c.Nodes[0].Addr(), pipeline); !maps.Equal(got, stored) || len(stored) != 9 {
		t.Errorf("consumer group %s holds %v, stream_positions %v", pipeline, got, stored)
	}
	return aggregatesEqualOracle(t, db, c.Bootstrap(), pred, produced), run.Output()
}

// sarama's OffsetManager on a group nobody ever used: Kafka answers
// OffsetFetch with offset -1 and no error, so ManagePartition succeeds and
// the next offset is Consumer.Offsets.Initial. (kfake answers
// GROUP_ID_NOT_FOUND and ManagePartition fails: why consumer/groupoffsets
// commits with kadm instead; where the two disagree, Kafka is right.)
func TestRealKafkaOffsetFetchOfNeverUsedGroup(t *testing.T) {
	c := sharedKafka(t)
	topic := "neverused_predictions"
	kafkaTopic(t, c, topic, 1)
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V2_8_0_0
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Enable = false
	client, err := sarama.NewClient([]string{c.Nodes[0].Addr()}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	om, err := sarama.NewOffsetManagerFromClient("rk-never-used", client)
	if err != nil {
		t.Fatal(err)
	}
	defer om.Close()
	pom, err := om.ManagePartition(topic, 0)
	if err != nil {
		t.Fatalf("ManagePartition of a never-used group: %v (Kafka answers -1, not an error)", err)
	}
	defer pom.AsyncClose()
	if next, meta := pom.NextOffset(); next != sarama.OffsetOldest || meta != "" {
		t.Fatalf("next offset %d %q, want Consumer.Offsets.Initial (%d) and no metadata", next, meta, sarama.OffsetOldest)
	}
}

// The single node SIGKILLed in the middle of a run and restarted on the
// same log dirs 3 s later: run rides through, and the result equals the SQL
// oracle (no record lost, none counted twice).
func TestRealKafkaBrokerRestartDuringRun(t *testing.T) {
	c := sharedKafka(t)
	rows, _ := rideThroughBrokerLoss(t, c, "restart", nil, func(string) *realkafka.Node {
		n := c.Nodes[0]
		n.Kill()
		return n
	}, func(func()) { time.Sleep(3 * time.Second) })
	t.Logf("broker SIGKILLed and restarted once; %d delay_aggregates rows equal the oracle", rows)
}

// A three-node KRaft cluster, topics with replication factor 3 and
// min.insync.replicas 2: the leader of the busiest predictions partition is
// SIGKILLed during a run, the second half of the sample is produced while it
// is down (acks=all with 2 in-sync replicas), then it restarts on its log
// dirs. run rides through the leader elections (the partition's reader
// stops at the change and reads on once OffsetForLeaderEpoch validated its
// position, KIP-320); the result equals the SQL oracle.
func TestRealKafkaClusterLeaderKilledDuringRun(t *testing.T) {
	c := sharedCluster(t)
	var pred string
	var victim *realkafka.Node
	var busiest int32
	var epochBefore int32
	rows, out := rideThroughBrokerLoss(t, c, "cluster", map[string]string{"min.insync.replicas": "2"}, func(topic string) *realkafka.Node {
		pred = topic
		hw := harness.HighWaters(t, c.Nodes[0].Addr(), nil, pred)
		var most int64 = -1
		for p := range int32(6) {
			if h := hw[fmt.Sprintf("%s/%d", pred, p)]; h > most {
				busiest, most = p, h
			}
		}
		leader, epoch, err := c.Leader(pred, busiest)
		if err != nil {
			t.Fatal(err)
		}
		epochBefore = epoch
		victim = c.Node(leader)
		t.Logf("SIGKILL node %d, leader of %s/%d (high water %d, leader epoch %d)", leader, pred, busiest, most, epoch)
		victim.Kill()
		return victim
	}, func(rest func()) {
		harness.WaitFor(t, time.Minute, "a new leader elected", func() bool {
			l, _, err := c.Leader(pred, busiest)
			return err == nil && l >= 0 && l != victim.ID
		})
		rest()
	})
	leader, epoch, err := c.Leader(pred, busiest)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s/%d: leader %d, leader epoch %d -> %d; %d delay_aggregates rows equal the oracle", pred, busiest, leader, epochBefore, epoch, rows)
	if epoch <= epochBefore {
		t.Errorf("leader epoch %d -> %d: no election happened", epochBefore, epoch)
	}
	// The reader of the partition stopped at the leader change and went on
	// once its position was validated against the new leader (KIP-320).
	if want := fmt.Sprintf("reading on\" partition=%s/%d offset=", pred, busiest); !strings.Contains(out, want) {
		t.Errorf("run output does not say %q:\n%s", want, harness.Tail(out, 40))
	}
}

// Without Java or Maven the tier fails (never skips) with the command that
// installs them: no java on PATH, and java but no mvn with an empty jar
// cache.
func TestRealKafkaToolsMissingFail(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir()) // no jars cached
	onlyJava := t.TempDir()
	java, err := exec.LookPath("java")
	if err != nil {
		t.Fatalf("java: %v: %s", err, realkafka.InstallHint)
	}
	if err := os.Symlink(java, filepath.Join(onlyJava, "java")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, missing string }{{t.TempDir(), "no java on PATH"}, {onlyJava, "[mvn] not on PATH"}} {
		t.Setenv("PATH", tc.path)
		c, err := realkafka.Start(realkafka.Options{})
		if err == nil {
			c.Close()
			t.Fatalf("PATH=%s: Start succeeded", tc.path)
		}
		if !strings.Contains(err.Error(), tc.missing) || !strings.Contains(err.Error(), "apt-get install -y openjdk-17-jre-headless maven") {
			t.Errorf("PATH=%s: %v; want %q and the apt-get command", tc.path, err, tc.missing)
		}
	}
}
