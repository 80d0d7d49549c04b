//go:build integration

package pipeline

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ovstream/ovstream/integration/harness"
)

var rollupArchive = flag.String("rollup.archive", "../../testdata/auckland-20160518-2h.tar.gz",
	"TestRollupEqualsSQLOracle: GTFS-realtime TripUpdates archive (.tar.gz or .tar.xz); the 48 h one is "+
		"../../../shared/data/auckland-20160519-48h-tripupdates-pb.tar.xz")

// rollupQuantiles are the quantiles compared.
var rollupQuantiles = []float64{0.5, 0.9, 0.99}

// oracleRollupSQL is the rollup over the raw events of oracle_events with
// PostgreSQL's own aggregates: the buckets are calendar hours or days of each
// event's own time in rollupTZ (the 5-minute windows nest in them).
const oracleRollupSQL = `
SELECT date_trunc($1, at, $2), %s, count(*), avg(d), min(d), max(d),
	percentile_cont($3::float8[]) WITHIN GROUP (ORDER BY d)
FROM oracle_events GROUP BY 1, 2`

// The done-when of the rollups (docs/analysing.md): an Auckland
// archive produced, drained, and every rollup per hour and per day (in
// Pacific/Auckland) of every dimension, from the SQL function ovs_rollup and
// from `ovstream report --json`, equals count(*), avg, min, max and
// percentile_cont(0.5, 0.9, 0.99) over the raw events from the topic (minus
// their dead letters): 0 differences beyond 1e-9 (and the test counts how
// many are not bit-identical). Then --top/--by/--min-events against the same
// oracle, and the example queries of docs/analysing.md run and return rows.
func TestRollupEqualsSQLOracle(t *testing.T) {
	started := time.Now()
	dir := t.TempDir()
	if out, err := exec.Command("tar", "-xf", *rollupArchive, "-C", dir).CombinedOutput(); err != nil {
		t.Fatalf("tar -xf %s: %v\n%s", *rollupArchive, err, out)
	}
	addr, _ := harness.StartBrokerProcess(t, "127.0.0.1:0", "")
	harness.ProduceCLI(t, addr, "--operator", "AT", "--gtfs-rt", dir)
	db := harness.FreshDB(t)
	harness.Drain(t, db, addr, "--allowed-lateness", "10m")
	n := harness.CreateOracleEvents(t, db, addr)
	events := harness.Dump(t, db, `SELECT count(*) FROM oracle_events`)
	t.Logf("%s: %d records, %s events (records minus dead letters), drained in %v", *rollupArchive, n, events[0],
		time.Since(started).Round(time.Second))

	from, to := "2016-05-01T00:00:00+12:00", "2016-06-01T00:00:00+12:00"
	dims := map[string]string{"line": "line", "station": "stop", "operator": "op", "network": "'all'"}
	var groups, compared, beyond, notBitIdentical int
	for _, bucket := range []string{"hour", "day"} {
		for _, dim := range []string{"line", "station", "operator", "network"} {
			what := dim + " per " + bucket
			t0 := time.Now()
			want := harness.QueryRollup(t, db, fmt.Sprintf(oracleRollupSQL, dims[dim]), bucket, harness.RollupTZ, rollupQuantiles)
			tOracle := time.Since(t0)
			t0 = time.Now()
			sql := harness.QueryRollup(t, db, `SELECT bucket_start, dimension_id, event_count, mean_delay_s, min_delay_s,
				max_delay_s, delay_quantiles FROM ovs_rollup('ovstream', $1, $4::timestamptz, $5::timestamptz,
				('1 ' || $6)::interval, $3::float8[], $2)`, dim, harness.RollupTZ, rollupQuantiles, from, to, bucket)
			tSQL := time.Since(t0)
			t0 = time.Now()
			rep := reportRollup(t, db, "--dimension", dim, "--from", from, "--to", to, "--bucket", bucket,
				"--tz", harness.RollupTZ, "--quantiles", "0.5,0.9,0.99")
			tReport := time.Since(t0)
			if len(want) == 0 {
				t.Fatalf("%s: the oracle has no groups", what)
			}
			for _, got := range []struct {
				name string
				rows map[harness.GroupKey]harness.Stats
			}{{"ovs_rollup", sql}, {"report", rep}} {
				c, b, nb := compareRollups(t, what+" "+got.name, got.rows, want)
				compared, beyond, notBitIdentical = compared+c, beyond+b, notBitIdentical+nb
			}
			groups += len(want)
			t.Logf("%s: %d groups; oracle %v, ovs_rollup %v, report %v", what, len(want),
				tOracle.Round(time.Millisecond), tSQL.Round(time.Millisecond), tReport.Round(time.Millisecond))
		}
	}
	t.Logf("rollups: %d groups, %d values compared (ovs_rollup and report, each against the oracle): %d differ by more than 1e-9, %d are not bit-identical",
		groups, compared, beyond, notBitIdentical)
	if beyond > 0 {
		t.Errorf("%d values differ from the oracle by more than 1e-9", beyond)
	}

	// --top/--by/--min-events: the five lines with the highest P90 per day
	// among those with at least 50 events, against the oracle ranked here.
	oracle := harness.QueryRollup(t, db, fmt.Sprintf(oracleRollupSQL, "line"), "day", harness.RollupTZ, rollupQuantiles)
	wantTop := topOf(oracle, 50, 4, 5) // vals[4]: p90
	gotTop := reportRows(t, db, "--dimension", "line", "--from", from, "--to", to, "--bucket", "day",
		"--tz", harness.RollupTZ, "--min-events", "50", "--by", "p90", "--top", "5", "--csv")
	harness.SameRows(t, "report --top 5 --by p90 --min-events 50 vs the oracle ranked", gotTop, wantTop)
	if len(gotTop) == 0 {
		t.Fatal("no top lines")
	}

	checkDocQueries(t, db)
	harness.CheckGrafanaSQL(t, db)
	t.Logf("done in %v", time.Since(started).Round(time.Second))
}

// reportRollup runs `ovstream report --json` and returns its rows by group.
func reportRollup(t *testing.T, db string, args ...string) map[harness.GroupKey]harness.Stats {
	t.Helper()
	var doc struct {
		Rows []map[string]any `json:"rows"`
	}
	out := harness.Report(t, db, append(args, "--json")...)
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("report --json: %v\n%s", err, out)
	}
	res := map[harness.GroupKey]harness.Stats{}
	num := func(r map[string]any, k string) float64 {
		f, err := r[k].(json.Number).Float64()
		if err != nil {
			t.Fatalf("report --json: %s of %v: %v", k, r, err)
		}
		return f
	}
	for _, r := range doc.Rows {
		b, err := time.Parse(time.RFC3339, r["bucket_start"].(string))
		if err != nil {
			t.Fatal(err)
		}
		n, _ := r["events"].(json.Number).Int64()
		res[harness.GroupKey{Bucket: b.Unix(), Id: r["id"].(string)}] = harness.Stats{Count: n, Vals: []float64{num(r, "mean"), num(r, "min"), num(r, "max"),
			num(r, "p50"), num(r, "p90"), num(r, "p99")}}
	}
	return res
}

// reportRows runs `ovstream report --csv` and returns its rows without the
// header, each as "[bucket id events p90]" with the bucket in Unix seconds.
func reportRows(t *testing.T, db string, args ...string) []string {
	t.Helper()
	recs, err := csv.NewReader(bytes.NewReader(harness.Report(t, db, args...))).ReadAll()
	if err != nil || len(recs) == 0 || recs[0][0] != "bucket_start" || recs[0][2] != "name" || recs[0][8] != "p90" {
		t.Fatalf("report --csv: %v, no header bucket_start,ID,name,events,mean,min,max,p50,p90: %q", err, recs)
	}
	var out []string
	for _, f := range recs[1:] {
		b, err := time.Parse(time.RFC3339, f[0])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("[%d %s %s %s]", b.Unix(), f[1], f[3], f[8]))
	}
	return out
}

// topOf ranks the groups of each bucket with at least minEvents events by
// vals[by], greatest first (ties by id), and keeps top, formatted as
// reportRows formats them.
func topOf(rows map[harness.GroupKey]harness.Stats, minEvents int64, by, top int) []string {
	perBucket := map[int64][]harness.GroupKey{}
	for k, s := range rows {
		if s.Count >= minEvents {
			perBucket[k.Bucket] = append(perBucket[k.Bucket], k)
		}
	}
	var out []string
	for b, ks := range perBucket {
		sort.Slice(ks, func(i, j int) bool {
			vi, vj := rows[ks[i]].Vals[by], rows[ks[j]].Vals[by]
			if vi != vj {
				return vi > vj
			}
			return ks[i].Id < ks[j].Id
		})
		for _, k := range ks[:min(top, len(ks))] {
			s := rows[k]
			out = append(out, fmt.Sprintf("[%d %s %d %s]", b, k.Id, s.Count, strconv.FormatFloat(s.Vals[by], 'g', -1, 64)))
		}
	}
	return out
}

// compareRollups compares got with the oracle want, group by group: the same
// groups, the same counts, and each statistic within 1e-9. It returns the
// values compared, those beyond 1e-9, and those not bit-identical.
func compareRollups(t *testing.T, what string, got, want map[harness.GroupKey]harness.Stats) (compared, beyond, notBitIdentical int) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d groups, the oracle has %d", what, len(got), len(want))
	}
	shown := 0
	for k, w := range want {
		g, ok := got[k]
		if !ok || g.Count != w.Count || len(g.Vals) != len(w.Vals) {
			t.Errorf("%s: group %v: %+v, oracle %+v", what, k, g, w)
			beyond++
			continue
		}
		for i := range w.Vals {
			compared++
			if math.Float64bits(g.Vals[i]) != math.Float64bits(w.Vals[i]) {
				notBitIdentical++
			}
			if math.Abs(g.Vals[i]-w.Vals[i]) > 1e-9 || math.IsNaN(g.Vals[i]) {
				beyond++
				if shown++; shown <= 5 {
					t.Errorf("%s: group %v value %d: %v, oracle %v", what, k, i, g.Vals[i], w.Vals[i])
				}
			}
		}
	}
	return compared, beyond, notBitIdentical
}

// readmeNow stands for now() in the example queries of docs/analysing.md: a moment just
// after the Auckland samples (2016-05-19 08:00-10:00 in Auckland for the 2 h
// slice), so that "today", "this week" and "this month" hold their data.
const readmeNow = `'2016-05-19 10:30:00+12'::timestamptz`

// checkDocQueries runs every SQL example of docs/analysing.md ("Analysing
// the numbers", up to "On-time performance and headways": those read stop
// visits, which the Auckland samples have none of; docVisitQueries checks
// them) on db, with now() replaced by readmeNow, and requires each to
// return rows.
func checkDocQueries(t *testing.T, db string) {
	t.Helper()
	b, err := os.ReadFile("../../docs/analysing.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "# Analysing the numbers\n")
	if !ok {
		t.Fatal(`docs/analysing.md has no "# Analysing the numbers" heading`)
	}
	// The sections of accuracy and of on-time performance read stop
	// visits, which this sample has none of: TestAccuracyEqualsPythonOracle
	// and the visit KPI tests run their examples.
	section, _, _ = strings.Cut(section, accuracyHeading)
	section, _, _ = strings.Cut(section, visitKPIHeading)
	var queries []string
	for _, block := range strings.Split(section, "```sql\n")[1:] {
		sql, _, _ := strings.Cut(block, "```")
		queries = append(queries, sql)
	}
	if len(queries) < 5 {
		t.Fatalf("docs/analysing.md has %d SQL examples, want 5", len(queries))
	}
	for i, q := range queries {
		rows := harness.Dump(t, db, strings.ReplaceAll(q, "now()", readmeNow))
		if len(rows) == 0 {
			t.Errorf("docs/analysing.md example %d returns no rows:\n%s", i+1, q)
			continue
		}
		t.Logf("docs/analysing.md example %d: %d rows, first %s", i+1, len(rows), rows[0])
	}
}

// `report` exits 2 on bad flags (before it connects), of every metric,
// with a message naming the flag; 0 on --help.
func TestReportFlags(t *testing.T) {
	base := []string{"report", "--database-url", "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=1",
		"--from", "2016-05-19", "--to", "2016-05-20"}
	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"report", "--help"}, 0, "Usage:\n  ovstream report"},
		{[]string{"report"}, 2, "--from and --to are required"},
		{append(base, "--dimension", "route"), 2, `dimension "route"`},
		{append(base, "--bucket", "fortnight"), 2, "--bucket"},
		{append(base, "--quantiles", "0.5,1.5"), 2, "--quantiles"},
		{append(base, "--metric", "speed"), 2, `--metric "speed": want delay, on-time, headway or accuracy`},
		{append(base, "--metric", "accuracy", "--bands", "0-3m:-30s..90s,4m-6m:-1m..1m"), 2, "--bands: band 2 starts at 240s"},
		{append(base, "--metric", "accuracy", "--bucket", "hour"), 2, "--bucket applies to --metric delay or on-time or headway only"},
		{append(base, "--tz", "Mars/Olympus"), 2, "--tz"},
		{append(base, "--by", "p95"), 2, `by "p95"`},
		{append(base, "--top", "3"), 2, "top needs by"},
		{append(base, "--json", "--csv"), 2, "choose one"},
		{append(base, "--from", "yesterday"), 2, "--from"},
		{append(base, "--to", "2016-05-18"), 2, "want from < to"},
		{append(base, "--no-such-flag"), 2, "unknown flag: --no-such-flag"},
		{append(base, "--metric", "punctuality"), 2, `--metric "punctuality": want delay, on-time, headway or accuracy`},
		{append(base, "--metric", "on-time", "--on-time", "swiss"), 2, `--on-time: on-time definition "swiss"`},
		{append(base, "--metric", "on-time", "--on-time", "-30,180"), 2, "EARLY,LATE in seconds"},
		{append(base, "--metric", "on-time", "--quantiles", "0.9"), 2, "--quantiles applies to --metric delay or accuracy only"},
		{append(base, "--metric", "headway", "--include-open"), 2, "--include-open applies to --metric delay only"},
		{append(base, "--metric", "headway", "--wait-tolerance", "-0.1"), 2, "wait tolerance -0.1"},
		{append(base, "--metric", "headway", "--wait-tolerance", "1e308"), 2, "wait tolerance 1e+308: want a number from 0 to 10"},
		{append(base, "--metric", "headway", "--bucket", "fortnight"), 2, "or service-day"},
		{append(base, "--metric", "on-time", "--dimension", "route"), 2, `dimension "route"`},
		{append(base, "--on-time", "crow"), 2, "--on-time applies to --metric on-time only"},
		{append(base, "--metric", "on-time", "--wait-tolerance", "0.5"), 2, "--wait-tolerance applies to --metric headway only"},
		{append(base, "--bucket", "service-day"), 2, "--bucket"},
		{base, 1, "ovstream report:"}, // good flags, no database there
		{append(base, "--metric", "headway", "--bucket", "service-day"), 1, "ovstream report:"},
	} {
		p := harness.StartOvstream(t, nil, tc.args...)
		if code := p.Wait(t, time.Minute); code != tc.code || !strings.Contains(p.Output(), tc.says) {
			t.Errorf("%v: exit %d, want %d with %q:\n%s", tc.args[1:], code, tc.code, tc.says, p.Output())
		}
	}
}
