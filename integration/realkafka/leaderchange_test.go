//go:build integration

package realkafka_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ovstream/ovstream/integration/harness"
	"github.com/ovstream/ovstream/integration/realkafka"
)

// liveProducer writes one prediction per predictions partition and one
// position per positions partition every 20 ms while it runs, event times on
// the wall clock (UTC), acks=all, idempotent: what a live feed does. It
// counts the predictions the brokers acknowledged.
type liveProducer struct {
	t        *testing.T
	cl       *kgo.Client
	pred     string
	pos      string
	running  atomic.Bool
	acked    atomic.Int64
	failed   atomic.Int64
	stop     chan struct{}
	done     chan struct{}
	trips    atomic.Int64
	inflight sync.WaitGroup
	mu       sync.Mutex // guards cl
}

func startLiveProducer(t *testing.T, c *realkafka.Cluster, pred, pos string) *liveProducer {
	t.Helper()
	p := &liveProducer{t: t, pred: pred, pos: pos, stop: make(chan struct{}), done: make(chan struct{})}
	p.connect(c.Nodes...)
	go p.loop()
	t.Cleanup(func() { p.close() })
	return p
}

// connect gives the producer a new client seeded with nodes, once the
// records of the one before are acknowledged: a client that knows the new
// leaders at once, so that no record waits in the producer for a leader that
// is gone (such a record arrives later than its event time by the producer's
// timeouts, and may be late by definition).
func (p *liveProducer) connect(nodes ...*realkafka.Node) {
	p.t.Helper()
	p.inflight.Wait()
	var seeds []string
	for _, n := range nodes {
		seeds = append(seeds, n.Addr())
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(5*time.Millisecond),
		kgo.RecordDeliveryTimeout(5*time.Minute), kgo.ProduceRequestTimeout(3*time.Second),
		kgo.RequestTimeoutOverhead(2*time.Second))
	if err != nil {
		p.t.Fatal(err)
	}
	if err := cl.Ping(context.Background()); err != nil {
		p.t.Fatal(err)
	}
	p.mu.Lock()
	old := p.cl
	p.cl = cl
	p.mu.Unlock()
	if old != nil {
		old.Close()
	}
}

func (p *liveProducer) loop() {
	defer close(p.done)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-tick.C:
		}
		if !p.running.Load() {
			continue
		}
		now := time.Now().UTC().Format(time.RFC3339Nano)
		for part := range int32(6) {
			n := p.trips.Add(1)
			v := harness.Pred(fmt.Sprintf("t%d", n), fmt.Sprintf("L%d", n%7), fmt.Sprintf("S%d", n%11), "AT", int(n%600)-120, now)
			p.send(&kgo.Record{Topic: p.pred, Partition: part, Value: v}, true)
		}
		for part := range int32(3) {
			p.send(&kgo.Record{Topic: p.pos, Partition: part, Value: harness.Pos(fmt.Sprintf("v%d", part), -36.8, now)}, false)
		}
	}
}

func (p *liveProducer) send(r *kgo.Record, count bool) {
	p.inflight.Add(1)
	p.mu.Lock()
	cl := p.cl
	p.mu.Unlock()
	cl.Produce(context.Background(), r, func(_ *kgo.Record, err error) {
		defer p.inflight.Done()
		switch {
		case err != nil:
			p.failed.Add(1)
		case count:
			p.acked.Add(1)
		}
	})
}

// produceFor produces for d, then pauses.
func (p *liveProducer) produceFor(d time.Duration) {
	p.running.Store(true)
	time.Sleep(d)
	p.running.Store(false)
}

// finish stops producing and waits until every record was acknowledged or
// failed; it fails the test when one failed (the oracle counts acknowledged
// records only, and a failed one may still be in the log).
func (p *liveProducer) finish() int {
	p.t.Helper()
	p.running.Store(false)
	p.inflight.Wait()
	if n := p.failed.Load(); n > 0 {
		p.t.Fatalf("%d records failed to produce", n)
	}
	return int(p.acked.Load())
}

func (p *liveProducer) close() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.done
	p.inflight.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cl.Close()
}

// busiestLeader returns the node leading the most partitions of topic, and
// those partitions with their leader epochs.
func busiestLeader(t *testing.T, c *realkafka.Cluster, topic string, n int32) (*realkafka.Node, map[int32]int32) {
	t.Helper()
	by := map[int32]map[int32]int32{}
	for p := range n {
		leader, epoch, err := c.Leader(topic, p)
		if err != nil {
			t.Fatal(err)
		}
		if by[leader] == nil {
			by[leader] = map[int32]int32{}
		}
		by[leader][p] = epoch
	}
	var best int32 = -1
	for id, ps := range by {
		if best < 0 || len(ps) > len(by[best]) {
			best = id
		}
	}
	return c.Node(best), by[best]
}

// A Kafka leader change while a live feed is quiet for longer than the idle
// timeout must not turn on-time records into late ones. A split pipeline
// (two instances and a standby of the first) reads a live feed on a
// three-node cluster (replication factor 3, min.insync.replicas 2); the
// producer pauses longer than --idle-timeout, the leader of the most
// predictions partitions is SIGKILLed (or its JVM SIGSTOPped) during the
// pause, and the feed resumes while that broker is away. The partitions that
// moved must hold the watermark until their records are read: 0 `late` dead
// letters, and the windows equal the SQL oracle over every record produced.
// The allowed lateness (2 s) and window (10 s) are short so that a partition
// wrongly left out of the watermark for a few seconds shows at once.
func TestRealKafkaLeaderChangeNoLateRecords(t *testing.T) {
	c := sharedCluster(t)
	for _, fault := range []string{"kill", "stop"} {
		t.Run(fault, func(t *testing.T) {
			r := newLeaderRig(t, c, fault, "3s", "2s")
			r.prod.produceFor(10 * time.Second)
			time.Sleep(4 * time.Second) // quiet longer than the idle timeout: every partition idle
			victim, moved := busiestLeader(t, c, r.pred, 6)
			t.Logf("%s node %d, leader of %s partitions %v (partition: leader epoch)", fault, victim.ID, r.pred, moved)
			heal := r.fault(fault, victim)
			r.waitLeaders(victim, moved)
			r.waitWritable(victim)
			// The feed resumes while the old leader is away, then after it is back.
			r.prod.connect(r.others(victim)...)
			r.prod.produceFor(20 * time.Second)
			heal()
			r.prod.produceFor(10 * time.Second)
			r.finish()
		})
	}
}

// The long variant (make test-long): rounds of a live feed under a seeded
// random schedule of faults: a leader SIGKILLed and restarted, a leader's
// JVM stopped until a new leader is elected and the feed went on for 5 to
// 15 s, during the feed or during a pause longer than the idle timeout (the
// default, 30 s), and the loss of the controller quorum (two of the three
// nodes SIGKILLed) during a pause. After a fault in a pause the feed
// resumes once every partition has a leader and two in-sync replicas: a
// record that waited in the producer for a leader would reach the log later
// than its event time, late by definition. Allowed lateness 5 s, window
// 10 s. No record appended within the allowed lateness of its event time
// (LogAppendTime) is dead-lettered `late`, no other dead letter, and the
// windows equal the SQL oracle over every record produced.
func TestRealKafkaLeaderChangesLong(t *testing.T) {
	c := sharedCluster(t)
	rng := harness.CrashSeed(t)
	r := newLeaderRig(t, c, "long", "30s", "5s")
	for round := range 5 {
		quiet := rng.IntN(2) == 0
		fault := []string{"kill", "stop", "quorum"}[rng.IntN(3)]
		if fault == "quorum" {
			quiet = true
		}
		r.prod.connect(c.Nodes...)
		r.prod.produceFor(time.Duration(5+rng.IntN(10)) * time.Second)
		victim, moved := busiestLeader(t, c, r.pred, 6)
		t.Logf("round %d: %s node %d (leader of %v), during a pause: %t", round, fault, victim.ID, moved, quiet)
		if quiet {
			time.Sleep(33 * time.Second) // past the idle timeout
		} else {
			r.prod.running.Store(true)
		}
		var heal func()
		switch fault {
		case "quorum":
			second := r.others(victim)[rng.IntN(2)]
			victim.Kill()
			second.Kill()
			time.Sleep(time.Duration(3+rng.IntN(8)) * time.Second)
			for _, n := range []*realkafka.Node{victim, second} {
				if err := c.Restart(n); err != nil {
					t.Fatal(err)
				}
			}
			r.waitWritable()
			heal = func() {}
		default:
			heal = r.fault(fault, victim)
			r.waitLeaders(victim, moved)
			r.waitWritable(victim)
			if fault == "stop" {
				time.Sleep(time.Duration(rng.IntN(3)) * time.Second)
			}
		}
		if quiet {
			r.prod.connect(r.others(victim)...)
		}
		r.prod.produceFor(time.Duration(5+rng.IntN(10)) * time.Second)
		heal()
	}
	r.prod.connect(c.Nodes...)
	r.prod.produceFor(5 * time.Second)
	r.finish()
}

// leaderRig is a split pipeline (two instances and a standby of the first)
// reading a live feed on the three-node cluster, with a short window (10 s),
// idle timeout and allowed lateness.
type leaderRig struct {
	t         *testing.T
	c         *realkafka.Cluster
	db        string
	pred, pos string
	pipeline  string
	split     []string
	flags     []string
	prod      *liveProducer
	procs     []*harness.Proc
	lateness  time.Duration // --allowed-lateness
}

func newLeaderRig(t *testing.T, c *realkafka.Cluster, name, idle, lateness string) *leaderRig {
	t.Helper()
	r := &leaderRig{t: t, c: c, db: harness.FreshDB(t), pipeline: "lc_" + name}
	var err error
	if r.lateness, err = time.ParseDuration(lateness); err != nil {
		t.Fatal(err)
	}
	// LogAppendTime: each record's timestamp is when the leader appended
	// it, which tells a record late by definition (finish).
	r.pred, r.pos = kafkaTopics(t, c, fmt.Sprintf("lc%s%d", name, rand.IntN(1e6)),
		map[string]string{"min.insync.replicas": "2", "message.timestamp.type": "LogAppendTime"})
	r.split = []string{
		fmt.Sprintf("%[1]s:0,%[1]s:1,%[1]s:2,%[2]s:0", r.pred, r.pos),
		fmt.Sprintf("%[1]s:3,%[1]s:4,%[1]s:5,%[2]s:1,%[2]s:2", r.pred, r.pos),
	}
	r.flags = []string{"--pipeline", r.pipeline, "--topics", r.pred + "," + r.pos, "--window", "10s",
		"--allowed-lateness", lateness, "--idle-timeout", idle, "--lease", "5s"}
	r.prod = startLiveProducer(t, c, r.pred, r.pos)
	r.procs = []*harness.Proc{r.start(r.split[0]), r.start(r.split[1]), r.start(r.split[0])}
	return r
}

func (r *leaderRig) start(parts string, extra ...string) *harness.Proc {
	return harness.StartOvstream(r.t, nil, harness.RunArgs(r.db, r.c.Bootstrap(), append(append([]string{"--partitions", parts}, r.flags...), extra...)...)...)
}

// others returns the nodes but n.
func (r *leaderRig) others(n *realkafka.Node) []*realkafka.Node {
	var out []*realkafka.Node
	for _, o := range r.c.Nodes {
		if o != n {
			out = append(out, o)
		}
	}
	return out
}

// fault SIGKILLs victim ("kill") or stops its JVM ("stop") and returns what
// brings it back.
func (r *leaderRig) fault(kind string, victim *realkafka.Node) (heal func()) {
	r.t.Helper()
	switch kind {
	case "kill":
		victim.Kill()
		return func() {
			if err := r.c.Restart(victim); err != nil {
				r.t.Fatal(err)
			}
		}
	case "stop":
		if err := syscall.Kill(-victim.Pid(), syscall.SIGSTOP); err != nil {
			r.t.Fatal(err)
		}
		var once sync.Once
		cont := func() { once.Do(func() { _ = syscall.Kill(-victim.Pid(), syscall.SIGCONT) }) }
		r.t.Cleanup(cont)
		return cont
	}
	r.t.Fatalf("unknown fault %q", kind)
	return nil
}

// waitLeaders waits until each partition of moved has a leader other than
// victim with a larger leader epoch, as the metadata of the other nodes says.
func (r *leaderRig) waitLeaders(victim *realkafka.Node, moved map[int32]int32) {
	r.t.Helper()
	r.waitMetadata("new leaders elected", func(md kadm.Metadata) bool {
		t, ok := md.Topics[r.pred]
		if !ok || t.Err != nil {
			return false
		}
		for p, epoch := range moved {
			pd, ok := t.Partitions[p]
			if !ok || pd.Err != nil || pd.Leader < 0 || pd.Leader == victim.ID || pd.LeaderEpoch <= epoch {
				return false
			}
		}
		return true
	}, victim)
}

// waitWritable waits until every partition of the rig's topics has a leader
// other than down and at least two in-sync replicas (min.insync.replicas),
// as the metadata of the other nodes says: a produce then succeeds at once,
// so no record waits in the producer for a leader and reaches the log later
// than its event time (which would make it late by definition).
func (r *leaderRig) waitWritable(down ...*realkafka.Node) {
	r.t.Helper()
	gone := map[int32]bool{}
	for _, n := range down {
		gone[n.ID] = true
	}
	r.waitMetadata("every partition writable (a leader, 2 in-sync replicas)", func(md kadm.Metadata) bool {
		for _, topic := range []string{r.pred, r.pos} {
			t, ok := md.Topics[topic]
			if !ok || t.Err != nil || len(t.Partitions) == 0 {
				return false
			}
			for _, p := range t.Partitions {
				if p.Err != nil || p.Leader < 0 || gone[p.Leader] || len(p.ISR) < 2 {
					return false
				}
			}
		}
		return true
	}, down...)
}

// waitMetadata waits up to 2 minutes until the metadata of the rig's topics,
// asked of the nodes but down (a stopped JVM would hold every request to it
// until its timeout), satisfies ok.
func (r *leaderRig) waitMetadata(what string, ok func(kadm.Metadata) bool, down ...*realkafka.Node) {
	r.t.Helper()
	var seeds []string
	for _, n := range r.c.Nodes {
		if !slices.Contains(down, n) {
			seeds = append(seeds, n.Addr())
		}
	}
	harness.WaitFor(r.t, 2*time.Minute, what, func() bool {
		// A new client each time: its first request goes to a seed, never
		// to a node it learnt of (the stopped one among them).
		cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
		if err != nil {
			r.t.Fatal(err)
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		md, err := kadm.NewClient(cl).Metadata(ctx, r.pred, r.pos)
		return err == nil && ok(md)
	})
}

// finish stops the feed, waits until the instances consumed every record,
// stops them, drains both halves and checks: no dead letter, and the windows
// and distributions equal the SQL oracle (window 10 s) over every record
// the brokers acknowledged.
func (r *leaderRig) finish() {
	t, db := r.t, r.db
	t.Helper()
	produced := r.prod.finish()
	addr := r.c.Nodes[0].Addr()
	hw := harness.HighWaters(t, addr, nil, r.pred, r.pos)
	harness.WaitFor(t, 2*time.Minute, "the instances consumed every record", func() bool {
		consumed := harness.StoredConsumedOf(t, db, r.pipeline)
		for k, h := range hw {
			if consumed[k] < h {
				return false
			}
		}
		return true
	})
	for _, p := range r.procs {
		select {
		case <-p.Done:
			t.Fatalf("an instance exited during the faults (exit %d):\n%s", p.Cmd.ProcessState.ExitCode(), harness.Tail(p.Output(), 40))
		default:
		}
		_ = p.Cmd.Process.Signal(harness.Sigterm)
	}
	for _, p := range r.procs {
		if code := p.Wait(t, time.Minute); code != 0 {
			t.Fatalf("SIGTERM: exit %d\n%s", code, harness.Tail(p.Output(), 40))
		}
	}
	// The last windows: a split drain of both halves.
	drains := []*harness.Proc{r.start(r.split[0], "--drain"), r.start(r.split[1], "--drain")}
	for _, p := range drains {
		if code := p.Wait(t, 3*time.Minute); code != 0 {
			t.Fatalf("run --drain exited %d:\n%s", code, harness.Tail(p.Output(), 40))
		}
	}
	// A record the leader appended more than the allowed lateness after its
	// event time (it waited in the producer, for a leader or for in-sync
	// replicas) is late by definition; any other late one is ovstream's.
	late := harness.Dump(t, db, `SELECT partition, "offset" FROM dead_letters WHERE reason = 'late' AND topic = '`+r.pred+`'`)
	byDefinition := 0
	if len(late) > 0 {
		delays := appendDelays(t, addr, r.pred, produced)
		var wrong []string
		for _, row := range late {
			var k [2]int64
			if _, err := fmt.Sscanf(row, "[%d %d]", &k[0], &k[1]); err != nil {
				t.Fatal(err)
			}
			if d, ok := delays[k]; !ok || d <= r.lateness {
				wrong = append(wrong, fmt.Sprintf("%d/%d appended %v after its event time", k[0], k[1], d))
			} else {
				byDefinition++
			}
		}
		if len(wrong) > 0 {
			t.Errorf("%d records dead-lettered late though appended within the allowed lateness %v, e.g. %v",
				len(wrong), r.lateness, wrong[:min(5, len(wrong))])
		}
	}
	if all := harness.Dump(t, db, `SELECT count(*) FROM dead_letters WHERE NOT (reason = 'late' AND topic = '`+r.pred+`')`); all[0] != "[0]" {
		t.Errorf("dead letters but the late ones: %v, want none", all)
	}
	if n := harness.LoadOracleInput(t, db, addr, r.pred); n != produced {
		t.Fatalf("topic %s holds %d records, %d were acknowledged", r.pred, n, produced)
	}
	got := harness.Dump(t, db, harness.DumpAggregates)
	harness.SameRows(t, "delay_aggregates vs SQL oracle", got, harness.Dump(t, db, strings.ReplaceAll(harness.OracleAggregates, "300", "10")))
	harness.SameRows(t, "stored distributions vs SQL oracle", harness.Dump(t, db, harness.DumpDistributions),
		harness.Dump(t, db, strings.ReplaceAll(harness.OracleDistributions, "300", "10")))
	t.Logf("%d predictions produced, %d late (appended more than %v after their event time), %d delay_aggregates rows against the oracle",
		produced, byDefinition, r.lateness, len(got))
}

// appendDelays reads the n records of topic with franz-go and returns, per
// [partition, offset], how long after its event_time the leader appended it
// (the record's LogAppendTime timestamp).
func appendDelays(t *testing.T, addr, topic string, n int) map[[2]int64]time.Duration {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out := map[[2]int64]time.Duration{}
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %d of the %d records of %s: %v", len(out), n, topic, err)
		}
		fs.EachRecord(func(rec *kgo.Record) {
			var v struct {
				EventTime time.Time `json:"event_time"`
			}
			if err := json.Unmarshal(rec.Value, &v); err != nil {
				t.Fatalf("%s/%d/%d: %v", topic, rec.Partition, rec.Offset, err)
			}
			out[[2]int64{int64(rec.Partition), rec.Offset}] = rec.Timestamp.Sub(v.EventTime)
		})
	}
	return out
}
