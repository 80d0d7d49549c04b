//go:build integration

package integration

import (
	"net/url"
	"strings"
	"testing"
	"time"
)

// The demo says at once, before it starts a broker or produces anything,
// that the database DATABASE_URL names does not exist, and how to create it.
func TestDemoNamesAMissingDatabaseFirst(t *testing.T) {
	u, err := url.Parse(testDatabaseURL())
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/ovs_no_such_database"
	began := time.Now()
	out, errOut, code := runCLI(t, []string{"DATABASE_URL=" + u.String()}, "demo", "--data", "../testdata")
	if code != 1 || !strings.Contains(errOut, `database "ovs_no_such_database" does not exist`) ||
		!strings.Contains(errOut, "createdb ovs_no_such_database") {
		t.Errorf("demo with a missing database: exit %d, stderr:\n%s", code, errOut)
	}
	if strings.Contains(out, "produced") || strings.Contains(out, "embedded broker") {
		t.Errorf("the demo started producing before it checked the database:\n%s", out)
	}
	if d := time.Since(began); d > 20*time.Second {
		t.Errorf("the demo took %v to fail", d)
	}
}
