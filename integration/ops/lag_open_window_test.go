//go:build integration

package ops

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ovstream/ovstream/integration/harness"
)

// endOffsets returns the high water mark (end offset) of every partition of
// topics, keyed "topic/partition", as franz-go's kadm reads them with
// ListOffsets: a client ovstream does not read with.
func endOffsets(t *testing.T, addr string, topics ...string) map[string]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	listed, err := kadm.NewClient(cl).ListEndOffsets(ctx, topics...)
	if err != nil {
		t.Fatalf("kadm ListEndOffsets %v: %v", topics, err)
	}
	out := map[string]int64{}
	listed.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			t.Fatalf("kadm ListEndOffsets %s/%d: %v", o.Topic, o.Partition, o.Err)
		}
		out[fmt.Sprintf("%s/%d", o.Topic, o.Partition)] = o.Offset
	})
	return out
}

// lagHealthJSON is the part of the health API about the lag.
type lagHealthJSON struct {
	Lag struct {
		Source     string `json:"source"`
		Total      *int64 `json:"total"`
		Partitions []struct {
			Partition string `json:"partition"`
			Lag       *int64 `json:"lag"`
			Held      *int64 `json:"held"`
		} `json:"partitions"`
	} `json:"lag"`
}

func num(v *int64) string {
	if v == nil {
		return "null"
	}
	return fmt.Sprint(*v)
}

// The feed stops while its last windows are open: every record is read, so
// the lag (the gauge, `status`, the health API) returns to 0, while the
// stored committable offsets stay behind the open windows and are shown as
// held (consumed position - stored next offset). Exact figures from the high
// water marks kadm reads and the offsets stored in PostgreSQL.
func TestLagClearsWhenFeedStopsWithOpenWindow(t *testing.T) {
	addr := harness.StartBroker(t)
	db := harness.FreshDB(t)
	const pipeline = "lagopen"
	p := harness.StartOvstream(t, nil, harness.RunArgs(db, addr, "--pipeline", pipeline, "--metrics-addr", "127.0.0.1:0",
		"--idle-timeout", "1s", "--allowed-lateness", "2m", "--log-level", "info")...)
	ops := harness.OpsAddr(t, p)
	harness.ProduceFeeds(t, addr, harness.LoadFeeds(t, "AT", "../../testdata/auckland-20160519-peak10min"))

	hw := endOffsets(t, addr, harness.PredictionsTopic, harness.PositionsTopic)
	var total int64
	for k, h := range hw {
		if strings.HasPrefix(k, harness.PredictionsTopic+"/") {
			total += h
		}
	}
	if total != 4610 {
		t.Fatalf("kadm: %d records in %s, want the 4610 produced", total, harness.PredictionsTopic)
	}
	harness.WaitFor(t, time.Minute, "every record consumed and committed", func() bool {
		m := harness.Scrape(t, ops)
		return m[`ovstream_consumed_messages_total{topic="arrival_predictions"}`] == float64(total) &&
			m["ovstream_uncommitted_messages"] == 0 && sameOffsets(harness.StoredConsumedOf(t, db, pipeline), hw)
	})

	// Quiescent: every partition idle, and the watermark that leaves them
	// out stored (with what it closed): from here on nothing moves the
	// stored offsets.
	harness.WaitFor(t, 30*time.Second, "every partition idle and the watermark stored", func() bool {
		m := harness.Scrape(t, ops)
		for k := range hw {
			tp := strings.Split(k, "/")
			if m[fmt.Sprintf(`ovstream_partition_idle{partition="%s",topic="%s"}`, tp[1], tp[0])] != 1 {
				return false
			}
		}
		wm := harness.Dump(t, db, `SELECT extract(epoch FROM min(watermark))::bigint FROM stream_positions WHERE pipeline = '`+pipeline+`'`)[0]
		return fmt.Sprintf("[%d]", int64(m["ovstream_watermark_timestamp_seconds"])) == wm && m["ovstream_uncommitted_messages"] == 0
	})

	// The gauges, refreshed with every reading of the high water marks.
	var stored map[string]int64
	var why string
	t.Cleanup(func() {
		if t.Failed() && why != "" {
			t.Logf("last gauge reading: %s", why)
		}
	})
	harness.WaitFor(t, 20*time.Second, "lag gauges 0 and held gauges = high water - stored", func() bool {
		m := harness.Scrape(t, ops)
		stored = harness.StoredNext(t, db, pipeline) // a commit may still move it as the watermark advances
		for _, gauge := range []string{"ovstream_partition_lag_messages", "ovstream_partition_held_messages"} {
			for k, h := range hw {
				tp := strings.Split(k, "/")
				key := fmt.Sprintf(`%s{partition="%s",topic="%s"}`, gauge, tp[1], tp[0])
				want := float64(h - stored[k]) // held: consumed (= high water) - stored
				if gauge == "ovstream_partition_lag_messages" {
					want = 0
				}
				if v, ok := m[key]; !ok || v != want {
					why = fmt.Sprintf("%s = %v (present %t), want %v (high water %d, stored next %d)", key, v, ok, want, h, stored[k])
					return false
				}
			}
		}
		why = ""
		return true
	})
	// The database: everything consumed, the committable offsets behind the
	// open windows (the premise of this test).
	if again := harness.StoredNext(t, db, pipeline); !sameOffsets(again, stored) {
		t.Fatalf("stored next offsets moved from %v to %v while the windows stay open", stored, again)
	}
	var held int64
	for k, h := range hw {
		held += h - stored[k]
	}
	if len(stored) != len(hw) || held <= 0 {
		t.Fatalf("stored next offsets %v, high water marks %v: no window left open", stored, hw)
	}

	// status, a process of its own reading PostgreSQL and Kafka.
	s := harness.Status(t, db, addr, pipeline)
	if len(s.Partitions) != len(hw) || num(s.TotalLag) != "0" || s.TotalHeld != held {
		t.Errorf("status: %d partitions, total lag %s, total held %d; want %d, 0, %d", len(s.Partitions),
			num(s.TotalLag), s.TotalHeld, len(hw), held)
	}
	for _, sp := range s.Partitions {
		k := fmt.Sprintf("%s/%d", sp.Topic, sp.Partition)
		wantNext, wantConsumed, wantHeld := fmt.Sprint(stored[k]), fmt.Sprint(hw[k]), fmt.Sprint(hw[k]-stored[k])
		if num(sp.HighWater) != fmt.Sprint(hw[k]) || num(sp.Lag) != "0" || num(sp.NextOffset) != wantNext ||
			num(sp.Consumed) != wantConsumed || num(sp.Held) != wantHeld {
			t.Errorf("status %s: high water %s, lag %s, next %s, consumed %s, held %s; want %d, 0, %s, %s, %s", k,
				num(sp.HighWater), num(sp.Lag), num(sp.NextOffset), num(sp.Consumed), num(sp.Held),
				hw[k], wantNext, wantConsumed, wantHeld)
		}
	}
	text, _, code := harness.RunCLI(t, nil, "status", "--database-url", db, "--brokers", addr, "--pipeline", pipeline)
	if want := fmt.Sprintf("total lag: 0 (held in open windows: %d)", held); code != 0 || !strings.Contains(text, want) {
		t.Errorf("status exited %d, does not say %q:\n%s", code, want, text)
	}

	// The health API of the running instance: the same figures.
	code, body := harness.HttpGet(t, "http://"+ops+"/dashboard/api/health?pipeline="+pipeline)
	var h lagHealthJSON
	if err := json.Unmarshal([]byte(body), &h); code != 200 || err != nil {
		t.Fatalf("health API: HTTP %d, %v: %s", code, err, body)
	}
	if h.Lag.Source != "run" || num(h.Lag.Total) != "0" || len(h.Lag.Partitions) != len(hw) {
		t.Errorf("health API lag: source %q, total %s, %d partitions; want run, 0, %d", h.Lag.Source, num(h.Lag.Total),
			len(h.Lag.Partitions), len(hw))
	}
	for _, hp := range h.Lag.Partitions {
		want := fmt.Sprint(hw[hp.Partition] - stored[hp.Partition])
		if num(hp.Lag) != "0" || num(hp.Held) != want {
			t.Errorf("health API %s: lag %s, held %s; want 0, %s", hp.Partition, num(hp.Lag), num(hp.Held), want)
		}
	}
}
