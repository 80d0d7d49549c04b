//go:build integration

package realkafka_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ovstream/ovstream/integration/harness"
	"github.com/ovstream/ovstream/integration/realkafka"
)

// Apache Kafka's own kafka-topics.sh (TopicCommand, whose Java AdminClient
// asks DescribeTopicPartitions since Kafka 3.8) describes the topics of
// `ovstream broker`: every partition of both topics, led by node 0, with
// its replicas and ISR, and empty ELR lists (kfake left them null and the
// client failed with a NullPointerException).
func TestRealKafkaToolsDescribeEmbeddedBroker(t *testing.T) {
	addr, _ := harness.StartBrokerProcess(t, "127.0.0.1:0", "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := realkafka.Tool(ctx, t.TempDir(), "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", addr, "--describe")
	if err != nil {
		t.Fatalf("kafka-topics.sh --describe against ovstream broker: %v\n%s", err, out)
	}
	part := regexp.MustCompile(`^\s*Topic: (\S+)\s+Partition: (\d+)\s+Leader: (\S+)\s+Replicas: (\S+)\s+Isr: (\S+)\s+Elr:\s*(\S*)\s+LastKnownElr:\s*(\S*)\s*$`)
	head := regexp.MustCompile(`^Topic: (\S+)\s+TopicId: \S+\s+PartitionCount: (\d+)\s+ReplicationFactor: (\d+)`)
	var heads, parts []string
	for _, l := range strings.Split(out, "\n") {
		if m := head.FindStringSubmatch(l); m != nil {
			heads = append(heads, strings.Join(m[1:], " "))
		} else if m := part.FindStringSubmatch(l); m != nil {
			parts = append(parts, strings.Join(m[1:], " "))
		}
	}
	wantHeads := []string{"arrival_predictions 6 1", "vehicle_positions 3 1"}
	var wantParts []string
	for _, tc := range []struct {
		topic string
		n     int
	}{{"arrival_predictions", 6}, {"vehicle_positions", 3}} {
		for p := range tc.n {
			wantParts = append(wantParts, tc.topic+" "+string(rune('0'+p))+" 0 0 0  ")
		}
	}
	if strings.Join(heads, "\n") != strings.Join(wantHeads, "\n") || strings.Join(parts, "\n") != strings.Join(wantParts, "\n") {
		t.Errorf("kafka-topics.sh --describe listed topics %q and partitions %q; want %q and %q\n%s", heads, parts, wantHeads, wantParts, out)
	}
}
