//go:build integration

package ops

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ovstream/ovstream/integration/harness"
)

// `ovstream healthcheck`, the Dockerfile's HEALTHCHECK (the image has no
// curl): exit 0 while `run` serves /healthz, 1 once it stopped, 2 on a bad
// flag. With --dashboard=false the ops address serves no dashboard.
func TestHealthcheckCommand(t *testing.T) {
	addr := harness.StartBroker(t)
	db := harness.FreshDB(t)
	p := harness.StartOvstream(t, nil, harness.RunArgs(db, addr, "--pipeline", "health", "--metrics-addr", "127.0.0.1:0", "--dashboard=false")...)
	ops := harness.OpsAddr(t, p)
	url := "http://" + ops + "/healthz"
	if code, _ := harness.HttpGet(t, "http://"+ops+"/dashboard/"); code != 404 {
		t.Errorf("--dashboard=false: /dashboard/ answers %d, want 404", code)
	}
	if out, errOut, code := harness.RunCLI(t, nil, "healthcheck", "--url", url); code != 0 {
		t.Errorf("healthcheck of a running instance: exit %d: %s%s", code, out, errOut)
	}
	if _, errOut, code := harness.RunCLI(t, nil, "healthcheck", "--url", "http://"+ops+"/nope"); code != 1 || !strings.Contains(errOut, "404") {
		t.Errorf("healthcheck of a wrong path: exit %d: %s", code, errOut)
	}
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.Wait(t, time.Minute); code != 0 {
		t.Fatalf("run exited %d:\n%s", code, p.Output())
	}
	if _, errOut, code := harness.RunCLI(t, nil, "healthcheck", "--url", url, "--timeout", "1s"); code != 1 || errOut == "" {
		t.Errorf("healthcheck after the instance stopped: exit %d: %s", code, errOut)
	}
	if _, _, code := harness.RunCLI(t, nil, "healthcheck", "--timeout", "0s"); code != 2 {
		t.Errorf("healthcheck --timeout 0s: exit %d, want 2", code)
	}
}
