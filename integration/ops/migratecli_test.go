//go:build integration

package ops

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ovstream/ovstream/integration/harness"
	"github.com/ovstream/ovstream/migrations"
)

// `migrate version` settles --database-url as every command does (flag >
// OVSTREAM_DATABASE_URL > DATABASE_URL > the --config file > default): the
// runbook's repair of a dirty migration reads the version of the database
// the service uses, never the default one's. A migrated database and an
// empty one tell them apart.
func TestMigrateVersionReadsTheConfiguredDatabase(t *testing.T) {
	migrated, empty := harness.FreshDB(t), harness.EmptyDB(t)
	file := filepath.Join(t.TempDir(), "ovstream.toml")
	if err := os.WriteFile(file, []byte(fmt.Sprintf("[migrate]\ndatabase-url = %q\n", migrated)), 0o600); err != nil {
		t.Fatal(err)
	}
	top := filepath.Join(t.TempDir(), "top.toml")
	if err := os.WriteFile(top, []byte(fmt.Sprintf("database-url = %q\n", empty)), 0o600); err != nil {
		t.Fatal(err)
	}
	latest := migrations.Latest()
	atLatest := fmt.Sprintf("schema at version %d, dirty=false (this binary needs %d)\n", latest, latest)
	atZero := fmt.Sprintf("schema at version 0, dirty=false (this binary needs %d)\n"+
		"schema is at version 0, this binary needs %d: run `ovstream migrate up` or start `run` with --migrate\n", latest, latest)
	for _, tc := range []struct {
		what string
		env  []string
		args []string
		want string
	}{
		{"DATABASE_URL", []string{"DATABASE_URL=" + migrated}, nil, atLatest},
		{"DATABASE_URL (empty database)", []string{"DATABASE_URL=" + empty}, nil, atZero},
		{"OVSTREAM_DATABASE_URL over DATABASE_URL", []string{"DATABASE_URL=" + empty, "OVSTREAM_DATABASE_URL=" + migrated}, nil, atLatest},
		{"--config [migrate]", nil, []string{"--config", file}, atLatest},
		{"OVSTREAM_CONFIG, top-level key", []string{"OVSTREAM_CONFIG=" + top}, nil, atZero},
		{"flag over env", []string{"DATABASE_URL=" + empty}, []string{"--database-url", migrated}, atLatest},
	} {
		out, errOut, code := harness.RunCLI(t, harness.CliEnv(tc.env...), append([]string{"migrate", "version"}, tc.args...)...)
		if code != 0 || out != tc.want {
			t.Errorf("%s: migrate version: exit %d, stdout %q, stderr %q; want exit 0 and %q", tc.what, code, out, errOut, tc.want)
		}
	}
	// A key the file cannot hold is refused here too, as for every command.
	bad := filepath.Join(t.TempDir(), "bad.toml")
	if err := os.WriteFile(bad, []byte("[migrate]\ndatabse-url = \"x\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := harness.RunCLI(t, harness.CliEnv(), "migrate", "version", "--config", bad); code != 2 ||
		!strings.Contains(errOut, "migrate.databse-url: no such flag") {
		t.Errorf("migrate version --config with a typo: exit %d, stderr %q; want 2 naming the key", code, errOut)
	}
}
