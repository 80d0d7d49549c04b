package dashboard

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The vendored uPlot is the npm package's file, byte for byte
// (assets/vendor/uplot/README.md has the version and how to refresh it).
func TestVendoredUPlot(t *testing.T) {
	for file, want := range map[string]string{
		"assets/vendor/uplot/uPlot.iife.min.js": "19c8d4c6ad88929a79f4ae49d6f7161566dfd0ba3d15cc495e974f787eb78f1f",
		"assets/vendor/uplot/uPlot.min.css":     "df630c6a8d6f8eeaff264b50f73ce5b114f646ffd9a0bb74f049b0a00135fa04",
	} {
		b, err := fs.ReadFile(assets, file)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		if got := hex.EncodeToString(sum[:]); got != want {
			t.Errorf("%s: sha256 %s, the README records %s", file, got, want)
		}
	}
	if _, err := fs.ReadFile(assets, "assets/vendor/uplot/LICENSE"); err != nil {
		t.Error("uPlot's licence is not kept beside it:", err)
	}
}

// Nothing the pages load comes from elsewhere: no src, href or url() names
// another origin, and the answers forbid it (Content-Security-Policy).
func TestAssetsOffline(t *testing.T) {
	external := regexp.MustCompile(`(?i)(src|href)\s*=\s*["']?(https?:)?//|url\(\s*["']?(https?:)?//|fetch\(\s*["'](https?:)?//`)
	err := fs.WalkDir(assets, "assets", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(path, ".md") || strings.HasSuffix(path, "LICENSE") {
			return err
		}
		b, err := fs.ReadFile(assets, path)
		if err != nil {
			return err
		}
		if m := external.Find(b); m != nil {
			t.Errorf("%s loads from another origin: %q", path, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func newTestHandler(t *testing.T) *Handler {
	t.Helper()
	// Nothing listens on port 1: requests that reach the database fail.
	h, err := New(Config{DatabaseURL: "postgres://u@127.0.0.1:1/none?connect_timeout=1", QueryTimeout: 5 * time.Second,
		Logger: nil})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

func get(t *testing.T, h http.Handler, target string) (*http.Response, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
	b, _ := io.ReadAll(rec.Result().Body)
	return rec.Result(), string(b)
}

// The pages and assets need no database; bad parameters get 400 naming the
// parameter, before the database is asked; a database that does not answer
// gets 500 with the error, as JSON.
func TestHandler(t *testing.T) {
	h := newTestHandler(t)
	for _, p := range []string{"/", "/delay", "/top", "/line", "/health"} {
		resp, body := get(t, h, p)
		if resp.StatusCode != 200 || !strings.Contains(body, `<script src="assets/app.js"`) {
			t.Errorf("GET %s: %d\n%s", p, resp.StatusCode, body)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
			t.Errorf("GET %s: Content-Security-Policy %q", p, csp)
		}
	}
	for _, p := range []string{"/assets/app.js", "/assets/style.css", "/assets/vendor/uplot/uPlot.iife.min.js", "/assets/vendor/uplot/uPlot.min.css"} {
		if resp, body := get(t, h, p); resp.StatusCode != 200 || len(body) < 100 {
			t.Errorf("GET %s: %d, %d bytes", p, resp.StatusCode, len(body))
		}
	}
	for _, p := range []string{"/nowhere", "/assets/%c0%ae%c0%ae/", "/assets/%ff", "/assets/a%00"} {
		if resp, _ := get(t, h, p); resp.StatusCode != 404 {
			t.Errorf("GET %s: %d, want 404", p, resp.StatusCode)
		}
	}
	for target, says := range map[string]string{
		"/api/delay?tz=Mars/Olympus":          "tz: ",
		"/api/top?tz=Mars/Olympus":            "tz: ",
		"/api/top?dimension=route":            "dimension: ",
		"/api/top?min_events=0":               "min_events: ",
		"/api/top?top=many":                   "top: ",
		"/api/health?tz=Nowhere":              "tz: ",
		"/api/line?tz=Nowhere":                "tz: ",
		"/api/delay?pipeline=p&from=tomorrow": "", // reaches the database first
		"/api/pipelines?pipeline=%ff":         "pipeline: ",
		"/api/health?pipeline=a%00":           "pipeline: ",
		"/api/line?line=%c0%ae":               "line: ",
		"/api/top?pipeline=a%0Bb":             "pipeline: ",
		"/api/line?tz=Local":                  "tz: ",
		"/api/delay?tz=/etc/localtime":        "tz: ",
	} {
		resp, body := get(t, h, target)
		var doc map[string]string
		if err := json.Unmarshal([]byte(body), &doc); err != nil || doc["error"] == "" {
			t.Errorf("GET %s: %d %q: no JSON error", target, resp.StatusCode, body)
			continue
		}
		want := http.StatusBadRequest
		if says == "" {
			want = http.StatusInternalServerError
		}
		if resp.StatusCode != want || !strings.HasPrefix(doc["error"], says) {
			t.Errorf("GET %s: %d %q, want %d starting %q", target, resp.StatusCode, doc["error"], want, says)
		}
	}
}

func TestNewNeedsADatabaseURL(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Error("New without a database URL: no error")
	}
	if _, err := New(Config{DatabaseURL: "postgres://%zz"}); err == nil {
		t.Error("New with a bad URL: no error")
	}
}

func TestChooseBucket(t *testing.T) {
	w := 5 * time.Minute
	for _, tc := range []struct {
		param      string
		span       time.Duration
		name, errs string
	}{
		{"", 2 * time.Hour, "5m", ""},
		{"auto", 24 * time.Hour, "5m", ""},               // 288 points
		{"auto", 48 * time.Hour, "15m", ""},              // 576 windows: the next that gives <= 400
		{"auto", 30 * 24 * time.Hour, "3h", ""},          // 240 points
		{"auto", 365 * 24 * time.Hour, "day", ""},        // 365 points
		{"auto", 20 * 365 * 24 * time.Hour, "month", ""}, // the largest
		{"hour", 24 * time.Hour, "hour", ""},
		{"1h", 24 * time.Hour, "1h", ""},
		{"15m", 24 * time.Hour, "15m", ""},
		{"1m", time.Hour, "", "bucket: 1m is shorter than the window size 5m"},
		{"all", time.Hour, "", "bucket: want a bucket"},
		{"fortnight", time.Hour, "", "bucket: bucket \"fortnight\""},
		{"5m", 365 * 24 * time.Hour, "", "bucket: 5m over"},
	} {
		_, name, _, err := chooseBucket(tc.param, tc.span, w)
		switch {
		case tc.errs != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.errs)):
			t.Errorf("chooseBucket(%q, %v): %v, want an error %q", tc.param, tc.span, err, tc.errs)
		case tc.errs == "" && (err != nil || name != tc.name):
			t.Errorf("chooseBucket(%q, %v) = %q, %v; want %q", tc.param, tc.span, name, err, tc.name)
		}
	}
}

// Without from and to, a page shows the newest span of the pipeline's
// windows, not before its first one; a bad time names its parameter.
func TestTimeRange(t *testing.T) {
	akl, err := time.LoadLocation("Pacific/Auckland")
	if err != nil {
		t.Fatal(err)
	}
	first := time.Date(2016, 5, 18, 18, 55, 0, 0, time.UTC)
	e := extent{First: first, Last: first.Add(2 * time.Hour), Window: 5 * time.Minute}
	from, to, err := timeRange(url.Values{}, akl, e, 24*time.Hour)
	if err != nil || !from.Equal(first) || !to.Equal(e.End()) || from.Location() != akl {
		t.Errorf("default range: %v..%v, %v; want %v..%v", from, to, err, first, e.End())
	}
	from, _, _ = timeRange(url.Values{}, akl, e, time.Hour)
	if !from.Equal(e.End().Add(-time.Hour)) {
		t.Errorf("default range of an hour starts %v", from)
	}
	from, to, err = timeRange(url.Values{"from": {"2016-05-19T07:00"}, "to": {"2016-05-19T09:00:00+12:00"}}, akl, e, time.Hour)
	if err != nil || from.UTC() != time.Date(2016, 5, 18, 19, 0, 0, 0, time.UTC) || to.UTC() != time.Date(2016, 5, 18, 21, 0, 0, 0, time.UTC) {
		t.Errorf("given range: %v..%v, %v", from, to, err)
	}
	for v, says := range map[string]url.Values{
		"from: ": {"from": {"yesterday"}},
		"to: ":   {"to": {"2016-13-01"}},
		"from: 2016-05-19T09:00:00+12:00 is not before": {"from": {"2016-05-19T09:00"}, "to": {"2016-05-19T08:00"}},
	} {
		if _, _, err := timeRange(says, akl, e, time.Hour); err == nil || !strings.HasPrefix(err.Error(), v) {
			t.Errorf("timeRange(%v): %v, want %q", says, err, v)
		}
	}
}

func TestDayParam(t *testing.T) {
	akl, _ := time.LoadLocation("Pacific/Auckland")
	e := extent{First: time.Date(2016, 5, 18, 18, 55, 0, 0, time.UTC), Last: time.Date(2016, 5, 18, 20, 55, 0, 0, time.UTC), Window: 5 * time.Minute}
	d, err := dayParam("", akl, e) // 2016-05-19 08:55 in Auckland
	if err != nil || d.Format(time.RFC3339) != "2016-05-19T00:00:00+12:00" {
		t.Errorf("default day: %v, %v", d, err)
	}
	if _, err := dayParam("19/05/2016", akl, e); err == nil || !strings.HasPrefix(err.Error(), "day: ") {
		t.Errorf("bad day: %v", err)
	}
	// A day of a DST change has 25 hours (Auckland, 2016-04-03).
	d, _ = dayParam("2016-04-03", akl, e)
	if got := nextDay(d).Sub(d); got != 25*time.Hour {
		t.Errorf("2016-04-03 in Auckland: %v, want 25h", got)
	}
}

func TestLagOf(t *testing.T) {
	n := func(v int64) *int64 { return &v }
	l := lagOf("kafka", []PartitionLag{{Partition: "t/0", Lag: n(3)}, {Partition: "t/1", Lag: n(4)}}, nil)
	if !l.Known || l.Total == nil || *l.Total != 7 {
		t.Errorf("lag of two partitions: %+v", l)
	}
	l = lagOf("kafka", []PartitionLag{{Partition: "t/0", Lag: n(3)}, {Partition: "t/1"}}, nil)
	if l.Known || l.Total != nil {
		t.Errorf("lag with one unknown partition: %+v, want the total unknown", l)
	}
	l = lagOf("kafka", nil, io.ErrUnexpectedEOF)
	if l.Known || l.Total != nil || !strings.Contains(l.Note, "unexpected EOF") {
		t.Errorf("lag with an error: %+v", l)
	}
}

type fakeHealth struct{ commit time.Time }

func (f fakeHealth) Assigned() bool          { return true }
func (f fakeHealth) Standby() (bool, string) { return false, "" }
func (f fakeHealth) LastCommit() time.Time   { return f.commit }

// RunSource reads the run's gauges: the watermark (Unix seconds) to the
// microsecond, the lag of each partition ordered by topic and number.
func TestRunSource(t *testing.T) {
	reg := prometheus.NewRegistry()
	wm := prometheus.NewGauge(prometheus.GaugeOpts{Name: "ovstream_watermark_timestamp_seconds"})
	open := prometheus.NewGauge(prometheus.GaugeOpts{Name: "ovstream_open_windows"})
	lag := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ovstream_partition_lag_messages"}, []string{"topic", "partition"})
	reg.MustRegister(wm, open, lag)
	at := time.Date(2016, 5, 18, 21, 5, 0, 123456000, time.UTC)
	wm.Set(float64(at.UnixNano()) / 1e9)
	open.Set(3)
	lag.WithLabelValues("b", "10").Set(5)
	lag.WithLabelValues("b", "2").Set(1)
	lag.WithLabelValues("a", "0").Set(0)
	commit := time.Now()
	l := RunSource("p", "host:1", reg, fakeHealth{commit})()
	if l.Watermark == nil || !l.Watermark.Equal(at) || l.OpenWindows != 3 || l.LastCommit == nil || !l.LastCommit.Equal(commit) {
		t.Errorf("live: %+v", l)
	}
	var parts []string
	for _, p := range l.Lag {
		parts = append(parts, p.Partition)
	}
	if strings.Join(parts, " ") != "a/0 b/2 b/10" || *l.Lag[2].Lag != 5 {
		t.Errorf("lag partitions %v", parts)
	}
}

// The API's names: null where the names table has none (an id missing from
// it, a line without a short name); ids stay as they are.
func TestNamesJSON(t *testing.T) {
	nm := names{
		"320":  {Name: "Airport - Fall River Regional Exp", ShortName: "320"},
		"6250": {Name: "Bedford Hwy Before Flamingo Dr (6250)"},
	}
	for _, tc := range []struct{ id, want string }{
		{"320", `{"id":"320","name":"Airport - Fall River Regional Exp","short_name":"320","events":1,"mean":0,"p50":0,"p90":0,"min":0,"max":0}`},
		{"6250", `{"id":"6250","name":"Bedford Hwy Before Flamingo Dr (6250)","short_name":null,"events":1,"mean":0,"p50":0,"p90":0,"min":0,"max":0}`},
		{"sp6", `{"id":"sp6","name":null,"short_name":null,"events":1,"mean":0,"p50":0,"p90":0,"min":0,"max":0}`},
	} {
		b, err := json.Marshal(Ranked{ID: tc.id, Named: nm.of(tc.id), Stats: Stats{Events: 1}})
		if err != nil || string(b) != tc.want {
			t.Errorf("%s: %s %v\nwant %s", tc.id, b, err, tc.want)
		}
	}
	if got := names(nil).of("x"); got.Name != nil || got.ShortName != nil {
		t.Errorf("no names: %+v", got)
	}
}
