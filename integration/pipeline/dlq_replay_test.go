//go:build integration

package pipeline

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/consumer"
	"github.com/ovstream/ovstream/integration/harness"
	"github.com/ovstream/ovstream/store"
)

// The SQL oracle over every record oracle_msgs holds, dead letters included:
// the records the producers wrote, each counted once.
var (
	oracleAllAggregates    = strings.Replace(harness.OracleAggregates, "WHERE d.topic", "WHERE false AND d.topic", 1)
	oracleAllDistributions = strings.Replace(harness.OracleDistributions, "WHERE d.topic", "WHERE false AND d.topic", 1)
)

// checkAllCounted checks the drained tables of db against the oracle over
// every record of oracle_msgs (n of them, each a prediction): delay_aggregates
// and its distributions equal the oracle, the network rows count n events,
// and dead_letter_replays holds one row per replayed source, each counted by
// exactly one copy, all of them the dead letters of reason.
func checkAllCounted(t *testing.T, db string, n int, reason string) {
	t.Helper()
	harness.SameRows(t, "delay_aggregates vs the SQL oracle over every record written", harness.Dump(t, db, harness.DumpAggregates), harness.Dump(t, db, oracleAllAggregates))
	harness.SameRows(t, "stored distributions vs the SQL oracle over every record written", harness.Dump(t, db, harness.DumpDistributions),
		harness.Dump(t, db, oracleAllDistributions))
	if c := harness.Dump(t, db, `SELECT sum(event_count)::bigint FROM delay_aggregates WHERE dimension = 'network'`); c[0] != fmt.Sprintf("[%d]", n) {
		t.Errorf("the network rows count %v events, want every record once: %d", c, n)
	}
	harness.SameRows(t, "dead_letter_replays vs the rejected dead letters",
		harness.Dump(t, db, `SELECT source_topic, source_partition, source_offset FROM dead_letter_replays`),
		harness.Dump(t, db, `SELECT topic, partition, "offset" FROM dead_letters WHERE reason = '`+reason+`' AND source_topic IS NULL`))
	if other := harness.Dump(t, db, `SELECT reason, count(*) FROM dead_letters WHERE source_topic IS NOT NULL GROUP BY reason`); len(other) != 0 {
		t.Errorf("copies dead-lettered: %v, want none", other)
	}
}

// copiesPerSource reads topic and returns how many copies of each source
// (header ovstream-dlq-source) it holds.
func copiesPerSource(t *testing.T, addr, topic string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, m := range harness.ReadTopic(t, addr, topic) {
		for _, h := range m.Headers {
			if string(h.Key) == "ovstream-dlq-source" {
				out[string(h.Value)]++
			}
		}
	}
	return out
}

// replayArgs is `dlq replay` of the rejected dead letters into the
// predictions topic.
func replayArgs(db, addr string) []string { return replayReason(db, addr, store.ReasonRejected) }

// replayReason is `dlq replay` of the dead letters of reason into the
// predictions topic.
func replayReason(db, addr, reason string) []string {
	return []string{"dlq", "replay", "--database-url", db, "--brokers", addr, "--reason", reason, "--to", harness.PredictionsTopic}
}

// wantSIGKILL fails the test unless p ended by SIGKILL at crash point
// point:n.
func wantSIGKILL(t *testing.T, p *harness.Proc, point string, n int) {
	t.Helper()
	<-p.Done
	ws, _ := p.Cmd.ProcessState.Sys().(syscall.WaitStatus)
	want := fmt.Sprintf("crashpoint: %s reached %d time(s): SIGKILL", point, n)
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL || !strings.Contains(p.Output(), want) {
		t.Fatalf("%s:%d: ended with %v, want SIGKILL after %q; output:\n%s", point, n, p.Cmd.ProcessState, want, harness.Tail(p.Output(), 40))
	}
}

// 3,000 predictions over 6 partitions and 3 windows, 20 stations; a CHECK
// refuses the station rows of S00..S09, so the drain dead-letters their
// 1,500 records rejected. The CHECK is dropped; `dlq replay` is SIGKILLed
// after Kafka acknowledged its second batch (500 copies) and before it marked
// them replayed, so the rerun sends them again: 500 sources have two copies
// in the topic (the repro). A `run --drain` is SIGKILLed after
// reading 1,200 copies, and run again. The tables end equal to the SQL
// oracle over the 3,000 records written: every replayed record counted once,
// merged into its final window. Before the fix the copies were dead-lettered
// late (their windows were final) and 1,500 records were never counted.
func TestDLQReplayKilledAndRerun(t *testing.T) {
	addr, db := harness.StartBroker(t), harness.FreshDB(t)
	const n = 3000
	harness.SendAll(t, addr, harness.Synthetic(n, windowsFrom, 300*time.Millisecond)) // 15 minutes
	harness.ExecSQL(t, db, `ALTER TABLE delay_aggregates ADD CONSTRAINT no_low_stations CHECK (dimension <> 'station' OR dimension_id >= 'S10')`)
	harness.Drain(t, db, addr)
	if got := harness.LoadOracleInput(t, db, addr, harness.PredictionsTopic); got != n {
		t.Fatalf("the topic holds %d records, want %d", got, n)
	}
	if r := harness.Dump(t, db, `SELECT count(*) FROM dead_letters WHERE reason = 'rejected'`); r[0] != "[1500]" {
		t.Fatalf("%v rejected dead letters, want the 1500 records of S00..S09", r)
	}
	harness.ExecSQL(t, db, `ALTER TABLE delay_aggregates DROP CONSTRAINT no_low_stations`)

	p := harness.StartOvstream(t, []string{"OVSTREAM_CRASHPOINT=replay_acked:2"}, replayArgs(db, addr)...)
	wantSIGKILL(t, p, "replay_acked", 2)
	if p := harness.StartOvstream(t, nil, replayArgs(db, addr)...); p.Wait(t, time.Minute) != 0 {
		t.Fatalf("the second dlq replay failed:\n%s", p.Output())
	}
	copies, twice := copiesPerSource(t, addr, harness.PredictionsTopic), 0
	for _, c := range copies {
		if c > 1 {
			twice++
		}
	}
	if len(copies) != 1500 || twice != 500 {
		t.Fatalf("the topic holds copies of %d sources, %d of them twice; want 1500 and 500 (the killed batch sent again)",
			len(copies), twice)
	}

	p = harness.StartOvstream(t, []string{"OVSTREAM_CRASHPOINT=after_consume:1200"}, harness.RunArgs(db, addr, "--drain")...)
	wantSIGKILL(t, p, "after_consume", 1200)
	out := harness.Drain(t, db, addr)
	checkAllCounted(t, db, n, store.ReasonRejected)
	if !strings.Contains(out, "replayed copies counted") {
		t.Errorf("the drain's summary says nothing of the copies:\n%s", harness.Tail(out, 20))
	}
	if strings.Contains(out, "level=ERROR") {
		t.Errorf("the drain logged errors:\n%s", harness.Tail(out, 40))
	}
}

// windowsFrom is where synthetic's records start.
var windowsFrom = time.Date(2016, 5, 18, 20, 0, 0, 0, time.UTC)

// The runbook's recovery of rejected records: CHECK constraints refuse the
// station rows of a real stop and the trip row of a real trip of the
// Auckland peak sample; the drain dead-letters their records rejected. The
// constraints are dropped, `dlq replay --reason rejected` re-produces them,
// and a second drain counts every copy, merged exactly into the stored rows
// of the final windows (the station's rows written anew): delay_aggregates
// and its distributions equal the SQL oracle over every record written, and
// the trip's latest state is its newest record. Before the fix every copy
// was dead-lettered late and the tables stayed without them.
func TestDLQReplayRejectedAfterFix(t *testing.T) {
	addr, db := harness.StartBroker(t), harness.FreshDB(t)
	harness.ProduceFeeds(t, addr, harness.LoadFeeds(t, "AT", "../../testdata/auckland-20160519-peak10min"))
	refuseRealIDs(t, db)
	harness.Drain(t, db, addr)
	n := harness.LoadOracleInput(t, db, addr, harness.PredictionsTopic)
	rejected := harness.Dump(t, db, `SELECT count(*) FROM dead_letters WHERE reason = 'rejected'`)
	harness.ExecSQL(t, db, `ALTER TABLE delay_aggregates DROP CONSTRAINT no_station_7151;
ALTER TABLE trip_delay_latest DROP CONSTRAINT no_trip_7380020909;`)
	p := harness.StartOvstream(t, nil, replayArgs(db, addr)...)
	if p.Wait(t, time.Minute) != 0 || !strings.Contains(p.Output(), "replayed "+strings.Trim(rejected[0], "[]")+" dead letters") {
		t.Fatalf("dlq replay of %v rejected dead letters:\n%s", rejected, p.Output())
	}
	harness.Drain(t, db, addr)
	checkAllCounted(t, db, n, store.ReasonRejected)
	if s := harness.Dump(t, db, `SELECT count(*) FROM delay_aggregates WHERE dimension = 'station' AND dimension_id = '`+harness.RefusedStation+`'`); s[0] == "[0]" {
		t.Errorf("station %s has no rows", harness.RefusedStation)
	}
	want := harness.Dump(t, db, `SELECT j->>'delay_s', j->>'event_time' FROM (SELECT convert_from(value, 'UTF8')::jsonb AS j FROM oracle_msgs) m
		WHERE j->>'trip_id' = '`+harness.RefusedTrip+`' ORDER BY (j->>'event_time')::timestamptz DESC LIMIT 1`)
	got := harness.Dump(t, db, `SELECT delay_s::text, to_char(observed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') FROM trip_delay_latest
		WHERE trip_id = '`+harness.RefusedTrip+`'`)
	harness.SameRows(t, "the refused trip's latest state vs its newest record", got, want)
}

// Late records in a split pipeline (two instances), and the operator's
// decision to count them: 600 records over 15 minutes, split drains; then
// 120 records of the first 10 minutes again (other delays), late, so the
// next split drains dead-letter them late. A plain `dlq replay --reason
// late` counts nothing: the allowed lateness said they do not count, and
// each copy is dead-lettered late again, keeping its source. `dlq replay
// --reason late --into-final-windows` then replays those dead letters, with
// the original sources: the split drains merge every copy into the merged
// windows, and the tables equal the SQL oracle over all 720 records, each
// source counted once.
func TestDLQReplayLateIntoFinalWindows(t *testing.T) {
	addr, db := harness.StartBroker(t), harness.FreshDB(t)
	harness.SendAll(t, addr, harness.Synthetic(600, windowsFrom, 1500*time.Millisecond))
	harness.WaitAll(t, harness.StartSplit(t, db, addr, harness.Split2, "--drain"), "split drains of the records on time")
	late := harness.Synthetic(120, windowsFrom.Add(7*time.Second), 5*time.Second)
	for i, m := range late { // other delays than the first records'
		m.Value = sarama.ByteEncoder(harness.Pred(fmt.Sprint("late", i), fmt.Sprint("L", i%5), fmt.Sprintf("S%02d", i%20), "AT", 1000+i, windowsFrom.Add(time.Duration(7+5*i)*time.Second).Format(time.RFC3339)))
	}
	harness.SendAll(t, addr, late)
	harness.WaitAll(t, harness.StartSplit(t, db, addr, harness.Split2, "--drain"), "split drains of the late records")
	if n := harness.LoadOracleInput(t, db, addr, harness.PredictionsTopic); n != 720 {
		t.Fatalf("the topic holds %d records, want 720", n)
	}
	if l := harness.Dump(t, db, `SELECT reason, count(*) FROM dead_letters GROUP BY reason`); fmt.Sprint(l) != "[[late 120]]" {
		t.Fatalf("dead letters %v, want the 120 late records", l)
	}
	harness.SameRows(t, "delay_aggregates vs the SQL oracle without the late records", harness.Dump(t, db, harness.DumpAggregates), harness.Dump(t, db, harness.OracleAggregates))

	replay := func(extra ...string) {
		t.Helper()
		args := append([]string{"dlq", "replay", "--database-url", db, "--brokers", addr, "--reason", "late", "--to", harness.PredictionsTopic}, extra...)
		if p := harness.StartOvstream(t, nil, args...); p.Wait(t, time.Minute) != 0 || !strings.Contains(p.Output(), "replayed 120 dead letters") {
			t.Fatalf("dlq replay %v:\n%s", extra, p.Output())
		}
	}
	replay()
	harness.WaitAll(t, harness.StartSplit(t, db, addr, harness.Split2, "--drain"), "split drains of the plain replay")
	if l := harness.Dump(t, db, `SELECT count(*) FROM dead_letters WHERE reason = 'late' AND source_topic IS NOT NULL AND
		(source_topic, source_partition, source_offset) IN (SELECT topic, partition, "offset" FROM dead_letters WHERE source_topic IS NULL)`); l[0] != "[120]" {
		t.Fatalf("%v copies dead-lettered late keeping their source, want 120", l)
	}
	harness.SameRows(t, "delay_aggregates after the plain replay vs the SQL oracle without the late records",
		harness.Dump(t, db, harness.DumpAggregates), harness.Dump(t, db, harness.OracleAggregates))

	replay("--into-final-windows")
	harness.WaitAll(t, harness.StartSplit(t, db, addr, harness.Split2, "--drain"), "split drains of the replay into final windows")
	harness.SameRows(t, "delay_aggregates vs the SQL oracle over every record written", harness.Dump(t, db, harness.DumpAggregates), harness.Dump(t, db, oracleAllAggregates))
	harness.SameRows(t, "stored distributions vs the SQL oracle over every record written", harness.Dump(t, db, harness.DumpDistributions),
		harness.Dump(t, db, oracleAllDistributions))
	harness.SameRows(t, "dead_letter_replays vs the late records",
		harness.Dump(t, db, `SELECT source_topic, source_partition, source_offset FROM dead_letter_replays`),
		harness.Dump(t, db, `SELECT topic, partition, "offset" FROM dead_letters WHERE source_topic IS NULL`))
}

// The commit's count of copies, through the store: a source counts once
// (a second copy, in the same batch or a later one, is skipped); when
// PostgreSQL refuses a merged row, the window's copies are counted one at a
// time and only the copy whose row is refused is dead-lettered rejected,
// keeping its source; a window stored without its distribution (before
// schema 5) takes no copy: dead-lettered late, saying so. Each merged row
// equals the oracle's: the stored events plus the copies'.
func TestStoreCountsReplayedCopies(t *testing.T) {
	ctx := harness.TestCtx(t)
	s, url, epoch := harness.OpenStore(t)
	w := harness.T0.Add(-5 * time.Minute) // a window without rows: the copies' rows are new
	cp := func(src, off int64, stop string, delay float64, at time.Time) store.ReplayedRecord {
		start := at.Truncate(5 * time.Minute)
		return store.ReplayedRecord{Source: store.SourceID{Topic: "orig", Partition: 0, Offset: src}, Copy: harness.Tp0, Offset: off,
			Value: []byte(fmt.Sprint("copy ", off)), WindowStart: start, WindowEnd: start.Add(5 * time.Minute),
			Prediction: aggregate.Prediction{TripID: "t", Line: "L1", StopID: stop, Operator: "op1", DelayS: delay, EventTime: at}}
	}
	commit := func(next int64, recs ...store.ReplayedRecord) store.ReplayOutcome {
		t.Helper()
		var out store.ReplayOutcome
		b := store.Batch{Pipeline: "p", Owner: harness.Owner0, Epoch: epoch, Positions: harness.At0(next), Replayed: recs, ReplayOut: &out}
		if err := s.Commit(ctx, harness.WithSeqs(t, s, b)); err != nil {
			t.Fatal(err)
		}
		return out
	}
	// The stored window t0: line L1 with delay 0 (30 events), written as a run would.
	base := store.Batch{Pipeline: "p", Owner: harness.Owner0, Epoch: epoch, Positions: harness.At0(0),
		Windows: []aggregate.Row{harness.Row(aggregate.DimLine, "L1", 30, 0, 0, 0, 0)}}
	if err := s.Commit(ctx, harness.WithSeqs(t, s, base)); err != nil {
		t.Fatal(err)
	}
	out := commit(2, cp(1, 0, "S1", 10, harness.T0.Add(time.Minute)), cp(1, 1, "S1", 10, harness.T0.Add(time.Minute)))
	if out.Counted != 1 || out.Duplicates != 1 || len(out.DeadLetters) != 0 {
		t.Fatalf("two copies of one source: %+v, want 1 counted, 1 duplicate", out)
	}
	if out := commit(3, cp(1, 2, "S1", 10, harness.T0.Add(time.Minute))); out.Counted != 0 || out.Duplicates != 1 {
		t.Fatalf("a third copy in a later commit: %+v, want a duplicate", out)
	}
	const line = `SELECT event_count, mean_delay_s, p90_delay_s, delay_values::text, delay_counts::text FROM delay_aggregates
		WHERE dimension = 'line' AND dimension_id = 'L1' AND window_start = $1`
	if got := harness.Dump(t, url, strings.Replace(line, "$1", "'"+harness.T0.Format(time.RFC3339)+"'", 1)); fmt.Sprint(got) != "[[31 0.3225806451612903 0 {0,10} {30,1}]]" {
		t.Fatalf("line L1 after one copy: %v, want 31 events, mean 10/31, p90 0, {0,10} {30,1}", got)
	}
	// A CHECK refuses station S9: of three copies of window w, the one at S9
	// is dead-lettered rejected, the other two count.
	harness.ExecSQL(t, url, `ALTER TABLE delay_aggregates ADD CONSTRAINT no_s9 CHECK (dimension <> 'station' OR dimension_id <> 'S9')`)
	out = commit(6, cp(10, 3, "S2", 5, w.Add(time.Second)), cp(11, 4, "S9", 7, w.Add(2*time.Second)), cp(12, 5, "S2", 9, w.Add(3*time.Second)))
	if out.Counted != 2 || out.Duplicates != 0 || len(out.DeadLetters) != 1 {
		t.Fatalf("three copies, one refused: %+v, want 2 counted and 1 dead letter", out)
	}
	d := harness.Dump(t, url, `SELECT "offset", reason, source_topic, source_offset, error LIKE '%no_s9%' FROM dead_letters`)
	if fmt.Sprint(d) != "[[4 rejected orig 11 true]]" {
		t.Fatalf("dead letters %v, want the copy at offset 4, rejected for no_s9, source orig/0/11", d)
	}
	if got := harness.Dump(t, url, `SELECT dimension, dimension_id, event_count, mean_delay_s, p90_delay_s FROM delay_aggregates WHERE window_start = '`+
		w.Format(time.RFC3339)+`'`); fmt.Sprint(got) != "[[line L1 2 7 8.6] [network all 2 7 8.6] [operator op1 2 7 8.6] [station S2 2 7 8.6]]" {
		t.Fatalf("window %s: %v, want the two copies of S2 (5 s and 9 s) in every row", w, got)
	}
	// A row without its distribution takes no copy.
	harness.ExecSQL(t, url, `UPDATE delay_aggregates SET delay_values = NULL, delay_counts = NULL WHERE window_start = '`+harness.T0.Format(time.RFC3339)+`'`)
	out = commit(7, cp(20, 6, "S1", 3, harness.T0.Add(2*time.Minute)))
	if out.Counted != 0 || len(out.DeadLetters) != 1 || out.DeadLetters[0].Reason != store.ReasonLate ||
		!strings.Contains(out.DeadLetters[0].Error, "without its distribution") {
		t.Fatalf("a copy into a row without distribution: %+v, want a late dead letter saying so", out)
	}
	if n := harness.Dump(t, url, `SELECT source_offset, "offset" FROM dead_letter_replays`); fmt.Sprint(n) != "[[1 0] [10 3] [12 5]]" {
		t.Fatalf("dead_letter_replays %v, want sources 1, 10 and 12 with the copies that counted", n)
	}
}

// The double count, in open windows: 1,500 predictions 60-90 s
// ahead of the clock (max future skew 10 s) are dead-lettered future; the
// clock moves 2 minutes on; `dlq replay --reason future` is SIGKILLed after
// Kafka acknowledged its second batch, and rerun: 500 sources have two
// copies. A drain (in process, on the moved clock) reads the copies while
// their windows are open: each waits for its window, which the drain
// finalizes, and counts once. Before the fix both copies of those 500 were
// counted in their open windows (2,000 events for 1,500 records).
func TestDLQReplayIntoOpenWindowsCountsOnce(t *testing.T) {
	addr, db := harness.OnePartitionBroker(t), harness.FreshDB(t)
	clock := &harness.SkewClock{}
	base := clock.Now().Truncate(time.Second)
	first := harness.RunInProcess(t, db, addr, clock, consumer.Config{MaxFutureSkew: 10 * time.Second})
	const n = 1500
	msgs := harness.Synthetic(n, base.Add(time.Minute), 20*time.Millisecond)
	for _, m := range msgs {
		m.Partition = 0
	}
	harness.SendAll(t, addr, msgs)
	harness.WaitFor(t, time.Minute, "a commit of every record", func() bool { return harness.StoredConsumed(t, db) == n })
	first.Stop(t)
	if d := harness.Dump(t, db, `SELECT reason, count(*) FROM dead_letters GROUP BY reason`); fmt.Sprint(d) != "[[future 1500]]" {
		t.Fatalf("dead letters %v, want 1500 future", d)
	}
	if got := harness.LoadOracleInput(t, db, addr, harness.PredictionsTopic); got != n {
		t.Fatalf("the topic holds %d records, want %d", got, n)
	}
	clock.Jump(2 * time.Minute)

	p := harness.StartOvstream(t, []string{"OVSTREAM_CRASHPOINT=replay_acked:2"}, replayReason(db, addr, store.ReasonFuture)...)
	wantSIGKILL(t, p, "replay_acked", 2)
	if p := harness.StartOvstream(t, nil, replayReason(db, addr, store.ReasonFuture)...); p.Wait(t, time.Minute) != 0 {
		t.Fatalf("the second dlq replay failed:\n%s", p.Output())
	}
	copies, twice := copiesPerSource(t, addr, harness.PredictionsTopic), 0
	for _, c := range copies {
		if c > 1 {
			twice++
		}
	}
	if len(copies) != n || twice != 500 {
		t.Fatalf("the topic holds copies of %d sources, %d of them twice; want %d and 500", len(copies), twice, n)
	}
	sum := harness.RunInProcess(t, db, addr, clock, consumer.Config{MaxFutureSkew: 10 * time.Second, Drain: true}).Wait(t, 2*time.Minute)
	checkAllCounted(t, db, n, store.ReasonFuture)
	if sum.ReplayedCounted != n || sum.ReplayedDuplicates != 500 {
		t.Errorf("the drain counted %d copies and skipped %d, want %d and 500", sum.ReplayedCounted, sum.ReplayedDuplicates, n)
	}
}
