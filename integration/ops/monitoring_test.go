//go:build integration

package ops

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ovstream/ovstream/integration/harness"
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
	promtool(t, "check", "rules", harness.AlertsFile)
	promtool(t, "test", "rules", harness.AlertsTestFile)
}

// grafanaPromVars replaces the dashboard variables and Grafana's own by
// values Prometheus accepts.
var grafanaPromVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h",
	"$job", ".*", "$instance", ".*")

// The Prometheus dashboard is a valid Grafana model and every query in it
// is valid PromQL (promtool checks each one as a recording rule).
func TestGrafanaServiceDashboard(t *testing.T) {
	d := harness.LoadDashboard(t, harness.ServiceDashboard, "prometheus")
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
	for _, f := range []string{harness.AlertsFile, harness.ServiceDashboard} {
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
