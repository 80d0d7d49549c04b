//go:build integration

package integration

// G7 (docs/design.md "Pipelines, instances and partitions", Split windows and
// Draining a split pipeline): instances of one pipeline on disjoint
// partitions write partial aggregates, merged once every partition passed a
// window; together they end with the tables of one uninterrupted instance
// over every partition, and delay_aggregates equals the SQL oracle.

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"
)

// splits are partitions of the two topics (6 + 3) among instances: each
// entry is one instance's --partitions.
var (
	split2 = []string{
		"arrival_predictions:0,arrival_predictions:1,arrival_predictions:2,vehicle_positions:0",
		"arrival_predictions:3,arrival_predictions:4,arrival_predictions:5,vehicle_positions:1,vehicle_positions:2",
	}
	split3 = []string{
		"arrival_predictions:0,arrival_predictions:3,vehicle_positions:2",
		"arrival_predictions:1,arrival_predictions:4,vehicle_positions:0",
		"arrival_predictions:2,arrival_predictions:5,vehicle_positions:1",
	}
)

// startSplit starts one instance per entry of split on db, with extra flags.
func startSplit(t *testing.T, db, addr string, split []string, extra ...string) []*proc {
	t.Helper()
	var ps []*proc
	for _, parts := range split {
		ps = append(ps, startOvstream(t, nil, runArgs(db, addr, append([]string{"--partitions", parts}, extra...)...)...))
	}
	return ps
}

// waitAll waits for every process and requires exit 0.
func waitAll(t *testing.T, ps []*proc, what string) {
	t.Helper()
	for i, p := range ps {
		if code := p.wait(t, 4*time.Minute); code != 0 {
			t.Fatalf("%s: instance %d exited %d:\n%s", what, i, code, tail(p.output(), 60))
		}
	}
}

// compareWithReference compares every result table of db with the
// uninterrupted run and returns the rows compared and the rows that differ.
func compareWithReference(t *testing.T, db string, ref *reference, what string) (compared, differing int) {
	t.Helper()
	for _, q := range resultTables {
		got, want := dump(t, db, q.sql), ref.tables[q.sql]
		sameRows(t, q.what+" ("+what+" vs one uninterrupted instance)", got, want)
		compared += len(got)
		differing += diffCount(got, want)
	}
	return compared, differing
}

// diffCount counts the rows of a and b that have no equal row in the other.
func diffCount(a, b []string) int {
	n := map[string]int{}
	for _, r := range a {
		n[r]++
	}
	for _, r := range b {
		n[r]--
	}
	d := 0
	for _, c := range n {
		d += max(c, -c)
	}
	return d
}

// Two and three instances of one pipeline, each with --drain on its own
// partitions of both topics, side by side over the Auckland 2 h data: the
// last drain to finish merges every window, and delay_aggregates (and every
// other result table) equals one uninterrupted drain over all partitions and
// the SQL oracle, row for row and bit for bit.
func TestSplitDrainsEqualOneDrain(t *testing.T) {
	t.Parallel() // its own broker and databases
	ds := auckland2h(t)
	ref := referenceFor(t, ds)
	addr := startBroker(t)
	f := newFeed(ds, addr, 1)
	f.steps[len(f.steps)-1].settle = false
	f.all(t)
	for _, tc := range []struct {
		name  string
		split []string
	}{{"two", split2}, {"three", split3}} {
		t.Run(tc.name, func(t *testing.T) {
			db := freshDB(t)
			waitAll(t, startSplit(t, db, addr, tc.split, "--drain", "--allowed-lateness", ds.lateness), "split drain")
			compared, differing := compareWithReference(t, db, ref, tc.name+" split drains")
			checkOracle(t, db, addr, ds)
			if n := dump(t, db, `SELECT count(*) FROM delay_partial_windows`); n[0] != "[0]" {
				t.Errorf("%s partials left after the drains", n[0])
			}
			if n := dump(t, db, `SELECT count(*) FROM stream_positions WHERE drained`); n[0] != "[0]" {
				t.Errorf("%s partitions still marked drained", n[0])
			}
			// Every partition ends with the watermark one drain stores: the
			// end of the last window.
			wms := dump(t, db, `SELECT DISTINCT watermark = (SELECT max(window_end) FROM delay_aggregates) FROM stream_positions`)
			if len(wms) != 1 || wms[0] != "[true]" {
				t.Errorf("stored watermarks vs the end of the last window: %v", wms)
			}
			t.Logf("%d instances: %d rows compared with one uninterrupted instance, %d differ; %d delay_aggregates rows equal the SQL oracle",
				len(tc.split), compared, differing, len(ref.tables[dumpAggregates]))
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
	ds := auckland2h(t)
	ref := referenceFor(t, ds)
	addr := startBroker(t)
	db := freshDB(t)
	f := newFeed(ds, addr, 16)
	t.Cleanup(f.close)
	// The second instance allows 20 minutes more lateness (no event of the
	// data is late under either): its watermark trails the first's, so the
	// first's partials of the windows in between wait for it. A long idle
	// timeout keeps every partition active, so they wait until the drain.
	var ps []*proc
	for i, lateness := range []string{ds.lateness, "30m"} {
		ps = append(ps, startOvstream(t, nil, runArgs(db, addr, "--partitions", split2[i], "--flush-interval", "50ms",
			"--allowed-lateness", lateness, "--idle-timeout", "1h")...))
	}
	f.paced(100 * time.Millisecond)
	f.wait(t, 3*time.Minute)
	hw := highWaterMarks(t, addr)
	waitFor(t, 2*time.Minute, "every record consumed and committed by the split services", func() bool {
		for i, p := range ps {
			if exited(p) {
				t.Fatalf("instance %d exited:\n%s", i, tail(p.output(), 60))
			}
		}
		stored := map[string]bool{}
		for _, row := range dump(t, db, `SELECT topic || '/' || partition || ' ' || consumed_offset FROM stream_positions WHERE consumed_offset IS NOT NULL`) {
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
	loadOracleInput(t, db, addr, predictionsTopic)
	const merged = `(SELECT merged_until FROM pipelines WHERE name = 'ovstream')`
	got := dump(t, db, dumpAggregates)
	want := dump(t, db, `SELECT * FROM (`+oracleAggregates+`) AS o(ws, we, dim, id, op, n, mean, p90, lo, hi) WHERE we <= `+merged)
	pending := dump(t, db, `SELECT count(DISTINCT window_start) FROM delay_partial_windows`)
	if len(got) == 0 || pending[0] == "[0]" {
		t.Fatalf("%d merged rows and %s windows pending: the check would prove nothing", len(got), pending[0])
	}
	sameRows(t, "merged windows of the split services vs SQL oracle", got, want)
	t.Logf("split services: %d merged rows equal the SQL oracle (%d differ); %s windows pending", len(got), diffCount(got, want), pending[0])
	status := startOvstream(t, nil, "status", "--database-url", db, "--brokers", addr)
	if code := status.wait(t, time.Minute); code != 0 || !strings.Contains(status.output(), "windows of partials waiting") {
		t.Fatalf("status exited %d without the merge lag:\n%s", code, status.output())
	}
	for _, p := range ps {
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	waitAll(t, ps, "SIGTERM")
	out := drain(t, db, addr, "--allowed-lateness", ds.lateness)
	if !strings.Contains(out, "split pipeline") {
		t.Errorf("the final drain did not merge the partials left (no split mode):\n%s", tail(out, 30))
	}
	compared, differing := compareWithReference(t, db, ref, "split services + one drain")
	execSQL(t, db, `DROP TABLE oracle_msgs`) // checkOracle loads it again
	checkOracle(t, db, addr, ds)
	if n := dump(t, db, `SELECT count(*) FROM delay_partial_windows`); n[0] != "[0]" {
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
	rng := crashSeed(t)
	ds := auckland2h(t)
	ref := referenceFor(t, ds)
	addr := startBroker(t)
	db := freshDB(t)
	f := newFeed(ds, addr, 24)
	t.Cleanup(f.close)
	args := func(i int, extra ...string) []string {
		return runArgs(db, addr, append([]string{"--partitions", split2[i], "--flush-interval", "50ms",
			"--allowed-lateness", ds.lateness, "--log-level", "info"}, extra...)...)
	}
	b := startOvstream(t, nil, args(1)...)
	a := startOvstream(t, nil, args(0)...)
	f.paced(250 * time.Millisecond)
	// Once both instances passed a window (partials written and merged),
	// instance 0 dies: a SIGKILL, then at crash points inside commits that
	// write partials and merge.
	waitFor(t, 2*time.Minute, "a merged window", func() bool {
		return dump(t, db, `SELECT count(*) > 0 FROM delay_aggregates`)[0] == "[true]"
	})
	a.kill()
	kills := 1
	for _, point := range []string{"mid_commit", "before_commit", "mid_commit"} {
		n := 3 + rng.IntN(8)
		a := startOvstream(t, []string{fmt.Sprintf("OVSTREAM_CRASHPOINT=%s:%d", point, n)}, args(0)...)
		select {
		case <-a.done:
		case <-time.After(2 * time.Minute):
			t.Fatalf("crash point %s:%d not reached in 2 minutes:\n%s", point, n, tail(a.output(), 40))
		}
		want := fmt.Sprintf("crashpoint: %s reached %d time(s): SIGKILL", point, n)
		if !strings.Contains(a.output(), want) {
			t.Fatalf("instance 0 ended without %q:\n%s", want, tail(a.output(), 40))
		}
		kills++
		t.Logf("instance 0 killed at %s:%d (feed finished: %v)", point, n, f.finished())
	}
	partials := dump(t, db, `SELECT count(*) FROM delay_partial_windows`)
	merged := dump(t, db, `SELECT count(*) FROM delay_aggregates`)
	t.Logf("after the kills: %s partials, %s merged rows", partials, merged)
	a = startOvstream(t, nil, args(0)...)
	time.Sleep(time.Duration(300+rng.IntN(1500)) * time.Millisecond)
	if exited(b) {
		t.Fatalf("instance 1 exited:\n%s", tail(b.output(), 40))
	}
	b.kill()
	kills++
	b = startOvstream(t, nil, args(1)...)
	f.wait(t, 3*time.Minute)
	time.Sleep(time.Second)
	for i, p := range []*proc{a, b} {
		if exited(p) {
			t.Fatalf("instance %d exited:\n%s", i, tail(p.output(), 40))
		}
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	waitAll(t, []*proc{a, b}, "SIGTERM")
	waitAll(t, startSplit(t, db, addr, split2, "--drain", "--allowed-lateness", ds.lateness), "split drain")
	compared, differing := compareWithReference(t, db, ref, "split run with kills")
	checkOracle(t, db, addr, ds)
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
	addr := startBroker(t)
	db := freshDB(t)
	at := func(minute int) string { return fmt.Sprintf("2016-05-18T20:%02d:00Z", minute) }
	var recs []rec
	for minute := 0; minute <= 40; minute++ {
		for part := int32(0); part < 5; part++ {
			trip := fmt.Sprintf("T%d", part)
			recs = append(recs, rec{predictionsTopic, part, trip, pred(trip, "L1", fmt.Sprintf("S%d", minute%4), "AT", 10*minute+int(part), at(minute))})
		}
	}
	produceRecords(t, addr, recs...)
	args := func(parts string, extra ...string) []string {
		return runArgs(db, addr, append([]string{"--partitions", parts, "--flush-interval", "50ms",
			"--allowed-lateness", "1m"}, extra...)...)
	}
	mostly := "arrival_predictions:0,arrival_predictions:1,arrival_predictions:2,arrival_predictions:3,arrival_predictions:4," +
		"vehicle_positions:0,vehicle_positions:1,vehicle_positions:2"
	last := "arrival_predictions:5"
	a := startOvstream(t, nil, args(mostly)...)
	b := startOvstream(t, nil, args(last)...)
	waitFor(t, time.Minute, "windows up to 20:35 merged without partition 5", func() bool {
		return dump(t, db, `SELECT coalesce((SELECT merged_until >= '2016-05-18T20:35:00Z' FROM pipelines), false)`)[0] == "[true]"
	})
	produceRecords(t, addr, rec{predictionsTopic, 5, "T5", pred("T5", "L1", "S9", "AT", 999, at(1))})
	waitFor(t, time.Minute, "the event of a merged window dead-lettered as late", func() bool {
		return dump(t, db, `SELECT count(*) FROM dead_letters WHERE partition = 5 AND reason = 'late'`)[0] == "[1]"
	})
	produceRecords(t, addr, rec{predictionsTopic, 5, "T5", pred("T5", "L1", "S9", "AT", 7, at(44))})
	time.Sleep(500 * time.Millisecond)
	for i, p := range []*proc{a, b} {
		if exited(p) {
			t.Fatalf("instance %d exited:\n%s", i, tail(p.output(), 40))
		}
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	waitAll(t, []*proc{a, b}, "SIGTERM")
	waitAll(t, []*proc{startOvstream(t, nil, args(mostly, "--drain")...), startOvstream(t, nil, args(last, "--drain")...)}, "split drain")
	loadOracleInput(t, db, addr, predictionsTopic)
	got, want := dump(t, db, dumpAggregates), dump(t, db, oracleAggregates)
	sameRows(t, "delay_aggregates vs SQL oracle", got, want)
	if n := dump(t, db, `SELECT sum(event_count)::bigint FROM delay_aggregates WHERE dimension = 'network'`); n[0] != fmt.Sprintf("[%d]", len(recs)+1) {
		t.Errorf("network rows count %s events, want %d (every on-time event, the late one not)", n[0], len(recs)+1)
	}
	t.Logf("%d delay_aggregates rows equal the SQL oracle (%d differ)", len(got), diffCount(got, want))
}
