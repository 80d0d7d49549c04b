//go:build integration

package dashboard

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ovstream/ovstream/integration/harness"
)

// onTimeOracle counts the stop visits of pipeline halifax arriving in
// [$1, $2) per group (the expression key) with CASE over delay_s: early
// below -$3, late above $4, on time between, bounds included.
const onTimeOracle = `SELECT %s, count(*), sum(CASE WHEN delay_s < -$3::float8 THEN 1 ELSE 0 END),
	sum(CASE WHEN delay_s < -$3::float8 OR delay_s > $4::float8 THEN 0 ELSE 1 END), sum(CASE WHEN delay_s > $4::float8 THEN 1 ELSE 0 END)
	FROM stop_visits WHERE pipeline = 'halifax' AND arrival_time >= $1::timestamptz AND arrival_time < $2::timestamptz GROUP BY 1`

// gapsOracle lists every gap of the visits of pipeline halifax with a
// predicted arrival in [$1, $2): per line and stop on a service day, the
// arrival minus the one before (in arrival order; ties by trip_id, then
// stop_key, bytewise) and the same of the scheduled times (arrival - delay,
// in their own order), with the line and stop of the later visit.
const gapsOracle = `WITH v AS (
	SELECT line, stop_id, start_date, trip_id COLLATE "C" AS trip, stop_key COLLATE "C" AS sk, arrival_time,
		arrival_time - make_interval(secs => delay_s) AS sched
	FROM stop_visits WHERE pipeline = 'halifax' AND arrival_predicted
), g AS (
	SELECT line, stop_id, arrival_time,
		extract(epoch FROM arrival_time - lag(arrival_time) OVER (PARTITION BY line, stop_id, start_date ORDER BY arrival_time, trip, sk))::float8 AS h,
		extract(epoch FROM sched - lag(sched) OVER (PARTITION BY line, stop_id, start_date ORDER BY sched, trip, sk))::float8 AS s
	FROM v
)
SELECT line, stop_id, h, s FROM g WHERE arrival_time >= $1::timestamptz AND arrival_time < $2::timestamptz AND (h IS NOT NULL OR s IS NOT NULL)`

// otCounts are an oracle group's visits, early, on time, late.
type otCounts [4]int64

// queryOnTime runs onTimeOracle with key.
func queryOnTime(t *testing.T, db, key string, from, to time.Time, early, late float64) map[string]otCounts {
	t.Helper()
	out := map[string]otCounts{}
	ctx := harness.TestCtx(t)
	conn := harness.Connect(t, ctx, db)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, fmt.Sprintf(onTimeOracle, key), from, to, early, late)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		var c otCounts
		if err := rows.Scan(&k, &c[0], &c[1], &c[2], &c[3]); err != nil {
			t.Fatal(err)
		}
		out[k] = c
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkOnTimeCells compares cells visits, early, on time, late, on time
// (%) with c: counts exact in text and data-v, the share exact in data-v
// and to 0.1 percentage point in the text.
func checkOnTimeCells(t *testing.T, what string, cells []cell, c otCounts) {
	t.Helper()
	if len(cells) != 5 {
		t.Fatalf("%s: %d cells, want visits, early, on time, late, on time (%%)", what, len(cells))
	}
	for i := range 4 {
		if w := strconv.FormatInt(c[i], 10); cells[i].Text != w || cells[i].V != w {
			t.Errorf("%s: column %d shows %q (data-v %q), the oracle %s", what, i, cells[i].Text, cells[i].V, w)
		}
	}
	checkShare(t, what, cells[4], float64(c[2])/float64(c[0]))
}

// checkShare compares a share cell with want: exact in data-v, as a
// percentage to 0.1 in the text.
func checkShare(t *testing.T, what string, c cell, want float64) {
	t.Helper()
	exact, err1 := strconv.ParseFloat(c.V, 64)
	shown, err2 := strconv.ParseFloat(c.Text, 64)
	if err1 != nil || err2 != nil || exact != want || math.Abs(shown-100*want) > 0.05+1e-9 {
		t.Errorf("%s: share shown %q (data-v %q), the oracle %v", what, c.Text, c.V, want)
	}
}

// checkSeconds compares a seconds cell with want (nil: none): exact in
// data-v, to 0.1 s in the text.
func checkSeconds(t *testing.T, what string, c cell, want *float64) {
	t.Helper()
	if want == nil {
		if c.Text != "–" || c.V != "" {
			t.Errorf("%s: %q (data-v %q), the oracle has none", what, c.Text, c.V)
		}
		return
	}
	exact, err1 := strconv.ParseFloat(c.V, 64)
	shown, err2 := strconv.ParseFloat(c.Text, 64)
	if err1 != nil || err2 != nil || exact != *want || math.Abs(shown-*want) > 0.05+1e-9 {
		t.Errorf("%s: shown %q (data-v %q), the oracle %v", what, c.Text, c.V, *want)
	}
}

// hwOracle is one group's gaps: the observed and the scheduled ones, and
// those assessed (both known) and within the tolerance.
type hwOracle struct {
	h, s             []float64
	assessed, within int64
}

func (o *hwOracle) stats() (n int64, mean, awt *float64, sn int64, smean, swt, excess, assess *float64) {
	sum := func(xs []float64, sq bool) float64 {
		var t float64
		for _, x := range xs {
			if sq {
				x *= x
			}
			t += x
		}
		return t
	}
	ptr := func(f float64) *float64 { return &f }
	if len(o.h) > 0 {
		mean = ptr(sum(o.h, false) / float64(len(o.h)))
		if sh := sum(o.h, false); sh != 0 {
			awt = ptr(sum(o.h, true) / (2 * sh))
		}
	}
	if len(o.s) > 0 {
		smean = ptr(sum(o.s, false) / float64(len(o.s)))
		if ss := sum(o.s, false); ss != 0 {
			swt = ptr(sum(o.s, true) / (2 * ss))
		}
	}
	if awt != nil && swt != nil {
		excess = ptr(*awt - *swt)
	}
	if o.assessed > 0 {
		assess = ptr(float64(o.within) / float64(o.assessed))
	}
	return int64(len(o.h)), mean, awt, int64(len(o.s)), smean, swt, excess, assess
}

// queryGaps groups gapsOracle's gaps by line (byStop false) or stop, and
// all of them under "all", in Go: every gap is whole seconds, so the sums
// are exact in float64.
func queryGaps(t *testing.T, db string, from, to time.Time, byStop bool, tol float64) map[string]*hwOracle {
	t.Helper()
	ctx := harness.TestCtx(t)
	conn := harness.Connect(t, ctx, db)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, gapsOracle, from, to)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]*hwOracle{}
	for rows.Next() {
		var line, stop string
		var h, s *float64
		if err := rows.Scan(&line, &stop, &h, &s); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{map[bool]string{false: line, true: stop}[byStop], "all"} {
			o := out[k]
			if o == nil {
				o = &hwOracle{}
				out[k] = o
			}
			if h != nil {
				if *h != math.Trunc(*h) {
					t.Fatalf("gap %v s is not whole seconds: the float64 sums would not be exact", *h)
				}
				o.h = append(o.h, *h)
			}
			if s != nil {
				o.s = append(o.s, *s)
			}
			if h != nil && s != nil {
				o.assessed++
				if *h <= *s*(1+tol) {
					o.within++
				}
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// The on-time and headway pages in headless Chromium on the Halifax sample
// (its realtime snapshot produced with its static feed through the embedded
// broker, drained): every number shown equals SQL written here over
// stop_visits, not the functions the pages read (ovs_on_time,
// ovs_headways):
//   - on time, North American (the default) and CROW: the cards (visits,
//     share on time, early, late); the lines with at least 20 visits,
//     least on time first (ties: more visits, then id), top 25, and the
//     bar chart's values; per hour of day of arrival in America/Halifax;
//     per service day;
//   - headways per line (default tolerance 0.25) and per station
//     (tolerance 0.5): gaps, mean headway, average wait, scheduled gaps and
//     wait, excess wait, assessed, within, wait assessment, ranked by excess
//     wait, and the cards of the network; gaps from a lag window over the
//     visits, summed in Go;
//   - bad parameters: a 400 naming the parameter, shown on the page beside
//     its form.
func TestDashboardOnTimeAndHeadwayPages(t *testing.T) {
	started := time.Now()
	bro := harness.NewBrowser(t)
	addr, _ := harness.StartBrokerProcess(t, "127.0.0.1:0", "")
	harness.ProduceCLI(t, addr, "--operator", "HFX", "--gtfs-static", harness.HalifaxStatic, "--gtfs-rt", "../../testdata/halifax-20251106")
	db := harness.FreshDB(t)
	harness.Drain(t, db, addr, "--pipeline", "halifax", "--allowed-lateness", "1h")
	srv := harness.StartOvstream(t, nil, "serve", "--database-url", db, "--addr", "127.0.0.1:0", "--pipeline", "halifax", "--tz", halifaxTZ)
	base := harness.Printed(t, srv, regexp.MustCompile(`dashboard of pipeline halifax: (http://[0-9.:]+/)`))
	loc, err := time.LoadLocation(halifaxTZ)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sample drained in %v: %v", time.Since(started).Round(time.Millisecond),
		harness.Dump(t, db, `SELECT count(*), min(start_date), max(start_date), min(arrival_time), max(arrival_time),
			count(*) FILTER (WHERE arrival_predicted) FROM stop_visits`))

	// The default range: the first service day's midnight (the newest but
	// 6 is earlier) to the midnight 2 days after the newest, in the page's zone.
	var first, last time.Time
	harness.SqlRow(t, db, `SELECT min(start_date)::timestamp, max(start_date)::timestamp FROM stop_visits WHERE pipeline = 'halifax'`, &first, &last)
	from := time.Date(first.Year(), first.Month(), first.Day(), 0, 0, 0, 0, loc)
	to := time.Date(last.Year(), last.Month(), last.Day()+2, 0, 0, 0, 0, loc)
	q := url.Values{"tz": {halifaxTZ}}

	for _, def := range []struct {
		param       string
		early, late float64
	}{{"", 60, 300}, {"crow", 30, 180}} {
		bro.Open(t, base+"ontime?"+with(q, "definition", def.param))
		var query struct {
			From, To string
			EarlyS   float64 `json:"early_s"`
			LateS    float64 `json:"late_s"`
		}
		raw := harness.Eval[string](t, bro, `JSON.stringify(window.ovs.data.query)`)
		if err := json.Unmarshal([]byte(raw), &query); err != nil {
			t.Fatal(err)
		}
		if query.From != from.Format(time.RFC3339) || query.To != to.Format(time.RFC3339) || query.EarlyS != def.early || query.LateS != def.late {
			t.Errorf("on time %q: query %s; want from %s to %s, %v s early to %v s late", def.param, raw, from.Format(time.RFC3339),
				to.Format(time.RFC3339), def.early, def.late)
		}
		what := "on time " + cmp.Or(def.param, "na")

		total := queryOnTime(t, db, "'all'", from, to, def.early, def.late)["all"]
		checkCard(t, bro, "ot-visits", strconv.FormatInt(total[0], 10), strconv.FormatInt(total[0], 10))
		checkCard(t, bro, "ot-early", strconv.FormatInt(total[1], 10), strconv.FormatInt(total[1], 10))
		checkCard(t, bro, "ot-late", strconv.FormatInt(total[3], 10), strconv.FormatInt(total[3], 10))
		share := float64(total[2]) / float64(total[0])
		checkCard(t, bro, "ot-share", fmt.Sprintf("%.1f %%", 100*share), strconv.FormatFloat(share, 'g', -1, 64))

		lines := queryOnTime(t, db, "line", from, to, def.early, def.late)
		var ranked []string
		for id, c := range lines {
			if c[0] >= 20 {
				ranked = append(ranked, id)
			}
		}
		slices.SortFunc(ranked, func(a, b string) int {
			ca, cb := lines[a], lines[b]
			return cmp.Or(cmp.Compare(float64(ca[2])/float64(ca[0]), float64(cb[2])/float64(cb[0])), cmp.Compare(cb[0], ca[0]), strings.Compare(a, b))
		})
		ranked = ranked[:min(25, len(ranked))]
		rows := tableRows(t, bro, "ontime-lines-table")
		if len(rows) != len(ranked) || len(ranked) < 10 {
			t.Fatalf("%s: the page ranks %d lines, the oracle %d (want at least 10)", what, len(rows), len(ranked))
		}
		zip := zipNames(t)["line"]
		for i, r := range rows {
			id := ranked[i]
			if r[0].Text != strconv.Itoa(i+1) || r[1].Text != id {
				t.Errorf("%s: rank %d is %q, the oracle ranks %q there", what, i+1, r[1].Text, id)
			}
			if n, ok := zip[id]; ok && r[2].Text != n.Name {
				t.Errorf("%s: line %s is named %q, routes.txt %q", what, id, r[2].Text, n.Name)
			}
			checkOnTimeCells(t, what+" line "+id, r[len(r)-5:], lines[id])
		}
		c := chart(t, bro, "ontime-lines")
		for i, id := range ranked {
			w := lines[id]
			if i >= len(c.Data[1]) || c.Data[1][i] == nil || math.Abs(*c.Data[1][i]-100*float64(w[2])/float64(w[0])) > 1e-9 {
				t.Errorf("%s: the chart's bar %d is not line %s's share %v", what, i, id, float64(w[2])/float64(w[0]))
			}
		}
		checkDrawn(t, "ontime-lines", c, 1)

		hours := queryOnTime(t, db, "extract(hour FROM arrival_time AT TIME ZONE 'America/Halifax')::int::text", from, to, def.early, def.late)
		hrows := tableRows(t, bro, "ontime-hours-table")
		if len(hrows) != len(hours) || len(hours) < 3 {
			t.Errorf("%s: %d hours shown, the oracle %d (want at least 3)", what, len(hrows), len(hours))
		}
		for _, r := range hrows {
			h := strings.TrimPrefix(strings.TrimSuffix(r[0].Text, ":00"), "0")
			checkOnTimeCells(t, what+" hour "+r[0].Text, r[1:], hours[cmp.Or(h, "0")])
		}
		checkDrawn(t, "ontime-hours", chart(t, bro, "ontime-hours"), 1)

		days := queryOnTime(t, db, "start_date::text", from, to, def.early, def.late)
		drows := tableRows(t, bro, "ontime-days-table")
		if len(drows) != len(days) {
			t.Errorf("%s: %d service days shown, the oracle %d", what, len(drows), len(days))
		}
		for _, r := range drows {
			checkOnTimeCells(t, what+" day "+r[0].Text, r[1:], days[r[0].Text])
		}
		checkDrawn(t, "ontime-days", chart(t, bro, "ontime-days"), 1)
		bro.Screenshot(t, "ontime-"+cmp.Or(def.param, "na"))
	}

	for _, tc := range []struct {
		dim string
		tol float64
	}{{"line", 0.25}, {"station", 0.5}} {
		args := []string{"dimension", tc.dim}
		if tc.dim == "station" {
			args = append(args, "wait_tolerance", "0.5")
		}
		bro.Open(t, base+"headway?"+with(q, args...))
		what := "headways per " + tc.dim
		gaps := queryGaps(t, db, from, to, tc.dim == "station", tc.tol)
		all := gaps["all"]
		n, mean, awt, _, _, swt, excess, assess := all.stats()
		checkCard(t, bro, "hw-gaps", strconv.FormatInt(n, 10), strconv.FormatInt(n, 10))
		for _, k := range []struct {
			id string
			v  *float64
		}{{"hw-mean", mean}, {"hw-awt", awt}, {"hw-excess", excess}} {
			checkCard(t, bro, k.id, fmt.Sprintf("%.1f s", *k.v), strconv.FormatFloat(*k.v, 'g', -1, 64))
		}
		checkCard(t, bro, "hw-assessment", fmt.Sprintf("%.1f %%", 100**assess), strconv.FormatFloat(*assess, 'g', -1, 64))
		if swt == nil || all.assessed < 100 {
			t.Errorf("%s: %d gaps assessed, scheduled wait %v: want at least 100 and one", what, all.assessed, swt)
		}
		delete(gaps, "all")
		var ranked []string
		for id, o := range gaps {
			if int64(len(o.h)) >= 10 {
				ranked = append(ranked, id)
			}
		}
		excessOf := func(id string) *float64 { _, _, _, _, _, _, e, _ := gaps[id].stats(); return e }
		slices.SortFunc(ranked, func(a, b string) int {
			ea, eb := excessOf(a), excessOf(b)
			byExcess := 0
			switch {
			case ea == nil && eb != nil:
				byExcess = 1
			case ea != nil && eb == nil:
				byExcess = -1
			case ea != nil && eb != nil:
				byExcess = cmp.Compare(*eb, *ea)
			}
			return cmp.Or(byExcess, cmp.Compare(len(gaps[b].h), len(gaps[a].h)), strings.Compare(a, b))
		})
		ranked = ranked[:min(25, len(ranked))]
		rows := tableRows(t, bro, "headway-table")
		if len(rows) != len(ranked) || len(ranked) < 10 {
			t.Fatalf("%s: the page ranks %d, the oracle %d (want at least 10)", what, len(rows), len(ranked))
		}
		for i, r := range rows {
			id := ranked[i]
			if r[0].Text != strconv.Itoa(i+1) || r[1].Text != id {
				t.Errorf("%s: rank %d is %q, the oracle ranks %q there", what, i+1, r[1].Text, id)
				continue
			}
			o := gaps[id]
			n, mean, awt, sn, smean, swt, excess, assess := o.stats()
			_ = smean
			cells := r[len(r)-9:]
			w := func(i int, v int64) {
				if s := strconv.FormatInt(v, 10); cells[i].Text != s || cells[i].V != s {
					t.Errorf("%s %s: column %d shows %q (data-v %q), the oracle %s", what, id, i, cells[i].Text, cells[i].V, s)
				}
			}
			w(0, n)
			checkSeconds(t, what+" "+id+" mean headway", cells[1], mean)
			checkSeconds(t, what+" "+id+" average wait", cells[2], awt)
			w(3, sn)
			checkSeconds(t, what+" "+id+" scheduled wait", cells[4], swt)
			checkSeconds(t, what+" "+id+" excess wait", cells[5], excess)
			w(6, o.assessed)
			w(7, o.within)
			if assess == nil {
				checkSeconds(t, what+" "+id+" wait assessment", cells[8], nil)
			} else {
				checkShare(t, what+" "+id+" wait assessment", cells[8], *assess)
			}
		}
		checkDrawn(t, "headway", chart(t, bro, "headway"), 3)
		bro.Screenshot(t, "headway-"+tc.dim)
	}

	// Bad parameters: a 400 naming the parameter, before or after reading
	// the database; the page shows it and keeps its form.
	for _, bad := range []struct{ api, query, prefix string }{
		{"ontime", "definition=fast", `definition: on-time definition "fast": want na, crow, or EARLY,LATE`},
		{"ontime", "definition=-5,300", `definition: `},
		{"ontime", "min_visits=0", `min_visits: "0": want a whole number from 1 to`},
		{"ontime", "top=501", `top: "501": want a whole number from 1 to 500`},
		{"ontime", "from=2025-11-07&to=2025-11-06", `from: 2025-11-07T00:00:00-04:00 is not before to`},
		{"ontime", "tz=Mars/Olympus", `tz: "Mars/Olympus" is no IANA time zone`},
		{"headway", "dimension=operator", `dimension: "operator": want line or station`},
		{"headway", "wait_tolerance=NaN", `wait_tolerance: "NaN": want a number from 0 to 10`},
		{"headway", "wait_tolerance=-0.1", `wait_tolerance: "-0.1": want a number from 0 to 10`},
		{"headway", "min_gaps=x", `min_gaps: "x": want a whole number from 1 to`},
		{"headway", "to=2025-13-01", `to: `},
	} {
		check400(t, base, "api/"+bad.api+"?"+bad.query, bad.prefix)
	}
	if state := bro.Load(t, base+"ontime?definition=fast"); state != "error" {
		t.Errorf("ontime page with a bad definition: state %q, want error", state)
	}
	if e := harness.Eval[string](t, bro, `document.getElementById("error").textContent`); !strings.HasPrefix(e, "definition: ") {
		t.Errorf("ontime page with a bad definition shows %q", e)
	}
	if v := harness.Eval[string](t, bro, `document.querySelector("select[name=definition]").value`); v != "fast" {
		t.Errorf("ontime page with a bad definition: the form holds %q", v)
	}
	t.Logf("done in %v", time.Since(started).Round(time.Millisecond))
}

// check400 requires target to answer 400 with an error starting with prefix.
func check400(t *testing.T, base, target, prefix string) {
	t.Helper()
	code, body := harness.HttpGet(t, base+target)
	var doc struct{ Error string }
	if code != 400 || json.Unmarshal([]byte(body), &doc) != nil || !strings.HasPrefix(doc.Error, prefix) {
		t.Errorf("%s: %d %s; want 400 %q...", target, code, body, prefix)
	}
}
