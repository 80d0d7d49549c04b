//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// What operators who already run Prometheus and Grafana get (docs/operations.md
// "Alerts and Grafana dashboards"): deploy/prometheus/alerts.yml and two dashboards in
// deploy/grafana. The checks here need promtool (Debian package prometheus,
// installed by .ci/run); without it they fail, they never skip.

const (
	alertsFile       = "../deploy/prometheus/alerts.yml"
	alertsTestFile   = "../deploy/prometheus/alerts_test.yml"
	serviceDashboard = "../deploy/grafana/ovstream-service.json"
	delaysDashboard  = "../deploy/grafana/ovstream-delays.json"
)

func promtool(t *testing.T, args ...string) {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found: install Debian's prometheus package (apt-get install prometheus; .ci/run does)")
	}
	if out, err := exec.Command(path, args...).CombinedOutput(); err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// The alerting rules are valid, and each alert fires on the series it is
// meant for and on no healthy instance (promtool's rule unit tests in
// deploy/prometheus/alerts_test.yml).
func TestPrometheusAlertRules(t *testing.T) {
	promtool(t, "check", "rules", alertsFile)
	promtool(t, "test", "rules", alertsTestFile)
}

// grafanaDashboard is the part of a Grafana dashboard JSON model checked here.
type grafanaDashboard struct {
	UID           string `json:"uid"`
	Title         string `json:"title"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID         int            `json:"id"`
		Title      string         `json:"title"`
		Type       string         `json:"type"`
		Datasource grafanaDS      `json:"datasource"`
		GridPos    map[string]int `json:"gridPos"`
		Targets    []struct {
			RefID      string    `json:"refId"`
			Datasource grafanaDS `json:"datasource"`
			Expr       string    `json:"expr"`
			RawSQL     string    `json:"rawSql"`
			Format     string    `json:"format"`
		} `json:"targets"`
	} `json:"panels"`
}

type grafanaDS struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// loadDashboard reads a dashboard and checks what Grafana needs to import it
// into any installation: a uid, a schema version, a datasource variable of
// the plugin type (so the importer picks the datasource), and every panel and
// query bound to that variable, never to one installation's datasource uid.
func loadDashboard(t *testing.T, path, plugin string) grafanaDashboard {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: not a JSON dashboard: %v", path, err)
	}
	if d.UID == "" || d.Title == "" || d.SchemaVersion < 36 {
		t.Errorf("%s: uid %q, title %q, schemaVersion %d: want all set (schemaVersion >= 36)", path, d.UID, d.Title, d.SchemaVersion)
	}
	var dsVar bool
	for _, v := range d.Templating.List {
		if v.Type == "datasource" && v.Name == "datasource" && string(v.Query) == `"`+plugin+`"` {
			dsVar = true
		}
	}
	if !dsVar {
		t.Errorf("%s: no templating variable 'datasource' of type datasource for plugin %s", path, plugin)
	}
	want := grafanaDS{Type: plugin, UID: "${datasource}"}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("%s: panel id %d twice", path, p.ID)
		}
		ids[p.ID] = true
		if p.Datasource != want {
			t.Errorf("%s: panel %q datasource %+v, want %+v", path, p.Title, p.Datasource, want)
		}
		if p.GridPos["w"] == 0 || p.GridPos["h"] == 0 || len(p.Targets) == 0 {
			t.Errorf("%s: panel %q has no size or no query", path, p.Title)
		}
		for _, q := range p.Targets {
			if q.Datasource != want {
				t.Errorf("%s: panel %q query %s datasource %+v, want %+v", path, p.Title, q.RefID, q.Datasource, want)
			}
		}
	}
	if len(d.Panels) < 6 {
		t.Errorf("%s: %d panels, want at least 6", path, len(d.Panels))
	}
	return d
}

// grafanaPromVars replaces the dashboard variables and Grafana's own by
// values Prometheus accepts.
var grafanaPromVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h",
	"$job", ".*", "$instance", ".*")

// The Prometheus dashboard is a valid Grafana model and every query in it
// is valid PromQL (promtool checks each one as a recording rule).
func TestGrafanaServiceDashboard(t *testing.T) {
	d := loadDashboard(t, serviceDashboard, "prometheus")
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	n := 0
	for _, p := range d.Panels {
		for _, q := range p.Targets {
			expr := grafanaPromVars.Replace(q.Expr)
			if strings.Contains(expr, "$") {
				t.Errorf("panel %q: a variable left in %q", p.Title, expr)
			}
			b, _ := json.Marshal(expr) // a JSON string is a YAML string
			fmt.Fprintf(&rules, "      - record: dashboard:q%d\n        expr: %s\n", n, b)
			n++
		}
	}
	path := filepath.Join(t.TempDir(), "dashboard-queries.yml")
	if err := os.WriteFile(path, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	promtool(t, "check", "rules", path)
	t.Logf("%d panels, %d PromQL queries valid", len(d.Panels), n)
}

var metricName = regexp.MustCompile(`\bovstream_[a-z_]+\b`)

// checkDeployMetricNames fails for each metric that the alerts or the
// service dashboard name and a running instance does not expose; scraped is
// scrape()'s result of a running `run`.
func checkDeployMetricNames(t *testing.T, scraped map[string]float64) {
	t.Helper()
	exposed := map[string]bool{}
	for k := range scraped {
		name, _, _ := strings.Cut(k, "{")
		exposed[name] = true
	}
	for _, f := range []string{alertsFile, serviceDashboard} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		names := map[string]bool{}
		for _, m := range metricName.FindAllString(string(b), -1) {
			names[m] = true
		}
		if len(names) < 8 {
			t.Errorf("%s names %d ovstream metrics, want at least 8", f, len(names))
		}
		for m := range names {
			if !exposed[m] {
				t.Errorf("%s uses %s, which run does not expose", f, m)
			}
		}
	}
}

// grafanaSQLVars are the values the delays dashboard's SQL is run with: the
// month of the Auckland sample, in its time zone. Grafana's PostgreSQL
// datasource expands $__timeFrom() to a quoted RFC 3339 time and
// $__timeFilter(c) to c BETWEEN two of them.
func grafanaSQL(sql, line, bucket string) string {
	const from, to = "'2016-04-30T12:00:00Z'", "'2016-05-31T12:00:00Z'"
	sql = regexp.MustCompile(`\$__timeFilter\(([^)]*)\)`).ReplaceAllString(sql, "$1 BETWEEN "+from+" AND "+to)
	return strings.NewReplacer("$__timeFrom()", from, "$__timeTo()", to, "$pipeline", "ovstream",
		"$tz", rollupTZ, "$bucket", bucket, "$min_events", "50", "$line", line).Replace(sql)
}

// checkGrafanaSQL runs every query of the delays dashboard (its variables
// too) against db, which holds a drained Auckland sample and its raw events
// in oracle_events (TestRollupEqualsSQLOracle), for hourly and daily
// buckets: each returns rows, and the one panel that merges distributions
// itself (a line's P90 by hour of day) equals percentile_cont over the raw
// events.
func checkGrafanaSQL(t *testing.T, db string) {
	t.Helper()
	d := loadDashboard(t, delaysDashboard, "grafana-postgresql-datasource")
	var line string
	for _, v := range d.Templating.List {
		var q string
		if v.Type != "query" || json.Unmarshal(v.Query, &q) != nil {
			continue
		}
		rows := dump(t, db, grafanaSQL(q, "", "1 hour"))
		if len(rows) == 0 {
			t.Errorf("variable %s: no values", v.Name)
			continue
		}
		if v.Name == "line" {
			// dump sorts; the busiest line is what Grafana shows first.
			top := dump(t, db, grafanaSQL(q, "", "1 hour")+" LIMIT 1")
			line = strings.Trim(top[0], "[]")
		}
	}
	if line == "" {
		t.Fatal("the delays dashboard has no 'line' variable")
	}
	for _, bucket := range []string{"1 hour", "1 day"} {
		for _, p := range d.Panels {
			for _, q := range p.Targets {
				sql := grafanaSQL(q.RawSQL, line, bucket)
				if strings.Contains(sql, "$") {
					t.Fatalf("panel %q: a variable left in\n%s", p.Title, sql)
				}
				if rows := dump(t, db, sql); len(rows) == 0 {
					t.Errorf("panel %q (%s): no rows", p.Title, bucket)
				}
			}
		}
	}
	for _, p := range d.Panels {
		if !strings.Contains(p.Title, "by hour of day") {
			continue
		}
		got := dump(t, db, grafanaSQL(p.Targets[0].RawSQL, line, ""))
		want := dump(t, db, fmt.Sprintf(`SELECT h::text, percentile_cont(0.9) WITHIN GROUP (ORDER BY d)
			FROM (SELECT extract(hour FROM at AT TIME ZONE '%s')::int AS h, d FROM oracle_events WHERE line = '%s') e
			GROUP BY h`, rollupTZ, line))
		sort.Strings(want)
		sameRows(t, "panel "+p.Title+" vs percentile_cont over the events", got, want)
		t.Logf("panel %q for line %s: %d hours equal the oracle", p.Title, line, len(got))
		return
	}
	t.Error(`the delays dashboard has no "by hour of day" panel`)
}
