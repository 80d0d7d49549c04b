package rollup

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ovstream/ovstream/aggregate"
)

func TestName(t *testing.T) {
	for p, want := range map[float64]string{0: "p0", 0.5: "p50", 0.9: "p90", 0.99: "p99", 0.999: "p99.9",
		0.05: "p5", 1: "p100", 0.29: "p29", 0.995: "p99.5", 0.123: "p12.3"} {
		if got := Name(p); got != want {
			t.Errorf("Name(%v) = %q, want %q", p, got, want)
		}
	}
}

func TestParseBucket(t *testing.T) {
	for in, want := range map[string]string{"all": "", "": "", "1h": "1 hour", "hour": "1 hour", "day": "1 day",
		"1d": "1 day", "week": "7 days", "1mo": "1 month", "year": "1 year", "15m": "900000000 microseconds",
		"24h": "86400000000 microseconds"} {
		b, err := ParseBucket(in)
		if err != nil || b.sql != want {
			t.Errorf("ParseBucket(%q) = %q, %v; want %q", in, b.sql, err, want)
		}
	}
	for _, bad := range []string{"0s", "-1h", "fortnight", "1ns"} {
		if _, err := ParseBucket(bad); err == nil {
			t.Errorf("ParseBucket(%q): no error", bad)
		}
	}
}

func TestParseTime(t *testing.T) {
	akl, err := time.LoadLocation("Pacific/Auckland")
	if err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]string{
		"2016-05-19":                "2016-05-18T12:00:00Z",
		"2016-05-19T07:30":          "2016-05-18T19:30:00Z",
		"2016-05-19 07:30:15":       "2016-05-18T19:30:15Z",
		"2016-05-19T07:30:00+02:00": "2016-05-19T05:30:00Z",
		"2016-05-19T07:30:00Z":      "2016-05-19T07:30:00Z",
	} {
		got, err := ParseTime(in, akl)
		if err != nil || got.UTC().Format(time.RFC3339) != want {
			t.Errorf("ParseTime(%q) = %v, %v; want %s", in, got.UTC(), err, want)
		}
	}
	if _, err := ParseTime("yesterday", akl); err == nil {
		t.Error("ParseTime(yesterday): no error")
	}
}

func TestParseQuantiles(t *testing.T) {
	qs, err := ParseQuantiles("0.5, 0.9,0.99,")
	if err != nil || !slices.Equal(qs, []float64{0.5, 0.9, 0.99}) {
		t.Fatalf("ParseQuantiles = %v, %v", qs, err)
	}
	for _, bad := range []string{"1.5", "-0.1", "p90", "NaN"} {
		if _, err := ParseQuantiles(bad); err == nil {
			t.Errorf("ParseQuantiles(%q): no error", bad)
		}
	}
}

func TestValidate(t *testing.T) {
	ok := Query{Pipeline: "p", Dimension: "line", From: time.Unix(0, 0), To: time.Unix(3600, 0), Quantiles: []float64{0.9}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for what, edit := range map[string]func(*Query){
		"dimension": func(q *Query) { q.Dimension = "route" },
		"range":     func(q *Query) { q.To = q.From },
		"quantile":  func(q *Query) { q.Quantiles = []float64{2} },
		"by":        func(q *Query) { q.By = "p50" },
		"top":       func(q *Query) { q.Top = 3 },
	} {
		q := ok
		edit(&q)
		if err := q.Validate(); err == nil {
			t.Errorf("%s: no error", what)
		}
	}
	ok.By, ok.Top = "p90", 3
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
}

// rank orders one bucket's rows by the metric, greatest first, ties by id,
// and keeps the first top; the rows of earlier buckets stay as they are.
func TestRank(t *testing.T) {
	row := func(id string, n int64, p90 float64) Row {
		return Row{ID: id, Summary: aggregate.Summary{Count: n, Quantiles: []float64{p90}}}
	}
	rows := []Row{row("earlier", 1, 0), row("a", 5, 10), row("b", 7, 30), row("c", 1, 30), row("d", 9, 20)}
	q := Query{Quantiles: []float64{0.9}, By: "p90"}
	metric, _ := q.metric()
	got := rank(slices.Clone(rows), 1, metric, 3)
	var ids []string
	for _, r := range got {
		ids = append(ids, r.ID)
	}
	if strings.Join(ids, " ") != "earlier b c d" {
		t.Fatalf("rank: %v", ids)
	}
	if got := rank(slices.Clone(rows), 1, nil, 0); len(got) != len(rows) || got[1].ID != "a" {
		t.Fatalf("rank without metric: %+v", got)
	}
}
