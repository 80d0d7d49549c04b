//go:build integration

package pipeline

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ovstream/ovstream/consumer/crashpoint"
	"github.com/ovstream/ovstream/integration/harness"
)

// Provisional rows, on the Auckland morning (real, slightly out-of-order
// data), against a SQL oracle over the records read from the topic by
// franz-go (not the service's client). Each check takes one snapshot of the
// database (provisional_positions, the view's provisional rows, the
// watermark) and computes, with SQL alone, every window not yet final over
// exactly the records below the snapshot's provisional consumed offsets, dead
// letters left out: count, mean, P90, min, max and the distribution must be
// equal.

// liveMsgs loads every record of the topics at addr into table live_msgs of
// db, read with franz-go up to the end offsets, and returns how many.
func liveMsgs(t *testing.T, db, addr string, topics ...string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topics...)
	if err != nil {
		t.Fatal(err)
	}
	left := map[string]int64{} // topic/partition -> end offset still to reach
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[fmt.Sprintf("%s/%d", o.Topic, o.Partition)] = o.Offset
		}
	})
	var rows [][]any
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("reading the topics: %v (left %v)", err, left)
		}
		fs.EachRecord(func(r *kgo.Record) {
			rows = append(rows, []any{r.Topic, r.Partition, r.Offset, r.Value})
			k := fmt.Sprintf("%s/%d", r.Topic, r.Partition)
			if end, ok := left[k]; ok && r.Offset+1 >= end {
				delete(left, k)
			}
		})
	}
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `DROP TABLE IF EXISTS live_msgs;
		CREATE TABLE live_msgs (topic text, partition int, "offset" bigint, value bytea)`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.CopyFrom(ctx, pgx.Identifier{"live_msgs"}, []string{"topic", "partition", "offset", "value"},
		pgx.CopyFromRows(rows)); err != nil {
		t.Fatal(err)
	}
	return len(rows)
}

// provisionalSnapshot is what one snapshot of the database held.
type provisionalSnapshot struct {
	watermark time.Time // stream_positions.watermark of the predictions topic (one value: a single owner)
	windows   int       // windows with provisional rows
	rows      int       // provisional rows
	consumed  int64     // sum of provisional_positions.consumed_offset
}

// snapshotProvisional copies, in one REPEATABLE READ transaction, the view's
// provisional rows into snap_prov, provisional_positions into snap_pos and
// the delay_aggregates window starts into snap_final; it also checks there
// that no window has rows in both delay_aggregates and
// delay_aggregates_provisional (a mixture) and that the view's final rows
// are delay_aggregates'.
func snapshotProvisional(t *testing.T, db string) provisionalSnapshot {
	t.Helper()
	return snapshotProvisionalAt(t, db, `SELECT coalesce(max(watermark), '1970-01-01Z') FROM stream_positions WHERE topic = 'arrival_predictions'`)
}

// snapshotProvisionalAt is snapshotProvisional with the snapshot's watermark
// (the end of the last final window) read by the query frontier. It also
// checks that no provisional partial of a split pipeline is left of a
// merged window.
func snapshotProvisionalAt(t *testing.T, db, frontier string) provisionalSnapshot {
	t.Helper()
	ctx := harness.TestCtx(t)
	conn := harness.Connect(t, ctx, db)
	defer conn.Close(ctx)
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // committed below
	var s provisionalSnapshot
	var mixed, mergedPartials, viewFinal, tableRows int
	err = tx.QueryRow(ctx, `SELECT
		(`+frontier+`),
		(SELECT count(DISTINCT window_start) FROM delay_aggregates_provisional p
			WHERE EXISTS (SELECT 1 FROM delay_aggregates d WHERE d.pipeline = p.pipeline AND d.window_start = p.window_start)),
		(SELECT count(*) FROM delay_partial_provisional s JOIN pipelines ON name = s.pipeline WHERE s.window_end <= merged_until),
		(SELECT count(*) FROM delay_aggregates_live WHERE final),
		(SELECT count(*) FROM delay_aggregates)`).Scan(&s.watermark, &mixed, &mergedPartials, &viewFinal, &tableRows)
	if err != nil {
		t.Fatal(err)
	}
	if mixed != 0 || mergedPartials != 0 {
		t.Errorf("%d windows have final and provisional rows at once; %d provisional partials of merged windows", mixed, mergedPartials)
	}
	if viewFinal != tableRows {
		t.Errorf("delay_aggregates_live has %d final rows, delay_aggregates %d", viewFinal, tableRows)
	}
	if _, err := tx.Exec(ctx, `
		DROP TABLE IF EXISTS snap_prov, snap_pos, snap_final;
		CREATE TABLE snap_prov AS SELECT * FROM delay_aggregates_live WHERE NOT final;
		CREATE TABLE snap_pos AS SELECT * FROM provisional_positions;
		CREATE TABLE snap_final AS SELECT DISTINCT window_start FROM delay_aggregates`); err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(ctx, `SELECT (SELECT count(DISTINCT window_start) FROM snap_prov), (SELECT count(*) FROM snap_prov),
		(SELECT coalesce(sum(consumed_offset), 0)::bigint FROM snap_pos)`).Scan(&s.windows, &s.rows, &s.consumed); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

// checkProvisionalOracle compares the snapshot's provisional rows and their
// distributions with the oracle over the records of live_msgs below
// snap_pos' consumed offsets, for the windows that end after the snapshot's
// watermark, and fails unless they are equal.
func checkProvisionalOracle(t *testing.T, db string, s provisionalSnapshot, what string) {
	t.Helper()
	ctx := harness.TestCtx(t)
	conn := harness.Connect(t, ctx, db)
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `DROP TABLE IF EXISTS oracle_msgs;
		CREATE TABLE oracle_msgs AS SELECT m.* FROM live_msgs m JOIN snap_pos p
			ON p.topic = m.topic AND p.partition = m.partition AND m."offset" < p.consumed_offset`); err != nil {
		t.Fatal(err)
	}
	wm := s.watermark.UTC().Format(time.RFC3339Nano)
	open := fmt.Sprintf(`SELECT * FROM (%s) AS o(ws, we, dim, id, op, n, mean, p90, mn, mx) WHERE we > '%s'`, harness.OracleAggregates, wm)
	openDist := fmt.Sprintf(`SELECT o.* FROM (%s) AS o(ws, dim, id, i, v, n) WHERE ws + interval '300 seconds' > '%s'`,
		harness.OracleDistributions, wm)
	got := harness.Dump(t, db, strings.ReplaceAll(harness.DumpAggregates, "delay_aggregates", "snap_prov"))
	want := harness.Dump(t, db, open)
	if len(want) == 0 && len(got) == 0 {
		t.Logf("%s: no open window holds a record below the provisional offsets (watermark %s): no provisional row", what, wm)
		return
	}
	harness.SameRows(t, what+": provisional rows vs SQL oracle over the records read", got, want)
	harness.SameRows(t, what+": provisional distributions vs SQL oracle",
		harness.Dump(t, db, strings.ReplaceAll(harness.DumpDistributions, "delay_aggregates", "snap_prov")), harness.Dump(t, db, openDist))
	t.Logf("%s: %d provisional rows in %d windows after watermark %s, %d records read, equal to the oracle",
		what, s.rows, s.windows, wm, s.consumed)
}

// waitConsumed waits until the provisional consumed offsets reach the end
// offsets of the topics (every record read and in a provisional write), two
// minutes at most.
func waitConsumed(t *testing.T, db, addr string, p *harness.Proc) {
	t.Helper()
	hw := harness.HighWaters(t, addr, nil, harness.PredictionsTopic, harness.PositionsTopic)
	var total int64
	for _, n := range hw {
		total += n
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var got int64
		harness.SqlRow(t, db, `SELECT coalesce(sum(consumed_offset), 0)::bigint FROM provisional_positions`, &got)
		if got == total {
			return
		}
		if p != nil {
			select {
			case <-p.Done:
				t.Fatalf("run ended while provisional offsets were at %d of %d:\n%s", got, total, p.Output())
			default:
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("provisional offsets at %d of %d after two minutes", got, total)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// aucklandHalves returns functions producing the Auckland 2-hour morning
// split in two halves, in file order (the second half's event times are
// later).
func aucklandHalves(t *testing.T) (produceFirst, produceSecond func(addr string)) {
	t.Helper()
	res := harness.LoadFeeds(t, "AT", harness.ExtractTarGz(t, "../../testdata/auckland-20160518-2h.tar.gz"))
	half := len(res.Predictions) / 2
	a, b := *res, *res
	a.Predictions, b.Predictions = res.Predictions[:half], res.Predictions[half:]
	a.Positions, b.Positions = res.Positions[:len(res.Positions)/2], res.Positions[len(res.Positions)/2:]
	return func(addr string) { harness.ProduceFeeds(t, addr, &a) }, func(addr string) { harness.ProduceFeeds(t, addr, &b) }
}

// A service run (no --drain) with provisional rows every 200 ms: while the
// first half of the morning is read, and once it is all read, the
// provisional rows equal the oracle over exactly the records read so far;
// then the second half closes those windows: their final rows equal the
// oracle over every record, no provisional row of them remains, and the
// windows still open are provisional and exact again.
func TestProvisionalRowsEqualOracle(t *testing.T) {
	addr, db := harness.StartBroker(t), harness.FreshDB(t)
	produceFirst, produceSecond := aucklandHalves(t)
	produceFirst(addr)
	p := harness.StartOvstream(t, nil, harness.RunArgs(db, addr, "--provisional-interval", "200ms", "--flush-interval", "200ms")...)
	harness.WaitFor(t, 2*time.Minute, "a provisional write", func() bool {
		var n int
		harness.SqlRow(t, db, `SELECT count(*) FROM delay_aggregates_provisional`, &n)
		return n > 0
	})
	mid := snapshotProvisional(t, db)
	if mid.rows == 0 {
		t.Fatal("no provisional row in the snapshot")
	}
	waitConsumed(t, db, addr, p)
	liveMsgs(t, db, addr, harness.PredictionsTopic, harness.PositionsTopic)
	checkProvisionalOracle(t, db, mid, "first provisional write")
	caught := snapshotProvisional(t, db)
	checkProvisionalOracle(t, db, caught, "first half read")
	if caught.windows == 0 {
		t.Fatal("no open window after the first half")
	}
	var lastOpen time.Time
	harness.SqlRow(t, db, `SELECT max(window_end) FROM snap_prov`, &lastOpen)

	produceSecond(addr)
	waitConsumed(t, db, addr, p)
	harness.WaitFor(t, time.Minute, "the first half's open windows final", func() bool {
		var wm time.Time
		harness.SqlRow(t, db, `SELECT max(watermark) FROM stream_positions WHERE topic = 'arrival_predictions'`, &wm)
		return !wm.Before(lastOpen)
	})
	n := liveMsgs(t, db, addr, harness.PredictionsTopic, harness.PositionsTopic)
	end := snapshotProvisional(t, db)
	if end.rows == 0 {
		t.Fatal("no provisional row after the second half")
	}
	checkProvisionalOracle(t, db, end, "second half read")

	// The windows provisional after the first half are final now: equal to
	// the oracle over every record, and no provisional row of them is left.
	harness.ExecSQL(t, db, `DROP TABLE IF EXISTS oracle_msgs; CREATE TABLE oracle_msgs AS SELECT * FROM live_msgs`)
	final := fmt.Sprintf(`SELECT * FROM (%s) AS o(ws, we, dim, id, op, n, mean, p90, mn, mx) WHERE we <= '%s'`,
		harness.OracleAggregates, end.watermark.UTC().Format(time.RFC3339Nano))
	harness.SameRows(t, "final rows vs SQL oracle over every record", harness.Dump(t, db, harness.DumpAggregates), harness.Dump(t, db, final))
	harness.SameRows(t, "final distributions vs SQL oracle", harness.Dump(t, db, harness.DumpDistributions),
		harness.Dump(t, db, fmt.Sprintf(`SELECT o.* FROM (%s) AS o(ws, dim, id, i, v, c) WHERE ws + interval '300 seconds' <= '%s'`,
			harness.OracleDistributions, end.watermark.UTC().Format(time.RFC3339Nano))))
	var left, finalOfFirst int
	ts := func(t time.Time) string { return "'" + t.UTC().Format(time.RFC3339Nano) + "'" }
	harness.SqlRow(t, db, `SELECT count(*) FROM delay_aggregates_provisional WHERE window_end <= `+ts(lastOpen), &left)
	harness.SqlRow(t, db, `SELECT count(DISTINCT window_start) FROM delay_aggregates WHERE window_end <= `+ts(lastOpen)+
		` AND window_end > `+ts(caught.watermark), &finalOfFirst)
	if left != 0 || finalOfFirst != caught.windows {
		t.Errorf("the %d windows provisional after the first half: %d provisional rows left, %d windows final",
			caught.windows, left, finalOfFirst)
	}
	t.Logf("%d records; %d windows went from provisional to final", n, finalOfFirst)
	p.Kill()
	if code := p.Wait(t, time.Minute); code == 0 {
		t.Fatalf("run exited 0 after kill -9:\n%s", p.Output())
	}

	// report --include-open reads the view: one row per window (5m buckets),
	// final or provisional as the view says; without it, final rows only.
	from, to := "2016-05-18T00:00:00Z", "2016-05-19T00:00:00Z"
	args := []string{"--pipeline", "ovstream", "--dimension", "network", "--from", from, "--to", to, "--bucket", "5m",
		"--quantiles", "0.9", "--csv"}
	view := `SELECT extract(epoch FROM window_start)::bigint, dimension_id, event_count, min_delay_s, max_delay_s, p90_delay_s, final
		FROM delay_aggregates_live WHERE dimension = 'network'`
	want := harness.Dump(t, db, view)
	got := reportLiveRows(t, db, append(args, "--include-open")...)
	harness.SameRows(t, "report --include-open vs delay_aggregates_live", got, want)
	var open int
	for _, r := range want {
		if strings.HasSuffix(r, " false]") {
			open++
		}
	}
	if open == 0 || open == len(want) {
		t.Errorf("the view holds %d provisional windows of %d: want some of each", open, len(want))
	}
	harness.SameRows(t, "report without --include-open vs final rows", reportLiveRows(t, db, args...),
		harness.Dump(t, db, view+" AND final"))
}

// reportLiveRows runs `ovstream report` with args (--csv, --quantiles 0.9)
// and returns its rows as "[bucket id events min max p90 final]", the
// bucket in Unix seconds, as dump prints the view's; without
// --include-open, whose column final it must have, each row is final.
func reportLiveRows(t *testing.T, db string, args ...string) []string {
	t.Helper()
	recs, err := csv.NewReader(bytes.NewReader(harness.Report(t, db, args...))).ReadAll()
	if err != nil || len(recs) == 0 {
		t.Fatalf("report --csv: %v: %q", err, recs)
	}
	withFinal := slices.Contains(args, "--include-open")
	if want := 8 + map[bool]int{true: 1}[withFinal]; len(recs[0]) != want || (withFinal && recs[0][8] != "final") {
		t.Fatalf("report %v: header %q, want %d columns ending in p90%s", args, recs[0], want,
			map[bool]string{true: ", final"}[withFinal])
	}
	var out []string
	for _, f := range recs[1:] {
		b, err := time.Parse(time.RFC3339, f[0])
		if err != nil {
			t.Fatal(err)
		}
		final := "true"
		if withFinal {
			final = f[8]
		}
		out = append(out, fmt.Sprintf("[%d %s %s %s %s %s %s]", b.Unix(), f[1], f[3], f[5], f[6], f[7], final))
	}
	return out
}

// SIGKILL while windows go from provisional to final. The morning is
// produced in six parts; after the first is read (its open windows
// provisional), each of four rounds produces the next part, whose records
// close those windows, and starts the service (--takeover) to die in its
// first commits: at a crash point inside the commit that writes final rows
// and deletes provisional ones (after the writes, before COMMIT, after
// COMMIT: with --flush-interval 1h the first commit is the one a closed
// window starts) or by kill -9 at a random moment. After each death no window has
// both final and provisional rows, and the provisional rows equal the
// oracle over the records below the stored provisional offsets. At the end
// the final rows equal the oracle over every record, and windows that were
// provisional when a round died are among them.
func TestProvisionalSIGKILLLeavesNoMixture(t *testing.T) {
	addr, db := harness.StartBroker(t), harness.FreshDB(t)
	res := harness.LoadFeeds(t, "AT", harness.ExtractTarGz(t, "../../testdata/auckland-20160518-2h.tar.gz"))
	const parts = 6
	producePart := func(i int) {
		part := *res
		n, m := len(res.Predictions), len(res.Positions)
		part.Predictions, part.Positions = res.Predictions[i*n/parts:(i+1)*n/parts], res.Positions[i*m/parts:(i+1)*m/parts]
		harness.ProduceFeeds(t, addr, &part)
	}
	rng := harness.CrashSeed(t)
	args := harness.RunArgs(db, addr, "--provisional-interval", "100ms", "--takeover")
	producePart(0)
	p := harness.StartOvstream(t, nil, args...)
	waitConsumed(t, db, addr, p)
	s := snapshotProvisional(t, db)
	p.Kill()
	if code := p.Wait(t, time.Minute); code == 0 {
		t.Fatalf("run exited 0 after kill -9:\n%s", p.Output())
	}
	harness.ExecSQL(t, db, `CREATE TABLE seen_prov (window_start timestamptz)`)
	rounds := []string{crashpoint.MidCommit, crashpoint.BeforeCommit, crashpoint.AfterCommit, "kill -9"}
	for i, point := range rounds {
		producePart(i + 1)
		var env []string
		runArgs := args
		if point != "kill -9" {
			env = []string{fmt.Sprintf("%s=%s:1", crashpoint.EnvPoint, point)}
			runArgs = append(slices.Clone(args), "--flush-interval", "1h")
		}
		before := s
		p := harness.StartOvstream(t, env, runArgs...)
		if point == "kill -9" {
			time.Sleep(time.Duration(200+rng.IntN(1500)) * time.Millisecond)
			p.Kill()
		}
		if code := p.Wait(t, 2*time.Minute); code == 0 {
			t.Fatalf("round %d (%s): run exited 0, want a kill:\n%s", i, point, p.Output())
		}
		s = snapshotProvisional(t, db)
		liveMsgs(t, db, addr, harness.PredictionsTopic, harness.PositionsTopic)
		checkProvisionalOracle(t, db, s, fmt.Sprintf("round %d, killed at %s", i, point))
		if point == crashpoint.AfterCommit && !s.watermark.After(before.watermark) {
			t.Errorf("round %d: the commit killed after COMMIT did not finalize a window (watermark %s before and after)",
				i, s.watermark.Format(time.RFC3339))
		}
		harness.ExecSQL(t, db, `INSERT INTO seen_prov SELECT DISTINCT window_start FROM snap_prov`)
	}
	producePart(parts - 1)
	p = harness.StartOvstream(t, nil, args...)
	waitConsumed(t, db, addr, p)
	liveMsgs(t, db, addr, harness.PredictionsTopic, harness.PositionsTopic)
	s = snapshotProvisional(t, db)
	checkProvisionalOracle(t, db, s, "after the kills, every record read")
	harness.ExecSQL(t, db, `DROP TABLE IF EXISTS oracle_msgs; CREATE TABLE oracle_msgs AS SELECT * FROM live_msgs`)
	wm := s.watermark.UTC().Format(time.RFC3339Nano)
	harness.SameRows(t, "final rows after the kills vs SQL oracle", harness.Dump(t, db, harness.DumpAggregates),
		harness.Dump(t, db, fmt.Sprintf(`SELECT * FROM (%s) AS o(ws, we, dim, id, op, n, mean, p90, mn, mx) WHERE we <= '%s'`, harness.OracleAggregates, wm)))
	var wentFinal int
	harness.SqlRow(t, db, `SELECT count(DISTINCT window_start) FROM seen_prov s
		WHERE EXISTS (SELECT 1 FROM delay_aggregates d WHERE d.window_start = s.window_start)`, &wentFinal)
	if wentFinal == 0 {
		t.Error("no window provisional at a kill became final later")
	}
	t.Logf("%d windows provisional at a kill are final now", wentFinal)
	p.Kill()
}

// --provisional-interval 0 turns provisional rows off: the service reads
// and commits everything, and neither table holds a row.
func TestProvisionalIntervalZeroWritesNone(t *testing.T) {
	addr, db := harness.StartBroker(t), harness.FreshDB(t)
	produceFirst, _ := aucklandHalves(t)
	produceFirst(addr)
	p := harness.StartOvstream(t, nil, harness.RunArgs(db, addr, "--provisional-interval", "0")...)
	hw := harness.HighWaters(t, addr, nil, harness.PredictionsTopic, harness.PositionsTopic)
	harness.WaitFor(t, 2*time.Minute, "every record consumed and committed", func() bool {
		if harness.Exited(p) {
			t.Fatalf("run exited:\n%s", p.Output())
		}
		stored := harness.StoredConsumedOf(t, db, "ovstream")
		for tp, off := range hw {
			if stored[tp] != off {
				return false
			}
		}
		return true
	})
	var prov, pos, final int
	harness.SqlRow(t, db, `SELECT (SELECT count(*) FROM delay_aggregates_provisional), (SELECT count(*) FROM provisional_positions),
		(SELECT count(*) FROM delay_aggregates)`, &prov, &pos, &final)
	if prov != 0 || pos != 0 || final == 0 {
		t.Errorf("--provisional-interval 0: %d provisional rows, %d provisional positions, %d final rows", prov, pos, final)
	}
	p.Kill()
}

// A restart with --provisional-interval 0 removes the provisional rows an
// earlier run wrote: they would be shown as current while they count only
// the records that run had read.
func TestProvisionalIntervalZeroClearsEarlierRows(t *testing.T) {
	addr, db := harness.StartBroker(t), harness.FreshDB(t)
	produceFirst, _ := aucklandHalves(t)
	produceFirst(addr)
	p := harness.StartOvstream(t, nil, harness.RunArgs(db, addr, "--provisional-interval", "100ms")...)
	harness.WaitFor(t, 2*time.Minute, "provisional rows written", func() bool {
		var n int
		harness.SqlRow(t, db, `SELECT count(*) FROM delay_aggregates_provisional`, &n)
		return n > 0
	})
	p.Kill()
	p = harness.StartOvstream(t, nil, harness.RunArgs(db, addr, "--provisional-interval", "0")...)
	defer p.Kill()
	var prov, pos int
	harness.WaitFor(t, time.Minute, "the provisional rows of the earlier run removed", func() bool {
		harness.SqlRow(t, db, `SELECT (SELECT count(*) FROM delay_aggregates_provisional), (SELECT count(*) FROM provisional_positions)`,
			&prov, &pos)
		return prov == 0 && pos == 0
	})
}
