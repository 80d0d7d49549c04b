package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ovstream/ovstream/config"

	"github.com/IBM/sarama"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ovstream/ovstream/consumer"
)

// cleanEnv unsets (sets empty, which counts as unset) every variable that
// settles a flag, so that the machine's DATABASE_URL or OVSTREAM_* do not
// leak into a test.
func cleanEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "OVSTREAM_") {
			t.Setenv(name, "")
		}
	}
	for _, name := range config.ConventionalEnv {
		t.Setenv(name, "")
	}
}

// ovstream runs the command line in-process and returns stdout, stderr and
// the exit code.
func ovstream(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := execute(context.Background(), args, &out, &errb)
	return out.String(), errb.String(), code
}

// commandPaths returns the path of every command users can call, e.g.
// ["dlq", "replay"], from the tree itself.
func commandPaths(c *cobra.Command, prefix []string) [][]string {
	var out [][]string
	for _, sub := range c.Commands() {
		if !sub.IsAvailableCommand() {
			continue
		}
		p := append(append([]string{}, prefix...), sub.Name())
		out = append(out, p)
		out = append(out, commandPaths(sub, p)...)
	}
	return out
}

// Every command's --help (and -h) prints its usage on stdout, nothing on
// stderr, and exits 0 (run and demo exited 2 before).
func TestHelpOfEveryCommandOnStdoutExit0(t *testing.T) {
	cleanEnv(t)
	paths := commandPaths(newRoot(io.Discard, io.Discard), nil)
	seen := map[string]bool{}
	for _, p := range paths {
		seen[strings.Join(p, " ")] = true
	}
	for _, want := range []string{"run", "demo", "migrate", "migrate up", "migrate down", "migrate version", "migrate force",
		"broker", "produce", "status", "healthcheck", "dlq", "dlq list", "dlq replay", "report", "export", "export otp-empirical-delay", "version", "completion"} {
		if !seen[want] {
			t.Errorf("command %q is missing from the tree %v", want, paths)
		}
	}
	for _, p := range append(paths, []string{}) {
		for _, h := range []string{"--help", "-h"} {
			out, errOut, code := ovstream(t, append(p, h)...)
			usage := "Usage:\n  " + strings.Join(append([]string{"ovstream"}, p...), " ")
			if code != 0 || errOut != "" || !strings.Contains(out, usage) {
				t.Errorf("%v %s: exit %d, stderr %q, stdout without %q:\n%s", p, h, code, errOut, usage, out)
			}
		}
	}
}

// demo's help lists the run flags with the demo's defaults, and not the flags
// the demo sets itself.
func TestDemoHelpOmitsWhatDemoSets(t *testing.T) {
	cleanEnv(t)
	out, _, code := ovstream(t, "demo", "--help")
	if code != 0 {
		t.Fatalf("demo --help: exit %d", code)
	}
	for _, gone := range []string{"--brokers", "--drain", "--migrate", "--kafka-tls", "--kafka-sasl", "--pipeline", "--retention", "--dead-letter-retention"} {
		if regexp.MustCompile(`(?m)^\s+` + gone + `\b`).MatchString(out) {
			t.Errorf("demo --help lists %s, which the demo sets itself:\n%s", gone, out)
		}
	}
	for _, want := range []string{`--allowed-lateness duration .*\(default 10m\)`,
		`--flush-interval duration .*\(default 1s\)`, `--window duration`, `--data string`} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("demo --help does not match %q:\n%s", want, out)
		}
	}
}

// --version and `version` print the same line: the module version from the
// build info ("(devel)" when none) and the Go version; exit 0.
func TestVersion(t *testing.T) {
	cleanEnv(t)
	flagOut, _, code1 := ovstream(t, "--version")
	cmdOut, _, code2 := ovstream(t, "version")
	if code1 != 0 || code2 != 0 || flagOut != cmdOut {
		t.Fatalf("--version exit %d %q; version exit %d %q: want both 0 and equal", code1, flagOut, code2, cmdOut)
	}
	if !regexp.MustCompile(`^ovstream (v\S+|\(devel\)) \(commit \S+.*; ` + regexp.QuoteMeta(runtime.Version()) + ` \S+/\S+\)\n$`).MatchString(flagOut) {
		t.Errorf("--version = %q", flagOut)
	}
}

// Usage errors: a short message naming what is wrong, the pointer to the
// command's help, exit 2, nothing on stdout; suggestions for typos.
func TestUsageErrorsAreShort(t *testing.T) {
	cleanEnv(t)
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"stauts"}, []string{`unknown command "stauts"`, "Did you mean this?\n\tstatus", "Run 'ovstream --help' for usage."}},
		{[]string{"rnu", "--window", "1m"}, []string{`unknown command "rnu"`, "\trun", "Run 'ovstream --help'"}},
		{[]string{"run", "--windw", "1m"}, []string{"unknown flag: --windw (did you mean --window?)", "Run 'ovstream run --help' for usage."}},
		{[]string{"status", "--jsn"}, []string{"unknown flag: --jsn (did you mean --json?)", "Run 'ovstream status --help'"}},
		{[]string{"run", "--window", "5"}, []string{`invalid argument "5" for "--window"`, "missing unit"}},
		{[]string{"migrate", "upp"}, []string{`unknown subcommand "upp"`, "\tup", "Run 'ovstream migrate --help'"}},
		{[]string{"migrate"}, []string{"a subcommand is required: down, force, up, version"}},
		{[]string{"dlq", "lst"}, []string{`unknown subcommand "lst"`, "\tlist"}},
		{[]string{"migrate", "force"}, []string{"want one argument, the version V"}},
		{[]string{"migrate", "force", "x"}, []string{`version "x" is not a number`}},
		{[]string{"migrate", "--database-url", "postgres://127.0.0.1:1/x", "down"}, []string{"add --yes to confirm", "Run 'ovstream migrate down --help'"}},
	} {
		out, errOut, code := ovstream(t, tc.args...)
		if code != exitUsage || out != "" || strings.Count(errOut, "\n") > 6 {
			t.Errorf("%v: exit %d, stdout %q, stderr of %d lines; want 2, nothing, a short message:\n%s",
				tc.args, code, out, strings.Count(errOut, "\n"), errOut)
		}
		for _, w := range tc.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("%v: stderr does not say %q:\n%s", tc.args, w, errOut)
			}
		}
	}
	// `ovstream` alone: the command list, as a usage error.
	if out, errOut, code := ovstream(t); code != exitUsage || out != "" || !strings.Contains(errOut, "Available Commands:") {
		t.Errorf("ovstream alone: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// A command that takes no positional argument refuses one (they were
// silently ignored).
func TestStrayArgumentsRefused(t *testing.T) {
	cleanEnv(t)
	for _, args := range [][]string{{"run"}, {"demo"}, {"status"}, {"dlq", "list"}, {"dlq", "replay", "--to", "t"},
		{"report", "--from", "2016-05-19", "--to", "2016-05-20"}, {"broker"}, {"healthcheck"}, {"version"},
		{"export", "otp-empirical-delay", "--out", "x.zip"}, {"migrate", "up"}, {"migrate", "version"}, {"migrate", "down", "5", "--yes"}, {"migrate", "force", "1"}} {
		_, errOut, code := ovstream(t, append(args, "stray")...)
		if code != exitUsage || !strings.Contains(errOut, `unexpected argument "stray"`) && !strings.Contains(errOut, "want one argument") {
			t.Errorf("%v stray: exit %d, stderr %q; want 2 naming the argument", args, code, errOut)
		}
	}
}

// A zero or negative duration where it makes no sense is a usage error naming
// the flag, from the command line and from the environment alike; zero is
// allowed where the flag says what it means.
func TestZeroDurationsNameTheFlag(t *testing.T) {
	cleanEnv(t)
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"run", "--window", "0"}, "--window 0s: want a positive duration"},
		{[]string{"run", "--window", "500ms"}, "--window 500ms: want at least 1s"},
		{[]string{"run", "--idle-timeout", "0s"}, "--idle-timeout 0s: want a positive duration"},
		{[]string{"run", "--flush-interval", "0s"}, "--flush-interval 0s"},
		{[]string{"run", "--lease", "0s"}, "--lease 0s"},
		{[]string{"run", "--connect-timeout", "0s"}, "--connect-timeout 0s"},
		{[]string{"run", "--max-future-skew", "0s"}, "--max-future-skew 0s"},
		{[]string{"run", "--metadata-refresh", "0s"}, "--metadata-refresh 0s"},
		{[]string{"run", "--allowed-lateness", "-1s"}, "--allowed-lateness -1s is negative: want 0 (no lateness) or a positive duration"},
		{[]string{"run", "--progress-interval", "-1s"}, "--progress-interval -1s is negative"},
		{[]string{"run", "--pipeline", ""}, "--pipeline is empty"},
		{[]string{"run", "--start-offset", "first"}, `--start-offset "first"`},
		{[]string{"run", "--topics", "a,a"}, `--topics "a,a"`},
		{[]string{"demo", "--window", "0s"}, "--window 0s"},
		{[]string{"status", "--lease", "0s"}, "--lease 0s"},
		{[]string{"status", "--pipeline", ""}, "--pipeline is empty"},
		{[]string{"dlq", "list", "--pipeline", ""}, "--pipeline is empty"},
		{[]string{"report", "--pipeline", "", "--from", "2016-05-19", "--to", "2016-05-20"}, "--pipeline is empty"},
		{[]string{"produce", "--interval", "0s", "--gtfs-rt-url", "http://127.0.0.1:1/x"}, "--interval 0s"},
		{[]string{"produce", "--http-timeout", "0s", "--gtfs-rt-url", "http://127.0.0.1:1/x"}, "--http-timeout 0s"},
		{[]string{"produce", "--retention", "0s", "--gtfs-rt-url", "http://127.0.0.1:1/x"}, "--retention 0s"},
		{[]string{"produce", "--progress-interval", "-1s", "--gtfs-rt", "x"}, "--progress-interval -1s is negative"},
		{[]string{"healthcheck", "--timeout", "0s"}, "--timeout 0s"},
	} {
		_, errOut, code := ovstream(t, tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.flag) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, errOut, tc.flag)
		}
	}
	t.Setenv("OVSTREAM_IDLE_TIMEOUT", "0s")
	if _, errOut, code := ovstream(t, "run"); code != exitUsage ||
		!strings.Contains(errOut, "--idle-timeout 0s (from env OVSTREAM_IDLE_TIMEOUT): want a positive duration") {
		t.Errorf("OVSTREAM_IDLE_TIMEOUT=0s: exit %d, stderr %q", code, errOut)
	}
}

// startLine runs `run` against a broker address nothing listens on (it fails
// at once, exit 1, after its start-up line) and returns that line.
func startLine(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, code := ovstream(t, append([]string{"run", "--brokers", "127.0.0.1:1", "--metrics-addr", "", "--connect-timeout", "1ms"}, args...)...)
	if code != exitError {
		t.Fatalf("run %v: exit %d, want 1 (Kafka unreachable)\nstdout %s\nstderr %s", args, code, out, errOut)
	}
	for _, l := range strings.Split(errOut, "\n") {
		if strings.Contains(l, "msg=starting ") {
			return l
		}
	}
	t.Fatalf("run %v: no start-up line:\n%s", args, errOut)
	return ""
}

// field returns key=value of a logfmt line (value unquoted).
func field(line, key string) string {
	m := regexp.MustCompile(` ` + key + `=("[^"]*"|\S*)`).FindStringSubmatch(line)
	if m == nil {
		return "<none>"
	}
	return strings.Trim(m[1], `"`)
}

// flag > environment > config file > default, seen in the effective settings
// of run's start-up line; the command's section of the file wins over its
// top; the conventional DATABASE_URL comes after OVSTREAM_DATABASE_URL, and
// both before the file; the database password shows nowhere.
func TestSettingsPrecedence(t *testing.T) {
	cleanEnv(t)
	file := filepath.Join(t.TempDir(), "ovstream.toml")
	if err := os.WriteFile(file, []byte(`
pipeline = "from-file-top"
window = "15m"
database-url = "postgres://file:Pw-file-1234@file.example:5432/f?sslmode=disable"
[run]
pipeline = "from-file-run"
allowed-lateness = "7m"
[status]
pipeline = "for-status-only"
`), 0o600); err != nil {
		t.Fatal(err)
	}
	check := func(what, line, key, want string) {
		t.Helper()
		if got := field(line, key); got != want {
			t.Errorf("%s: %s=%s, want %s\n%s", what, key, got, want, line)
		}
	}
	check("default", startLine(t), "pipeline", "ovstream")
	line := startLine(t, "--config", file)
	check("file", line, "pipeline", "from-file-run")
	check("file top", line, "window", "15m0s")
	check("file section", line, "allowed_lateness", "7m0s")
	check("file", line, "database", "postgres://file@file.example:5432/f?sslmode=disable")
	t.Setenv("OVSTREAM_PIPELINE", "from-env")
	t.Setenv("DATABASE_URL", "postgres://conv:Pw-conv-1234@conv.example:5432/c?sslmode=disable")
	line = startLine(t, "--config", file)
	check("env over file", line, "pipeline", "from-env")
	check("DATABASE_URL over file", line, "database", "postgres://conv@conv.example:5432/c?sslmode=disable")
	t.Setenv("OVSTREAM_DATABASE_URL", "postgres://ovs:Pw-ovs-12345@ovs.example:5432/o?sslmode=disable")
	check("OVSTREAM_DATABASE_URL over DATABASE_URL", startLine(t, "--config", file), "database", "postgres://ovs@ovs.example:5432/o?sslmode=disable")
	line = startLine(t, "--config", file, "--pipeline", "from-flag", "--database-url", "postgres://flag@flag.example:5432/x")
	check("flag over env", line, "pipeline", "from-flag")
	check("flag over env", line, "database", "postgres://flag@flag.example:5432/x")
	check("file under the flags", line, "window", "15m0s")
	// OVSTREAM_CONFIG names the file too.
	t.Setenv("OVSTREAM_PIPELINE", "")
	t.Setenv("OVSTREAM_CONFIG", file)
	check("OVSTREAM_CONFIG", startLine(t), "pipeline", "from-file-run")
	for _, pw := range []string{"Pw-file-1234", "Pw-conv-1234", "Pw-ovs-12345"} {
		if _, errOut, _ := ovstream(t, "run", "--brokers", "127.0.0.1:1", "--metrics-addr", "", "--connect-timeout", "1ms"); strings.Contains(errOut, pw) {
			t.Errorf("run printed the password %s:\n%s", pw, errOut)
		}
	}
}

// A repeatable flag takes a list from the file; a mistyped key, a key of a
// command-line-only flag or a value of the wrong shape are errors naming the
// file and key.
func TestConfigFileKeys(t *testing.T) {
	cleanEnv(t)
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		body, want string
	}{
		{"windw = \"1m\"\n", "windw: no such flag"},
		{"[runn]\nwindow = \"1m\"\n", `runn.window: no command "runn" to hold it`},
		{"[status]\nwindow = \"1m\"\n", "status.window: no such flag"},
		{"[migrate.down]\nyes = true\n", "migrate.down.yes: --yes is taken from the command line only"},
		{"window = 5\n", `window: invalid argument "5" for "--window" flag`},
		{"[run]\npipeline = [\"a\", \"b\"]\n", "run.pipeline: --pipeline takes one value, not a list"},
		{"window = \n", "not TOML"},
	} {
		p := write("bad.toml", tc.body)
		if _, errOut, code := ovstream(t, "run", "--config", p); code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("config %q: exit %d, stderr %q; want 2 and %q", tc.body, code, errOut, tc.want)
		}
	}
	if _, errOut, code := ovstream(t, "run", "--config", filepath.Join(dir, "missing.toml")); code != exitUsage || !strings.Contains(errOut, "missing.toml") {
		t.Errorf("missing config file: exit %d, stderr %q", code, errOut)
	}

	// A list for a repeatable flag, settled on a command built here.
	var f produceFlags
	c := &cobra.Command{Use: "produce", RunE: func(*cobra.Command, []string) error { return nil }}
	f.register(c.Flags())
	root := &cobra.Command{Use: "ovstream", PersistentPreRunE: config.SettleAndCheck}
	root.PersistentFlags().String(config.Flag, "", "")
	root.AddCommand(c)
	p := write("lists.toml", "[produce]\ngtfs-rt-url = [\"http://a.example/tu\", \"http://b.example/vp\"]\nhttp-header = [\"X-Key: 1,2\"]\n")
	root.SetArgs([]string{"produce", "--config", p})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if strings.Join(f.feedURLs, " ") != "http://a.example/tu http://b.example/vp" || len(f.headers) != 1 || f.headers[0] != "X-Key: 1,2" {
		t.Errorf("from the file: --gtfs-rt-url %q, --http-header %q", f.feedURLs, f.headers)
	}
}

// The SASL password is not taken on the command line; from the environment
// (OVSTREAM_KAFKA_SASL_PASSWORD over KAFKA_SASL_PASSWORD) or the file it is.
func TestSASLPasswordNotOnTheCommandLine(t *testing.T) {
	cleanEnv(t)
	_, errOut, code := ovstream(t, "status", "--kafka-sasl-password", "Sasl-pw-9876")
	if code != exitUsage || !strings.Contains(errOut, "--kafka-sasl-password is not taken on the command line") || strings.Contains(errOut, "Sasl-pw-9876") {
		t.Errorf("--kafka-sasl-password on the command line: exit %d, stderr %q", code, errOut)
	}
	if out, _, _ := ovstream(t, "status", "--help"); strings.Contains(out, "kafka-sasl-password") {
		t.Errorf("status --help lists the hidden password flag:\n%s", out)
	}
	settled := func(env map[string]string, file string) string {
		t.Helper()
		var k kafkaFlags
		c := &cobra.Command{Use: "status"}
		k.register(c.Flags())
		c.Flags().String(config.Flag, file, "")
		if file != "" {
			c.Flags().Lookup(config.Flag).Changed = true
		}
		if _, err := config.Settle(c, func(n string) (string, bool) { v, ok := env[n]; return v, ok }); err != nil {
			t.Fatal(err)
		}
		return k.password()
	}
	file := filepath.Join(t.TempDir(), "s.toml")
	if err := os.WriteFile(file, []byte("kafka-sasl-password = \"from-file\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		env  map[string]string
		file string
		want string
	}{
		{map[string]string{"KAFKA_SASL_PASSWORD": "conv"}, "", "conv"},
		{map[string]string{"KAFKA_SASL_PASSWORD": "conv", "OVSTREAM_KAFKA_SASL_PASSWORD": "ovs"}, file, "ovs"},
		{map[string]string{"KAFKA_SASL_PASSWORD": "conv"}, file, "conv"},
		{nil, file, "from-file"},
		{map[string]string{"KAFKA_SASL_PASSWORD": ""}, "", ""},
	} {
		if got := settled(tc.env, tc.file); got != tc.want {
			t.Errorf("env %v, file %q: password %q, want %q", tc.env, tc.file, got, tc.want)
		}
	}
}

// --allowed-lateness 0s reaches the consumer as zero: Run validates the
// Config again, and 0 used to become the default 2m there.
func TestZeroLatenessMeansZero(t *testing.T) {
	cleanEnv(t)
	lateness := func(args ...string) time.Duration {
		t.Helper()
		var f runFlags
		fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
		f.register(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		cfg, err := f.config(slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		if err := cfg.Validate(); err != nil { // again, as consumer.Run does
			t.Fatal(err)
		}
		return cfg.Lateness()
	}
	if got := lateness("--allowed-lateness", "0s"); got != 0 {
		t.Errorf("--allowed-lateness 0s: the consumer uses %v", got)
	}
	if got := lateness(); got != 2*time.Minute {
		t.Errorf("no --allowed-lateness: the consumer uses %v, want the default 2m", got)
	}
	if got := lateness("--allowed-lateness", "90s"); got != 90*time.Second {
		t.Errorf("--allowed-lateness 90s: the consumer uses %v", got)
	}
	if got := field(startLine(t, "--allowed-lateness", "0s"), "allowed_lateness"); got != "0s" {
		t.Errorf("start-up line of --allowed-lateness 0s: allowed_lateness=%s", got)
	}
	// A library user's zero still takes the default; NoLateness is zero.
	for _, tc := range []struct {
		set, want time.Duration
	}{{0, 2 * time.Minute}, {consumer.NoLateness, 0}, {time.Minute, time.Minute}} {
		cfg := consumer.Config{Brokers: []string{"b:1"}, PredictionsTopic: "p", Owner: "o", AllowedLateness: tc.set}
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		cfg = cfg.WithDefaults().WithDefaults()
		if err := cfg.Validate(); err != nil || cfg.Lateness() != tc.want {
			t.Errorf("AllowedLateness %v: Lateness() %v with the defaults set twice (%v), want %v", tc.set, cfg.Lateness(), err, tc.want)
		}
	}
	cfg := consumer.Config{Brokers: []string{"b:1"}, PredictionsTopic: "p", Owner: "o", AllowedLateness: -time.Second}
	if err := cfg.Validate(); err == nil {
		t.Error("AllowedLateness -1s: Validate accepted it")
	}
}

// Errors that wrap sarama's say "kafka:" once: sarama's own errors start with
// it too ("kafka: cannot connect: ADDR: kafka: invalid configuration ...").
func TestKafkaErrorsSayKafkaOnce(t *testing.T) {
	c := sarama.NewConfig()
	c.Net.SASL.Enable = true // without a user: sarama's configuration error
	err := kafkaPreflight([]string{"127.0.0.1:1"}, c)
	if err == nil || strings.Count(err.Error(), "kafka:") != 1 || !strings.Contains(err.Error(), "invalid configuration") {
		t.Errorf("preflight error %q: want one kafka: prefix and sarama's reason", err)
	}
}

// Shell completion scripts for bash, zsh and fish, on stdout.
func TestCompletionScripts(t *testing.T) {
	cleanEnv(t)
	for _, sh := range []string{"bash", "zsh", "fish"} {
		out, errOut, code := ovstream(t, "completion", sh)
		if code != 0 || errOut != "" || !strings.Contains(out, "ovstream") || len(out) < 1000 {
			t.Errorf("completion %s: exit %d, stderr %q, %d bytes", sh, code, errOut, len(out))
		}
	}
	// What a shell asks while completing "ovstream st": the commands that fit.
	out, _, code := ovstream(t, "__complete", "st")
	if code != 0 || !strings.Contains(out, "status") {
		t.Errorf("__complete st: exit %d, %q", code, out)
	}
}

// The config file example of docs/configuration.md is valid for run and
// status, and sets what it says.
func TestDocsConfigExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), "# Configuration")
	_, block, ok2 := strings.Cut(after, "```toml\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/configuration.md has no ```toml block under # Configuration")
	}
	file := filepath.Join(t.TempDir(), "ovstream.toml")
	if err := os.WriteFile(file, []byte(block), 0o600); err != nil {
		t.Fatal(err)
	}
	for cmd, want := range map[string]map[string]string{
		"run":    {"pipeline": "nl-ovapi", "allowed-lateness": "5m0s", "log-format": "json", "kafka-sasl-password": "...", "window": "5m0s"},
		"status": {"pipeline": "nl-ovapi", "lease": "15s", "brokers": "kafka-1:9092,kafka-2:9092"},
	} {
		c, _, err := newRoot(io.Discard, io.Discard).Find([]string{cmd})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.ParseFlags([]string{"--config", file}); err != nil {
			t.Fatal(err)
		}
		from, err := config.Settle(c, func(string) (string, bool) { return "", false })
		if err == nil {
			err = config.CheckValues(c.Flags(), from)
		}
		if err != nil {
			t.Fatalf("%s with the config of docs/configuration.md: %v", cmd, err)
		}
		for name, v := range want {
			if got := c.Flags().Lookup(name).Value.String(); got != v {
				t.Errorf("%s --%s = %q from the config of docs/configuration.md, want %q", cmd, name, got, v)
			}
		}
	}
}
