//go:build integration

package ops

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ovstream/ovstream/integration/harness"
)

// The binary as a user meets it: every command's --help on stdout with exit
// 0; --version names the module version and commit that `go version -m`
// reads from the same binary; a mistyped command or flag and a stray
// argument are exit 2 with a short message; a zero duration is exit 2 naming
// the flag.
func TestCLIHelpVersionAndUsageErrors(t *testing.T) {
	for _, cmd := range []string{"", "run", "demo", "migrate", "migrate up", "migrate down", "migrate version", "migrate force",
		"broker", "produce", "status", "healthcheck", "dlq", "dlq list", "dlq replay", "report", "version", "completion",
		"crashpoints"} {
		args := append(strings.Fields(cmd), "--help")
		out, errOut, code := harness.RunCLI(t, harness.CliEnv(), args...)
		if code != 0 || errOut != "" || !strings.Contains(out, "Usage:\n  "+strings.TrimSpace("ovstream "+cmd)) {
			t.Errorf("ovstream %s --help: exit %d, stderr %q, stdout:\n%s", cmd, code, errOut, out)
		}
	}

	// --version against the build info as `go version -m` reads it.
	info, err := exec.Command("go", "version", "-m", harness.OvstreamBin(t)).Output()
	if err != nil {
		t.Fatal(err)
	}
	mod := regexp.MustCompile(`(?m)^\s+mod\s+github.com/ovstream/ovstream\s+(\S+)`).FindSubmatch(info)
	rev := regexp.MustCompile(`(?m)^\s+build\s+vcs.revision=(\S+)`).FindSubmatch(info)
	if mod == nil {
		t.Fatalf("go version -m: no main module line:\n%s", info)
	}
	want := "ovstream " + string(mod[1]) + " (commit "
	if rev != nil {
		want += string(rev[1])
	}
	for _, args := range [][]string{{"--version"}, {"version"}} {
		out, _, code := harness.RunCLI(t, harness.CliEnv(), args...)
		if code != 0 || !strings.HasPrefix(out, want) {
			t.Errorf("ovstream %v: exit %d, %q; want it to start with %q (go version -m:\n%s)", args, code, out, want, info)
		}
	}

	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"stauts"}, "Did you mean this?\n\tstatus"},
		{[]string{"run", "--windw", "1m"}, "unknown flag: --windw (did you mean --window?)"},
		{[]string{"status", "extra"}, `unexpected argument "extra"`},
		{[]string{"run", "--idle-timeout", "0"}, "--idle-timeout 0s: want a positive duration"},
		{[]string{"run", "--pipeline", ""}, "--pipeline is empty"},
	} {
		out, errOut, code := harness.RunCLI(t, harness.CliEnv(), tc.args...)
		hint := "Run 'ovstream"
		if code != 2 || out != "" || !strings.Contains(errOut, tc.says) || !strings.Contains(errOut, hint) || strings.Count(errOut, "\n") > 6 {
			t.Errorf("ovstream %v: exit %d, stdout %q, stderr:\n%s\nwant 2 and a short message with %q and %q", tc.args, code, out, errOut, tc.says, hint)
		}
	}
}

// flag > environment > config file > default, for --pipeline, as run's
// start-up line shows the effective settings (run then fails: no Kafka at
// 127.0.0.1:1, exit 1); OVSTREAM_DATABASE_URL wins over DATABASE_URL, and the
// password shows nowhere.
func TestCLISettingsPrecedence(t *testing.T) {
	file := filepath.Join(t.TempDir(), "ovstream.toml")
	if err := os.WriteFile(file, []byte("pipeline = \"top-of-file\"\n[run]\npipeline = \"from-file\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	started := func(env []string, args ...string) string {
		t.Helper()
		out, errOut, code := harness.RunCLI(t, harness.CliEnv(env...), append([]string{"run", "--brokers", "127.0.0.1:1", "--metrics-addr", "", "--connect-timeout", "1ms"}, args...)...)
		if code != 1 {
			t.Fatalf("run %v: exit %d, want 1\n%s%s", args, code, out, errOut)
		}
		if strings.Contains(errOut, "Pw-5ecret") {
			t.Errorf("run printed the database password:\n%s", errOut)
		}
		for _, l := range strings.Split(errOut, "\n") {
			if strings.Contains(l, "msg=starting") {
				return l
			}
		}
		t.Fatalf("run %v: no start-up line:\n%s", args, errOut)
		return ""
	}
	for _, tc := range []struct {
		what string
		env  []string
		args []string
		want string
	}{
		{"default", nil, nil, " pipeline=ovstream "},
		{"file", nil, []string{"--config", file}, " pipeline=from-file "},
		{"env over file", []string{"OVSTREAM_PIPELINE=from-env"}, []string{"--config", file}, " pipeline=from-env "},
		{"flag over env", []string{"OVSTREAM_PIPELINE=from-env"}, []string{"--config", file, "--pipeline", "from-flag"}, " pipeline=from-flag "},
		{"DATABASE_URL", []string{"DATABASE_URL=postgres://conv:Pw-5ecret@conv.example/c"}, nil, ` database=postgres://conv@conv.example/c `},
		{"OVSTREAM_DATABASE_URL over DATABASE_URL", []string{"DATABASE_URL=postgres://conv:Pw-5ecret@conv.example/c",
			"OVSTREAM_DATABASE_URL=postgres://ovs:Pw-5ecret@ovs.example/o"}, nil, ` database=postgres://ovs@ovs.example/o `},
	} {
		if line := started(tc.env, tc.args...); !strings.Contains(line, tc.want) {
			t.Errorf("%s: start-up line without %q:\n%s", tc.what, tc.want, line)
		}
	}
}

// --allowed-lateness 0s means zero (it used to mean the default 2m): the
// watermark stored with the commit is the partition's max event time itself,
// so the window that ended before it is written, and the one holding it is not.
func TestCLIZeroLatenessReachesTheWatermark(t *testing.T) {
	addr, db := harness.StartBroker(t), harness.FreshDB(t)
	base := time.Date(2016, 5, 18, 20, 0, 0, 0, time.UTC)
	harness.ProduceToZero(t, addr, harness.Pred("T", "L", "S", "AT", 60, harness.Rfc(base.Add(time.Minute))),
		harness.Pred("T", "L", "S", "AT", 90, harness.Rfc(base.Add(6*time.Minute+30*time.Second))))
	p := harness.StartOvstream(t, harness.CliEnv(), harness.RunArgs(db, addr, "--allowed-lateness", "0s", "--idle-timeout", "1h")...)
	const utc = `to_char(watermark AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')`
	wantWM := "[" + harness.Rfc(base.Add(6*time.Minute+30*time.Second)) + "]"
	var got []string
	// The watermark is committed with the offsets; a commit after both
	// records were read holds both times.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		got = harness.Dump(t, db, `SELECT `+utc+` FROM stream_positions WHERE topic = 'arrival_predictions' AND partition = 0 AND consumed_offset = 2`)
		if len(got) == 1 && got[0] == wantWM {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stored watermark %v after both records, want %s: the max event time (lateness 0); output:\n%s", got, wantWM, p.Output())
		}
	}
	if w := harness.Dump(t, db, `SELECT to_char(window_start AT TIME ZONE 'UTC', 'HH24:MI'), event_count FROM delay_aggregates
		WHERE dimension = 'network'`); len(w) != 1 || w[0] != "[20:00 1]" {
		t.Errorf("windows written %v, want only [20:00, 20:05) with its 1 event", w)
	}
	_ = p.Cmd.Process.Signal(harness.Sigterm)
	if code := p.Wait(t, time.Minute); code != 0 {
		t.Errorf("SIGTERM: exit %d\n%s", code, p.Output())
	}
}

// A --pipeline that is blank, padded with white space or holds a control
// character is a usage error naming the flag (exit 2, one short message), on
// every command that takes it and from the environment alike, before any
// connection; a name with inner spaces and non-ASCII letters is fine (run
// then fails on the unreachable Kafka, exit 1).
func TestCLIPipelineNameRejected(t *testing.T) {
	db := "--database-url=postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=1"
	cmds := [][]string{
		{"run", db, "--brokers", "127.0.0.1:1", "--metrics-addr", "", "--connect-timeout", "1ms"},
		{"status", db}, {"dlq", "list", db}, {"serve", db, "--addr", "127.0.0.1:0"},
		{"report", db, "--from", "2016-05-19", "--to", "2016-05-20"},
	}
	for _, name := range []string{" ", "\t", " ovstream", "ovstream ", "ovstream\n", "ov\tstream", "ov\x1bstream", "ov\x7fstream", "ov\u0085stream", "ov\u200bstream"} {
		for _, cmd := range cmds {
			args := append(slices.Clone(cmd), "--pipeline", name)
			out, errOut, code := harness.RunCLI(t, harness.CliEnv(), args...)
			if code != 2 || out != "" || !strings.Contains(errOut, "--pipeline "+strconv.Quote(name)) ||
				!strings.Contains(errOut, "Run 'ovstream") || strings.Count(errOut, "\n") > 3 {
				t.Errorf("ovstream %q: exit %d, stdout %q, stderr:\n%s\nwant 2 and a short message naming --pipeline %q", args, code, out, errOut, name)
			}
		}
	}
	_, errOut, code := harness.RunCLI(t, harness.CliEnv("OVSTREAM_PIPELINE= x"), cmds[0]...)
	if code != 2 || !strings.Contains(errOut, `--pipeline " x" (from env OVSTREAM_PIPELINE)`) {
		t.Errorf("OVSTREAM_PIPELINE=' x': exit %d, stderr:\n%s", code, errOut)
	}
	_, errOut, code = harness.RunCLI(t, harness.CliEnv(), append(slices.Clone(cmds[0]), "--pipeline", "Nederland – ov 2")...)
	if code != 1 || !strings.Contains(errOut, "kafka: cannot connect") {
		t.Errorf("--pipeline 'Nederland – ov 2': exit %d, want 1 (Kafka unreachable), stderr:\n%s", code, errOut)
	}
}
