//go:build integration

package pipeline

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ovstream/ovstream/integration/harness"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestRestartProbesNoPartitionThatDelivers: a restart seeks every partition to
// its stored offset and must not take the first fetch's latency for a stuck
// partition. The run loop probes a partition for trailing transaction markers
// (a synchronous fetch of its own, consumer/source.go visibleEnd) once it was
// quiet for probeAfter; quiet must count from the seek. It counted from the
// zero time, so every partition sought past offset 0 was probed at the first
// tick, before its first fetch could answer: on a slow link each probe
// (1 MiB) stalled the loop for seconds, at every restart (docs/benchmarks-history.md
// "Progress under repeated crashes"). Here the consumer's first fetches are
// held for 700 ms (less than probeAfter, more than a tick): a restart must
// send no probe, and its table must equal one uninterrupted drain's.
func TestRestartProbesNoPartitionThatDelivers(t *testing.T) {
	c, addr := startControlledBroker(t)

	base := time.Date(2016, 5, 18, 19, 0, 0, 0, time.UTC)
	var recs []harness.Rec
	for i := range 600 { // 20 minutes of event time over 6 partitions
		p := int32(i % 6)
		at := base.Add(time.Duration(i) * 2 * time.Second).Format(time.RFC3339)
		recs = append(recs, harness.Rec{Topic: harness.PredictionsTopic, Partition: p, Key: fmt.Sprintf("trip-%d", p),
			Value: harness.Pred(fmt.Sprintf("trip-%d", p), fmt.Sprintf("L%d", i%4), fmt.Sprintf("S%d", i%9), "AT", i%97-20, at)})
	}
	harness.ProduceRecords(t, addr, recs[:300]...)
	db := harness.FreshDB(t)
	harness.Drain(t, db, addr) // stores next_offset 50 for every predictions partition

	harness.ProduceRecords(t, addr, recs[300:]...)
	var (
		probes     atomic.Int32
		mu         sync.Mutex
		firstFetch time.Time
	)
	c.ControlKey(int16(kmsg.Fetch), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.FetchRequest)
		if req.MaxWaitMillis == 0 { // visibleEnd's probe; the partition consumers wait 500 ms
			probes.Add(1)
			return nil, nil, false
		}
		mu.Lock()
		if firstFetch.IsZero() {
			firstFetch = time.Now()
		}
		hold := time.Until(firstFetch.Add(700 * time.Millisecond))
		mu.Unlock()
		if hold > 0 {
			c.SleepControl(func() { time.Sleep(hold) }) // yields: the run loop's own connection goes on
		}
		return nil, nil, false
	})
	out := harness.Drain(t, db, addr)
	if n := probes.Load(); n != 0 {
		t.Errorf("the restart sent %d marker probes for partitions that delivered records 700 ms after the seek; want 0\n%s", n, out)
	}

	once := harness.FreshDB(t)
	harness.Drain(t, once, addr)
	const q = `SELECT window_start, dimension, dimension_id, event_count, mean_delay_s, p90_delay_s, min_delay_s, max_delay_s
		FROM delay_aggregates`
	harness.SameRows(t, "delay_aggregates: drain, restart, drain vs one drain", harness.Dump(t, once, q), harness.Dump(t, db, q))
	if n := len(harness.Dump(t, db, q)); n == 0 {
		t.Fatal("no rows written")
	}
}

// TestMarkerProbeAsksForOneFetch: the probe for trailing transaction markers
// asks for what one fetch of the partition asks for (--fetch-bytes), not 1
// MiB. The run loop waits for it; on a slow link a 1 MiB probe of a partition
// that merely looked quiet blocked the loop for seconds, the partitions it
// did not read meanwhile looked quiet in turn, and probes crowded out reading
// (docs/benchmarks-history.md "Progress under repeated crashes"). The broker still returns
// the first record batch whole (KIP-74), so a probe always sees one batch.
func TestMarkerProbeAsksForOneFetch(t *testing.T) {
	c, addr := startControlledBroker(t)
	var (
		mu    sync.Mutex
		asked []int32 // per probe: the most it asked for, in total or for its partition
	)
	c.ControlKey(int16(kmsg.Fetch), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.FetchRequest)
		if req.MaxWaitMillis != 0 {
			return nil, nil, false
		}
		most := req.MaxBytes
		for _, tp := range req.Topics {
			for _, p := range tp.Partitions {
				most = max(most, p.PartitionMaxBytes)
			}
		}
		mu.Lock()
		asked = append(asked, most)
		mu.Unlock()
		return nil, nil, false
	})
	v := func(delay int) []byte { return harness.Pred("T", "L", "S", "AT", delay, "2016-05-18T20:01:00Z") }
	transactional(t, addr, []struct {
		commit bool
		values [][]byte
	}{{true, [][]byte{v(1), v(2), v(3)}}}) // offsets 0-2, the commit marker at 3
	db := harness.FreshDB(t)
	harness.Drain(t, db, addr, "--fetch-bytes", "4096")
	mu.Lock()
	defer mu.Unlock()
	if len(asked) == 0 {
		t.Fatal("no marker probe: the partition ends in a commit marker and must be probed")
	}
	for _, n := range asked {
		if n > 4096 {
			t.Fatalf("marker probes asked for %v bytes; want at most --fetch-bytes 4096", asked)
		}
	}
	pos := harness.Dump(t, db, `SELECT next_offset, consumed_offset FROM stream_positions WHERE topic = 'arrival_predictions' AND partition = 0`)
	if len(pos) != 1 || pos[0] != "[4 4]" {
		t.Fatalf("stored position %v, want [4 4]: past the trailing marker", pos)
	}
	if got := harness.Dump(t, db, `SELECT event_count, min_delay_s, max_delay_s FROM delay_aggregates WHERE dimension = 'network'`); len(got) != 1 || got[0] != "[3 1 3]" {
		t.Fatalf("network row %v, want [3 1 3]", got)
	}
}

// TestAbortedTransactionAtOffsetZeroEndsTheDrain: a partition whose log holds
// nothing a read_committed consumer delivers from where it starts (here an
// aborted transaction at offset 0) must still be found caught up by the
// marker probe. The probe state counted offset 0 as probed already, so such a
// partition was never probed: the drain never ended, and a service would hold
// the watermark on it for ever (no window written, no offset moved).
func TestAbortedTransactionAtOffsetZeroEndsTheDrain(t *testing.T) {
	addr, db := harness.StartBroker(t), harness.FreshDB(t)
	v := func(delay int) []byte { return harness.Pred("T", "L", "S", "AT", delay, "2016-05-18T20:01:00Z") }
	transactional(t, addr, []struct {
		commit bool
		values [][]byte
	}{{false, [][]byte{v(1), v(2), v(3)}}}) // offsets 0-2 aborted, the abort marker at 3
	p := harness.StartOvstream(t, nil, harness.RunArgs(db, addr, "--drain")...)
	if code := p.Wait(t, time.Minute); code != 0 {
		t.Fatalf("run --drain exited %d:\n%s", code, p.Output())
	}
	pos := harness.Dump(t, db, `SELECT next_offset, consumed_offset FROM stream_positions WHERE topic = 'arrival_predictions' AND partition = 0`)
	if len(pos) != 1 || pos[0] != "[4 4]" {
		t.Fatalf("stored position %v, want [4 4]: past the aborted records and their marker", pos)
	}
	if n := harness.Dump(t, db, `SELECT count(*) FROM delay_aggregates`); n[0] != "[0]" {
		t.Fatalf("%v rows from an aborted transaction", n)
	}
}
