//go:build integration

package harness

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Eventually polls cond every 50 ms until it holds (true) or timeout passes (false).
func Eventually(timeout time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// Spread returns n predictions per partition of parts, one a minute per
// partition from start, each partition with its own line and stop.
func Spread(parts []int32, n int, start time.Time) []Rec {
	var out []Rec
	for i := 0; i < n; i++ {
		for _, p := range parts {
			trip := fmt.Sprintf("T%d-%d-%d", p, start.Hour()*60+start.Minute(), i)
			out = append(out, Rec{PredictionsTopic, p, trip,
				Pred(trip, fmt.Sprintf("L%d", p), fmt.Sprintf("S%d", i%3), "AT", int(p)*10+i, start.Add(time.Duration(i)*time.Minute).Format(time.RFC3339))})
		}
	}
	return out
}

// AdminClient is a sarama ClusterAdmin on the broker at addr.
func AdminClient(t *testing.T, addr string) sarama.ClusterAdmin {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V2_8_0_0
	admin, err := sarama.NewClusterAdmin([]string{addr}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	return admin
}

// TopicID returns the Kafka topic ID of topic (Metadata v10+, KIP-516), as
// Kafka prints it (URL-safe base64 without padding).
func TopicID(t *testing.T, addr, topic string) string {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V2_8_0_0
	b := sarama.NewBroker(addr)
	if err := b.Open(cfg); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	resp, err := b.GetMetadata(sarama.NewMetadataRequest(cfg.Version, []string{topic}))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Topics) != 1 || resp.Topics[0].Err != sarama.ErrNoError || resp.Topics[0].Uuid == (sarama.Uuid{}) {
		t.Fatalf("metadata of %s: %+v", topic, resp.Topics)
	}
	return resp.Topics[0].Uuid.String()
}

// Events returns n predictions for partition 0 of the predictions topic, one
// a minute from start, trip and delay numbered from first.
func Events(first, n int, start time.Time) []Rec {
	var out []Rec
	for i := first; i < first+n; i++ {
		out = append(out, Rec{PredictionsTopic, 0, fmt.Sprintf("T%d", i),
			Pred(fmt.Sprintf("T%d", i), "L", "S", "AT", i, start.Add(time.Duration(i-first)*time.Minute).Format(time.RFC3339))})
	}
	return out
}

// GroupOffsets returns the committed offsets of group, keyed "topic/partition",
// as kadm (franz-go's admin client, not sarama) sees them.
func GroupOffsets(t *testing.T, addr, group string) (map[string]int64, map[string]string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := kadm.NewClient(cl).FetchOffsets(ctx, group)
	if err != nil {
		return nil, nil // the group does not exist yet
	}
	offs, meta := map[string]int64{}, map[string]string{}
	resp.Each(func(o kadm.OffsetResponse) {
		if o.Err == nil {
			k := fmt.Sprintf("%s/%d", o.Topic, o.Partition)
			offs[k], meta[k] = o.At, o.Metadata
		}
	})
	return offs, meta
}
