//go:build integration

package ops

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/ovstream/ovstream/integration/harness"
)

// A --pipeline the database holds nothing of (a misspelt name) is an error
// naming it and the known pipelines: report and status exit 2 (a usage
// error) with that line on stderr and nothing on stdout, and so do dlq
// list and dlq replay; the dashboard
// answers its pages and its API for that pipeline with 404, the API's error
// saying the same, which the page shows in Chromium; a known pipeline still
// gets 200. An empty database says it has none yet.
func TestUnknownPipelineNamed(t *testing.T) {
	bro := harness.NewBrowser(t) // first: a missing Chromium fails at once
	addr := harness.StartBroker(t)
	db := harness.FreshDB(t)
	// Two pipelines as their first claims leave them; "gamma" has only
	// results (loaded without a claim), which is known too.
	harness.ExecSQL(t, db, `INSERT INTO pipelines (name) VALUES ('beta'), ('alpha')`)
	harness.ExecSQL(t, db, `SELECT ovs_create_delay_partition('2016-05-19 07:00+00')`)
	harness.ExecSQL(t, db, `INSERT INTO delay_aggregates (pipeline, window_start, window_end, dimension, dimension_id,
		event_count, mean_delay_s, p90_delay_s, min_delay_s, max_delay_s, delay_values, delay_counts)
		VALUES ('gamma', '2016-05-19 07:00+00', '2016-05-19 07:05+00', 'network', 'all', 1, 30, 30, 30, 30, '{30}', '{1}')`)
	const known = `known pipelines: "alpha", "beta"`
	report := []string{"report", "--database-url", db, "--from", "2016-05-19", "--to", "2016-05-20"}
	status := []string{"status", "--database-url", db, "--brokers", addr}
	for _, args := range [][]string{report, status} {
		out, errOut, code := harness.RunCLI(t, nil, append(args, "--pipeline", "alpah")...)
		want := "ovstream " + args[0] + `: no pipeline "alpah" in this database; ` + known + "\n" +
			"Run 'ovstream " + args[0] + " --help' for usage.\n"
		if code != 2 || out != "" || errOut != want {
			t.Errorf("%s --pipeline alpah: exit %d, stdout %q, stderr %q; want exit 2, no output and %q", args[0], code, out, errOut, want)
		}
		for _, p := range []string{"alpha", "gamma"} {
			if out, errOut, code := harness.RunCLI(t, nil, append(args, "--pipeline", p)...); code != 0 || errOut != "" {
				t.Errorf("%s --pipeline %s: exit %d, stderr %q; want 0:\n%s", args[0], p, code, errOut, out)
			}
		}
	}

	for _, sub := range []string{"list", "replay"} {
		args := []string{"dlq", sub, "--database-url", db, "--pipeline", "alpah"}
		if sub == "replay" {
			args = append(args, "--brokers", addr, "--to", "somewhere")
		}
		out, errOut, code := harness.RunCLI(t, nil, args...)
		if want := "ovstream dlq " + sub + `: no pipeline "alpah" in this database; ` + known + "\n"; code != 2 || out != "" || !strings.HasPrefix(errOut, want) {
			t.Errorf("dlq %s --pipeline alpah: exit %d, stdout %q, stderr %q; want exit 2, no output and %q", sub, code, out, errOut, want)
		}
	}
	if out, errOut, code := harness.RunCLI(t, nil, "dlq", "list", "--database-url", db, "--pipeline", "alpha"); code != 0 || out != "0 dead letters\n" {
		t.Errorf("dlq list --pipeline alpha: exit %d, stdout %q, stderr %q; want 0 dead letters", code, out, errOut)
	}

	srv := harness.StartOvstream(t, nil, "serve", "--database-url", db, "--addr", "127.0.0.1:0", "--pipeline", "alpah")
	base := harness.Printed(t, srv, regexp.MustCompile(`dashboard of pipeline alpah: (http://[0-9.:]+/)`))
	for _, tc := range []struct {
		path string
		code int
	}{
		{"delay", 404}, {"health", 404}, {"top?pipeline=alpah", 404}, {"line?pipeline=alpha", 200}, {"?pipeline=gamma", 200},
		{"api/delay", 404}, {"api/top?pipeline=alpah", 404}, {"api/line?pipeline=alpah&id=1", 404}, {"api/health", 404},
		{"api/delay?pipeline=alpha", 200}, {"api/health?pipeline=alpha", 200},
	} {
		code, body := harness.HttpGet(t, base+tc.path)
		if code != tc.code {
			t.Errorf("GET %s: %d, want %d: %s", tc.path, code, tc.code, body)
			continue
		}
		if code == 404 && strings.HasPrefix(tc.path, "api/") {
			var e struct {
				Error     string   `json:"error"`
				Pipelines []string `json:"pipelines"`
			}
			if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error != `no pipeline "alpah" in this database; `+known ||
				strings.Join(e.Pipelines, ",") != "alpha,beta" {
				t.Errorf("GET %s: %s; want the error naming alpah and the known pipelines", tc.path, body)
			}
		}
		if code == 404 && !strings.HasPrefix(tc.path, "api/") && !strings.Contains(body, `<p id="error" class="error" hidden></p>`) {
			t.Errorf("GET %s: the 404 is not the page (whose script shows the API's error):\n%s", tc.path, body)
		}
	}

	// The page, in a browser, shows the API's message.
	ctx, cancel := context.WithTimeout(bro.Ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"top?pipeline=alpah")); err != nil {
		t.Fatal(err)
	}
	shownErr, err := chromedp.Run(ctx, chromedp.Poll[string](
		`document.body && document.body.dataset.state === "error" && document.getElementById("error").textContent`,
		chromedp.WithPollingTimeout(45*time.Second)))
	if want := `no pipeline "alpah" in this database; ` + known; err != nil || shownErr != want {
		t.Errorf("the page of an unknown pipeline shows %q (%v), want %q", shownErr, err, want)
	}

	empty := harness.FreshDB(t)
	_, errOut, code := harness.RunCLI(t, nil, "report", "--database-url", empty, "--from", "2016-05-19", "--to", "2016-05-20")
	if want := "ovstream report: no pipeline \"ovstream\" in this database: it has none yet (the first `ovstream run --pipeline NAME` makes one)\n" +
		"Run 'ovstream report --help' for usage.\n"; code != 2 || errOut != want {
		t.Errorf("report on an empty database: exit %d, stderr %q; want 2 and %q", code, errOut, want)
	}
}
