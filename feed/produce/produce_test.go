package produce_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/broker/embedded"
	"github.com/ovstream/ovstream/feed/gtfsrt"
	"github.com/ovstream/ovstream/feed/produce"
)

func startBroker(t *testing.T, topics map[string]int32) string {
	t.Helper()
	b, err := embedded.Start(embedded.Config{Addr: "127.0.0.1:0", Topics: topics})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b.Addr()
}

type record struct {
	partition int32
	offset    int64
	key       string
	value     string
}

// readTopic reads every partition of topic up to its high water mark, read_committed.
func readTopic(t *testing.T, addr, topic string) []record {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V2_8_0_0
	cfg.Consumer.IsolationLevel = sarama.ReadCommitted
	cfg.Consumer.MaxWaitTime = 20 * time.Millisecond
	client, err := sarama.NewClient([]string{addr}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	c, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	parts, err := client.Partitions(topic)
	if err != nil {
		t.Fatal(err)
	}
	var out []record
	for _, p := range parts {
		hw, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			t.Fatal(err)
		}
		if hw == 0 {
			continue
		}
		pc, err := c.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			t.Fatal(err)
		}
		timeout := time.After(20 * time.Second)
		for done := false; !done; {
			select {
			case m := <-pc.Messages():
				out = append(out, record{p, m.Offset, string(m.Key), string(m.Value)})
				done = m.Offset+1 >= hw
			case err := <-pc.Errors():
				t.Fatal(err)
			case <-timeout:
				t.Fatalf("%s/%d: timeout before high water %d", topic, p, hw)
			}
		}
		pc.Close()
	}
	return out
}

func TestGTFSRTAuckland(t *testing.T) {
	addr := startBroker(t, map[string]int32{"arrival_predictions": 6, "vehicle_positions": 3})
	res, err := gtfsrt.Load([]string{"../../testdata/auckland-20160519-peak10min"}, gtfsrt.Options{Operator: "AT"})
	if err != nil {
		t.Fatal(err)
	}
	topics := produce.Topics{Predictions: "arrival_predictions", Positions: "vehicle_positions"}
	counts, err := produce.GTFSRT(context.Background(), produce.Config{Brokers: []string{addr}}, res, topics)
	if err != nil {
		t.Fatal(err)
	}
	if counts.Produced("arrival_predictions") != 4610 || counts.Produced("vehicle_positions") != 0 || counts.Failed() != 0 {
		t.Fatalf("counts %+v", counts)
	}
	recs := readTopic(t, addr, "arrival_predictions")
	if len(recs) != 4610 {
		t.Fatalf("read %d records, want 4610", len(recs))
	}
	// Each record meets the data contract, is keyed by its trip_id, sits in the
	// partition sarama's hash gives that key, and each partition holds its
	// predictions in the order of res.
	hp := sarama.NewHashPartitioner("arrival_predictions")
	byPartition := map[int32][]string{}
	for _, r := range recs {
		p, err := aggregate.DecodePrediction([]byte(r.value))
		if err != nil {
			t.Fatalf("offset %d: %v: %s", r.offset, err, r.value)
		}
		if r.key != p.TripID {
			t.Fatalf("key %q, trip_id %q", r.key, p.TripID)
		}
		want, _ := hp.Partition(&sarama.ProducerMessage{Key: sarama.StringEncoder(r.key)}, 6)
		if want != r.partition {
			t.Fatalf("key %q in partition %d, want %d", r.key, r.partition, want)
		}
		byPartition[r.partition] = append(byPartition[r.partition], r.value)
	}
	wantBy := map[int32][]string{}
	for _, p := range res.Predictions {
		part, _ := hp.Partition(&sarama.ProducerMessage{Key: sarama.StringEncoder(p.TripID)}, 6)
		wantBy[part] = append(wantBy[part], string(produce.EncodePrediction(p)))
	}
	for part, want := range wantBy {
		if strings.Join(byPartition[part], "\n") != strings.Join(want, "\n") {
			t.Fatalf("partition %d: records differ from the loaded predictions in order", part)
		}
	}
}

func TestGTFSRTHalifaxPositions(t *testing.T) {
	addr := startBroker(t, map[string]int32{"p": 2, "v": 3})
	res, err := gtfsrt.Load([]string{"../../testdata/halifax-20251106"}, gtfsrt.Options{Operator: "HFX"})
	if err != nil {
		t.Fatal(err)
	}
	counts, err := produce.GTFSRT(context.Background(), produce.Config{Brokers: []string{addr}}, res, produce.Topics{Predictions: "p", Positions: "v"})
	if err != nil {
		t.Fatal(err)
	}
	if counts.Produced("p") != 11638 || counts.Produced("v") != 291 {
		t.Fatalf("counts %+v", counts)
	}
	recs := readTopic(t, addr, "v")
	if len(recs) != 291 {
		t.Fatalf("read %d positions", len(recs))
	}
	for _, r := range recs {
		p, err := aggregate.DecodePosition([]byte(r.value))
		if err != nil {
			t.Fatalf("%v: %s", err, r.value)
		}
		if r.key != p.VehicleID {
			t.Fatalf("key %q, vehicle_id %q", r.key, p.VehicleID)
		}
	}
}

func TestJSONL(t *testing.T) {
	addr := startBroker(t, map[string]int32{"arrival_predictions": 3})
	input := strings.Join([]string{
		`{"trip_id":"T1","line":"L","stop_id":"S","operator":"O","delay_s":5,"event_time":"2026-05-04T10:00:00Z"}`,
		``,
		`   `,
		`{"vehicle_id":"V9","delay_s":"NaN"}`,
		`not json at all`,
		`{"trip_id":"T2","vehicle_id":"V1"}` + "\r",
		`{"trip_id":7}`,
	}, "\n") // no final newline: the last line still counts
	jc, err := produce.JSONL(context.Background(), produce.Config{Brokers: []string{addr}}, strings.NewReader(input), "arrival_predictions", produce.KeyFields(false))
	if err != nil {
		t.Fatal(err)
	}
	if jc.Lines != 7 || jc.Empty != 2 || jc.Produced != 5 || jc.NoKey != 2 || jc.Failed != 0 {
		t.Fatalf("counts %+v", jc)
	}
	got := map[string]string{}
	for _, r := range readTopic(t, addr, "arrival_predictions") {
		got[r.value] = r.key
	}
	want := map[string]string{
		`{"trip_id":"T1","line":"L","stop_id":"S","operator":"O","delay_s":5,"event_time":"2026-05-04T10:00:00Z"}`: "T1",
		`{"vehicle_id":"V9","delay_s":"NaN"}`: "V9",
		`not json at all`:                     "",
		`{"trip_id":"T2","vehicle_id":"V1"}`:  "T2",
		`{"trip_id":7}`:                       "",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("records\n got %v\nwant %v", got, want)
	}
}

func TestUnreachableBroker(t *testing.T) {
	cfg := produce.Config{Brokers: []string{"127.0.0.1:1"}, Sarama: produce.NewSaramaConfig("")}
	cfg.Sarama.Metadata.Retry.Max = 0
	cfg.Sarama.Net.DialTimeout = time.Second
	_, err := produce.JSONL(context.Background(), cfg, strings.NewReader("{}\n"), "t", nil)
	if err == nil {
		t.Fatal("no error")
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	et := time.Date(2016, 5, 18, 20, 0, 13, 0, time.FixedZone("NZST", 12*3600))
	p := aggregate.Prediction{TripID: `t"1\`, Line: "L", StopID: "S", Operator: "AT", DelayS: -87882,
		EventTime: et, VehicleID: "V", StopSequence: 18, HasStopSequence: true}
	b := produce.EncodePrediction(p)
	if want := `{"trip_id":"t\"1\\","line":"L","stop_id":"S","operator":"AT","delay_s":-87882,"event_time":"2016-05-18T08:00:13Z","vehicle_id":"V","stop_sequence":18}`; string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	// Out of range: the consumer's decoder says why.
	if _, err := aggregate.DecodePrediction(b); err == nil || !strings.Contains(err.Error(), "delay_s") {
		t.Fatalf("decode of |delay| > 86400: %v", err)
	}
	p.DelayS = 12.5
	got, err := aggregate.DecodePrediction(produce.EncodePrediction(p))
	if err != nil || got.TripID != p.TripID || got.DelayS != 12.5 || !got.EventTime.Equal(et) || got.StopSequence != 18 || !got.HasStopSequence || got.VehicleID != "V" {
		t.Fatalf("round trip %+v, %v", got, err)
	}
	// The names from static GTFS are optional; the decoder ignores them for now.
	named := p
	named.LineName, named.LineShortName, named.StopName = "Airport - Fall River Regional Exp", "320", `Bridge "Terminal" Bay 10`
	b = produce.EncodePrediction(named)
	if want := `{"trip_id":"t\"1\\","line":"L","stop_id":"S","operator":"AT","delay_s":12.5,"event_time":"2016-05-18T08:00:13Z","vehicle_id":"V","stop_sequence":18,` +
		`"line_name":"Airport - Fall River Regional Exp","line_short_name":"320","stop_name":"Bridge \"Terminal\" Bay 10"}`; string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	if got, err := aggregate.DecodePrediction(b); err != nil || got.TripID != p.TripID || got.DelayS != 12.5 {
		t.Fatalf("decode of a named prediction: %+v, %v", got, err)
	}
	for _, bad := range []aggregate.Prediction{
		{TripID: "t", Line: "L", StopID: "S", Operator: "O", DelayS: math.NaN(), EventTime: et},
		{TripID: "t\x00", Line: "L", StopID: "S", Operator: "O", EventTime: et},
		{TripID: "t\xff", Line: "L", StopID: "S", Operator: "O", EventTime: et},
	} {
		if _, err := aggregate.DecodePrediction(produce.EncodePrediction(bad)); err == nil {
			t.Errorf("%q decoded without error", produce.EncodePrediction(bad))
		}
	}

	bearing, speed := 45.0, 22.352
	pos := aggregate.Position{VehicleID: "2526", Lat: 44.81045, Lon: -63.59964, EventTime: et, TripID: "T", Line: "320", Operator: "HFX", Bearing: &bearing, SpeedMPS: &speed}
	b = produce.EncodePosition(pos)
	if want := `{"vehicle_id":"2526","lat":44.81045,"lon":-63.59964,"event_time":"2016-05-18T08:00:13Z","trip_id":"T","line":"320","operator":"HFX","bearing":45,"speed_mps":22.352}`; string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	gp, err := aggregate.DecodePosition(b)
	if err != nil || gp.VehicleID != "2526" || gp.Lat != 44.81045 || *gp.Bearing != 45 || *gp.SpeedMPS != 22.352 || gp.Operator != "HFX" {
		t.Fatalf("round trip %+v, %v", gp, err)
	}
	if b := produce.EncodePosition(aggregate.Position{VehicleID: "v", EventTime: et}); string(b) != `{"vehicle_id":"v","lat":0,"lon":0,"event_time":"2016-05-18T08:00:13Z"}` {
		t.Fatalf("minimal position %s", b)
	}
}
