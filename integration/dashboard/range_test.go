//go:build integration

package dashboard

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/ovstream/ovstream/integration/harness"
)

// The dashboard's API on time ranges at the edges of what a time can say,
// against `serve` on a drained pipeline of three events (line L1, delays 0,
// 10 and 20 s, 2026-05-04 10:00-10:02 UTC): a range starting at
// 0001-01-01T00:00:00Z (Go's zero time) is a range like any other, with
// exact numbers; a range of more points than the page draws, or longer than
// 292 years (beyond which its length overflowed and slipped past the
// points' bound), is a 400 naming the parameter; never a 500.
func TestDashboardTimeRangeEdges(t *testing.T) {
	db := harness.ThreeEventsDrained(t)
	srv := harness.StartOvstream(t, nil, "serve", "--database-url", db, "--addr", "127.0.0.1:0", "--pipeline", "ovstream")
	base := harness.Printed(t, srv, regexp.MustCompile(`dashboard of pipeline ovstream: (http://[0-9.:]+/)`)) + "api/"

	// percentile_cont(0.5, 0.9) over {0, 10, 20}: 10 and 18; mean 10.
	const all = `"events":3,"mean":10,"p50":10,"p90":18,"min":0,"max":20`
	for _, tc := range []struct {
		path string
		code int
		says string // in the body: a 200's data, or the start of a 400's error
	}{
		{"delay?from=0001-01-01T00:00:00Z&to=0001-01-02T00:00:00Z", 200, `"points":[]`},
		{"delay?from=1800-01-01T00:00:00Z&to=2026-05-05T00:00:00Z&bucket=year", 200, `"start":"2026-01-01T00:00:00Z",` + all},
		{"top?day=0001-01-01", 200, `"rows":[]`},
		{"top?day=2026-05-04&min_events=1", 200, `"rows":[{"id":"L1","name":null,"short_name":null,` + all + `}]`},
		{"line?from=0001-01-01T00:00:00Z&to=2026-05-05T00:00:00Z", 200, `"lines":[{"id":"L1","name":null,"short_name":null,"events":3}]`},
		{"delay?from=0001-01-01T00:00:00Z", 400, "from: 0001-01-01T00:00:00Z to 2026-05-04T10:05:00Z is longer than 292 years"},
		{"delay?from=0000-01-01T00:00:00Z&bucket=5m", 400, "from: 0000-01-01T00:00:00Z to 2026-05-04T10:05:00Z is longer than 292 years"},
		{"delay?from=2026-01-01&to=9999-12-31T23:59:59-23:59", 400, "from: 2026-01-01T00:00:00Z to 10000-01-01T23:58:59Z is longer than 292 years"},
		{"delay?from=1900-01-01&bucket=5m", 400, "bucket: 5m over 1107466h5m0s gives 13289593 points, more than 5000"},
		{"delay?from=2027-01-01&to=2026-01-01", 400, "from: 2027-01-01T00:00:00Z is not before to 2026-01-01T00:00:00Z"},
	} {
		resp, err := http.Get(base + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body := string(b)
		if tc.code == 400 {
			var doc map[string]string
			if json.Unmarshal(b, &doc) == nil {
				body = doc["error"]
			}
			if !strings.HasPrefix(body, tc.says) {
				body = "not " + body
			}
		}
		if resp.StatusCode != tc.code || !strings.Contains(body, tc.says) {
			u, _ := url.PathUnescape(tc.path)
			t.Errorf("GET %s: %d %s\nwant %d with %s", u, resp.StatusCode, b, tc.code, tc.says)
		}
	}
}
