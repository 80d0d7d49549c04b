//go:build integration

package realkafka_test

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ovstream/ovstream/integration/harness"
)

// noPassword fails the test when out holds the shared node's SASL password
// or the wrong one the failure cases send.
func noPassword(t *testing.T, what, out string) {
	t.Helper()
	for _, s := range []string{saslPassword, "WrongPass-5e5e"} {
		if strings.Contains(out, s) {
			t.Errorf("%s shows the password %s...:\n%s", what, s[:6], out)
		}
	}
}

// produce and run over SASL_SSL (SCRAM-SHA-512, TLS from the harness's
// PEM files) with the README's flags: the drain equals the SQL oracle and
// the group-offset mirror works. A wrong password, an untrusted certificate
// and an unreachable broker each end the run with exit 1 and one error line
// ("ovstream run: kafka: cannot connect: BROKER: CAUSE") naming the broker
// and the cause. The password is in no output of
// ovstream and in no Kafka log. status and dlq replay work over it too.
func TestRealKafkaSASLSSL(t *testing.T) {
	c := sharedKafka(t)
	pred, pos := kafkaTopics(t, c, "sasl", nil)
	db := harness.FreshDB(t)
	sec := func(brokers, ca string) []string {
		return []string{"--brokers", brokers, "--kafka-tls-ca", ca, "--kafka-sasl-mechanism", "SCRAM-SHA-512", "--kafka-sasl-user", saslUser}
	}
	env := []string{"KAFKA_SASL_PASSWORD=" + saslPassword}
	out, errOut, code := harness.RunCLI(t, env, append(append([]string{"produce"}, sec(c.SASLBootstrap(), c.TLS.CAFile)...),
		"--operator", "AT", "--predictions-topic", pred, "--positions-topic", pos, "--gtfs-rt", "../../testdata/auckland-20160519-peak10min")...)
	noPassword(t, "produce", out+errOut)
	if code != 0 || !strings.Contains(out, "4610") {
		t.Fatalf("produce over SASL_SSL: exit %d, want 0 and 4610 predictions: %s%s", code, out, errOut)
	}
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	if err := os.WriteFile(bad, []byte(harness.BadLines[1]+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = harness.RunCLI(t, env, append(append([]string{"produce"}, sec(c.SASLBootstrap(), c.TLS.CAFile)...),
		"--jsonl", bad, "--topic", pred)...)
	noPassword(t, "produce --jsonl", out+errOut)
	if code != 0 {
		t.Fatalf("produce --jsonl over SASL_SSL: exit %d: %s%s", code, out, errOut)
	}
	runSecure := func(env []string, brokers, ca string) (string, int) {
		t.Helper()
		args := append([]string{"run", "--drain", "--database-url", db, "--pipeline", "rk_sasl", "--topics", pred + "," + pos,
			"--metrics-addr", "", "--flush-interval", "100ms", "--allowed-lateness", "10m", "--log-level", "debug",
			"--connect-timeout", "2s"}, sec(brokers, ca)...)
		p := harness.StartOvstream(t, env, args...)
		code := p.Wait(t, 2*time.Minute)
		return p.Output(), code
	}
	out, code = runSecure(env, c.SASLBootstrap(), c.TLS.CAFile)
	noPassword(t, "run", out)
	if code != 0 {
		t.Fatalf("run --drain over SASL_SSL: exit %d\n%s", code, harness.Tail(out, 30))
	}
	if strings.Contains(out, "cannot commit offsets to the Kafka consumer group") {
		t.Errorf("the group-offset mirror failed over SASL_SSL:\n%s", out)
	}
	rows := aggregatesEqualOracle(t, db, c.Bootstrap(), pred, 4611)

	// status and dlq replay over SASL_SSL: lag 0 on the 9 partitions; the
	// one dead letter (the bad line) re-produced byte for byte.
	dbEnv := append(slices.Clone(env), "DATABASE_URL="+db)
	sout, serr, code := harness.RunCLI(t, dbEnv, append([]string{"status", "--json", "--pipeline", "rk_sasl", "--topics", pred + "," + pos},
		sec(c.SASLBootstrap(), c.TLS.CAFile)...)...)
	noPassword(t, "status", sout+serr)
	var st harness.StatusJSON
	if code != 0 || json.Unmarshal([]byte(sout), &st) != nil || st.Lag() != 0 || len(st.Partitions) != 9 {
		t.Errorf("status over SASL_SSL: exit %d, lag %d, %d partitions; want 0, 0, 9\n%s%s", code, st.Lag(), len(st.Partitions), sout, serr)
	}
	if err := c.CreateTopic("sasl_replayed", 1, 0, nil); err != nil {
		t.Fatal(err)
	}
	rout, rerr, code := harness.RunCLI(t, dbEnv, append([]string{"dlq", "replay", "--pipeline", "rk_sasl", "--to", "sasl_replayed"},
		sec(c.SASLBootstrap(), c.TLS.CAFile)...)...)
	noPassword(t, "dlq replay", rout+rerr)
	if code != 0 || rout != "replayed 1 dead letters to sasl_replayed\n" {
		t.Fatalf("dlq replay over SASL_SSL: exit %d: %s%s", code, rout, rerr)
	}
	replayed := harness.ReadTopic(t, c.Nodes[0].Addr(), "sasl_replayed")
	if len(replayed) != 1 || string(replayed[0].Value) != harness.BadLines[1] {
		t.Fatalf("sasl_replayed holds %d records, want 1 with the bad line %q", len(replayed), harness.BadLines[1])
	}
	headers := map[string]string{}
	for _, h := range replayed[0].Headers {
		headers[string(h.Key)] = string(h.Value)
	}
	src := harness.Dump(t, db, `SELECT topic || '/' || partition || '/' || "offset" FROM dead_letters`)
	if len(src) != 1 || "["+headers["ovstream-dlq-source"]+"]" != src[0] || headers["ovstream-dlq-reason"] != "decode" {
		t.Errorf("replayed headers %v, want source %v and reason decode", headers, src)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	broker := c.SASLBootstrap()
	for _, tc := range []struct {
		what, brokers, ca, password string
		want                        []string
	}{
		{"wrong password", broker, c.TLS.CAFile, "WrongPass-5e5e", []string{"cannot connect: " + broker, "SASL Authentication failed", "invalid credentials"}},
		{"untrusted certificate", broker, c.TLS.OtherCAFile, saslPassword, []string{"cannot connect: " + broker, "certificate signed by unknown authority"}},
		{"unreachable broker", closed, c.TLS.CAFile, saslPassword, []string{"cannot connect: " + closed, "connection refused"}},
	} {
		out, code := runSecure([]string{"KAFKA_SASL_PASSWORD=" + tc.password}, tc.brokers, tc.ca)
		noPassword(t, "run with "+tc.what, out)
		var errs []string
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "ovstream run: ") {
				errs = append(errs, line)
			}
		}
		t.Logf("%s: exit %d, errors %q", tc.what, code, errs)
		if code != 1 || len(errs) != 1 {
			t.Errorf("run with %s: exit %d and %d error lines, want 1 and 1:\n%s", tc.what, code, len(errs), harness.Tail(out, 20))
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(errs[0], w) {
				t.Errorf("run with %s: the error does not say %q: %s", tc.what, w, errs[0])
			}
		}
	}
	for _, n := range c.Nodes {
		b, err := os.ReadFile(n.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		noPassword(t, "Kafka's log", string(b))
	}
	t.Logf("%d delay_aggregates rows equal the oracle over SASL_SSL", rows)
}
