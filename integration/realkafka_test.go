//go:build integration

package integration

import (
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/ovstream/ovstream/integration/realkafka"
)

// The real-broker tier (issue 23): Apache Kafka (realkafka.Version, KRaft,
// from Maven Central) under the claims the kfake tests make. Every test is
// named TestRealKafka*: go test -tags integration -run TestRealKafka ./integration/

// shared is the single KRaft node the real-broker tests share (a JVM start
// costs seconds on 2 cores); each test makes topics of its own on it.
var shared struct {
	once sync.Once
	c    *realkafka.Cluster
	err  error
}

// TestMain stops the shared node when the tests end (its JVM also dies with
// the test process: realkafka sets Pdeathsig).
func TestMain(m *testing.M) {
	code := m.Run()
	if shared.c != nil {
		shared.c.Close()
	}
	os.Exit(code)
}

// sharedKafka returns the shared node, starting it on first use; a test that
// fails logs the tail of its log.
func sharedKafka(t *testing.T) *realkafka.Cluster {
	t.Helper()
	shared.once.Do(func() { shared.c, shared.err = realkafka.Start(realkafka.Options{}) })
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("Kafka log:\n%s", shared.c.Logs(60))
		}
	})
	return shared.c
}

// kafkaTopics creates the test's own predictions (6 partitions) and
// positions (3) topics, prefix_predictions and prefix_positions, with
// replication factor rf (0: every node) and configs.
func kafkaTopics(t *testing.T, c *realkafka.Cluster, prefix string, configs map[string]string) (pred, pos string) {
	t.Helper()
	pred, pos = prefix+"_predictions", prefix+"_positions"
	for name, n := range map[string]int32{pred: 6, pos: 3} {
		if err := c.CreateTopic(name, n, 0, configs); err != nil {
			t.Fatal(err)
		}
	}
	return pred, pos
}

// produceAuckland runs `ovstream produce` of the Auckland peak sample into
// the topics and checks it reports its 4610 predictions.
func produceAuckland(t *testing.T, brokers, pred, pos string, extra ...string) {
	t.Helper()
	out := produceCLI(t, brokers, append([]string{"--operator", "AT", "--predictions-topic", pred, "--positions-topic", pos,
		"--gtfs-rt", "../testdata/auckland-20160519-peak10min"}, extra...)...)
	if !strings.Contains(out, "4610") {
		t.Fatalf("produce of the Auckland peak does not report 4610 predictions:\n%s", out)
	}
}

// aggregatesEqualOracle loads every record of pred into oracle_msgs and
// fails unless delay_aggregates and the stored distributions equal the SQL
// oracle row for row; it returns the number of rows compared.
func aggregatesEqualOracle(t *testing.T, db, brokers, pred string, wantRecords int) int {
	t.Helper()
	if n := loadOracleInput(t, db, brokers, pred); n != wantRecords {
		t.Fatalf("topic %s holds %d records, want %d", pred, n, wantRecords)
	}
	got := dump(t, db, dumpAggregates)
	if len(got) == 0 {
		t.Fatal("no delay_aggregates rows")
	}
	sameRows(t, "delay_aggregates vs SQL oracle", got, dump(t, db, oracleAggregates))
	sameRows(t, "stored distributions vs SQL oracle", dump(t, db, dumpDistributions), dump(t, db, oracleDistributions))
	return len(got)
}

// `ovstream produce` of the Auckland peak into Apache Kafka, then
// `ovstream run --drain`: delay_aggregates equals the SQL oracle over the
// records the topic holds, 0 rows differ.
func TestRealKafkaDrainEqualsSQLOracle(t *testing.T) {
	c := sharedKafka(t)
	pred, pos := kafkaTopics(t, c, "drain", nil)
	db := freshDB(t)
	produceAuckland(t, c.Bootstrap(), pred, pos)
	drain(t, db, c.Bootstrap(), "--pipeline", "rk_drain", "--topics", pred+","+pos)
	rows := aggregatesEqualOracle(t, db, c.Bootstrap(), pred, 4610)
	t.Logf("%d delay_aggregates rows equal the oracle", rows)
}
