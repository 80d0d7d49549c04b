//go:build integration

package realkafka_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ovstream/ovstream/integration/harness"
	"github.com/twmb/franz-go/pkg/kadm"
)

// aclUser and aclPassword are the SCRAM user TestRealKafkaACLNoRead creates
// on the shared node, which is no super user: it may do what its ACLs grant.
const (
	aclUser     = "ovs-reader"
	aclPassword = "ReaderPass-7c1d"
)

// A principal with DESCRIBE but not READ on the topics (Kafka's
// StandardAuthorizer, SASL_SSL): the metadata and the offsets answer, every
// Fetch is refused with TOPIC_AUTHORIZATION_FAILED. `run --drain` exits 1
// with one error line naming the topic, the partition and the missing
// operation, and writes nothing; once READ is granted, a rerun drains
// everything and equals the SQL oracle (nothing was lost or skipped).
func TestRealKafkaACLNoRead(t *testing.T) {
	c := sharedKafka(t)
	pred, pos := kafkaTopics(t, c, "acl", nil)
	produceAuckland(t, c.Bootstrap(), pred, pos)
	cl, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: aclUser, Mechanism: kadm.ScramSha512,
		Iterations: 4096, Password: aclPassword}}); err != nil {
		t.Fatal(err)
	}
	grant := func(op kadm.ACLOperation) {
		t.Helper()
		b := kadm.NewACLs().Allow("User:"+aclUser).Topics(pred, pos).Operations(op).ResourcePatternType(kadm.ACLPatternLiteral)
		res, err := adm.CreateACLs(ctx, b)
		if err == nil {
			for _, r := range res {
				if r.Err != nil {
					err = r.Err
				}
			}
		}
		if err != nil {
			t.Fatalf("grant %v on %s, %s: %v", op, pred, pos, err)
		}
	}
	grant(kadm.OpDescribe)
	db := harness.FreshDB(t)
	run := func() (string, int) {
		t.Helper()
		p := harness.StartOvstream(t, []string{"KAFKA_SASL_PASSWORD=" + aclPassword}, "run", "--drain", "--database-url", db,
			"--pipeline", "rk_acl", "--topics", pred+","+pos, "--metrics-addr", "", "--flush-interval", "100ms",
			"--allowed-lateness", "10m", "--connect-timeout", "2s", "--brokers", c.SASLBootstrap(),
			"--kafka-tls-ca", c.TLS.CAFile, "--kafka-sasl-mechanism", "SCRAM-SHA-512", "--kafka-sasl-user", aclUser)
		code := p.Wait(t, time.Minute)
		return p.Output(), code
	}
	// The broker applies the new user and ACL from its metadata log: the
	// first run may meet an authentication failure while it catches up.
	var out string
	var code int
	for range 20 {
		if out, code = run(); !strings.Contains(out, "SASL Authentication failed") {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	var errs []string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "ovstream run: ") {
			errs = append(errs, line)
		}
	}
	t.Logf("without READ: exit %d, errors %q", code, errs)
	if code != 1 || len(errs) != 1 {
		t.Fatalf("run --drain without READ: exit %d and %d error lines, want 1 and 1:\n%s", code, len(errs), harness.Tail(out, 20))
	}
	want := regexp.MustCompile(`^ovstream run: kafka: not authorized to read topic "(` + pred + `|` + pos +
		`)" partition [0-9]+: the principal needs READ on the topic \(kafka server: The client is not authorized to access this topic\); ` +
		`grant it with kafka-acls --add --operation READ$`)
	if !want.MatchString(errs[0]) {
		t.Errorf("the error does not name the topic, the partition and READ: %s", errs[0])
	}
	if n := harness.Dump(t, db, `SELECT (SELECT count(*) FROM delay_aggregates), (SELECT count(*) FROM dead_letters),
		(SELECT coalesce(sum(next_offset), 0)::int FROM stream_positions)`); n[0] != "[0 0 0]" {
		t.Errorf("after the refused run: delay_aggregates rows, dead letters, sum of stored offsets %s, want [0 0 0]", n[0])
	}
	grant(kadm.OpRead)
	if out, code = run(); code != 0 {
		t.Fatalf("run --drain with READ: exit %d\n%s", code, harness.Tail(out, 30))
	}
	rows := aggregatesEqualOracle(t, db, c.Bootstrap(), pred, 4610)
	t.Logf("with READ granted: %d delay_aggregates rows equal the oracle", rows)
}
