//go:build integration

package harness

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
)

var (
	AlertsFile       = RepoPath("deploy/prometheus/alerts.yml")
	AlertsTestFile   = RepoPath("deploy/prometheus/alerts_test.yml")
	ServiceDashboard = RepoPath("deploy/grafana/ovstream-service.json")
	delaysDashboard  = RepoPath("deploy/grafana/ovstream-delays.json")
)

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

// LoadDashboard reads a dashboard and checks what Grafana needs to import it
// into any installation: a uid, a schema version, a datasource variable of
// the plugin type (so the importer picks the datasource), and every panel and
// query bound to that variable, never to one installation's datasource uid.
func LoadDashboard(t *testing.T, path, plugin string) grafanaDashboard {
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

// grafanaSQLVars are the values the delays dashboard's SQL is run with: the
// month of the Auckland sample, in its time zone. Grafana's PostgreSQL
// datasource expands $__timeFrom() to a quoted RFC 3339 time and
// $__timeFilter(c) to c BETWEEN two of them.
func grafanaSQL(sql, line, bucket string) string {
	const from, to = "'2016-04-30T12:00:00Z'", "'2016-05-31T12:00:00Z'"
	sql = regexp.MustCompile(`\$__timeFilter\(([^)]*)\)`).ReplaceAllString(sql, "$1 BETWEEN "+from+" AND "+to)
	return strings.NewReplacer("$__timeFrom()", from, "$__timeTo()", to, "$pipeline", "ovstream",
		"$tz", RollupTZ, "$bucket", bucket, "$min_events", "50", "$line", line).Replace(sql)
}

// CheckGrafanaSQL runs every query of the delays dashboard (its variables
// too) against db, which holds a drained Auckland sample and its raw events
// in oracle_events (TestRollupEqualsSQLOracle), for hourly and daily
// buckets: each returns rows, and the one panel that merges distributions
// itself (a line's P90 by hour of day) equals percentile_cont over the raw
// events.
func CheckGrafanaSQL(t *testing.T, db string) {
	t.Helper()
	d := LoadDashboard(t, delaysDashboard, "grafana-postgresql-datasource")
	var line string
	for _, v := range d.Templating.List {
		var q string
		if v.Type != "query" || json.Unmarshal(v.Query, &q) != nil {
			continue
		}
		rows := Dump(t, db, grafanaSQL(q, "", "1 hour"))
		if len(rows) == 0 {
			t.Errorf("variable %s: no values", v.Name)
			continue
		}
		if v.Name == "line" {
			// dump sorts; the busiest line is what Grafana shows first.
			top := Dump(t, db, grafanaSQL(q, "", "1 hour")+" LIMIT 1")
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
				if rows := Dump(t, db, sql); len(rows) == 0 {
					t.Errorf("panel %q (%s): no rows", p.Title, bucket)
				}
			}
		}
	}
	for _, p := range d.Panels {
		if !strings.Contains(p.Title, "by hour of day") {
			continue
		}
		got := Dump(t, db, grafanaSQL(p.Targets[0].RawSQL, line, ""))
		want := Dump(t, db, fmt.Sprintf(`SELECT h::text, percentile_cont(0.9) WITHIN GROUP (ORDER BY d)
			FROM (SELECT extract(hour FROM at AT TIME ZONE '%s')::int AS h, d FROM oracle_events WHERE line = '%s') e
			GROUP BY h`, RollupTZ, line))
		sort.Strings(want)
		SameRows(t, "panel "+p.Title+" vs percentile_cont over the events", got, want)
		t.Logf("panel %q for line %s: %d hours equal the oracle", p.Title, line, len(got))
		return
	}
	t.Error(`the delays dashboard has no "by hour of day" panel`)
}
