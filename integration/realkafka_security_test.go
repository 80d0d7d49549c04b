//go:build integration

package integration

import (
	"net"
	"os"
	"strings"
	"testing"
	"time"
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
// ovstream and in no Kafka log.
func TestRealKafkaSASLSSL(t *testing.T) {
	c := sharedKafka(t)
	pred, pos := kafkaTopics(t, c, "sasl", nil)
	db := freshDB(t)
	sec := func(brokers, ca string) []string {
		return []string{"--brokers", brokers, "--kafka-tls-ca", ca, "--kafka-sasl-mechanism", "SCRAM-SHA-512", "--kafka-sasl-user", saslUser}
	}
	env := []string{"KAFKA_SASL_PASSWORD=" + saslPassword}
	out, errOut, code := runCLI(t, env, append(append([]string{"produce"}, sec(c.SASLBootstrap(), c.TLS.CAFile)...),
		"--operator", "AT", "--predictions-topic", pred, "--positions-topic", pos, "--gtfs-rt", "../testdata/auckland-20160519-peak10min")...)
	noPassword(t, "produce", out+errOut)
	if code != 0 || !strings.Contains(out, "4610") {
		t.Fatalf("produce over SASL_SSL: exit %d, want 0 and 4610 predictions: %s%s", code, out, errOut)
	}
	runSecure := func(env []string, brokers, ca string) (string, int) {
		t.Helper()
		args := append([]string{"run", "--drain", "--database-url", db, "--pipeline", "rk_sasl", "--topics", pred + "," + pos,
			"--metrics-addr", "", "--flush-interval", "100ms", "--allowed-lateness", "10m", "--log-level", "debug"}, sec(brokers, ca)...)
		p := startOvstream(t, env, args...)
		code := p.wait(t, 2*time.Minute)
		return p.output(), code
	}
	out, code = runSecure(env, c.SASLBootstrap(), c.TLS.CAFile)
	noPassword(t, "run", out)
	if code != 0 {
		t.Fatalf("run --drain over SASL_SSL: exit %d\n%s", code, tail(out, 30))
	}
	if strings.Contains(out, "cannot commit offsets to the Kafka consumer group") {
		t.Errorf("the group-offset mirror failed over SASL_SSL:\n%s", out)
	}
	rows := aggregatesEqualOracle(t, db, c.Bootstrap(), pred, 4610)

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
			t.Errorf("run with %s: exit %d and %d error lines, want 1 and 1:\n%s", tc.what, code, len(errs), tail(out, 20))
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
