//go:build integration

package harness

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// opsAddrRE finds the address `run` logs for /metrics, /healthz and /readyz.
var opsAddrRE = regexp.MustCompile(`serving /metrics, /healthz and /readyz.*addr=([0-9.]+:[0-9]+)`)

// OpsAddr waits until p logged its metrics address and returns it.
func OpsAddr(t *testing.T, p *Proc) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if m := opsAddrRE.FindStringSubmatch(p.Output()); m != nil {
			return m[1]
		}
		select {
		case <-p.Done:
			t.Fatalf("ovstream ended before serving metrics:\n%s", p.Output())
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("no metrics address logged within 30s:\n%s", p.Output())
	return ""
}

// HttpGet returns the status and body of GET url.
func HttpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

// Scrape returns the samples of /metrics whose name starts with ovstream_,
// keyed as printed: `name{label="v",...}` (labels sorted by name).
func Scrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	code, body := HttpGet(t, "http://"+addr+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: HTTP %d", code)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "ovstream_") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("/metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// WaitFor polls cond every 50 ms until it holds or timeout passes.
func WaitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// HighWaters returns every partition's high water mark of topics, keyed "topic/partition".
func HighWaters(t *testing.T, addr string, cfg *sarama.Config, topics ...string) map[string]int64 {
	t.Helper()
	if cfg == nil {
		cfg = sarama.NewConfig()
		cfg.Version = sarama.V2_8_0_0
	}
	client, err := sarama.NewClient([]string{addr}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	out := map[string]int64{}
	for _, topic := range topics {
		ps, err := client.Partitions(topic)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			hw, err := client.GetOffset(topic, p, sarama.OffsetNewest)
			if err != nil {
				t.Fatal(err)
			}
			out[fmt.Sprintf("%s/%d", topic, p)] = hw
		}
	}
	return out
}

// StoredNext returns stream_positions.next_offset of pipeline, keyed "topic/partition".
func StoredNext(t *testing.T, db, pipeline string) map[string]int64 {
	t.Helper()
	return StoredOffsets(t, db, pipeline, "next_offset")
}

// StoredConsumedOf returns stream_positions.consumed_offset of pipeline, keyed "topic/partition".
func StoredConsumedOf(t *testing.T, db, pipeline string) map[string]int64 {
	t.Helper()
	return StoredOffsets(t, db, pipeline, "consumed_offset")
}

// StoredOffsets returns column (next_offset or consumed_offset) of pipeline's
// stream_positions rows that hold offsets, keyed "topic/partition".
func StoredOffsets(t *testing.T, db, pipeline, column string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, r := range Dump(t, db, fmt.Sprintf(`SELECT topic || '/' || partition, %s FROM stream_positions
		WHERE pipeline = '%s' AND %s IS NOT NULL`, column, pipeline, column)) {
		var k string
		var v int64
		if _, err := fmt.Sscanf(strings.Trim(r, "[]"), "%s %d", &k, &v); err != nil {
			t.Fatalf("row %q: %v", r, err)
		}
		out[k] = v
	}
	return out
}

// CreateTopic creates topic on the broker at addr.
func CreateTopic(t *testing.T, addr string, cfg *sarama.Config, topic string, partitions int32) {
	t.Helper()
	if cfg == nil {
		cfg = sarama.NewConfig()
		cfg.Version = sarama.V2_8_0_0
	}
	admin, err := sarama.NewClusterAdmin([]string{addr}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: 1}, false); err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

// OpsCtx is a context bounded by the test's deadline or 2 minutes.
func OpsCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// ThreeEventsDrained returns a database where run drained three
// predictions of line L1, station S1, operator OP into pipeline ovstream:
// delays 0, 10 and 20 s at 10:00, 10:01 and 10:02 UTC on 2026-05-04.
func ThreeEventsDrained(t *testing.T) string {
	t.Helper()
	addr, db := StartBroker(t), FreshDB(t)
	var lines []string
	for i := range 3 {
		lines = append(lines, fmt.Sprintf(`{"trip_id": "t%d", "line": "L1", "stop_id": "S1", "operator": "OP", "delay_s": %d, `+
			`"event_time": "2026-05-04T10:0%d:00Z"}`, i, 10*i, i))
	}
	ProduceLines(t, addr, PredictionsTopic, lines...)
	Drain(t, db, addr)
	return db
}
