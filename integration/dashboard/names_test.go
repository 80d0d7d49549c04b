//go:build integration

package dashboard

import (
	"cmp"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ovstream/ovstream/integration/harness"
)

// halifaxTZ is the Halifax sample's time zone: its one window,
// 2025-11-06 21:00-21:05 UTC, is 17:00 there.
const halifaxTZ = "America/Halifax"

// label is one category label of a bar chart as the page laid it out.
type label struct {
	Text  string `json:"text"`  // textContent: the full label
	Title string `json:"title"` // the title attribute (shown on hover)
	// Fits: the label's box lies inside the chart, left of the plot area:
	// a long label is cut (CSS ellipsis), it never runs into the bars.
	Fits bool `json:"fits"`
	// Cut: the text is wider than its box and shown with an ellipsis.
	Cut      bool `json:"cut"`
	Ellipsis bool `json:"ellipsis"` // its computed text-overflow is ellipsis
}

// chartLabels reads the category labels of the horizontal bar chart in the
// element with that id.
func chartLabels(t *testing.T, b *harness.Browser, id string) []label {
	t.Helper()
	return harness.Eval[[]label](t, b, fmt.Sprintf(`(() => {
		const box = document.getElementById(%q);
		const plot = box.querySelector(".u-over").getBoundingClientRect();
		const outer = box.getBoundingClientRect();
		return [...box.querySelectorAll(".cat-label")].map(e => {
			const r = e.getBoundingClientRect();
			return {text: e.textContent, title: e.title, fits: r.left >= outer.left && r.right <= plot.left,
				cut: e.scrollWidth > e.clientWidth, ellipsis: getComputedStyle(e).textOverflow === "ellipsis"};
		});
	})()`, id))
}

// apiNames are the names of the rows (api/top) or lines (api/line) the page drew.
type apiNames struct {
	ID        string  `json:"id"`
	Name      *string `json:"name"`
	ShortName *string `json:"short_name"`
}

// zipNames reads the names of the Halifax static feed with encoding/csv:
// line (route_id) -> route_long_name and route_short_name; station
// (stop_id) -> stop_name. Every route of the sample has route_short_name =
// route_id and a long name, so the dashboard names a line by its long name.
func zipNames(t *testing.T) map[string]map[string]harness.NameRow {
	t.Helper()
	out := map[string]map[string]harness.NameRow{"line": {}, "station": {}}
	for _, r := range harness.ZipTable(t, harness.HalifaxStatic, "routes.txt") {
		if r["route_short_name"] != r["route_id"] || r["route_long_name"] == "" {
			t.Fatalf("routes.txt: route %q has short name %q, long name %q", r["route_id"], r["route_short_name"], r["route_long_name"])
		}
		out["line"][r["route_id"]] = harness.NameRow{Name: r["route_long_name"], Short: r["route_short_name"]}
	}
	for _, r := range harness.ZipTable(t, harness.HalifaxStatic, "stops.txt") {
		if r["stop_name"] != "" {
			out["station"][r["stop_id"]] = harness.NameRow{Name: r["stop_name"]}
		}
	}
	return out
}

// shown is how the page labels an id: "id — name", or the id alone when
// the static feed does not name it.
func shown(id string, n harness.NameRow, ok bool) string {
	if !ok {
		return id
	}
	return id + " — " + n.Name
}

// checkDashboardNames: the Halifax pair produced with its static feed
// (testdata's trimmed google_transit.zip), drained into db as pipeline
// halifax. The pages name lines and stations exactly as routes.txt and
// stops.txt of the zip do, read here with encoding/csv; an id the zip does
// not name (line sp6, station 6084: in the realtime feed, not in the trimmed
// schedule) shows its id alone:
//   - most delayed lines (min. 10 events, top 15) and stations (min. 30, top
//     15): the ids are the 15 greatest P90 of delay_aggregates (the sample is
//     one window); each row's name cell, chart label (text and title) and
//     api/top name and short_name (null when none); in an 800 px window
//     the longer labels are cut with an ellipsis inside the label area,
//     never over the bars, in full in their titles;
//   - line by hour: every option of the line chooser, the title of the
//     default (busiest) line, and of sp6;
//   - a line whose short name differs from its id shows both.
func checkDashboardNames(t *testing.T, bro *harness.Browser, db, base string) {
	zip := zipNames(t)
	addr, _ := harness.StartBrokerProcess(t, "127.0.0.1:0", "")
	harness.ProduceCLI(t, addr, "--operator", "HFX", "--gtfs-static", harness.HalifaxStatic, "--gtfs-rt", "../../testdata/halifax-20251106")
	harness.Drain(t, db, addr, "--pipeline", "halifax", "--allowed-lateness", "1h")
	if w := harness.Dump(t, db, `SELECT count(DISTINCT window_start) FROM delay_aggregates WHERE pipeline = 'halifax'`); w[0] != "[1]" {
		t.Fatalf("the Halifax sample fills %v windows, want 1", w)
	}
	q := url.Values{"pipeline": {"halifax"}, "tz": {halifaxTZ}}
	for _, tc := range []struct {
		dim, unnamed   string
		minEvents, top int
	}{{"line", "sp6", 10, 15}, {"station", "6084", 30, 15}} {
		names := zip[tc.dim]
		var want []string
		for _, r := range harness.Dump(t, db, fmt.Sprintf(`SELECT dimension_id FROM delay_aggregates WHERE pipeline = 'halifax'
			AND dimension = '%s' AND event_count >= %d ORDER BY p90_delay_s DESC, dimension_id LIMIT %d`, tc.dim, tc.minEvents, tc.top)) {
			want = append(want, strings.Trim(r, "[]"))
		}
		named := 0
		for _, id := range want {
			if _, ok := names[id]; ok {
				named++
			}
		}
		if len(want) != tc.top || !slices.Contains(want, tc.unnamed) || names[tc.unnamed] != (harness.NameRow{}) || named != tc.top-1 {
			t.Fatalf("halifax top %ss %v: %d named by the zip; want %d, all but %s", tc.dim, want, named, tc.top, tc.unnamed)
		}

		bro.Open(t, base+"top?"+with(q, "day", "2025-11-06", "dimension", tc.dim,
			"min_events", strconv.Itoa(tc.minEvents), "top", strconv.Itoa(tc.top)))
		rows := tableRows(t, bro, "top-table")
		labels := chartLabels(t, bro, "top-chart")
		api := harness.Eval[[]apiNames](t, bro, `window.ovs.data.rows`)
		if len(rows) != tc.top || len(labels) != tc.top || len(api) != tc.top {
			t.Fatalf("halifax top %ss: %d rows, %d chart labels, %d API rows; want %d", tc.dim, len(rows), len(labels), len(api), tc.top)
		}
		var ids []string
		for i, r := range rows {
			id := r[1].Text
			ids = append(ids, id)
			n, ok := names[id]
			wantCell := cell{"–", ""}
			if ok {
				wantCell = cell{n.Name, n.Name}
			}
			if r[2] != wantCell {
				t.Errorf("halifax top %s %s: name cell %+v, the zip %+v", tc.dim, id, r[2], wantCell)
			}
			l := labels[i]
			if l.Text != shown(id, n, ok) || l.Title != l.Text || !l.Fits || (l.Cut && !l.Ellipsis) {
				t.Errorf("halifax top %s %s: chart label %+v, want %q in full in its title, inside the label area", tc.dim, id, l, shown(id, n, ok))
			}
			a := api[i]
			wantShort := (*string)(nil)
			if tc.dim == "line" && ok {
				wantShort = &n.Short
			}
			if a.ID != id || (a.Name == nil) == ok || ok && *a.Name != n.Name || !eqPtr(a.ShortName, wantShort) {
				t.Errorf("halifax top %s %s: api/top names %s %v %v; the zip %+v (named %v)", tc.dim, id, a.ID, str(a.Name), str(a.ShortName), n, ok)
			}
		}
		if !slices.Equal(slices.Sorted(slices.Values(ids)), slices.Sorted(slices.Values(want))) {
			t.Errorf("halifax top %ss: the page ranks %v, delay_aggregates %v", tc.dim, ids, want)
		}
		bro.Screenshot(t, "halifax-top-"+tc.dim+"s")
		if tc.dim != "station" {
			continue
		}
		// In a narrow window the label area (a third of the chart) is too
		// small for the longer station labels: they are cut with an
		// ellipsis, in full in their titles, and stay left of the bars.
		bro.Resize(t, 800, 900)
		bro.Open(t, base+"top?"+with(q, "day", "2025-11-06", "dimension", tc.dim,
			"min_events", strconv.Itoa(tc.minEvents), "top", strconv.Itoa(tc.top)))
		cut := 0
		for i, l := range chartLabels(t, bro, "top-chart") {
			n, ok := names[ids[i]]
			if l.Text != shown(ids[i], n, ok) || l.Title != l.Text || !l.Fits || !l.Ellipsis {
				t.Errorf("halifax top stations, 800 px wide: label %+v, want %q in full in its title, cut inside the label area",
					l, shown(ids[i], n, ok))
			}
			if l.Cut {
				cut++
			}
		}
		if cut == 0 {
			t.Error("halifax top stations, 800 px wide: no label is cut")
		}
		bro.Screenshot(t, "halifax-top-stations-narrow")
		bro.Resize(t, 0, 0)
	}

	// Line by hour: the chooser names every line, the title the one shown.
	lines := harness.Dump(t, db, `SELECT dimension_id || ' (' || event_count || ' events)' FROM delay_aggregates
		WHERE pipeline = 'halifax' AND dimension = 'line'`)
	busiest := strings.Trim(harness.Dump(t, db, `SELECT dimension_id FROM delay_aggregates WHERE pipeline = 'halifax' AND dimension = 'line'
		ORDER BY event_count DESC, dimension_id LIMIT 1`)[0], "[]")
	for _, line := range []string{"", "sp6"} {
		bro.Open(t, base+"line?"+with(q, "from", "2025-11-06", "to", "2025-11-07", "line", line))
		opts := harness.Eval[[]string](t, bro, `[...document.querySelectorAll("select[name=line] option")].map(o => o.textContent)`)
		var wantOpts []string
		for _, l := range lines {
			id, events, _ := strings.Cut(strings.Trim(l, "[]"), " ")
			n, ok := zip["line"][id]
			wantOpts = append(wantOpts, shown(id, n, ok)+" "+events)
		}
		slices.Sort(wantOpts)
		if slices.Sort(opts); !slices.Equal(opts, wantOpts) {
			t.Errorf("halifax line chooser: %q\nwant (routes.txt) %q", opts, wantOpts)
		}
		id := cmp.Or(line, busiest)
		n, ok := zip["line"][id]
		if h1 := harness.Eval[string](t, bro, `document.getElementById("title").textContent`); h1 != "Line "+shown(id, n, ok)+" by hour of day" {
			t.Errorf("halifax line page of %s: title %q, want the line %q", id, h1, shown(id, n, ok))
		}
		got := harness.Eval[apiNames](t, bro, `window.ovs.data.line`)
		if got.ID != id || (got.Name == nil) == ok || ok && (*got.Name != n.Name || !eqPtr(got.ShortName, &n.Short)) {
			t.Errorf("halifax api/line: line %s %v %v; the zip %+v (named %v)", got.ID, str(got.Name), str(got.ShortName), n, ok)
		}
		if line == "" {
			bro.Screenshot(t, "halifax-line")
		}
	}

	// A line whose short name is not its id (Auckland's route ids under
	// --line-id route_id, with a static feed) shows both: "id — short long".
	// Its names row is written here by hand, for the Auckland sample's
	// busiest line (pipeline ovstream).
	id := strings.Trim(harness.Dump(t, db, `SELECT dimension_id FROM delay_aggregates WHERE pipeline = 'ovstream' AND dimension = 'line'
		GROUP BY 1 ORDER BY sum(event_count) DESC, 1 LIMIT 1`)[0], "[]")
	harness.Dump(t, db, `INSERT INTO names (pipeline, dimension, dimension_id, name, short_name, observed_at)
		VALUES ('ovstream', 'line', '`+id+`', 'Hand-written Name', 'X1', now()) RETURNING 1`)
	bro.Open(t, base+"line?"+with(url.Values{"tz": {harness.RollupTZ}}, "pipeline", "ovstream", "line", id, "from", "2016-05-19", "to", "2016-05-20"))
	want := id + " — X1 Hand-written Name"
	if h1 := harness.Eval[string](t, bro, `document.getElementById("title").textContent`); h1 != "Line "+want+" by hour of day" {
		t.Errorf("line page of %s: title %q, want the line %q", id, h1, want)
	}
	if o := harness.Eval[string](t, bro, `document.querySelector("select[name=line]").selectedOptions[0].textContent`); !strings.HasPrefix(o, want+" (") {
		t.Errorf("line page of %s: chooser %q, want %q", id, o, want)
	}
	if got := harness.Eval[apiNames](t, bro, `window.ovs.data.line`); str(got.Name) != `"Hand-written Name"` || str(got.ShortName) != `"X1"` {
		t.Errorf("api/line of %s: %v %v", id, str(got.Name), str(got.ShortName))
	}
}

func eqPtr(a, b *string) bool { return a == nil && b == nil || a != nil && b != nil && *a == *b }

// str shows a nullable string: null or quoted.
func str(s *string) string {
	if s == nil {
		return "null"
	}
	return strconv.Quote(*s)
}
