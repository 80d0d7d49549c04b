//go:build integration

package dashboard

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ovstream/ovstream/integration/harness"
	"github.com/ovstream/ovstream/store"
)

// dashboardParams are the parameters of every API of the dashboard.
var dashboardParams = map[string][]string{
	"pipelines": {"pipeline", "tz"},
	"delay":     {"pipeline", "tz", "from", "to", "bucket", "line"},
	"top":       {"pipeline", "tz", "day", "dimension", "min_events", "top"},
	"line":      {"pipeline", "tz", "from", "to", "line"},
	"ontime":    {"pipeline", "tz", "from", "to", "definition", "min_visits", "top"},
	"headway":   {"pipeline", "tz", "from", "to", "dimension", "wait_tolerance", "min_gaps", "top"},
	"accuracy":  {"pipeline", "tz", "from", "to", "bands", "min_predictions", "top"},
	"health":    {"pipeline", "tz"},
}

// nastyValues are values every parameter must survive: bytes PostgreSQL
// refuses, zones it does not know, numbers and times at and past the edges.
var nastyValues = []string{
	"\xff", "L1\xff", "\x00", "L1\x00", "\xc0\xae\xc0\xae", "\xed\xa0\x80", "Local", "local", "localtime", "posixrules",
	"Factory", "../../../etc/passwd", "/etc/localtime", "UTC\x00", "Etc/GMT+14", "EST5EDT", "GMT0", "Europe/Amsterdam ",
	"'; DROP TABLE delay_aggregates; --", "%", "%25", "\\", "*", "_", "L1", "ovstream", " ovstream", "\u200b", "\ufeff",
	"😀", strings.Repeat("x", 300), strings.Repeat("é", 5000), "-1", "0", "1", "9223372036854775807", "-9223372036854775808",
	"1e400", "NaN", "infinity", "-infinity", "epoch", "now", "today", "allballs", "2026-02-30", "0000-01-01",
	"9999-12-31", "10000-01-01", "0001-01-01T00:00:00+24:00", "2026-05-04T10:00:00Z", "2026-05-04T10:00:00+14:00",
	"2026-05-04T10:00", "2026-05-04T25:00", "1h", "0s", "-5m", "1ns", "2562047h", "P1D", "month", "year", "auto", "all",
	"line", "station", "operator", "network", "na", "crow", "NA", "60,300", "-1,300", "1e308,1e308", "Inf,0", "0.25", "-0.1",
	"1e-320", "10.000001", "0-3m:-30s..90s", "0-3m:-30s..90s,3m-6m:-1m..2m30s", "0-3m:30s..90s", "0-1h:-5m..5m,1h-2h:-5m..5m",
	"0-2562047h:-1s..1s", "",
}

// dbText are words of PostgreSQL's or the driver's messages, which no
// answer of the dashboard may hold.
var dbText = regexp.MustCompile(`SQLSTATE|ERROR:|invalid byte sequence|pgx|pgconn|relation "|time zone "[^"]*" not recognized|syntax error|out of range`)

// A fuzz test of every parameter of every API of a real serve against real
// PostgreSQL (a drained pipeline): whatever one parameter holds, or several
// random ones together, the answer is never a 500 and never holds the
// database's text (a pipeline it does not know is a 404 naming it); a value with invalid UTF-8 or a NUL, and tz=Local, are a
// 400 naming the parameter. Paths of the assets with overlong or invalid
// UTF-8 are 4xx, never 500.
func TestDashboardBadInputIsA400(t *testing.T) {
	db := harness.ThreeEventsDrained(t)
	srv := harness.StartOvstream(t, harness.CliEnv(), "serve", "--database-url", db, "--addr", "127.0.0.1:0", "--pipeline", "ovstream")
	base := harness.Printed(t, srv, regexp.MustCompile(`dashboard of pipeline ovstream: (http://[0-9.:]+/)`))
	get := func(target string) (int, string) {
		t.Helper()
		return harness.HttpGet(t, base+target)
	}
	failures := 0
	check := func(api string, q url.Values) {
		t.Helper()
		target := "api/" + api + "?" + q.Encode()
		code, body := get(target)
		// A pipeline the database does not know: a 404 naming it and the
		// one it knows.
		p := strings.TrimSpace(q.Get("pipeline"))
		var nf struct{ Error string }
		unknown := code == 404 && p != "" && p != "ovstream" && json.Unmarshal([]byte(body), &nf) == nil &&
			nf.Error == fmt.Sprintf(`no pipeline %q in this database; known pipelines: "ovstream"`, p)
		bad := code >= 500 || (code != 200 && code != 400 && !unknown) || dbText.MatchString(body)
		// A value with invalid UTF-8 or a NUL, tz=Local, or a pipeline name
		// no pipeline can have (store.CheckPipelineName): a 400 naming one
		// of the parameters that hold one.
		var refused []string
		for name, vs := range q {
			v := vs[0]
			tv := strings.TrimSpace(v)
			if !utf8.ValidString(v) || strings.ContainsRune(v, 0) || (name == "tz" && strings.EqualFold(tv, "local")) ||
				(name == "pipeline" && tv != "" && store.CheckPipelineName(tv) != nil) {
				refused = append(refused, name)
			}
		}
		if len(refused) > 0 {
			var doc map[string]string
			named := false
			if code == 400 && json.Unmarshal([]byte(body), &doc) == nil {
				for _, name := range refused {
					named = named || strings.HasPrefix(doc["error"], name+": ")
				}
			}
			bad = bad || !named
		}
		if bad {
			if failures++; failures <= 25 {
				t.Errorf("GET /%s: %d %.300s", target, code, body)
			}
		}
	}
	for api, params := range dashboardParams {
		check(api, url.Values{})
		for _, name := range params {
			for _, v := range nastyValues {
				check(api, url.Values{name: {v}})
			}
		}
	}
	seed := time.Now().UnixNano()
	t.Logf("random parameters: seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	random := func() string {
		if rng.IntN(2) == 0 {
			return nastyValues[rng.IntN(len(nastyValues))]
		}
		b := make([]byte, rng.IntN(24))
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		return string(b)
	}
	for range 400 {
		apis := slices.Sorted(maps.Keys(dashboardParams))
		api := apis[rng.IntN(len(apis))]
		q := url.Values{}
		for _, name := range dashboardParams[api] {
			if rng.IntN(2) == 0 {
				q.Set(name, random())
			}
		}
		check(api, q)
	}
	if failures > 25 {
		t.Errorf("... %d bad answers in all", failures)
	}

	for _, path := range []string{"assets/%c0%ae%c0%ae/", "assets/%c0%ae%c0%ae/%c0%ae%c0%ae/etc/passwd", "assets/%ff", "assets/%00",
		"assets/..%2f..%2fgo.mod", "assets/vendor/%ed%a0%80/", "%ff", "delay%00", "api/%ff"} {
		if code, body := get(path); code < 400 || code >= 500 || dbText.MatchString(body) {
			t.Errorf("GET /%s: %d %.200s; want a 4xx", path, code, body)
		}
	}
}
