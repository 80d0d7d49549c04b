//go:build integration

package ops

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ovstream/ovstream/integration/harness"
	"github.com/twmb/franz-go/pkg/kfake"
)

// testPKI writes a CA, a server certificate for 127.0.0.1 and a client
// certificate, all PEM, to dir; it returns the server's tls.Config (which
// requires a client certificate signed by the CA).
func testPKI(t *testing.T, dir string) *tls.Config {
	t.Helper()
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	write := func(name, typ string, der []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	caKey := newKey()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ovstream test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	write("ca.pem", "CERTIFICATE", caDER)
	leaf := func(serial int64, name string, usage x509.ExtKeyUsage) (tls.Certificate, []byte, []byte) {
		k := newKey()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: k}, der, kder
	}
	server, _, _ := leaf(2, "127.0.0.1", x509.ExtKeyUsageServerAuth)
	_, cder, ckey := leaf(3, "ovstream", x509.ExtKeyUsageClientAuth)
	write("client.pem", "CERTIFICATE", cder)
	write("client-key.pem", "EC PRIVATE KEY", ckey)
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	return &tls.Config{Certificates: []tls.Certificate{server}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool,
		MinVersion: tls.VersionTLS12}
}

// Secrets of the security tests: none may appear in any output.
const (
	pw512   = "Scram512-Secret-4d1f"
	pw256   = "Scram256-Secret-9b2e"
	pwPlain = "Plain-Secret-77c0"
	pwDB    = "Db-Secret-31aa"
)

func assertNoSecret(t *testing.T, what, out string) {
	t.Helper()
	for _, s := range []string{pw512, pw256, pwPlain, pwDB, "WrongPass-5e5e"} {
		if strings.Contains(out, s) {
			t.Errorf("%s shows a secret (%s...):\n%s", what, s[:6], out)
		}
	}
}

// withPassword returns db with the user's password set (the local server
// trusts 127.0.0.1, so the password is carried but not checked).
func withPassword(t *testing.T, db, pw string) string {
	t.Helper()
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), pw)
	return u.String()
}

// The embedded broker with mutual TLS and SASL (SCRAM-SHA-512,
// SCRAM-SHA-256, PLAIN): produce, run --drain (with a password in
// DATABASE_URL, JSON debug logs), status and dlq replay all connect with the
// --kafka-* flags and KAFKA_SASL_PASSWORD; a wrong password or a missing
// client certificate fails with exit 1; no password appears in any log line,
// error or output, on success or failure.
func TestOpsKafkaTLSAndSASL(t *testing.T) {
	dir := t.TempDir()
	serverTLS := testPKI(t, dir)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(),
		kfake.Superuser("SCRAM-SHA-512", "ops512", pw512),
		kfake.Superuser("SCRAM-SHA-256", "ops256", pw256),
		kfake.Superuser("PLAIN", "opsplain", pwPlain),
		kfake.TLS(serverTLS),
		kfake.SeedTopics(6, harness.PredictionsTopic), kfake.SeedTopics(3, harness.PositionsTopic), kfake.SeedTopics(1, "replayed"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	addr := c.ListenAddrs()[0]
	tlsArgs := []string{"--brokers", addr, "--kafka-tls-ca", filepath.Join(dir, "ca.pem"),
		"--kafka-tls-cert", filepath.Join(dir, "client.pem"), "--kafka-tls-key", filepath.Join(dir, "client-key.pem")}
	sasl := func(mech, user string) []string {
		return append(append([]string(nil), tlsArgs...), "--kafka-sasl-mechanism", mech, "--kafka-sasl-user", user)
	}

	bad := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(bad, []byte(harness.BadLines[1]+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env512 := []string{"KAFKA_SASL_PASSWORD=" + pw512}
	for _, args := range [][]string{
		{"--operator", "AT", "--gtfs-rt", "../../testdata/auckland-20160519-peak10min"},
		{"--jsonl", bad, "--topic", harness.PredictionsTopic},
	} {
		out, errOut, code := harness.RunCLI(t, env512, append(append([]string{"produce"}, sasl("SCRAM-SHA-512", "ops512")...), args...)...)
		assertNoSecret(t, "produce", out+errOut)
		if code != 0 {
			t.Fatalf("produce over TLS + SCRAM-SHA-512 exited %d: %s%s", code, out, errOut)
		}
	}

	db := withPassword(t, harness.FreshDB(t), pwDB)
	p := harness.StartOvstream(t, []string{"KAFKA_SASL_PASSWORD=" + pw256, "DATABASE_URL=" + db},
		append([]string{"run", "--drain", "--pipeline", "secure", "--flush-interval", "100ms", "--allowed-lateness", "10m",
			"--log-format", "json", "--log-level", "debug", "--metrics-addr", "127.0.0.1:0"}, sasl("SCRAM-SHA-256", "ops256")...)...)
	code := p.Wait(t, 2*time.Minute)
	out := p.Output()
	assertNoSecret(t, "run", out)
	if code != 0 {
		t.Fatalf("run over TLS + SCRAM-SHA-256 exited %d:\n%s", code, out)
	}
	if strings.Contains(out, "cannot commit offsets to the Kafka consumer group") {
		t.Errorf("the group offset mirror failed over TLS + SASL:\n%s", out)
	}
	lines := 0
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "{") {
			lines++
			var v map[string]any
			if err := json.Unmarshal([]byte(l), &v); err != nil || v["msg"] == nil {
				t.Errorf("--log-format json line %q: %v", l, err)
			}
		}
	}
	if lines < 10 {
		t.Errorf("%d JSON log lines, want the debug log", lines)
	}
	if got := harness.Dump(t, db, `SELECT sum(event_count)::bigint FROM delay_aggregates WHERE dimension = 'network'`); got[0] != "[4610]" {
		t.Errorf("network events %v, want 4610", got)
	}

	// status with PLAIN; the JSON and the text output show no secret.
	envPlain := []string{"KAFKA_SASL_PASSWORD=" + pwPlain, "DATABASE_URL=" + db}
	sout, serr, code := harness.RunCLI(t, envPlain, append([]string{"status", "--json", "--pipeline", "secure"}, sasl("PLAIN", "opsplain")...)...)
	assertNoSecret(t, "status", sout+serr)
	var s harness.StatusJSON
	if code != 0 || json.Unmarshal([]byte(sout), &s) != nil || s.Lag() != 0 || len(s.Partitions) != 9 || s.DeadLetters["decode"].Total != 1 {
		t.Errorf("status over TLS + PLAIN: exit %d, %+v\n%s", code, s, serr)
	}

	// dlq replay with SCRAM-SHA-512.
	rout, rerr, code := harness.RunCLI(t, append(env512, "DATABASE_URL="+db), append([]string{"dlq", "replay", "--pipeline", "secure", "--to", "replayed"}, sasl("SCRAM-SHA-512", "ops512")...)...)
	assertNoSecret(t, "dlq replay", rout+rerr)
	if code != 0 || rout != "replayed 1 dead letters to replayed\n" {
		t.Errorf("dlq replay over TLS + SCRAM: exit %d: %s%s", code, rout, rerr)
	}

	// Failures: a wrong SASL password; no client certificate; no password at all.
	for _, tc := range []struct {
		what string
		env  []string
		args []string
		want string
	}{
		{"wrong SCRAM password", []string{"KAFKA_SASL_PASSWORD=WrongPass-5e5e"}, sasl("SCRAM-SHA-512", "ops512"), "SASL"},
		{"wrong PLAIN password", []string{"KAFKA_SASL_PASSWORD=WrongPass-5e5e"}, sasl("PLAIN", "opsplain"), "SASL"},
		{"no client certificate", env512, []string{"--brokers", addr, "--kafka-tls-ca", filepath.Join(dir, "ca.pem"),
			"--kafka-sasl-mechanism", "SCRAM-SHA-512", "--kafka-sasl-user", "ops512"}, "kafka"},
	} {
		out, errOut, code := harness.RunCLI(t, append(tc.env, "DATABASE_URL="+db), append([]string{"status", "--pipeline", "secure"}, tc.args...)...)
		assertNoSecret(t, "status with "+tc.what, out+errOut)
		if code != 1 || !strings.Contains(errOut, tc.want) {
			t.Errorf("status with %s: exit %d, want 1 and an error saying %q: %s", tc.what, code, tc.want, errOut)
		}
	}
	_, errOut, code := harness.RunCLI(t, []string{"KAFKA_SASL_PASSWORD="}, append([]string{"run", "--database-url", db}, sasl("PLAIN", "opsplain")...)...)
	if code != 2 || !strings.Contains(errOut, "needs the password in env KAFKA_SASL_PASSWORD") {
		t.Errorf("run without KAFKA_SASL_PASSWORD: exit %d: %s", code, errOut)
	}
}

// The database password never shows when PostgreSQL cannot be reached or
// refuses: run, status and dlq fail with exit 1 and name no password, for a
// URL (user info and password= parameter) and a keyword/value DSN.
func TestOpsDatabasePasswordNeverShown(t *testing.T) {
	addr := harness.StartBroker(t)
	for _, db := range []string{
		"postgres://postgres:" + pwDB + "@127.0.0.1:1/ovs?sslmode=disable&connect_timeout=2",
		"postgres://postgres@127.0.0.1:1/ovs?sslmode=disable&password=" + pwDB,
		"host=127.0.0.1 port=1 user=postgres password=" + pwDB + " dbname=ovs sslmode=disable",
		// Reachable server, no such database: the server's own error.
		"postgres://postgres:" + pwDB + "@" + harness.TestServerAddr(t) + "/ovs_does_not_exist?sslmode=disable",
	} {
		for _, args := range [][]string{
			{"run", "--brokers", addr, "--connect-timeout", "1s", "--log-format", "json", "--log-level", "debug"},
			{"status", "--brokers", addr},
			{"dlq", "list"},
		} {
			out, errOut, code := harness.RunCLI(t, []string{"DATABASE_URL=" + db, "KAFKA_SASL_PASSWORD=" + pwPlain}, args...)
			assertNoSecret(t, args[0], out+errOut)
			if code != 1 || errOut == "" {
				t.Errorf("%s with an unusable database: exit %d, stderr %q; want 1 and an error", args[0], code, errOut)
			}
		}
	}
}
