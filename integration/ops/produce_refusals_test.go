//go:build integration

package ops

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/IBM/sarama"

	"github.com/ovstream/ovstream/broker/embedded"
	"github.com/ovstream/ovstream/integration/harness"
)

// `produce --gtfs-rt-url` ends with exit 1 and an error naming the URL and
// its status when a URL never gave a feed: at once when its first answer is
// one asking again cannot change (404), after --polls polls when it only
// failed in ways that may pass (503). Once a URL gave a feed, its later
// failures are reported in the poll lines and tolerated (exit 0).
func TestProduceFeedURLNeverAnswered(t *testing.T) {
	addr := harness.StartBroker(t)
	vp, err := os.ReadFile("../../testdata/halifax-20251106/VehiclePositions_20251106T210259Z.pb")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	reqs := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		reqs[r.URL.Path]++
		n := reqs[r.URL.Path]
		mu.Unlock()
		switch {
		case r.URL.Path == "/busy":
			http.Error(w, "busy", http.StatusServiceUnavailable)
		case r.URL.Path == "/once" && n == 1:
			_, _ = w.Write(vp)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	poll := func(path string, extra ...string) (string, string, int) {
		return harness.RunCLI(t, nil, append([]string{"produce", "--brokers", addr, "--gtfs-rt-url", srv.URL + path,
			"--interval", "20ms", "--http-attempts", "1"}, extra...)...)
	}

	out, errOut, code := poll("/vehiclepositons", "--polls", "3")
	want := "ovstream produce: feed URL " + srv.URL + "/vehiclepositons answered HTTP 404 at poll 1 and never gave a feed: " +
		"check the URL (and --http-header where it needs a key)\n"
	if code != 1 || out != "" || errOut != want || reqs["/vehiclepositons"] != 1 {
		t.Errorf("every poll a 404: exit %d, %d requests, stdout %q, stderr %q; want exit 1 after one request and %q",
			code, reqs["/vehiclepositons"], out, errOut, want)
	}

	out, errOut, code = poll("/busy", "--polls", "2")
	want = "ovstream produce: feed URL " + srv.URL + "/busy never gave a feed in 2 polls; last: HTTP 503\n"
	if code != 1 || strings.Count(out, " FAILED (HTTP 503)") != 2 || errOut != want {
		t.Errorf("every poll a 503: exit %d, stdout %q, stderr %q; want exit 1, two failed polls and %q", code, out, errOut, want)
	}

	out, errOut, code = poll("/once", "--polls", "3", "--operator", "HFX")
	if code != 0 || errOut != "" || !strings.Contains(out, "/once 200, 22429 bytes") || strings.Count(out, "/once FAILED (HTTP 404)") != 2 {
		t.Errorf("a feed, then 404s: exit %d, stderr %q; want 0 and the later 404s in the poll lines:\n%s", code, errOut, out)
	}
}

// brokerTopics lists the topics of the broker at addr with a metadata
// request that creates none.
func brokerTopics(t *testing.T, addr string) []string {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.Metadata.AllowAutoTopicCreation = false
	c, err := sarama.NewClient([]string{addr}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	topics, err := c.Topics()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(topics)
	return topics
}

// `produce` to a topic that does not exist, on a broker that creates topics
// on request (as Kafka's default auto.create.topics.enable=true), exits 1
// naming it and the topics there, produces nothing and creates nothing: for
// --jsonl, and for GTFS-realtime files (only the topics that get records are
// needed: the Halifax positions file has no prediction). --create-topics
// creates it with the broker's default partitions (10 here) and produces.
func TestProduceMissingTopicNotCreated(t *testing.T) {
	b, err := embedded.Start(embedded.Config{Addr: "127.0.0.1:0", AutoCreateTopics: true,
		Topics: map[string]int32{harness.PredictionsTopic: 6, harness.PositionsTopic: 3}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	addr := b.Addr()
	lines := filepath.Join(t.TempDir(), "lines.jsonl")
	if err := os.WriteFile(lines, []byte("{\"trip_id\":\"t1\"}\n{\"trip_id\":\"t2\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const there = `(topics there: "arrival_predictions", "vehicle_positions")`
	for _, tc := range []struct {
		args  []string
		topic string
	}{
		{[]string{"--jsonl", lines, "--topic", "arival_predictions"}, "arival_predictions"}, //nolint:misspell // a misspelt topic is what the test is about
		{[]string{"--gtfs-rt", "../../testdata/halifax-20251106/VehiclePositions_20251106T210259Z.pb", "--operator", "HFX",
			"--predictions-topic", "no_predictions_here", "--positions-topic", "vehicle_positons"}, "vehicle_positons"},
	} {
		out, errOut, code := harness.RunCLI(t, nil, append([]string{"produce", "--brokers", addr}, tc.args...)...)
		want := `ovstream produce: topic "` + tc.topic + `" does not exist ` + there +
			": create it first, or give --create-topics to create it with the broker's default partitions\n"
		if code != 1 || out != "" || !strings.HasSuffix(errOut, want) || strings.Count(errOut, "ovstream produce:") != 1 {
			t.Errorf("produce %q: exit %d, stdout %q, stderr %q; want exit 1 and %q", tc.args, code, out, errOut, want)
		}
	}
	if got := brokerTopics(t, addr); strings.Join(got, ",") != "arrival_predictions,vehicle_positions" {
		t.Errorf("topics after the refused produces: %v, want only the two created at start", got)
	}

	out, errOut, code := harness.RunCLI(t, nil, "produce", "--brokers", addr, "--jsonl", lines, "--topic", "new_topic", "--create-topics")
	if code != 0 || errOut != "" || out != "created topic new_topic (the broker's default partitions and replication)\n"+
		"produced 2 lines of "+lines+" to new_topic; skipped: 0 empty lines; 0 produced without a key (no trip_id/vehicle_id string or not JSON)\n" {
		t.Errorf("produce --create-topics: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if got := brokerTopics(t, addr); strings.Join(got, ",") != "arrival_predictions,new_topic,vehicle_positions" {
		t.Errorf("topics after --create-topics: %v", got)
	}
	if n := len(harness.ReadTopic(t, addr, "new_topic")); n != 2 {
		t.Errorf("new_topic holds %d records, want 2", n)
	}
}
