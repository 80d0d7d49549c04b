package embedded_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/ovstream/ovstream/broker/embedded"
)

func saramaConfig() *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V2_8_0_0
	cfg.Producer.Idempotent = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	cfg.Producer.Retry.Max = 5
	cfg.Net.MaxOpenRequests = 1
	cfg.Consumer.IsolationLevel = sarama.ReadCommitted
	cfg.Metadata.Retry.Backoff = 50 * time.Millisecond
	return cfg
}

func produce(t *testing.T, addr, topic string, partition int32, values ...string) {
	t.Helper()
	cfg := saramaConfig()
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	p, err := sarama.NewSyncProducer([]string{addr}, cfg)
	if err != nil {
		t.Fatalf("producer: %v", err)
	}
	defer p.Close()
	for _, v := range values {
		if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Partition: partition, Key: sarama.StringEncoder("k"), Value: sarama.StringEncoder(v)}); err != nil {
			t.Fatalf("send %q: %v", v, err)
		}
	}
}

// readAll reads partition from offset 0 up to its high water mark.
func readAll(t *testing.T, addr, topic string, partition int32) []string {
	t.Helper()
	client, err := sarama.NewClient([]string{addr}, saramaConfig())
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	defer client.Close()
	hw, err := client.GetOffset(topic, partition, sarama.OffsetNewest)
	if err != nil {
		t.Fatalf("high water: %v", err)
	}
	c, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	defer c.Close()
	pc, err := c.ConsumePartition(topic, partition, sarama.OffsetOldest)
	if err != nil {
		t.Fatalf("consume: %v", err)
	}
	defer pc.Close()
	var got []string
	timeout := time.After(10 * time.Second)
	for int64(len(got)) < hw {
		select {
		case m := <-pc.Messages():
			got = append(got, string(m.Value))
		case err := <-pc.Errors():
			t.Fatalf("consume: %v", err)
		case <-timeout:
			t.Fatalf("timeout after %d of %d messages", len(got), hw)
		}
	}
	return got
}

func TestProduceAndConsumeReadCommitted(t *testing.T) {
	b, err := embedded.Start(embedded.Config{Addr: "127.0.0.1:0", Topics: map[string]int32{"arrival_predictions": 6, "vehicle_positions": 3}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.Addr() == "127.0.0.1:0" || b.Addr() == "" {
		t.Fatalf("Addr() = %q, want the real port", b.Addr())
	}
	var want []string
	for i := range 20 {
		want = append(want, fmt.Sprintf(`{"n":%d}`, i))
	}
	produce(t, b.Addr(), "arrival_predictions", 5, want...)
	got := readAll(t, b.Addr(), "arrival_predictions", 5)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("read back %v, want %v", got, want)
	}

	client, err := sarama.NewClient([]string{b.Addr()}, saramaConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	for topic, n := range map[string]int{"arrival_predictions": 6, "vehicle_positions": 3} {
		ps, err := client.Partitions(topic)
		if err != nil || len(ps) != n {
			t.Errorf("%s: partitions %v (%v), want %d", topic, ps, err, n)
		}
	}
}

func TestDataDirSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	cfg := embedded.Config{Addr: "127.0.0.1:0", Topics: map[string]int32{"t": 2}, DataDir: dir}
	b, err := embedded.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	produce(t, b.Addr(), "t", 1, "a", "b", "c")
	b.Close()

	// Same topics again: they exist already, which must not be an error.
	b, err = embedded.Start(cfg)
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	defer b.Close()
	if got := readAll(t, b.Addr(), "t", 1); fmt.Sprint(got) != "[a b c]" {
		t.Fatalf("after restart read %v, want [a b c]", got)
	}
	produce(t, b.Addr(), "t", 1, "d")
	if got := readAll(t, b.Addr(), "t", 1); fmt.Sprint(got) != "[a b c d]" {
		t.Fatalf("after restart and produce read %v, want [a b c d]", got)
	}
}

func TestParseTopics(t *testing.T) {
	got, err := embedded.ParseTopics("arrival_predictions:6, vehicle_positions:3")
	if err != nil || len(got) != 2 || got["arrival_predictions"] != 6 || got["vehicle_positions"] != 3 {
		t.Fatalf("ParseTopics = %v, %v", got, err)
	}
	for _, bad := range []string{"", "a", "a:0", "a:-1", "a:x", ":3", "a:1,a:2"} {
		if _, err := embedded.ParseTopics(bad); err == nil {
			t.Errorf("ParseTopics(%q): no error", bad)
		}
	}
}
