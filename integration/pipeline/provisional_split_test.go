//go:build integration

package pipeline

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ovstream/ovstream/consumer/crashpoint"
	"github.com/ovstream/ovstream/integration/harness"
)

// splitFrontier is the end of a split pipeline's last merged window: its
// windows ending after it are provisional.
const splitFrontier = `SELECT coalesce((SELECT merged_until FROM pipelines WHERE name = 'ovstream'), '1970-01-01Z')`

// waitProvisionalOf waits until the provisional consumed offsets of the
// partitions of parts ("topic:N,..." as --partitions takes them) reach
// their high water marks hw, two minutes at most.
func waitProvisionalOf(t *testing.T, db string, hw map[string]int64, parts string) {
	t.Helper()
	harness.WaitFor(t, 2*time.Minute, "provisional offsets of "+parts+" at the high water marks", func() bool {
		got := map[string]int64{}
		for _, r := range harness.Dump(t, db, `SELECT topic || '/' || partition, consumed_offset FROM provisional_positions`) {
			var k string
			var v int64
			if _, err := fmt.Sscanf(strings.Trim(r, "[]"), "%s %d", &k, &v); err != nil {
				t.Fatalf("row %q: %v", r, err)
			}
			got[k] = v
		}
		for _, p := range strings.Split(parts, ",") {
			k := strings.Replace(p, ":", "/", 1)
			if got[k] != hw[k] {
				return false
			}
		}
		return true
	})
}

// A split pipeline of two instances (harness.Split2) run as a service on
// the Auckland morning, provisional rows every 200 ms. While the first half
// is read, and once it is all read, the provisional rows of
// delay_aggregates_live are the exact merge of both instances' shares:
// equal to the SQL oracle over exactly the records below the provisional
// offsets both stored (read back with franz-go), for every window the
// pipeline has not merged. Then the first instance is killed (kill -9, at a
// seeded moment) after a third quarter is produced, and the last quarter
// comes: the one left reads its share and the merge waits for the dead
// one's partitions; no window has
// final and provisional rows, and the provisional rows still equal the
// oracle over the records below each instance's stored offsets. So they do
// after a new first instance (--takeover) dies in its first commit, which
// merges: killed at a crash point before COMMIT (nothing merged), then after
// it (windows merged, their provisional rows gone). Another new one reads
// the rest: the windows provisional after the
// first half are final, equal to the oracle over every record, with no
// provisional row or partial left. Last, ovs_rollup(include_open => true)
// and report --include-open equal count, avg, min, max and percentile_cont
// over every event; without it, over the events of the final windows.
func TestSplitProvisionalRowsEqualOracle(t *testing.T) {
	addr, db := harness.StartBroker(t), harness.FreshDB(t)
	res := harness.LoadFeeds(t, "AT", harness.ExtractTarGz(t, "../../testdata/auckland-20160518-2h.tar.gz"))
	produce := func(from, to int) { // quarters of the morning, in file order
		part := *res
		n, m := len(res.Predictions), len(res.Positions)
		part.Predictions, part.Positions = res.Predictions[from*n/4:to*n/4], res.Positions[from*m/4:to*m/4]
		harness.ProduceFeeds(t, addr, &part)
	}
	produce(0, 2)
	rng := harness.CrashSeed(t)
	args := []string{"--provisional-interval", "200ms", "--flush-interval", "200ms", "--takeover"}
	ps := harness.StartSplit(t, db, addr, harness.Split2, args...)
	defer func() {
		for _, p := range ps {
			p.Kill()
		}
	}()
	harness.WaitFor(t, 2*time.Minute, "a provisional write", func() bool {
		var n int
		harness.SqlRow(t, db, `SELECT count(*) FROM delay_aggregates_provisional`, &n)
		return n > 0
	})
	mid := snapshotProvisionalAt(t, db, splitFrontier)
	if mid.rows == 0 {
		t.Fatal("no provisional row in the snapshot")
	}
	waitConsumed(t, db, addr, nil)
	liveMsgs(t, db, addr, harness.PredictionsTopic, harness.PositionsTopic)
	checkProvisionalOracle(t, db, mid, "first provisional write")
	caught := snapshotProvisionalAt(t, db, splitFrontier)
	checkProvisionalOracle(t, db, caught, "first half read")
	if caught.windows == 0 {
		t.Fatal("no open window after the first half")
	}
	// Both instances' shares are in the provisional rows: a window holds
	// provisional partials of partitions of each.
	var shared int
	harness.SqlRow(t, db, `SELECT count(*) FROM (SELECT window_start FROM delay_partial_provisional GROUP BY window_start
		HAVING bool_or(partition < 3) AND bool_or(partition >= 3)) AS w`, &shared)
	if shared == 0 {
		t.Error("no window has provisional partials of both instances")
	}
	var lastOpen time.Time
	harness.SqlRow(t, db, `SELECT max(window_end) FROM snap_prov`, &lastOpen)
	t.Logf("first half: %d windows hold partials of both instances", shared)

	// One instance dies (at a seeded moment after the third quarter arrives,
	// as it reads, merges and finalizes windows), the fourth arrives: the
	// other instance reads its share, the dead one lags.
	produce(2, 3)
	time.Sleep(time.Duration(rng.IntN(1500)) * time.Millisecond)
	ps[0].Kill()
	if code := ps[0].Wait(t, time.Minute); code == 0 {
		t.Fatalf("instance 0 exited 0 after kill -9:\n%s", ps[0].Output())
	}
	produce(3, 4)
	hw := harness.HighWaters(t, addr, nil, harness.PredictionsTopic, harness.PositionsTopic)
	waitProvisionalOf(t, db, hw, harness.Split2[1])
	total := liveMsgs(t, db, addr, harness.PredictionsTopic, harness.PositionsTopic)
	lag := snapshotProvisionalAt(t, db, splitFrontier)
	checkProvisionalOracle(t, db, lag, "instance 0 killed, instance 1 read its share")
	if lag.windows == 0 || lag.consumed >= int64(total) {
		t.Errorf("while instance 0 is dead: %d provisional windows, %d of %d records below the provisional offsets; want some windows, fewer records",
			lag.windows, lag.consumed, total)
	}

	// The lagging instance restarts and dies in its first commit, which
	// writes its partials and merges the windows both instances passed:
	// before COMMIT (nothing of it stays), then after it (those windows
	// final, their provisional rows gone).
	for _, point := range []string{crashpoint.BeforeCommit, crashpoint.AfterCommit} {
		p := harness.StartOvstream(t, []string{fmt.Sprintf("%s=%s:1", crashpoint.EnvPoint, point)}, harness.RunArgs(db, addr,
			append(append([]string{"--partitions", harness.Split2[0]}, args...), "--flush-interval", "1h")...)...)
		if code := p.Wait(t, 2*time.Minute); code == 0 {
			t.Fatalf("instance 0 exited 0, want a kill at %s:\n%s", point, p.Output())
		}
		s := snapshotProvisionalAt(t, db, splitFrontier)
		checkProvisionalOracle(t, db, s, "instance 0 killed at "+point)
		if merged := s.watermark.After(lag.watermark); merged != (point == crashpoint.AfterCommit) {
			t.Errorf("killed at %s: merged until %s, before %s", point, s.watermark.Format(time.RFC3339), lag.watermark.Format(time.RFC3339))
		}
	}
	ps[0] = harness.StartOvstream(t, nil, harness.RunArgs(db, addr, append([]string{"--partitions", harness.Split2[0]}, args...)...)...)
	waitConsumed(t, db, addr, ps[0])
	harness.WaitFor(t, time.Minute, "the first half's open windows merged", func() bool {
		var until time.Time
		harness.SqlRow(t, db, splitFrontier, &until)
		return !until.Before(lastOpen)
	})
	n := liveMsgs(t, db, addr, harness.PredictionsTopic, harness.PositionsTopic)
	end := snapshotProvisionalAt(t, db, splitFrontier)
	if end.rows == 0 {
		t.Fatal("no provisional row after the second half")
	}
	checkProvisionalOracle(t, db, end, "second half read")

	harness.ExecSQL(t, db, `DROP TABLE IF EXISTS oracle_msgs; CREATE TABLE oracle_msgs AS SELECT * FROM live_msgs`)
	frontier := end.watermark.UTC().Format(time.RFC3339Nano)
	harness.SameRows(t, "merged rows vs SQL oracle over every record", harness.Dump(t, db, harness.DumpAggregates),
		harness.Dump(t, db, fmt.Sprintf(`SELECT * FROM (%s) AS o(ws, we, dim, id, op, n, mean, p90, mn, mx) WHERE we <= '%s'`,
			harness.OracleAggregates, frontier)))
	harness.SameRows(t, "merged distributions vs SQL oracle", harness.Dump(t, db, harness.DumpDistributions),
		harness.Dump(t, db, fmt.Sprintf(`SELECT o.* FROM (%s) AS o(ws, dim, id, i, v, c) WHERE ws + interval '300 seconds' <= '%s'`,
			harness.OracleDistributions, frontier)))
	var left, partialsLeft, finalOfFirst int
	ts := "'" + lastOpen.UTC().Format(time.RFC3339Nano) + "'"
	harness.SqlRow(t, db, `SELECT (SELECT count(*) FROM delay_aggregates_provisional WHERE window_end <= `+ts+`),
		(SELECT count(*) FROM delay_partial_provisional WHERE window_end <= `+ts+`),
		(SELECT count(DISTINCT window_start) FROM delay_aggregates WHERE window_end <= `+ts+` AND window_end > '`+
		caught.watermark.UTC().Format(time.RFC3339Nano)+`')`, &left, &partialsLeft, &finalOfFirst)
	if left != 0 || partialsLeft != 0 || finalOfFirst != caught.windows {
		t.Errorf("the %d windows provisional after the first half: %d provisional rows and %d provisional partials left, %d windows merged",
			caught.windows, left, partialsLeft, finalOfFirst)
	}
	t.Logf("%d records; %d windows went from provisional to merged; %d provisional rows in %d windows at the end",
		n, finalOfFirst, end.rows, end.windows)

	// Rollups over the same records: every record is read and in a
	// provisional write or merged, and the feed is quiet, so the view holds
	// every event once.
	harness.ExecSQL(t, db, `CREATE TABLE oracle_events AS
		SELECT (j->>'event_time')::timestamptz AS at, (j->>'delay_s')::float8 AS d,
		       j->>'line' AS line, j->>'stop_id' AS stop, j->>'operator' AS op
		FROM (SELECT convert_from(m.value, 'UTF8')::jsonb AS j FROM oracle_msgs m
		      WHERE m.topic = 'arrival_predictions' AND NOT EXISTS (SELECT 1 FROM dead_letters d
		          WHERE d.topic = m.topic AND d.partition = m.partition AND d."offset" = m."offset")) AS ok`)
	from, to := "2016-05-18T00:00:00Z", "2016-05-20T00:00:00Z"
	quantiles := []float64{0.5, 0.9, 0.99}
	oracle := func(where string) map[harness.GroupKey]harness.Stats {
		return harness.QueryRollup(t, db, `SELECT date_trunc('hour', at, $1), line, count(*), avg(d), min(d), max(d),
			percentile_cont($2::float8[]) WITHIN GROUP (ORDER BY d) FROM oracle_events WHERE `+where+` GROUP BY 1, 2`,
			harness.RollupTZ, quantiles)
	}
	rollup := func(open bool) map[harness.GroupKey]harness.Stats {
		return harness.QueryRollup(t, db, `SELECT bucket_start, dimension_id, event_count, mean_delay_s, min_delay_s, max_delay_s,
			delay_quantiles FROM ovs_rollup('ovstream', 'line', $1::timestamptz, $2::timestamptz, bucket => '1 hour',
			quantiles => $3::float8[], tz => $4, include_open => $5)`, from, to, quantiles, harness.RollupTZ, open)
	}
	all, final := oracle("true"), oracle("to_timestamp(floor(extract(epoch FROM at) / 300) * 300 + 300) <= '"+frontier+"'")
	var beyond int
	for _, c := range []struct {
		what      string
		got, want map[harness.GroupKey]harness.Stats
	}{
		{"ovs_rollup include_open", rollup(true), all},
		{"ovs_rollup (final rows)", rollup(false), final},
		{"report --include-open", reportRollup(t, db, "--dimension", "line", "--from", from, "--to", to, "--bucket", "hour",
			"--tz", harness.RollupTZ, "--quantiles", "0.5,0.9,0.99", "--include-open"), all},
	} {
		_, b, _ := compareRollups(t, c.what, c.got, c.want)
		beyond += b
	}
	if beyond > 0 || len(all) == len(final) || len(final) == 0 {
		t.Errorf("rollups: %d values beyond 1e-9; %d groups over every event, %d over the final windows (want fewer, not none)",
			beyond, len(all), len(final))
	}
	var events int64
	for _, s := range all {
		events += s.Count
	}
	t.Logf("rollups per hour and line: %d groups, %d events with the open windows; %d groups over the final windows",
		len(all), events, len(final))
	if slices.ContainsFunc(ps, harness.Exited) {
		t.Error("an instance exited during the test")
	}
}
