//go:build integration

package dashboard

import (
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ovstream/ovstream/integration/harness"
)

// dashboardArchive is the sample the dashboard tests show: the 2 h of
// Auckland morning peak (2016-05-19 07:00-09:04 in Auckland).
const dashboardArchive = "../../testdata/auckland-20160518-2h.tar.gz"

// dashboardBad are records no run can decode: 3 before the drain (dead
// letters), 4 after it (the lag the health page must show).
var dashboardBad = []string{"not json 1", "not json 2", `{"trip_id": 7}`, "late 1", "late 2", "late 3", "late 4"}

// The dashboard in a real browser (headless Chromium, one for every page),
// against the Auckland sample drained from the embedded broker. On each
// page the numbers shown equal the SQL oracle over the raw events of the
// topic (percentile_cont(0.5, 0.9), avg, max, count per group; exactly, in
// each cell's data-v, and to 0.1 s in its text) and the chart holds the same
// series and drew them (pixels of each series' colour):
//   - delay over time (15-minute buckets) and its default view;
//   - the most delayed lines (min. 100 events) and stations (min. 20) of
//     2016-05-19 in Auckland, ranked by P90, labelled by their ids alone
//     (the sample has no names);
//   - the busiest line (the default) by hour of day;
//   - health under `serve --brokers`: lag 4 (records produced after the
//     drain) per partition as Kafka's high water minus the stored offset,
//     the watermark = the end of the last window written, the last commit =
//     the newest stored position, dead letters 3 decode;
//   - the same pages under `run --metrics-addr` at /dashboard/: the health
//     page shows the run's own state, and lag 0 and 7 dead letters once it
//     consumed the 4 records;
//   - names of lines and stations on the Halifax sample produced with its
//     static feed (checkDashboardNames).
//
// With -dashboard.screenshots DIR (make screenshots) it writes a PNG of
// each page.
func TestDashboard(t *testing.T) {
	started := time.Now()
	bro := harness.NewBrowser(t) // first: a missing Chromium fails at once
	dir := harness.ExtractTarGz(t, dashboardArchive)
	addr, _ := harness.StartBrokerProcess(t, "127.0.0.1:0", "")
	harness.ProduceCLI(t, addr, "--operator", "AT", "--gtfs-rt", dir)
	harness.ProduceLines(t, addr, harness.PredictionsTopic, dashboardBad[:3]...)
	db := harness.FreshDB(t)
	harness.Drain(t, db, addr)
	harness.CreateOracleEvents(t, db, addr)
	harness.ProduceLines(t, addr, harness.PredictionsTopic, dashboardBad[3:]...)
	t.Logf("sample drained in %v", time.Since(started).Round(time.Millisecond))

	srv := harness.StartOvstream(t, nil, "serve", "--database-url", db, "--addr", "127.0.0.1:0", "--pipeline", "ovstream",
		"--tz", harness.RollupTZ, "--brokers", addr)
	base := harness.Printed(t, srv, regexp.MustCompile(`dashboard of pipeline ovstream: (http://[0-9.:]+/)`))
	q := url.Values{"tz": {harness.RollupTZ}}

	// (a) The network's delay per 15 minutes from 07:00 to 09:00.
	from, to := "2016-05-19T07:00:00+12:00", "2016-05-19T09:00:00+12:00"
	want := harness.QueryRollup(t, db, `SELECT date_bin('15 minutes', at, $1::timestamptz), 'all', count(*), avg(d), min(d), max(d),
		percentile_cont('{0.5,0.9}'::float8[]) WITHIN GROUP (ORDER BY d)
		FROM oracle_events WHERE at >= $1::timestamptz AND at < $2::timestamptz GROUP BY 1`, from, to)
	bro.Open(t, base+"delay?"+with(q, "from", "2016-05-19T07:00", "to", "2016-05-19T09:00", "bucket", "15m"))
	rows := tableRows(t, bro, "delay-table")
	got := byTime(t, rows)
	checkShown(t, "delay per 15 minutes", got, want)
	keys := sortedKeys(want)
	if len(keys) != 8 {
		t.Errorf("the oracle has %d buckets of 15 minutes from 07:00 to 09:00, want 8", len(keys))
	}
	checkChart(t, bro, "delay", []string{"P90 (s)", "P50 (s)", "mean (s)"}, keys, want, 4, 3, 0)
	bro.Screenshot(t, "delay")

	// The default view: the pipeline's windows (06:55-09:05) in 5-minute buckets.
	bro.Open(t, base)
	def := harness.QueryRollup(t, db, `SELECT to_timestamp(floor(extract(epoch FROM at) / 300) * 300), 'all', count(*), avg(d), min(d), max(d),
		percentile_cont('{0.5,0.9}'::float8[]) WITHIN GROUP (ORDER BY d) FROM oracle_events GROUP BY 1`)
	checkShown(t, "delay, default view", byTime(t, tableRows(t, bro, "delay-table")), def)
	checkChart(t, bro, "delay", []string{"P90 (s)", "P50 (s)", "mean (s)"}, sortedKeys(def), def, 4, 3, 0)

	// (b) The most delayed lines and stations of the day, by P90.
	for _, tc := range []struct {
		dim, col  string
		minEvents int64
		top       int
	}{{"line", "line", 100, 10}, {"station", "stop", 20, 15}} {
		all := harness.QueryRollup(t, db, fmt.Sprintf(`SELECT date_trunc('day', at, $1), %s, count(*), avg(d), min(d), max(d),
			percentile_cont('{0.5,0.9}'::float8[]) WITHIN GROUP (ORDER BY d) FROM oracle_events GROUP BY 1, 2`, tc.col), harness.RollupTZ)
		ranked := rankByP90(all, tc.minEvents, tc.top)
		bro.Open(t, base+"top?"+with(q, "day", "2016-05-19", "dimension", tc.dim,
			"min_events", strconv.FormatInt(tc.minEvents, 10), "top", strconv.Itoa(tc.top)))
		rows := tableRows(t, bro, "top-table")
		if len(rows) != len(ranked) || len(ranked) != tc.top {
			t.Fatalf("top %ss: the page ranks %d, the oracle %d (want %d)", tc.dim, len(rows), len(ranked), tc.top)
		}
		p90s := make(map[harness.GroupKey]harness.Stats)
		var ids []harness.GroupKey
		labels := chartLabels(t, bro, "top-chart")
		api := harness.Eval[[]apiNames](t, bro, `window.ovs.data.rows`)
		for i, r := range rows {
			w := ranked[i]
			if r[0].Text != strconv.Itoa(i+1) || r[1].Text != w.Id {
				t.Errorf("top %ss: rank %d is %q, the oracle ranks %q there", tc.dim, i+1, r[1].Text, w.Id)
			}
			// The Auckland sample has no names: none is made up.
			if i >= len(labels) || labels[i].Text != w.Id || labels[i].Title != w.Id ||
				i >= len(api) || api[i].Name != nil || api[i].ShortName != nil {
				t.Errorf("top %s %s has no name, the page names it: labels %+v, api %+v", tc.dim, w.Id, labels, api)
			}
			checkCells(t, fmt.Sprintf("top %s %s", tc.dim, w.Id), r[2:], all[w])
			k := harness.GroupKey{Bucket: int64(i), Id: w.Id}
			ids, p90s[k] = append(ids, k), all[w]
		}
		if h := harness.Eval[[]string](t, bro, `[...document.querySelectorAll("#top-table th")].map(th => th.textContent)`); slices.Contains(h, "name") {
			t.Errorf("top %ss: a name column, and no id has a name: %q", tc.dim, h)
		}
		checkChart(t, bro, "top", []string{"P90 (s)", "P50 (s)", "mean (s)"}, ids, p90s, 4, 3, 0)
		bro.Screenshot(t, "top-"+tc.dim+"s")
	}

	// (c) The busiest line (the page's default) by hour of day.
	busiest := strings.Trim(harness.Dump(t, db, `SELECT line FROM oracle_events GROUP BY line ORDER BY count(*) DESC, line LIMIT 1`)[0], "[]")
	hours := harness.QueryRollup(t, db, `SELECT to_timestamp(extract(hour FROM at AT TIME ZONE $1)), line, count(*), avg(d), min(d), max(d),
		percentile_cont('{0.5,0.9}'::float8[]) WITHIN GROUP (ORDER BY d) FROM oracle_events WHERE line = $2 GROUP BY 1, 2`,
		harness.RollupTZ, busiest)
	bro.Open(t, base+"line?"+with(q, "from", "2016-05-19", "to", "2016-05-20"))
	if sel := harness.Eval[string](t, bro, `document.querySelector("select[name=line]").value`); sel != busiest {
		t.Errorf("line page: the default line is %q, the busiest is %q", sel, busiest)
	}
	got = map[harness.GroupKey][]cell{}
	for _, r := range tableRows(t, bro, "line-table") {
		h, err := strconv.Atoi(strings.TrimSuffix(r[0].Text, ":00"))
		if err != nil {
			t.Fatalf("line page: hour %q", r[0].Text)
		}
		got[harness.GroupKey{Bucket: int64(h), Id: busiest}] = r[1:]
	}
	checkShown(t, "line "+busiest+" by hour", got, hours)
	if len(hours) != 4 {
		t.Errorf("the oracle has %d hours (06, 07, 08, 09), want 4", len(hours))
	}
	lc := chart(t, bro, "line")
	for _, k := range sortedKeys(hours) { // the chart's x runs over the 24 hours
		if v := lc.Data[1][k.Bucket]; v == nil || *v != hours[k].Vals[4] {
			t.Errorf("line chart: P90 at hour %d is %v, the oracle %v", k.Bucket, v, hours[k].Vals[4])
		}
	}
	checkDrawn(t, "line", lc, 3)
	bro.Screenshot(t, "line")

	// (d) Health under serve --brokers.
	bro.Open(t, base+"health?"+q.Encode())
	stored := harness.StoredOffsets(t, db, "ovstream", "next_offset")
	hw := harness.HighWaters(t, addr, nil, harness.PredictionsTopic, harness.PositionsTopic)
	var wantLag int64
	for p, h := range hw {
		wantLag += h - stored[p]
	}
	if wantLag != 4 {
		t.Errorf("high water minus stored offsets: %d, want the 4 records produced after the drain", wantLag)
	}
	checkCard(t, bro, "h-lag", "4", "4")
	lagRows := tableRows(t, bro, "lag-table")
	if len(lagRows) != len(hw) {
		t.Errorf("health: %d partitions in the lag table, Kafka has %d", len(lagRows), len(hw))
	}
	for _, r := range lagRows {
		h, ok := hw[r[0].Text]
		if !ok || r[1].Text != strconv.FormatInt(stored[r[0].Text], 10) || r[2].Text != strconv.FormatInt(h, 10) ||
			r[3].Text != strconv.FormatInt(h-stored[r[0].Text], 10) {
			t.Errorf("health: lag row %v; stored %d, high water %d", r, stored[r[0].Text], h)
		}
	}
	checkDrawn(t, "lag", chart(t, bro, "lag"), 1)
	var wm, lastCommit time.Time
	harness.SqlRow(t, db, `SELECT (SELECT max(window_end) FROM delay_aggregates WHERE pipeline = 'ovstream'),
		(SELECT max(updated_at) FROM stream_positions WHERE pipeline = 'ovstream')`, &wm, &lastCommit)
	checkTimeCard(t, bro, "h-watermark", wm)
	checkTimeCard(t, bro, "h-newest", wm)
	checkTimeCard(t, bro, "h-commit", lastCommit)
	checkCard(t, bro, "h-merge", "0", "0")
	checkCard(t, bro, "h-dead", "3", "3")
	if dl := tableRows(t, bro, "dead-table"); len(dl) != 1 || dl[0][0].Text != "decode" || dl[0][1].Text != "3" {
		t.Errorf("health: dead letters %v, want decode 3", dl)
	}
	dc := chart(t, bro, "dead")
	if len(dc.Data) != 2 || len(dc.Data[1]) != 1 || dc.Data[1][0] == nil || *dc.Data[1][0] != 3 {
		t.Errorf("health: dead letter chart data %v, want [3]", dc.Data)
	}
	checkDrawn(t, "dead", dc, 1)
	if n := harness.Eval[int](t, bro, `document.querySelectorAll("#run").length`); n != 0 {
		t.Error("health under serve shows a running instance's section")
	}
	checkCard(t, bro, "h-fresh", "0.0 s", "0") // no instance runs
	checkFreshCard(t, bro, db, base+"health?"+q.Encode())
	bro.Screenshot(t, "health")

	// The same pages under run --metrics-addr, at /dashboard/: its own
	// pipeline's health comes from the run itself.
	run := harness.StartOvstream(t, nil, harness.RunArgs(db, addr, "--pipeline", "ovstream", "--metrics-addr", "127.0.0.1:0")...)
	ops := harness.OpsAddr(t, run)
	waitHealth(t, "http://"+ops+"/dashboard/api/health", func(h healthDoc) bool {
		return h.Run != nil && h.Run.Assigned && h.Run.LastCommit != "" && h.Lag.Total != nil && *h.Lag.Total == 0 &&
			h.deadLetters() == 7
	})
	bro.Open(t, "http://"+ops+"/dashboard/health?"+q.Encode())
	checkCard(t, bro, "h-lag", "0", "0")
	checkCard(t, bro, "h-dead", "7", "7")
	if title := harness.Eval[string](t, bro, `document.getElementById("run-title").textContent`); !strings.HasPrefix(title, "This instance: ") {
		t.Errorf("health under run: no section of the instance (%q)", title)
	}
	if s := harness.Eval[string](t, bro, `document.querySelector("#r-state .v").textContent`); s != "running" {
		t.Errorf("health under run: state %q, want running", s)
	}
	if s := harness.Eval[string](t, bro, `document.querySelector("#r-commit .v").dataset.v || ""`); s == "" {
		t.Error("health under run: no last commit of the instance")
	}
	if n := len(tableRows(t, bro, "lag-table")); n != len(hw) {
		t.Errorf("health under run: %d partitions in the lag table, want %d", n, len(hw))
	}
	bro.Screenshot(t, "health-run")
	bro.Open(t, "http://"+ops+"/dashboard/delay?"+with(q, "from", "2016-05-19T07:00", "to", "2016-05-19T09:00", "bucket", "15m"))
	checkShown(t, "delay under run", byTime(t, tableRows(t, bro, "delay-table")), want)
	checkChart(t, bro, "delay", []string{"P90 (s)", "P50 (s)", "mean (s)"}, keys, want, 4, 3, 0)
	if err := run.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := run.Wait(t, time.Minute); code != 0 {
		t.Errorf("run exited %d after SIGTERM:\n%s", code, run.Output())
	}

	// (e) Names of lines and stations, on the Halifax sample with its static feed.
	checkDashboardNames(t, bro, db, base)
	t.Logf("done in %v", time.Since(started).Round(time.Millisecond))
}

// with returns q plus the pairs kv, encoded.
func with(q url.Values, kv ...string) string {
	v := url.Values{}
	for k, vs := range q {
		v[k] = vs
	}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Set(kv[i], kv[i+1])
	}
	return v.Encode()
}

// byTime keys table rows whose first cell is a bucket start in rollupTZ
// ("2016-05-19 07:15:00") by its Unix seconds; the rest are the statistics.
func byTime(t *testing.T, rows [][]cell) map[harness.GroupKey][]cell {
	t.Helper()
	loc, err := time.LoadLocation(harness.RollupTZ)
	if err != nil {
		t.Fatal(err)
	}
	out := map[harness.GroupKey][]cell{}
	for _, r := range rows {
		at, err := time.ParseInLocation(time.DateTime, r[0].Text, loc)
		if err != nil {
			t.Fatalf("bucket start %q: %v", r[0].Text, err)
		}
		out[harness.GroupKey{Bucket: at.Unix(), Id: "all"}] = r[1:]
	}
	return out
}

func sortedKeys(m map[harness.GroupKey]harness.Stats) []harness.GroupKey {
	ks := make([]harness.GroupKey, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool {
		if ks[i].Bucket != ks[j].Bucket {
			return ks[i].Bucket < ks[j].Bucket
		}
		return ks[i].Id < ks[j].Id
	})
	return ks
}

// checkShown compares the rows a page shows with the oracle: the same groups,
// and each row's cells (checkCells).
func checkShown(t *testing.T, what string, got map[harness.GroupKey][]cell, want map[harness.GroupKey]harness.Stats) {
	t.Helper()
	if len(got) != len(want) || len(want) == 0 {
		t.Errorf("%s: the page shows %d rows, the oracle has %d", what, len(got), len(want))
	}
	for k, w := range want {
		c, ok := got[k]
		if !ok {
			t.Errorf("%s: the page has no row %v", what, k)
			continue
		}
		checkCells(t, fmt.Sprintf("%s %v", what, k), c, w)
	}
}

// checkCells compares the cells events, mean, P50, P90, max with the
// oracle's count and vals (mean, min, max, p50, p90): exact in data-v, and
// to 0.1 s in the text.
func checkCells(t *testing.T, what string, c []cell, w harness.Stats) {
	t.Helper()
	if len(c) != 5 {
		t.Fatalf("%s: %d cells, want events, mean, P50, P90, max", what, len(c))
	}
	if c[0].V != strconv.FormatInt(w.Count, 10) || c[0].Text != c[0].V {
		t.Errorf("%s: events %q (data-v %q), the oracle %d", what, c[0].Text, c[0].V, w.Count)
	}
	for i, name := range []string{"mean", "P50", "P90", "max"} {
		want := w.Vals[[]int{0, 3, 4, 2}[i]]
		exact, err1 := strconv.ParseFloat(c[i+1].V, 64)
		shown, err2 := strconv.ParseFloat(c[i+1].Text, 64)
		if err1 != nil || err2 != nil || math.Abs(exact-want) > 1e-9 || math.Abs(shown-want) > 0.05+1e-9 {
			t.Errorf("%s: %s shown %q, exact %q; the oracle %v", what, name, c[i+1].Text, c[i+1].V, want)
		}
	}
}

// checkChart checks a chart: its series labels, one point per oracle group
// in keys' order, series valIdx[j] of each (indexes into stats.vals), and
// that each series was drawn.
func checkChart(t *testing.T, b *harness.Browser, name string, series []string, keys []harness.GroupKey, want map[harness.GroupKey]harness.Stats, valIdx ...int) {
	t.Helper()
	c := chart(t, b, name)
	if !c.Found || strings.Join(c.Series[1:], ",") != strings.Join(series, ",") || c.Legend != len(series)+1 {
		t.Fatalf("chart %s: found %v, series %q, %d legend rows; want %q", name, c.Found, c.Series, c.Legend, series)
	}
	for j, vi := range valIdx {
		var pts []float64
		for _, v := range c.Data[j+1] {
			if v != nil {
				pts = append(pts, *v)
			}
		}
		if len(pts) != len(keys) {
			t.Errorf("chart %s: series %s has %d points, the oracle %d", name, series[j], len(pts), len(keys))
			continue
		}
		for i, k := range keys {
			if math.Abs(pts[i]-want[k].Vals[vi]) > 1e-9 {
				t.Errorf("chart %s: series %s point %d (%v) is %v, the oracle %v", name, series[j], i, k, pts[i], want[k].Vals[vi])
			}
		}
	}
	checkDrawn(t, name, c, len(series))
}

// checkDrawn requires a canvas, labelled axes and, for each of the chart's n
// series, pixels of its colour.
func checkDrawn(t *testing.T, name string, c chartInfo, n int) {
	t.Helper()
	if !c.Found || !c.Canvas || len(c.Painted) != n {
		t.Fatalf("chart %s: found %v, canvas %v, %d series drawn, want %d", name, c.Found, c.Canvas, len(c.Painted), n)
	}
	for i, px := range c.Painted {
		if px < 20 {
			t.Errorf("chart %s: series %q has %d pixels of its colour: not drawn", name, c.Series[i+1], px)
		}
	}
	if len(c.Labels) < 2 || c.Labels[0] == "" || c.Labels[1] == "" {
		t.Errorf("chart %s: axis labels %q", name, c.Labels)
	}
}

// rankByP90 ranks the oracle's groups with at least minEvents events by
// P90 (vals[4]), greatest first, ties by id, and keeps top.
func rankByP90(rows map[harness.GroupKey]harness.Stats, minEvents int64, top int) []harness.GroupKey {
	var out []harness.GroupKey
	for k, s := range rows {
		if s.Count >= minEvents {
			out = append(out, k)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := rows[out[i]].Vals[4], rows[out[j]].Vals[4]
		if a != b {
			return a > b
		}
		return out[i].Id < out[j].Id
	})
	return out[:min(top, len(out))]
}

// checkCard checks a health card's text and data-v.
func checkCard(t *testing.T, b *harness.Browser, id, text, v string) {
	t.Helper()
	got := harness.Eval[cell](t, b, fmt.Sprintf(`(() => { const e = document.querySelector("#%s .v");
		return e ? {text: e.textContent, v: e.dataset.v ?? ""} : {text: "(none)", v: ""}; })()`, id))
	if got.Text != text || got.V != v {
		t.Errorf("health card %s: %q (data-v %q), want %q (%q)", id, got.Text, got.V, text, v)
	}
}

// checkFreshCard checks the freshness card against pipeline_instances: an
// instance row whose closable_since is 90 s before the database's now() (as
// a heartbeat of a run holding a closable window writes it) shows an age
// between 90 s and 90 s plus the time the page took to load, by the
// database's clock, and the closable time to the second in the page's time
// zone; the row is deleted afterwards.
func checkFreshCard(t *testing.T, b *harness.Browser, db, page string) {
	t.Helper()
	var since time.Time
	harness.SqlRow(t, db, `INSERT INTO pipeline_instances (pipeline, owner, role, partitions, closable_since)
		VALUES ('ovstream', 'fresh@test', 'active', '{arrival_predictions/0}', now() - interval '90 seconds')
		RETURNING closable_since`, &since)
	defer harness.ExecSQL(t, db, `DELETE FROM pipeline_instances WHERE owner = 'fresh@test'`)
	b.Open(t, page)
	var upper float64
	harness.SqlRow(t, db, `SELECT extract(epoch FROM now() - closable_since)::float8 FROM pipeline_instances WHERE owner = 'fresh@test'`, &upper)
	got := harness.Eval[cell](t, b, `(() => { const e = document.querySelector("#h-fresh"); return e ?
		{text: e.querySelector(".s").textContent, v: e.querySelector(".v").dataset.v ?? ""} : {text: "(none)", v: ""}; })()`)
	age, err := strconv.ParseFloat(got.V, 64)
	loc, _ := time.LoadLocation(harness.RollupTZ)
	if wantSub := "a window closable since " + since.In(loc).Format(time.DateTime) + " is not written yet (fresh@test)"; err != nil ||
		age < 90 || age > upper || got.Text != wantSub {
		t.Errorf("health card h-fresh: age %q, %q; want an age in [90, %.3f] and %q", got.V, got.Text, upper, wantSub)
	}
}

// checkTimeCard checks that a health card shows the instant want: data-v
// (RFC 3339 in rollupTZ) to the microsecond, the text to the second.
func checkTimeCard(t *testing.T, b *harness.Browser, id string, want time.Time) {
	t.Helper()
	got := harness.Eval[cell](t, b, fmt.Sprintf(`(() => { const e = document.querySelector("#%s .v");
		return {text: e.textContent, v: e.dataset.v ?? ""}; })()`, id))
	loc, _ := time.LoadLocation(harness.RollupTZ)
	at, err := time.Parse(time.RFC3339Nano, got.V)
	if err != nil || !at.Equal(want) || got.Text != want.In(loc).Format(time.DateTime) {
		t.Errorf("health card %s: %q (data-v %q), want %s", id, got.Text, got.V, want.In(loc).Format(time.RFC3339Nano))
	}
}

// healthDoc is the part of api/health the test waits on.
type healthDoc struct {
	Lag struct {
		Total *int64 `json:"total"`
	} `json:"lag"`
	DeadLetters []struct {
		Total int64 `json:"total"`
	} `json:"dead_letters"`
	Run *struct {
		Assigned   bool   `json:"assigned"`
		LastCommit string `json:"last_commit"`
	} `json:"run"`
}

func (h healthDoc) deadLetters() (n int64) {
	for _, d := range h.DeadLetters {
		n += d.Total
	}
	return n
}

// waitHealth polls the health API until ok holds (a minute at most).
func waitHealth(t *testing.T, url string, ok func(healthDoc) bool) {
	t.Helper()
	harness.WaitFor(t, time.Minute, url+" as expected", func() bool {
		code, body := harness.HttpGet(t, url)
		var h healthDoc
		return code == 200 && json.Unmarshal([]byte(body), &h) == nil && ok(h)
	})
}
