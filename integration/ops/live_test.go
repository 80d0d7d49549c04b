//go:build integration

package ops

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ovstream/ovstream/feed/produce"
	"github.com/ovstream/ovstream/integration/harness"
)

// `produce --gtfs-rt-url` against a local HTTP server that serves the ten
// real Auckland TripUpdates snapshots in sequence (ETag) and the real
// Halifax VehiclePositions snapshot (Last-Modified): 20 polls, each new
// snapshot once with 200 and once with 304; one 503 and one response slower
// than --http-timeout, each retried inside its poll; the API key header and
// URL query reach the server and never the output. The topics then hold
// exactly what `produce --gtfs-rt` makes of the same files: every event
// once across all polls.
func TestOpsLiveGTFSRTPolling(t *testing.T) {
	addr := harness.StartBroker(t)
	const dir = "../../testdata/auckland-20160519-peak10min"
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var files [][]byte
	for _, e := range entries { // names hold the feed timestamp: sorted = published order
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, b)
	}
	if len(files) != 10 {
		t.Fatalf("%d files in %s", len(files), dir)
	}
	const vpFile = "../../testdata/halifax-20251106/VehiclePositions_20251106T210259Z.pb"
	vp, err := os.ReadFile(vpFile)
	if err != nil {
		t.Fatal(err)
	}
	const apiKey, urlKey = "Hdr-Secret-8e21", "Url-Secret-0c4d"
	var mu sync.Mutex
	idx, tuReqs, vpReqs := 0, 0, 0
	failed, slowed := false, false
	lastModified := time.Date(2025, 11, 6, 21, 3, 0, 0, time.UTC).Format(http.TimeFormat)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Api-Key") != apiKey {
			http.Error(w, "no api key", http.StatusUnauthorized)
			return
		}
		mu.Lock()
		switch r.URL.Path {
		case "/tu":
			tuReqs++
			switch {
			case idx == 3 && !failed:
				failed = true
				mu.Unlock()
				http.Error(w, "try again", http.StatusServiceUnavailable)
				return
			case idx == 5 && !slowed:
				slowed = true
				mu.Unlock()
				select { // slower than --http-timeout
				case <-r.Context().Done():
				case <-time.After(3 * time.Second):
				}
				return
			}
			etag := `"tu-` + strconv.Itoa(idx) + `"`
			if r.Header.Get("If-None-Match") == etag {
				if idx < len(files)-1 {
					idx++ // the client has seen this snapshot twice: publish the next one
				}
				mu.Unlock()
				w.WriteHeader(http.StatusNotModified)
				return
			}
			body := files[idx]
			mu.Unlock()
			w.Header().Set("ETag", etag)
			_, _ = w.Write(body)
		case "/vp":
			vpReqs++
			mu.Unlock()
			if r.URL.Query().Get("key") != urlKey {
				http.Error(w, "no key", http.StatusForbidden)
				return
			}
			if r.Header.Get("If-Modified-Since") == lastModified {
				w.WriteHeader(http.StatusNotModified)
				return
			}
			w.Header().Set("Last-Modified", lastModified)
			_, _ = w.Write(vp)
		default:
			mu.Unlock()
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)

	out, errOut, code := harness.RunCLI(t, nil, "produce", "--brokers", addr, "--operator", "AT",
		"--gtfs-rt-url", srv.URL+"/tu", "--gtfs-rt-url", srv.URL+"/vp?key="+urlKey, "--http-header", "X-Api-Key: "+apiKey,
		"--interval", "50ms", "--http-timeout", "300ms", "--polls", "20")
	if code != 0 {
		t.Fatalf("produce --gtfs-rt-url exited %d:\n%s%s", code, out, errOut)
	}
	for _, secret := range []string{apiKey, urlKey} {
		if strings.Contains(out+errOut, secret) {
			t.Errorf("the output shows a secret %s...:\n%s", secret[:4], out)
		}
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 20 {
		t.Fatalf("%d output lines, want one per poll (20):\n%s", len(lines), out)
	}
	produced := 0
	re := regexp.MustCompile(`; produced (\d+) records`)
	for i, l := range lines {
		if !strings.HasPrefix(l, "poll "+strconv.Itoa(i+1)+" at ") {
			t.Errorf("line %d: %q", i+1, l)
		}
		m := re.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("line %d has no produced count: %q", i+1, l)
		}
		n, _ := strconv.Atoi(m[1])
		produced += n
		tu304 := strings.Contains(l, "/tu 304 not modified")
		if i > 0 && !strings.Contains(l, "/vp 304 not modified") {
			t.Errorf("poll %d: the unchanged positions feed was not a 304: %q", i+1, l)
		}
		if (i%2 == 1) != tu304 {
			t.Errorf("poll %d: want a 304 on every second poll: %q", i+1, l)
		}
	}
	for _, want := range []string{"/tu 200, 99021 bytes, feed time 2016-05-18T20:00:20Z, ", "/vp 200, 22429 bytes, feed time 2025-11-06T21:02:59Z, 0 new predictions, 291 new positions"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("poll 1 does not say %q: %q", want, lines[0])
		}
	}
	if n := strings.Count(out, "(2 attempts)"); n != 2 {
		t.Errorf("%d polls needed a second attempt, want 2 (a 503 and a timeout):\n%s", n, out)
	}
	if !strings.Contains(out, "duplicate (trip, stop, timestamp)") {
		t.Errorf("no poll reports skipped duplicates:\n%s", out)
	}
	mu.Lock()
	if tuReqs != 22 || vpReqs != 20 {
		t.Errorf("requests: /tu %d, /vp %d; want 22 (20 polls + 2 retries) and 20", tuReqs, vpReqs)
	}
	mu.Unlock()

	// The topics hold what the same files give, each event once.
	want := harness.LoadFeeds(t, "AT", dir, vpFile)
	if produced != len(want.Predictions)+len(want.Positions) || len(want.Predictions) != 4610 || len(want.Positions) != 291 {
		t.Errorf("produced %d records over the polls; files give %d predictions and %d positions", produced, len(want.Predictions), len(want.Positions))
	}
	for _, tc := range []struct {
		topic string
		want  []string
	}{
		{harness.PredictionsTopic, encodeAll(want.Predictions, produce.EncodePrediction)},
		{harness.PositionsTopic, encodeAll(want.Positions, produce.EncodePosition)},
	} {
		var got []string
		for _, m := range harness.ReadTopic(t, addr, tc.topic) {
			got = append(got, string(m.Value))
		}
		slices.Sort(got)
		slices.Sort(tc.want)
		harness.SameRows(t, tc.topic+" (polled vs files)", got, tc.want)
	}
}

func encodeAll[T any](xs []T, enc func(T) []byte) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = string(enc(x))
	}
	return out
}
