//go:build integration

package integration

import (
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
)

// `produce --gtfs-rt-url` ends with exit 1 and an error naming the URL and
// its status when a URL never gave a feed: at once when its first answer is
// one asking again cannot change (404), after --polls polls when it only
// failed in ways that may pass (503). Once a URL gave a feed, its later
// failures are reported in the poll lines and tolerated (exit 0).
func TestProduceFeedURLNeverAnswered(t *testing.T) {
	addr := startBroker(t)
	vp, err := os.ReadFile("../testdata/halifax-20251106/VehiclePositions_20251106T210259Z.pb")
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
			w.Write(vp)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	poll := func(path string, extra ...string) (string, string, int) {
		return runCLI(t, nil, append([]string{"produce", "--brokers", addr, "--gtfs-rt-url", srv.URL + path,
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
