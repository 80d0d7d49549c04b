//go:build integration

package ops

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/integration/harness"
	"github.com/ovstream/ovstream/migrations"
)

// runPostgresScript runs .ci/postgres.sh ARGS with env added and
// DATABASE_URL removed from the environment; it returns the output and the
// exit code.
func runPostgresScript(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command("bash", append([]string{"../../.ci/postgres.sh"}, args...)...)
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "DATABASE_URL=") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	return string(out), cmd.ProcessState.ExitCode()
}

// A fresh Debian install, simulated: a cluster whose TCP logins need a
// scram-sha-256 password. .ci/postgres.sh, as `make run` and `make test`
// call it, leaves that server alone (same postmaster), starts a private
// cluster with trust authentication on a free port, creates the database
// ovstream there and writes DATABASE_URL into the env file the Makefile
// reads. With it the demo (`make run`) runs to its summary and a test
// database is created, migrated and dropped as the tests do (`make test`);
// a second call is a no-op; `stop` stops the private cluster.
func TestPostgresScriptOnScramCluster(t *testing.T) {
	machine := harness.StartPrivatePG(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	trustURL := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", machine.Port)
	conn, err := pgx.Connect(ctx, trustURL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SET password_encryption = 'scram-sha-256'; ALTER USER postgres PASSWORD 'Scr4m-Only'"); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	hba := "local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\nhost all all ::1/128 scram-sha-256\n"
	if err := os.WriteFile(filepath.Join(machine.Dir, "pg_hba.conf"), []byte(hba), 0o600); err != nil {
		t.Fatal(err)
	}
	machine.Run("pg_ctl", "-D", machine.Dir, "reload")
	harness.WaitFor(t, 30*time.Second, "scram-sha-256 for TCP", func() bool {
		c, err := pgx.Connect(ctx, trustURL)
		if err == nil {
			c.Close(ctx)
		}
		return err != nil && strings.Contains(err.Error(), "password")
	})
	pid := func() string {
		b, err := os.ReadFile(filepath.Join(machine.Dir, "postmaster.pid"))
		if err != nil {
			return "none"
		}
		return strings.SplitN(string(b), "\n", 2)[0]
	}
	before := pid()

	dir, err := os.MkdirTemp("", "ovstream-pgscript-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil { // the private cluster runs as postgres under root
		t.Fatal(err)
	}
	envFile := filepath.Join(dir, "local.env")
	env := []string{"OVSTREAM_PG_HOST=127.0.0.1", "OVSTREAM_PG_PORT=" + strconv.Itoa(machine.Port),
		"OVSTREAM_PG_DIR=" + filepath.Join(dir, "pg"), "OVSTREAM_PG_ENV=" + envFile}
	t.Cleanup(func() { runPostgresScript(t, env, "stop") })
	out, code := runPostgresScript(t, env)
	if code != 0 || !strings.Contains(out, "asks user postgres for a password") || !strings.Contains(out, "scram-sha-256") ||
		!strings.Contains(out, "created database ovstream") {
		t.Fatalf(".ci/postgres.sh on a scram cluster: exit %d:\n%s", code, out)
	}
	if after := pid(); after != before {
		t.Errorf("the machine's cluster was restarted: postmaster %s, then %s", before, after)
	}
	read := exec.Command("bash", "-c", `unset DATABASE_URL; . "$1"; echo "$DATABASE_URL"`, "-", envFile)
	b, err := read.Output()
	if err != nil {
		t.Fatal(err)
	}
	dbURL := strings.TrimSpace(string(b))
	u, err := url.Parse(dbURL)
	if err != nil || u.Hostname() != "127.0.0.1" || u.Port() == strconv.Itoa(machine.Port) || u.Path != "/ovstream" {
		t.Fatalf("DATABASE_URL from %s: %q; want the private cluster's database ovstream", envFile, dbURL)
	}
	keep := exec.Command("bash", "-c", `DATABASE_URL=mine; . "$1"; echo "$DATABASE_URL"`, "-", envFile)
	if b, err := keep.Output(); err != nil || strings.TrimSpace(string(b)) != "mine" {
		t.Errorf("the env file overrides a DATABASE_URL already set: %q, %v", b, err)
	}

	// make run: the demo, to its summary.
	demoOut, errOut, code := harness.RunCLI(t, []string{"DATABASE_URL=" + dbURL}, "demo", "--data", "../../testdata")
	if code != 0 || !strings.Contains(demoOut, "ten most delayed lines of the busiest window") {
		t.Fatalf("demo on the private cluster: exit %d\n%s%s", code, demoOut, errOut)
	}
	// make test: what emptyDB and freshDB do, with this URL as the admin database.
	admin, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE ovs_scriptcheck"); err != nil {
		t.Fatal(err)
	}
	u.Path = "/ovs_scriptcheck"
	if err := migrations.Up(ctx, u.String()); err != nil {
		t.Errorf("migrations on the private cluster: %v", err)
	}
	if _, err := admin.Exec(ctx, "DROP DATABASE ovs_scriptcheck WITH (FORCE)"); err != nil {
		t.Fatal(err)
	}

	if out, code := runPostgresScript(t, env); code != 0 || strings.Contains(out, "created database") || strings.Contains(out, "initialized") {
		t.Errorf("a second call: exit %d:\n%s", code, out)
	}
	if out, code := runPostgresScript(t, env, "stop"); code != 0 || !strings.Contains(out, "stopped the private PostgreSQL cluster") {
		t.Errorf("stop: exit %d:\n%s", code, out)
	}
	if exec.Command("pg_isready", "-q", "-h", "127.0.0.1", "-p", u.Port()).Run() == nil {
		t.Errorf("the private cluster still answers on port %s after stop", u.Port())
	}
	if after := pid(); after != before {
		t.Errorf("the machine's cluster was restarted: postmaster %s, then %s", before, after)
	}
}
