//go:build integration

package harness

import (
	"fmt"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// Synthetic returns n predictions, the i-th at event time from + i*step, on
// partition i%6, of 20 stations (S00..S19, six records in a row each), 5
// lines and 97 trips, with delays from -120 to 479 s.
func Synthetic(n int, from time.Time, step time.Duration) []*sarama.ProducerMessage {
	var msgs []*sarama.ProducerMessage
	for i := range n {
		at := from.Add(time.Duration(i) * step)
		msgs = append(msgs, &sarama.ProducerMessage{Topic: PredictionsTopic, Partition: int32(i % 6),
			Key: sarama.StringEncoder(fmt.Sprint("t", i%97)),
			Value: sarama.ByteEncoder(Pred(fmt.Sprint("t", i%97), fmt.Sprint("L", i%5), fmt.Sprintf("S%02d", (i/6)%20), "AT",
				(i*37)%600-120, at.Format(time.RFC3339Nano)))})
	}
	return msgs
}

// SendAll produces msgs, each to the partition it names, in batches.
func SendAll(t *testing.T, addr string, msgs []*sarama.ProducerMessage) {
	t.Helper()
	p, err := sarama.NewSyncProducer([]string{addr}, ProducerConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for len(msgs) > 0 {
		k := min(len(msgs), 500)
		if err := p.SendMessages(msgs[:k]); err != nil {
			t.Fatal(err)
		}
		msgs = msgs[k:]
	}
}

// Rec is one record to produce to an explicit partition.
type Rec struct {
	Topic     string
	Partition int32
	Key       string
	Value     []byte
}

// ProduceRecords produces recs in order, each to the partition it names.
func ProduceRecords(t testing.TB, addr string, recs ...Rec) {
	t.Helper()
	ProduceRecordsAt(t, addr, nil, recs...)
}

// ProduceRecordsAt is ProduceRecords with at[i] the timestamp (CreateTime)
// of recs[i]; nil at: the producer's clock.
func ProduceRecordsAt(t testing.TB, addr string, at []time.Time, recs ...Rec) {
	t.Helper()
	p, err := sarama.NewSyncProducer([]string{addr}, ProducerConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i, r := range recs {
		m := &sarama.ProducerMessage{Topic: r.Topic, Partition: r.Partition}
		if at != nil {
			m.Timestamp = at[i]
		}
		if r.Key != "" {
			m.Key = sarama.StringEncoder(r.Key)
		}
		if r.Value != nil {
			m.Value = sarama.ByteEncoder(r.Value)
		}
		if _, _, err := p.SendMessage(m); err != nil {
			t.Fatalf("produce to %s/%d: %v", r.Topic, r.Partition, err)
		}
	}
}

// ProducerConfig is an idempotent producer (acks=all) that writes each record
// to the partition it names and accepts values up to 2 MB.
func ProducerConfig() *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V2_8_0_0
	cfg.Producer.Idempotent = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	cfg.Producer.MaxMessageBytes = 2 << 20
	cfg.Net.MaxOpenRequests = 1
	return cfg
}

// Pred is a valid prediction of the data contract.
func Pred(trip, line, stop, op string, delay int, eventTime string) []byte {
	return []byte(fmt.Sprintf(`{"trip_id":%q,"line":%q,"stop_id":%q,"operator":%q,"delay_s":%d,"event_time":%q}`,
		trip, line, stop, op, delay, eventTime))
}

// Pos is a valid vehicle position.
func Pos(vehicle string, lat float64, eventTime string) []byte {
	return []byte(fmt.Sprintf(`{"vehicle_id":%q,"lat":%v,"lon":174.76,"event_time":%q}`, vehicle, lat, eventTime))
}

// RefusedStation and RefusedTrip are real ids of the Auckland peak sample:
// the stop with the most predictions (28, in all three windows) and a trip
// with 11 predictions.
const (
	RefusedStation = "7151"
	RefusedTrip    = "7380020909-20160512154122_v40.34"
)
