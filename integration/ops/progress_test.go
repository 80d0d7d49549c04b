//go:build integration

package ops

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ovstream/ovstream/integration/harness"
)

// logLines returns the JSON log lines of out whose msg is msg.
func logLines(t *testing.T, out, msg string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for _, l := range strings.Split(out, "\n") {
		if !strings.HasPrefix(l, "{") {
			continue
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if v["msg"] == msg {
			lines = append(lines, v)
		}
	}
	return lines
}

// `run` logs one start-up line with the effective settings (the database
// without its password), a progress line every --progress-interval (records
// per second, lag, watermark, open windows, commits; a drain the records
// left and the time to its end) and one shutdown line saying why it
// stopped: drain complete, SIGTERM, fenced.
func TestRunProgressAndStartStopLines(t *testing.T) {
	addr := harness.StartBroker(t)
	db := withPassword(t, harness.FreshDB(t), "Progr3ssPw")
	harness.ProduceFeeds(t, addr, harness.LoadFeeds(t, "AT", "../../testdata/auckland-20160519-peak10min"))
	const total = 4610
	// Fetching pauses at 600 uncommitted records until the next commit
	// (every 400 ms): the drain takes a few seconds, in steps.
	out := harness.Drain(t, db, addr, "--pipeline", "prog", "--log-format", "json", "--log-level", "info",
		"--progress-interval", "300ms", "--max-uncommitted-messages", "600", "--flush-interval", "400ms")
	if strings.Contains(out, "Progr3ssPw") {
		t.Errorf("the password shows in the log:\n%s", out)
	}
	start := logLines(t, out, "starting")
	if len(start) != 1 {
		t.Fatalf("%d start-up lines, want 1:\n%s", len(start), out)
	}
	for k, want := range map[string]any{"pipeline": "prog", "window": "5m0s", "allowed_lateness": "10m0s",
		"flush_interval": "400ms", "progress_interval": "300ms", "drain": true, "max_uncommitted_messages": 600.0,
		"partitions": "all", "topics": "arrival_predictions,vehicle_positions", "kafka_sasl": "off", "brokers": addr} {
		if start[0][k] != want {
			t.Errorf("start-up line %s = %v, want %v", k, start[0][k], want)
		}
	}
	if d, _ := start[0]["database"].(string); !strings.HasPrefix(d, "postgres://postgres@") || strings.Contains(d, "Progr3ssPw") {
		t.Errorf("start-up line database %q: want the URL without its password", d)
	}
	progress := logLines(t, out, "progress")
	if len(progress) < 3 {
		t.Fatalf("%d progress lines, want one every 300ms of a drain of several seconds:\n%s", len(progress), out)
	}
	var commits float64
	for _, p := range progress {
		consumed, left := p["consumed"].(float64), p["drain_left"].(float64)
		if consumed+left != total {
			t.Errorf("progress consumed %v + drain_left %v != %d records", consumed, left, total)
		}
		if eta, _ := p["drain_eta"].(string); consumed > 0 && (eta == "" || eta == "unknown") {
			t.Errorf("progress after %v records has no drain_eta: %v", consumed, p)
		}
		if _, err := time.ParseDuration(p["drain_eta"].(string)); err != nil && p["drain_eta"] != "unknown" {
			t.Errorf("drain_eta %v: %v", p["drain_eta"], err)
		}
		for _, k := range []string{"records_per_s", "lag", "watermark", "open_windows", "commit_failures", "uncommitted"} {
			if _, ok := p[k]; !ok {
				t.Errorf("progress line without %s: %v", k, p)
			}
		}
		if c := p["commits"].(float64); c < commits {
			t.Errorf("commits went from %v down to %v", commits, c)
		} else {
			commits = c
		}
	}
	if last := progress[len(progress)-1]; last["consumed"].(float64) == 0 || progress[0]["consumed"].(float64) == total {
		t.Errorf("the progress lines do not show the drain moving: first %v, last %v", progress[0], last)
	}
	stop := logLines(t, out, "stopped")
	if len(stop) != 1 || stop[0]["reason"] != "drain complete" || stop[0]["exit_code"] != 0.0 || stop[0]["consumed"] != float64(total) {
		t.Errorf("shutdown lines %v, want one: drain complete, exit 0, %d consumed", stop, total)
	}

	// SIGTERM, and fenced by a takeover.
	a := harness.StartOvstream(t, nil, harness.RunArgs(db, addr, "--pipeline", "prog2", "--log-format", "json", "--log-level", "info")...)
	harness.WaitFor(t, 30*time.Second, "the first instance assigned", func() bool { return strings.Contains(a.Output(), "watermark seeded") })
	b := harness.StartOvstream(t, nil, harness.RunArgs(db, addr, "--pipeline", "prog2", "--log-format", "json", "--log-level", "info", "--takeover")...)
	if code := a.Wait(t, time.Minute); code != 3 {
		t.Fatalf("the instance taken over exited %d, want 3:\n%s", code, a.Output())
	}
	if stop := logLines(t, a.Output(), "stopped"); len(stop) != 1 || stop[0]["reason"] != "fenced" || stop[0]["exit_code"] != 3.0 {
		t.Errorf("fenced instance's shutdown lines %v, want one: fenced, exit 3", stop)
	}
	harness.WaitFor(t, 30*time.Second, "the second instance assigned", func() bool { return strings.Contains(b.Output(), "watermark seeded") })
	if err := b.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := b.Wait(t, time.Minute); code != 0 {
		t.Fatalf("run after SIGTERM exited %d:\n%s", code, b.Output())
	}
	if stop := logLines(t, b.Output(), "stopped"); len(stop) != 1 || stop[0]["reason"] != "SIGTERM" || stop[0]["exit_code"] != 0.0 {
		t.Errorf("shutdown lines after SIGTERM %v, want one: SIGTERM, exit 0", stop)
	}
}
