//go:build integration

package schema

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ovstream/ovstream/integration/harness"
	"github.com/ovstream/ovstream/migrations"
)

// ovstreamCmd runs `ovstream ARGS...` to its end and returns its exit code
// and what it wrote to stderr.
func ovstreamCmd(t *testing.T, args ...string) (code int, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, harness.OvstreamBin(t), args...)
	var errBuf bytes.Buffer
	cmd.Stderr = &errBuf
	err := cmd.Run()
	var exited *exec.ExitError
	if err != nil && !errors.As(err, &exited) {
		t.Fatalf("ovstream %s: %v", strings.Join(args, " "), err)
	}
	return cmd.ProcessState.ExitCode(), errBuf.String()
}

// A migration that fails half-way says its version, that the schema is now
// dirty, and the runbook's repair (docs/runbook.md "Dirty migration"), from `migrate
// up` and from `run --migrate` alike, whether the failure happens now or was
// left by an earlier run; and the repair it prints works.
func TestMigrateFailureSaysRepair(t *testing.T) {
	// Migration 0002 alters dead_letters, then creates the index
	// dead_letters_pending: a table of that name makes it fail half-way,
	// after 0001 applied. Applied files are never edited, so this holds
	// whatever later migrations add.
	const conflict = "CREATE TABLE dead_letters_pending (x int)"
	repair := []string{"version 2", "dirty", "`ovstream migrate force 1`", "`ovstream migrate up`"}
	failedNow := append([]string{"migration 2 (0002_dead_letters_replayed.up.sql) failed",
		`relation "dead_letters_pending" already exists`}, repair...)
	expect := func(what string, code int, stderr string, want []string) {
		t.Helper()
		if code != 1 {
			t.Errorf("%s: exit %d, want 1; stderr:\n%s", what, code, stderr)
		}
		for _, w := range want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%s: stderr does not say %q:\n%s", what, w, stderr)
			}
		}
	}
	addr := harness.StartBroker(t)

	db := harness.EmptyDB(t)
	harness.ExecSQL(t, db, conflict)
	code, out := ovstreamCmd(t, "migrate", "--database-url", db, "up")
	expect("migrate up", code, out, failedNow)
	code, out = ovstreamCmd(t, "migrate", "--database-url", db, "up")
	expect("migrate up on the dirty schema", code, out, repair)
	code, out = ovstreamCmd(t, harness.RunArgs(db, addr, "--migrate", "--drain")...)
	expect("run --migrate on the dirty schema", code, out, repair)

	db2 := harness.EmptyDB(t)
	harness.ExecSQL(t, db2, conflict)
	code, out = ovstreamCmd(t, harness.RunArgs(db2, addr, "--migrate", "--drain")...)
	expect("run --migrate", code, out, failedNow)

	// The repair: remove what made it fail, mark version 1, migrate up.
	harness.ExecSQL(t, db, "DROP TABLE dead_letters_pending")
	if code, out := ovstreamCmd(t, "migrate", "--database-url", db, "force", "1"); code != 0 {
		t.Fatalf("migrate force 1: exit %d:\n%s", code, out)
	}
	if code, out := ovstreamCmd(t, "migrate", "--database-url", db, "up"); code != 0 {
		t.Fatalf("migrate up after the repair: exit %d:\n%s", code, out)
	}
	if err := migrations.Check(harness.TestCtx(t), db); err != nil {
		t.Fatalf("schema after the repair: %v", err)
	}
}
