//go:build integration

package ops

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ovstream/ovstream/integration/harness"
)

// run --pprof serves the Go runtime's profiles under /debug/pprof/ of
// --metrics-addr, and `go tool pprof` (the reader we did not write) reads
// them: a CPU profile taken while run reads a backlog names the run loop, and
// the heap profile names ovstream's own allocations. Without --pprof the
// path is not served (404).
func TestOpsPprof(t *testing.T) {
	addr, db := harness.StartBroker(t), harness.FreshDB(t)
	harness.ProduceLines(t, addr, harness.PredictionsTopic, harness.FlakyLines(0, 200000)...)
	p := harness.StartOvstream(t, nil, harness.RunArgs(db, addr, "--pprof", "--metrics-addr", "127.0.0.1:0", "--topics", harness.PredictionsTopic+",")...)
	ops := harness.OpsAddr(t, p)
	dir := t.TempDir()
	fetch := func(path string) string {
		t.Helper()
		code, body := harness.HttpGet(t, "http://"+ops+path)
		if code != 200 {
			t.Fatalf("GET %s with --pprof = %d: %.300s", path, code, body)
		}
		f := filepath.Join(dir, strings.NewReplacer("/", "_", "?", "_", "=", "_").Replace(path))
		if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}
	top := func(file string, args ...string) string {
		t.Helper()
		out, err := exec.Command("go", append(append([]string{"tool", "pprof", "-top"}, args...), harness.OvstreamBin(t), file)...).CombinedOutput()
		if err != nil {
			t.Fatalf("go tool pprof -top %s: %v\n%s", file, err, out)
		}
		return string(out)
	}
	cpu := top(fetch("/debug/pprof/profile?seconds=3"))
	if !strings.Contains(cpu, "Type: cpu") || !strings.Contains(cpu, "github.com/ovstream/ovstream/") {
		t.Errorf("the CPU profile of run reading 200,000 records names no ovstream function:\n%.2000s", cpu)
	}
	heap := top(fetch("/debug/pprof/heap"), "-sample_index=alloc_space")
	if !strings.Contains(heap, "Type: alloc_space") || !strings.Contains(heap, "github.com/ovstream/ovstream/") {
		t.Errorf("the heap profile of run names no ovstream allocation:\n%.2000s", heap)
	}
	stopProc(t, p)

	q := harness.StartOvstream(t, nil, harness.RunArgs(db, addr, "--metrics-addr", "127.0.0.1:0", "--topics", harness.PredictionsTopic+",")...)
	if code, _ := harness.HttpGet(t, "http://"+harness.OpsAddr(t, q)+"/debug/pprof/"); code != 404 {
		t.Errorf("GET /debug/pprof/ without --pprof = %d, want 404", code)
	}
}
