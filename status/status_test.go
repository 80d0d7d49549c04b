package status

import (
	"strings"
	"testing"
	"time"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/store"
)

// Held is the consumed position minus the stored next offset, per partition
// and summed; the text says the total lag with the held records beside it.
func TestHeldAndTotals(t *testing.T) {
	at := time.Date(2026, 12, 4, 17, 0, 0, 0, time.UTC)
	s := &store.Status{Positions: []store.StoredPosition{
		{Position: store.Position{PartitionID: aggregate.PartitionID{Topic: "p", Partition: 0}, NextOffset: 373, ConsumedOffset: 725}, UpdatedAt: at},
		{Position: store.Position{PartitionID: aggregate.PartitionID{Topic: "p", Partition: 1}, NextOffset: 10, ConsumedOffset: 10}, UpdatedAt: at},
	}}
	r := FromStore("x", s)
	if len(r.Partitions) != 2 || *r.Partitions[0].Held != 352 || *r.Partitions[1].Held != 0 || r.TotalHeld != 352 {
		t.Fatalf("held %d and %d, total %d; want 352, 0, 352", *r.Partitions[0].Held, *r.Partitions[1].Held, r.TotalHeld)
	}
	// Kafka's figures as KafkaOffsets sets them: lag = high water - consumed.
	for i, hw := range []int64{725, 12} {
		p := &r.Partitions[i]
		lag, start := hw-*p.ConsumedOffset, int64(0)
		p.HighWater, p.Lag, p.LogStart = &hw, &lag, &start
	}
	total := int64(2)
	r.TotalLag = &total
	var b strings.Builder
	Print(&b, r, at)
	for _, want := range []string{"total lag: 2 (held in open windows: 352)", "p/0", "373", "725", "352"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status text does not say %q:\n%s", want, b.String())
		}
	}
	r.TotalLag = nil
	b.Reset()
	Print(&b, r, at)
	if want := "total lag: unknown (Kafka could not be read); held in open windows: 352"; !strings.Contains(b.String(), want) {
		t.Errorf("status text does not say %q:\n%s", want, b.String())
	}
}
