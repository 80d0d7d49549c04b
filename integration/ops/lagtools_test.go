//go:build integration

package ops

import (
	"encoding/json"
	"os/exec"
	"testing"

	"github.com/ovstream/ovstream/integration/harness"
)

// committedPy prints, as JSON {"topic/partition": offset}, the offsets
// committed to a consumer group, as confluent-kafka (librdkafka) reads them
// with Consumer.committed(): an OffsetFetch, without joining the group.
// Arguments: bootstrap servers, group, then topic:partitions pairs.
const committedPy = `
import json, sys
from confluent_kafka import Consumer, TopicPartition
servers, group = sys.argv[1], sys.argv[2]
parts = []
for arg in sys.argv[3:]:
    topic, n = arg.split(":")
    parts += [TopicPartition(topic, p) for p in range(int(n))]
c = Consumer({"bootstrap.servers": servers, "group.id": group, "enable.auto.commit": False})
out = {"%s/%d" % (tp.topic, tp.partition): tp.offset for tp in c.committed(parts, timeout=20)}
c.close()
print(json.dumps(out))
`

// pythonWithConfluentKafka returns a Python interpreter that imports
// confluent_kafka (Debian's python3-confluent-kafka lives in /usr/bin/python3,
// which a pyenv shim may hide). The test fails without one: .ci/run installs it.
func pythonWithConfluentKafka(t *testing.T) string {
	t.Helper()
	for _, py := range []string{"/usr/bin/python3", "python3"} {
		if exec.Command(py, "-c", "import confluent_kafka").Run() == nil {
			return py
		}
	}
	t.Fatal("no python3 with confluent_kafka: apt-get install python3-confluent-kafka (.ci/run does)")
	return ""
}

// The lag tool the README names works: after a drain, confluent-kafka's
// committed() reads from the consumer group named after the pipeline
// exactly the next offsets stored in stream_positions, for every partition.
func TestLagVisibleToConfluentKafka(t *testing.T) {
	py := pythonWithConfluentKafka(t)
	addr := harness.StartBroker(t)
	db := harness.FreshDB(t)
	harness.ProduceFeeds(t, addr, harness.LoadFeeds(t, "AT", "../../testdata/auckland-20160519-peak10min"))
	harness.ProduceFeeds(t, addr, harness.LoadFeeds(t, "HFX", "../../testdata/halifax-20251106"))
	harness.Drain(t, db, addr, "--pipeline", "lagtool")
	stored := harness.StoredNext(t, db, "lagtool")
	out, err := exec.Command(py, "-c", committedPy, addr, "lagtool", harness.PredictionsTopic+":6", harness.PositionsTopic+":3").CombinedOutput()
	if err != nil {
		t.Fatalf("confluent-kafka committed(): %v\n%s", err, out)
	}
	var committed map[string]int64
	if err := json.Unmarshal(out, &committed); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(stored) != 9 || len(committed) != 9 {
		t.Fatalf("stored %v, committed %v: want 9 partitions each", stored, committed)
	}
	var sum int64
	for k, v := range stored {
		sum += v
		if committed[k] != v {
			t.Errorf("%s: confluent-kafka reads committed offset %d, stream_positions holds %d", k, committed[k], v)
		}
	}
	if sum == 0 {
		t.Error("nothing was stored: the test proves nothing")
	}
}
