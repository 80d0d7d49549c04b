//go:build integration

package ops

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ovstream/ovstream/integration/harness"
	"github.com/ovstream/ovstream/migrations"
)

// Every command that reads the schema checks its version first, read-only,
// and says what to do, as run does (migrations.SchemaError): status,
// report, dlq list, dlq replay and serve against no schema, an old one
// (version 6), a dirty one and one newer than the binary (exit 1, the
// SchemaError's words, no raw SQL error); serve does not start serving. migrate up and
// down on a newer schema say so instead of "no migration found". The check
// writes nothing: schema_migrations is as it was.
func TestCommandsCheckTheSchemaFirst(t *testing.T) {
	latest := migrations.Latest()
	none := harness.EmptyDB(t)
	six := harness.EmptyDB(t)
	if err := migrations.UpTo(harness.TestCtx(t), six, 6); err != nil {
		t.Fatal(err)
	}
	dirty := harness.FreshDB(t)
	harness.ExecSQL(t, dirty, `UPDATE schema_migrations SET dirty = true`)
	newer := harness.FreshDB(t)
	harness.ExecSQL(t, newer, fmt.Sprintf(`UPDATE schema_migrations SET version = %d`, latest+1))
	behind := func(v int) string {
		return fmt.Sprintf("schema is at version %d, this binary needs %d: run `ovstream migrate up` or start `run` with --migrate", v, latest)
	}
	ahead := fmt.Sprintf("schema is at version %d, newer than the %d this binary knows: run a newer ovstream binary", latest+1, latest)
	dbs := []struct{ name, url, says string }{
		{"no schema", none, behind(0)},
		{"version 6", six, behind(6)},
		{"dirty", dirty, fmt.Sprintf("schema version %d is dirty (a migration to version %d failed half-way)", latest, latest)},
		{"newer", newer, ahead},
	}
	cmds := [][]string{
		{"status", "--brokers", "127.0.0.1:1"},
		{"report", "--from", "2016-05-19", "--to", "2016-05-20"},
		{"dlq", "list"},
		{"dlq", "replay", "--to", "elsewhere", "--brokers", "127.0.0.1:1"},
		{"serve", "--addr", "127.0.0.1:0"},
	}
	for _, db := range dbs {
		before := harness.Dump(t, db.url, `SELECT to_regclass('schema_migrations') IS NOT NULL`)
		versions := harness.Dump(t, db.url, `SELECT count(*) FROM pg_class WHERE relname = 'schema_migrations'`)
		for _, cmd := range cmds {
			p := harness.StartOvstream(t, harness.CliEnv(), append(cmd, "--database-url", db.url)...)
			code := p.Wait(t, 30*time.Second)
			out := p.Output()
			if code != 1 || !strings.Contains(out, db.says) || strings.Contains(out, "SQLSTATE") || strings.Contains(out, "dashboard of pipeline") {
				t.Errorf("%s: ovstream %s: exit %d, output:\n%s\nwant exit 1 saying %q", db.name, strings.Join(cmd, " "), code, out, db.says)
			}
		}
		if after := harness.Dump(t, db.url, `SELECT to_regclass('schema_migrations') IS NOT NULL`); strings.Join(after, "") != strings.Join(before, "") ||
			strings.Join(harness.Dump(t, db.url, `SELECT count(*) FROM pg_class WHERE relname = 'schema_migrations'`), "") != strings.Join(versions, "") {
			t.Errorf("%s: the checks changed schema_migrations", db.name)
		}
	}
	if got := harness.Dump(t, none, `SELECT count(*) FROM pg_class WHERE relname = 'schema_migrations'`); got[0] != "[0]" {
		t.Errorf("the checks created schema_migrations in the empty database")
	}
	for _, args := range [][]string{{"migrate", "up"}, {"migrate", "down", "3", "--yes"}, {"migrate", "down", "--yes"}} {
		out, errOut, code := harness.RunCLI(t, harness.CliEnv(), append(args, "--database-url", newer)...)
		if code != 1 || !strings.Contains(errOut, ahead) || strings.Contains(errOut, "no migration found") {
			t.Errorf("ovstream %s on a newer schema: exit %d, stdout %q, stderr:\n%s\nwant exit 1 saying %q", strings.Join(args, " "), code, out, errOut, ahead)
		}
	}
	if v := harness.Dump(t, newer, `SELECT version, dirty FROM schema_migrations`); v[0] != fmt.Sprintf("[%d false]", latest+1) {
		t.Errorf("schema_migrations of the newer schema after the refusals: %v", v)
	}
	// The right schema passes the check (on a database that knows the pipeline).
	current := harness.FreshDB(t)
	harness.ExecSQL(t, current, `INSERT INTO pipelines (name) VALUES ('ovstream')`)
	if _, errOut, code := harness.RunCLI(t, harness.CliEnv(), "dlq", "list", "--database-url", current); code != 0 {
		t.Errorf("dlq list on the current schema: exit %d: %s", code, errOut)
	}
}
