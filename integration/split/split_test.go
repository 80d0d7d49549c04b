//go:build integration

package split

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ovstream/ovstream/integration/harness"
)

// Two and three instances of one pipeline, each with --drain on its own
// partitions of both topics, side by side over the Auckland 2 h data: the
// last drain to finish merges every window, and delay_aggregates (and every
// other result table) equals one uninterrupted drain over all partitions and
// the SQL oracle, row for row and bit for bit.
func TestSplitDrainsEqualOneDrain(t *testing.T) {
	t.Parallel() // its own broker and databases
	ds := harness.Auckland2h(t)
	ref := harness.ReferenceFor(t, ds)
	addr := harness.StartBroker(t)
	f := harness.NewFeed(ds, addr, 1)
	f.Steps[len(f.Steps)-1].Settle = false
	f.All(t)
	for _, tc := range []struct {
		name  string
		split []string
	}{{"two", harness.Split2}, {"three", harness.Split3}} {
		t.Run(tc.name, func(t *testing.T) {
			db := harness.FreshDB(t)
			harness.WaitAll(t, harness.StartSplit(t, db, addr, tc.split, "--drain", "--allowed-lateness", ds.Lateness), "split drain")
			compared, differing := harness.CompareWithReference(t, db, ref, tc.name+" split drains")
			harness.CheckOracle(t, db, addr, ds)
			if n := harness.Dump(t, db, `SELECT count(*) FROM delay_partial_windows`); n[0] != "[0]" {
				t.Errorf("%s partials left after the drains", n[0])
			}
			if n := harness.Dump(t, db, `SELECT count(*) FROM stream_positions WHERE drained`); n[0] != "[0]" {
				t.Errorf("%s partitions still marked drained", n[0])
			}
			// Every partition ends with the watermark one drain stores: the
			// end of the last window.
			wms := harness.Dump(t, db, `SELECT DISTINCT watermark = (SELECT max(window_end) FROM delay_aggregates) FROM stream_positions`)
			if len(wms) != 1 || wms[0] != "[true]" {
				t.Errorf("stored watermarks vs the end of the last window: %v", wms)
			}
			t.Logf("%d instances: %d rows compared with one uninterrupted instance, %d differ; %d delay_aggregates rows equal the SQL oracle",
				len(tc.split), compared, differing, len(ref.Tables[harness.DumpAggregates]))
		})
	}
}

// Two instances as services (no --drain) while the feed is produced: once
// every record is consumed and committed, every merged window (ending at or
// before merged_until) equals the SQL oracle, and the windows only the first
// instance passed wait as partials (status shows the merge lag). Both stop with SIGTERM; one
// instance over every partition then drains: it merges the partials the
// split run left with its own rows, and the tables equal one uninterrupted
// instance and the SQL oracle.
func TestSplitServicesThenOneDrain(t *testing.T) {
	t.Parallel() // its own broker and databases
	ds := harness.Auckland2h(t)
	ref := harness.ReferenceFor(t, ds)
	addr := harness.StartBroker(t)
	db := harness.FreshDB(t)
	f := harness.NewFeed(ds, addr, 16)
	t.Cleanup(f.Close)
	// The second instance allows 20 minutes more lateness (no event of the
	// data is late under either): its watermark trails the first's, so the
	// first's partials of the windows in between wait for it. A long idle
	// timeout keeps every partition active, so they wait until the drain.
	var ps []*harness.Proc
	for i, lateness := range []string{ds.Lateness, "30m"} {
		ps = append(ps, harness.StartOvstream(t, nil, harness.RunArgs(db, addr, "--partitions", harness.Split2[i], "--flush-interval", "50ms",
			"--allowed-lateness", lateness, "--idle-timeout", "1h")...))
	}
	f.Paced(100 * time.Millisecond)
	f.Wait(t, 3*time.Minute)
	hw := harness.HighWaterMarks(t, addr)
	harness.WaitFor(t, 2*time.Minute, "every record consumed and committed by the split services", func() bool {
		for i, p := range ps {
			if harness.Exited(p) {
				t.Fatalf("instance %d exited:\n%s", i, harness.Tail(p.Output(), 60))
			}
		}
		stored := map[string]bool{}
		for _, row := range harness.Dump(t, db, `SELECT topic || '/' || partition || ' ' || consumed_offset FROM stream_positions WHERE consumed_offset IS NOT NULL`) {
			stored[strings.Trim(row, "[]")] = true
		}
		for tp, off := range hw {
			if !stored[fmt.Sprintf("%s %d", tp, off)] {
				return false
			}
		}
		return true
	})
	// Let the commits after the last record finalize and merge what the
	// watermarks passed.
	time.Sleep(time.Second)
	harness.LoadOracleInput(t, db, addr, harness.PredictionsTopic)
	const merged = `(SELECT merged_until FROM pipelines WHERE name = 'ovstream')`
	got := harness.Dump(t, db, harness.DumpAggregates)
	want := harness.Dump(t, db, `SELECT * FROM (`+harness.OracleAggregates+`) AS o(ws, we, dim, id, op, n, mean, p90, lo, hi) WHERE we <= `+merged)
	pending := harness.Dump(t, db, `SELECT count(DISTINCT window_start) FROM delay_partial_windows`)
	if len(got) == 0 || pending[0] == "[0]" {
		t.Fatalf("%d merged rows and %s windows pending: the check would prove nothing", len(got), pending[0])
	}
	harness.SameRows(t, "merged windows of the split services vs SQL oracle", got, want)
	t.Logf("split services: %d merged rows equal the SQL oracle (%d differ); %s windows pending", len(got), harness.DiffCount(got, want), pending[0])
	status := harness.StartOvstream(t, nil, "status", "--database-url", db, "--brokers", addr)
	if code := status.Wait(t, time.Minute); code != 0 || !strings.Contains(status.Output(), "windows of partials waiting") {
		t.Fatalf("status exited %d without the merge lag:\n%s", code, status.Output())
	}
	for _, p := range ps {
		if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	harness.WaitAll(t, ps, "SIGTERM")
	out := harness.Drain(t, db, addr, "--allowed-lateness", ds.Lateness)
	if !strings.Contains(out, "split pipeline") {
		t.Errorf("the final drain did not merge the partials left (no split mode):\n%s", harness.Tail(out, 30))
	}
	compared, differing := harness.CompareWithReference(t, db, ref, "split services + one drain")
	harness.ExecSQL(t, db, `DROP TABLE oracle_msgs`) // checkOracle loads it again
	harness.CheckOracle(t, db, addr, ds)
	if n := harness.Dump(t, db, `SELECT count(*) FROM delay_partial_windows`); n[0] != "[0]" {
		t.Errorf("%s partials left after the drain", n[0])
	}
	t.Logf("split services then one drain: %d rows compared with one uninterrupted instance, %d differ", compared, differing)
}

// One instance of a split pipeline dies by SIGKILL once windows merge, then
// in the middle of commits that write partials and merge (crash points
// mid_commit and before_commit), and is restarted each time; the other is
// killed at a random moment and restarted. Then both drain: the tables equal
// one uninterrupted instance and the SQL oracle.
func TestSplitCrashRestart(t *testing.T) {
	t.Parallel() // its own broker and databases
	rng := harness.CrashSeed(t)
	ds := harness.Auckland2h(t)
	ref := harness.ReferenceFor(t, ds)
	addr := harness.StartBroker(t)
	db := harness.FreshDB(t)
	f := harness.NewFeed(ds, addr, 24)
	t.Cleanup(f.Close)
	args := func(i int, extra ...string) []string {
		return harness.RunArgs(db, addr, append([]string{"--partitions", harness.Split2[i], "--flush-interval", "50ms",
			"--allowed-lateness", ds.Lateness, "--log-level", "info"}, extra...)...)
	}
	b := harness.StartOvstream(t, nil, args(1)...)
	a := harness.StartOvstream(t, nil, args(0)...)
	f.Paced(250 * time.Millisecond)
	// Once both instances passed a window (partials written and merged),
	// instance 0 dies: a SIGKILL, then at crash points inside commits that
	// write partials and merge.
	harness.WaitFor(t, 2*time.Minute, "a merged window", func() bool {
		return harness.Dump(t, db, `SELECT count(*) > 0 FROM delay_aggregates`)[0] == "[true]"
	})
	a.Kill()
	kills := 1
	for _, point := range []string{"mid_commit", "before_commit", "mid_commit"} {
		n := 3 + rng.IntN(8)
		a := harness.StartOvstream(t, []string{fmt.Sprintf("OVSTREAM_CRASHPOINT=%s:%d", point, n)}, args(0)...)
		select {
		case <-a.Done:
		case <-time.After(2 * time.Minute):
			t.Fatalf("crash point %s:%d not reached in 2 minutes:\n%s", point, n, harness.Tail(a.Output(), 40))
		}
		want := fmt.Sprintf("crashpoint: %s reached %d time(s): SIGKILL", point, n)
		if !strings.Contains(a.Output(), want) {
			t.Fatalf("instance 0 ended without %q:\n%s", want, harness.Tail(a.Output(), 40))
		}
		kills++
		t.Logf("instance 0 killed at %s:%d (feed finished: %v)", point, n, f.Finished())
	}
	partials := harness.Dump(t, db, `SELECT count(*) FROM delay_partial_windows`)
	merged := harness.Dump(t, db, `SELECT count(*) FROM delay_aggregates`)
	t.Logf("after the kills: %s partials, %s merged rows", partials, merged)
	a = harness.StartOvstream(t, nil, args(0)...)
	time.Sleep(time.Duration(300+rng.IntN(1500)) * time.Millisecond)
	if harness.Exited(b) {
		t.Fatalf("instance 1 exited:\n%s", harness.Tail(b.Output(), 40))
	}
	b.Kill()
	kills++
	b = harness.StartOvstream(t, nil, args(1)...)
	f.Wait(t, 3*time.Minute)
	time.Sleep(time.Second)
	for i, p := range []*harness.Proc{a, b} {
		if harness.Exited(p) {
			t.Fatalf("instance %d exited:\n%s", i, harness.Tail(p.Output(), 40))
		}
		if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	harness.WaitAll(t, []*harness.Proc{a, b}, "SIGTERM")
	harness.WaitAll(t, harness.StartSplit(t, db, addr, harness.Split2, "--drain", "--allowed-lateness", ds.Lateness), "split drain")
	compared, differing := harness.CompareWithReference(t, db, ref, "split run with kills")
	harness.CheckOracle(t, db, addr, ds)
	t.Logf("%d SIGKILLs of split instances: %d rows compared with one uninterrupted instance, %d differ", kills, compared, differing)
}

// An idle partition does not hold the merge: one instance owns predictions
// partitions 0-4 and every positions partition, the other only predictions
// partition 5, which stays empty (idle at once, nothing of it open). The
// first instance's windows merge as its watermark passes them. An event that
// comes later on partition 5 for a merged window is late, dead-lettered,
// counted nowhere; one for a window not merged yet is counted. After both
// drain, delay_aggregates equals the SQL oracle over the records minus the
// dead letters.
func TestSplitIdlePartitionDoesNotHoldTheMerge(t *testing.T) {
	addr := harness.StartBroker(t)
	db := harness.FreshDB(t)
	at := func(minute int) string { return fmt.Sprintf("2016-05-18T20:%02d:00Z", minute) }
	var recs []harness.Rec
	for minute := 0; minute <= 40; minute++ {
		for part := int32(0); part < 5; part++ {
			trip := fmt.Sprintf("T%d", part)
			recs = append(recs, harness.Rec{Topic: harness.PredictionsTopic, Partition: part, Key: trip, Value: harness.Pred(trip, "L1", fmt.Sprintf("S%d", minute%4), "AT", 10*minute+int(part), at(minute))})
		}
	}
	harness.ProduceRecords(t, addr, recs...)
	args := func(parts string, extra ...string) []string {
		return harness.RunArgs(db, addr, append([]string{"--partitions", parts, "--flush-interval", "50ms",
			"--allowed-lateness", "1m"}, extra...)...)
	}
	mostly := "arrival_predictions:0,arrival_predictions:1,arrival_predictions:2,arrival_predictions:3,arrival_predictions:4," +
		"vehicle_positions:0,vehicle_positions:1,vehicle_positions:2"
	last := "arrival_predictions:5"
	a := harness.StartOvstream(t, nil, args(mostly)...)
	b := harness.StartOvstream(t, nil, args(last)...)
	harness.WaitFor(t, time.Minute, "windows up to 20:35 merged without partition 5", func() bool {
		return harness.Dump(t, db, `SELECT coalesce((SELECT merged_until >= '2016-05-18T20:35:00Z' FROM pipelines), false)`)[0] == "[true]"
	})
	harness.ProduceRecords(t, addr, harness.Rec{Topic: harness.PredictionsTopic, Partition: 5, Key: "T5", Value: harness.Pred("T5", "L1", "S9", "AT", 999, at(1))})
	harness.WaitFor(t, time.Minute, "the event of a merged window dead-lettered as late", func() bool {
		return harness.Dump(t, db, `SELECT count(*) FROM dead_letters WHERE partition = 5 AND reason = 'late'`)[0] == "[1]"
	})
	harness.ProduceRecords(t, addr, harness.Rec{Topic: harness.PredictionsTopic, Partition: 5, Key: "T5", Value: harness.Pred("T5", "L1", "S9", "AT", 7, at(44))})
	time.Sleep(500 * time.Millisecond)
	for i, p := range []*harness.Proc{a, b} {
		if harness.Exited(p) {
			t.Fatalf("instance %d exited:\n%s", i, harness.Tail(p.Output(), 40))
		}
		if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	harness.WaitAll(t, []*harness.Proc{a, b}, "SIGTERM")
	harness.WaitAll(t, []*harness.Proc{harness.StartOvstream(t, nil, args(mostly, "--drain")...), harness.StartOvstream(t, nil, args(last, "--drain")...)}, "split drain")
	harness.LoadOracleInput(t, db, addr, harness.PredictionsTopic)
	got, want := harness.Dump(t, db, harness.DumpAggregates), harness.Dump(t, db, harness.OracleAggregates)
	harness.SameRows(t, "delay_aggregates vs SQL oracle", got, want)
	if n := harness.Dump(t, db, `SELECT sum(event_count)::bigint FROM delay_aggregates WHERE dimension = 'network'`); n[0] != fmt.Sprintf("[%d]", len(recs)+1) {
		t.Errorf("network rows count %s events, want %d (every on-time event, the late one not)", n[0], len(recs)+1)
	}
	t.Logf("%d delay_aggregates rows equal the SQL oracle (%d differ)", len(got), harness.DiffCount(got, want))
}
