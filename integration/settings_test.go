//go:build integration

package integration

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// Every instance of a pipeline must share its window size
// and topics. Before, pipelines.window_size was never written: a second split
// instance with --window 10m was not refused (the merger then exited 1 with
// "partials of the window ... partition 3 twice or ends differ" and the
// other waited for ever), and another --topics silently overwrote
// pipelines.topics. Now an instance whose flags differ exits 2 naming each
// setting with both values, and writes nothing; `pipeline set` changes them
// on purpose while no instance runs.
func TestPipelineSettingsShared(t *testing.T) {
	t.Parallel()
	addr, db := startBroker(t), freshDB(t)
	produceFeeds(t, addr, loadFeeds(t, "AT", "../testdata/auckland-20160519-peak10min"))
	drain(t, db, addr, "--pipeline", "shared")
	if got := dump(t, db, `SELECT window_size::text, topics::text FROM pipelines WHERE name = 'shared'`); len(got) != 1 ||
		got[0] != "[00:05:00 {arrival_predictions,vehicle_positions}]" {
		t.Fatalf("recorded settings %v, want the first instance's 5m and both topics", got)
	}
	before := snapshot(t, db)

	for _, tc := range []struct {
		flags []string
		want  []string
	}{
		{[]string{"--window", "10m"}, []string{"--window 5m0s (pipeline) vs 10m0s (this instance)"}},
		{[]string{"--topics", "arrival_predictions,"}, []string{
			"--topics arrival_predictions,vehicle_positions (pipeline) vs arrival_predictions (this instance)"}},
		{[]string{"--window", "7m", "--topics", "vehicle_positions,arrival_predictions"}, []string{"--window 5m0s (pipeline) vs 7m0s",
			"--topics arrival_predictions,vehicle_positions (pipeline) vs vehicle_positions,arrival_predictions (this instance)"}},
	} {
		args := append(runArgs(db, addr, "--pipeline", "shared", "--drain"), tc.flags...)
		p := startOvstream(t, nil, args...)
		if code := p.wait(t, 2*time.Minute); code != 2 {
			t.Fatalf("run %v exited %d, want 2:\n%s", tc.flags, code, p.output())
		}
		for _, w := range tc.want {
			if !strings.Contains(p.output(), w) {
				t.Errorf("run %v did not say %q:\n%s", tc.flags, w, tail(p.output(), 10))
			}
		}
		sameSnapshot(t, "after the refused run "+strings.Join(tc.flags, " "), before, snapshot(t, db))
	}

	// On purpose: refused while an instance is live, then done.
	live := startOvstream(t, nil, runArgs(db, addr, "--pipeline", "shared")...)
	waitLog(t, live, claimedLine, time.Minute)
	set := []string{"pipeline", "set", "--database-url", db, "--pipeline", "shared", "--window", "10m"}
	if out, errOut, code := runCLI(t, nil, set...); code != 1 || !strings.Contains(errOut, `pipeline "shared" has live instances (`) {
		t.Fatalf("pipeline set with a live instance: exit %d, %q %q", code, out, errOut)
	}
	if err := live.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := live.wait(t, time.Minute); code != 0 {
		t.Fatalf("the live instance exited %d after SIGTERM:\n%s", code, live.output())
	}
	if out, errOut, code := runCLI(t, nil, set...); code != 0 || out != `pipeline "shared": --window 10m0s (was 5m0s); windows already written keep their size`+"\n" {
		t.Fatalf("pipeline set: exit %d, %q %q", code, out, errOut)
	}
	// Now 10m is the pipeline's, and 5m is refused.
	drain(t, db, addr, "--pipeline", "shared", "--window", "10m")
	p := startOvstream(t, nil, runArgs(db, addr, "--pipeline", "shared", "--drain")...)
	if code := p.wait(t, time.Minute); code != 2 || !strings.Contains(p.output(), "--window 10m0s (pipeline) vs 5m0s (this instance)") {
		t.Fatalf("run with the old window after pipeline set: exit %d\n%s", code, tail(p.output(), 10))
	}
}
