//go:build integration

package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/ovstream/ovstream/integration/harness"
)

// tickLabel is one tick label of a chart's x axis as uPlot drew it on the
// canvas: its text and its box's left and right edges, in CSS pixels from
// the canvas's left edge.
type tickLabel struct {
	Text  string  `json:"text"`
	Left  float64 `json:"left"`
	Right float64 `json:"right"`
}

// xTicks returns the x-axis tick labels the chart drew (uPlot's own splits
// and values, measured in its own font) and the canvas's width, CSS px.
func xTicks(t *testing.T, b *harness.Browser, name string) ([]tickLabel, float64) {
	t.Helper()
	var out struct {
		Ticks []tickLabel `json:"ticks"`
		Width float64     `json:"width"`
	}
	raw := harness.Eval[string](t, b, fmt.Sprintf(`JSON.stringify((() => {
		const u = window.ovs.charts[%q], a = u.axes[0], r = window.devicePixelRatio || 1;
		const ctx = document.createElement("canvas").getContext("2d");
		ctx.font = a.font[0];
		const ticks = [];
		a._splits.forEach((s, i) => {
			const v = a._values[i];
			if (v == null || v === "") return;
			const text = String(v);
			const w = Math.max(...text.split("\n").map((l) => ctx.measureText(l).width)) / r;
			const x = u.bbox.left / r + u.valToPos(s, "x");
			ticks.push({text, left: x - w / 2, right: x + w / 2});
		});
		return {ticks, width: u.root.querySelector("canvas").getBoundingClientRect().width};
	})())`, name))
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		t.Fatalf("x ticks of %s: %v", name, err)
	}
	return out.Ticks, out.Width
}

// checkTicks fails unless the delay chart's x-axis labels differ from the
// one before (a label repeats only on another day) and each lies wholly
// within the canvas.
func checkTicks(t *testing.T, b *harness.Browser, what string) {
	t.Helper()
	ticks, width := xTicks(t, b, "delay")
	if len(ticks) < 2 {
		t.Errorf("%s: %d x-axis labels, want at least 2: %+v", what, len(ticks), ticks)
	}
	for i, k := range ticks {
		if i > 0 && k.Text == ticks[i-1].Text {
			t.Errorf("%s: the x-axis label %q repeats: %q", what, k.Text, texts(ticks))
		}
		if k.Left < 0 || k.Right > width {
			t.Errorf("%s: the x-axis label %q spans %.1f to %.1f px, the canvas 0 to %.1f: it is cut",
				what, k.Text, k.Left, k.Right, width)
		}
	}
}

func texts(ticks []tickLabel) []string {
	var s []string
	for _, k := range ticks {
		s = append(s, k.Text)
	}
	return s
}

// formField is one field of the page's form: its name, type and value.
type formField struct {
	Name  string `json:"name"`
	Type  string `json:"type"`
	Value string `json:"value"`
}

func formFields(t *testing.T, b *harness.Browser) []formField {
	t.Helper()
	return harness.Eval[[]formField](t, b, `[...document.querySelectorAll("#controls input, #controls select")].map((e) =>
		({name: e.name, type: e.type, value: e.value}))`)
}

// field returns the form's field of that name (Name "" when none).
func field(fields []formField, name string) formField {
	for _, f := range fields {
		if f.Name == name {
			return f
		}
	}
	return formField{}
}

// The dashboard's delay page in headless Chromium on the Auckland sample
// (2016-05-19 07:00-09:04 in Auckland):
//   - one 5-minute bucket: the x-axis labels are distinct (seconds, not
//     "07:00 07:00 07:01");
//   - a range across midnight, two days, and the default view: every x-axis label,
//     the date at the right edge too, lies within the canvas;
//   - the from and to fields are text in a 24-hour clock
//     ("2016-05-18 19:00" in UTC, as the charts), and a time typed there
//     is the range shown;
//   - line=L shows line L's delay per bucket, equal to the SQL oracle over
//     the raw events; the form offers every line with events;
//   - an invalid tz, an unknown line or an include_open other than 1 or
//     0 shows the error and the form, with the bad value in its field, to
//     be corrected (an invalid tz on every
//     page).
//
// With -dashboard.screenshots DIR it writes a PNG of each view.
func TestDashboardDelayPageAxesFormAndLineFilter(t *testing.T) {
	bro := harness.NewBrowser(t)
	dir := harness.ExtractTarGz(t, dashboardArchive)
	addr, _ := harness.StartBrokerProcess(t, "127.0.0.1:0", "")
	harness.ProduceCLI(t, addr, "--operator", "AT", "--gtfs-rt", dir)
	db := harness.FreshDB(t)
	harness.Drain(t, db, addr)
	harness.CreateOracleEvents(t, db, addr)
	srv := harness.StartOvstream(t, nil, "serve", "--database-url", db, "--addr", "127.0.0.1:0", "--pipeline", "ovstream",
		"--tz", harness.RollupTZ)
	base := harness.Printed(t, srv, regexp.MustCompile(`dashboard of pipeline ovstream: (http://[0-9.:]+/)`))
	q := url.Values{"tz": {harness.RollupTZ}}

	// One bucket of 5 minutes: ticks less than a minute apart.
	bro.Open(t, base+"delay?"+with(q, "from", "2016-05-19 07:00", "to", "2016-05-19 07:05", "bucket", "5m"))
	if n := len(tableRows(t, bro, "delay-table")); n != 1 {
		t.Errorf("07:00-07:05 in buckets of 5m: %d rows, want 1", n)
	}
	checkTicks(t, bro, "one bucket")
	bro.Screenshot(t, "delay-one-bucket")

	// Across midnight: the date of the new day at the right edge.
	bro.Open(t, base+"delay?"+with(q, "from", "2016-05-18 20:00", "to", "2016-05-19 09:00", "bucket", "hour"))
	checkTicks(t, bro, "20:00 to 09:00 the next day")
	bro.Open(t, base+"delay?"+with(q, "from", "2016-05-18 00:00", "to", "2016-05-20 00:00", "bucket", "hour"))
	checkTicks(t, bro, "two days")
	bro.Screenshot(t, "delay-two-days")
	bro.Open(t, base+"delay?"+q.Encode())
	checkTicks(t, bro, "default view")

	// The fields of from and to: 24-hour text; what is typed is shown.
	bro.Open(t, base+"delay?"+with(q, "tz", "UTC", "from", "2016-05-18T19:00", "to", "2016-05-18T21:00"))
	fs := formFields(t, bro)
	for name, want := range map[string]string{"from": "2016-05-18 19:00", "to": "2016-05-18 21:00"} {
		if f := field(fs, name); f.Type != "text" || f.Value != want {
			t.Errorf("the %s field: %+v, want a text field holding %q (24-hour clock)", name, f, want)
		}
	}
	hint := harness.Eval[string](t, bro, `document.querySelector("#controls input[name=from]").parentElement.textContent`)
	if hint != "from (YYYY-MM-DD HH:MM, 24 h)" {
		t.Errorf("the from field's label %q says no format", hint)
	}
	if !harness.Eval[bool](t, bro, `!!document.querySelector("#controls input[name=from]").checkValidity()`) {
		t.Error("the from field refuses its own value")
	}
	ctx, cancel := context.WithTimeout(bro.Ctx, time.Minute)
	defer cancel()
	harness.Eval[bool](t, bro, `(() => { const f = document.getElementById("controls");
		f.elements.from.value = "2016-05-18 19:30"; f.elements.to.value = "2016-05-18 20:45";
		f.requestSubmit(); return true; })()`)
	submitted := false
	for deadline := time.Now().Add(20 * time.Second); !submitted && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		href, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href`))
		submitted = err == nil && strings.Contains(href, "from=2016-05-18+19%3A30")
	}
	if !submitted {
		t.Error("from 19:30 to 20:45 typed: the form was not submitted (the fields refuse a 24-hour time)")
	} else if state := bro.Settled(t, ctx, "the submitted form"); state != "ready" {
		t.Errorf("the submitted form: state %s", state)
	} else if got := harness.Eval[string](t, bro, `ovs.data.query.from + " " + ovs.data.query.to`); got != "2016-05-18T19:30:00Z 2016-05-18T20:45:00Z" {
		t.Errorf("from 19:30 to 20:45 typed: the page shows %s", got)
	}
	bro.Screenshot(t, "delay-24h-form")

	// One line per 15 minutes, against the oracle.
	busiest := strings.Trim(harness.Dump(t, db, `SELECT line FROM oracle_events GROUP BY line ORDER BY count(*) DESC, line LIMIT 1`)[0], "[]")
	from, to := "2016-05-19T07:00:00+12:00", "2016-05-19T09:00:00+12:00"
	want := harness.QueryRollup(t, db, `SELECT date_bin('15 minutes', at, $1::timestamptz), 'all', count(*), avg(d), min(d), max(d),
		percentile_cont('{0.5,0.9}'::float8[]) WITHIN GROUP (ORDER BY d)
		FROM oracle_events WHERE at >= $1::timestamptz AND at < $2::timestamptz AND line = $3 GROUP BY 1`, from, to, busiest)
	bro.Open(t, base+"delay?"+with(q, "from", "2016-05-19 07:00", "to", "2016-05-19 09:00", "bucket", "15m", "line", busiest))
	checkShown(t, "line "+busiest+" per 15 minutes", byTime(t, tableRows(t, bro, "delay-table")), want)
	checkChart(t, bro, "delay", []string{"P90 (s)", "P50 (s)", "mean (s)"}, sortedKeys(want), want, 4, 3, 0)
	if f := field(formFields(t, bro), "line"); f.Type != "select-one" || f.Value != busiest {
		t.Errorf("the line field: %+v, want the select holding %q", f, busiest)
	}
	offered := harness.Eval[[]string](t, bro, `[...document.querySelectorAll("#controls select[name=line] option")].map((o) => o.value)`)
	lines := harness.Dump(t, db, `SELECT line FROM oracle_events WHERE at >= '2016-05-19T07:00:00+12:00' AND at < '2016-05-19T09:00:00+12:00'
		GROUP BY line ORDER BY count(*) DESC, line`)
	for i := range lines {
		lines[i] = strings.Trim(lines[i], "[]")
	}
	slices.Sort(lines)
	if len(offered) == 0 || offered[0] != "" || !slices.Equal(slices.Sorted(slices.Values(offered[1:])), lines) {
		t.Errorf("the line select offers %d values %q..., want all lines (\"\") and the %d lines with events",
			len(offered), offered[:min(3, len(offered))], len(lines))
	}
	if title := harness.Eval[string](t, bro, `document.getElementById("title").textContent`); title != "Line "+busiest+": delay over time" {
		t.Errorf("line page title %q", title)
	}
	bro.Screenshot(t, "delay-line")

	// Bad values: the error, and the form holding them.
	for _, tc := range []struct {
		param, value, says string
	}{
		{"tz", "Mars/Olympus", `tz: "Mars/Olympus" is no IANA time zone`},
		{"include_open", "maybe", `include_open: "maybe": want 1 or 0`},
		{"line", "NOPE", `line: "NOPE" is no line of pipeline "ovstream": it has no window from 2016-05-19T07:00:00+12:00 to 2016-05-19T09:00:00+12:00 and no name`},
	} {
		u := base + "delay?" + with(q, "from", "2016-05-19 07:00", "to", "2016-05-19 09:00", tc.param, tc.value)
		if state := bro.Load(t, u); state != "error" {
			t.Errorf("%s=%s: state %s, want error", tc.param, tc.value, state)
		}
		if msg := harness.Eval[string](t, bro, `document.getElementById("error").textContent`); !strings.HasPrefix(msg, tc.says) {
			t.Errorf("%s=%s: the page says %q, want %q", tc.param, tc.value, msg, tc.says)
		}
		fs := formFields(t, bro)
		if f := field(fs, tc.param); f.Value != tc.value {
			t.Errorf("%s=%s: the form's %s field is %+v, want it holding the bad value; fields %+v", tc.param, tc.value, tc.param, f, fs)
		}
		if f := field(fs, "from"); f.Value != "2016-05-19 07:00" {
			t.Errorf("%s=%s: the from field is %+v, want it as given", tc.param, tc.value, f)
		}
		resp, err := http.Get(base + "api/delay?" + with(q, "from", "2016-05-19 07:00", "to", "2016-05-19 09:00", tc.param, tc.value))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(b), strings.ReplaceAll(tc.says, `"`, `\"`)) {
			t.Errorf("api/delay %s=%s: %d %.300s", tc.param, tc.value, resp.StatusCode, b)
		}
		bro.Screenshot(t, "delay-bad-"+tc.param)
	}
	// The other pages keep their forms too.
	for _, page := range []string{"top", "line", "health"} {
		if state := bro.Load(t, base+page+"?"+with(q, "tz", "Mars/Olympus", "day", "2016-05-19")); state != "error" {
			t.Errorf("%s?tz=Mars/Olympus: state %s, want error", page, state)
		}
		if f := field(formFields(t, bro), "tz"); f.Value != "Mars/Olympus" {
			t.Errorf("%s?tz=Mars/Olympus: the tz field is %+v, want it holding the bad value", page, f)
		}
	}
}
