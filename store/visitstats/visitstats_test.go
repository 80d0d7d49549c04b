package visitstats

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/ovstream/ovstream/store/rollup"
)

func TestParseOnTime(t *testing.T) {
	for in, want := range map[string]Definition{"na": NorthAmerica, "NA": NorthAmerica, "crow": CROW,
		"45,120": {Early: 45, Late: 120}, " 0 , 180 ": {Early: 0, Late: 180}, "60,300": {Early: 60, Late: 300}} {
		if got, err := ParseOnTime(in); err != nil || got != want {
			t.Errorf("ParseOnTime(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "swiss", "60", "-30,180", "30,-1", "NaN,1", "1,Inf", "a,b", "1,2,3"} {
		if _, err := ParseOnTime(bad); err == nil {
			t.Errorf("ParseOnTime(%q): no error", bad)
		}
	}
}

func TestParseBucket(t *testing.T) {
	if b, sd, err := ParseBucket("service-day"); err != nil || !sd || b != rollup.All {
		t.Fatalf("service-day: %v %v %v", b, sd, err)
	}
	if b, sd, err := ParseBucket("hour"); err != nil || sd || b != rollup.Hour {
		t.Fatalf("hour: %v %v %v", b, sd, err)
	}
	if _, _, err := ParseBucket("fortnight"); err == nil || !strings.Contains(err.Error(), "service-day") {
		t.Fatalf("fortnight: %v", err)
	}
}

func TestValidate(t *testing.T) {
	ok := Query{Metric: OnTime, Pipeline: "p", Dimension: "station", From: time.Unix(0, 0), To: time.Unix(1, 0),
		OnTime: NorthAmerica, WaitTolerance: 0.25}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for what, edit := range map[string]func(*Query){
		"metric":    func(q *Query) { q.Metric = "delay" },
		"dimension": func(q *Query) { q.Dimension = "route" },
		"pipeline":  func(q *Query) { q.Pipeline = "" },
		"range":     func(q *Query) { q.To = q.From },
		"early":     func(q *Query) { q.OnTime.Early = -1 },
		"tolerance": func(q *Query) { q.WaitTolerance = -0.1 },
	} {
		q := ok
		edit(&q)
		if err := q.Validate(); err == nil {
			t.Errorf("%s: no error", what)
		}
	}
}

// The writers print counts whole, seconds and shares exact (CSV, JSON) or
// rounded (table), NULL as an empty cell, null or "-", and ids that a
// spreadsheet would run with a leading '.
func TestWriters(t *testing.T) {
	q := Query{Metric: OnTime, Pipeline: "p", Dimension: "line", From: time.Unix(0, 0).UTC(), To: time.Unix(3600, 0).UTC(),
		OnTime: CROW}
	rows := []Row{{Bucket: time.Unix(0, 0).UTC(), ID: "=1", Name: "Line", Values: []any{int64(3), int64(1), int64(1), int64(1), 1.0 / 3}}}
	var b bytes.Buffer
	if err := WriteCSV(&b, q, rows); err != nil {
		t.Fatal(err)
	}
	if want := "bucket_start,line,name,visits,early,on_time,late,on_time_share\n1970-01-01T00:00:00Z,'=1,Line,3,1,1,1,0.3333333333333333\n"; b.String() != want {
		t.Errorf("CSV:\n%s\nwant\n%s", b.String(), want)
	}
	b.Reset()
	if err := WriteJSON(&b, q, rows); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `"rows":[{"bucket_start":"1970-01-01T00:00:00Z","id":"=1","name":"Line","visits":3,"early":1,"on_time":1,"late":1,"on_time_share":0.3333333333333333}]`) ||
		!strings.Contains(b.String(), `"on_time":{"definition":"crow","early_s":30,"late_s":180}`) {
		t.Errorf("JSON: %s", b.String())
	}
	q.Metric = Headway
	rows[0].Values = []any{int64(1), 0.0, nil, int64(0), nil, nil, nil, int64(0), int64(0), nil}
	b.Reset()
	if err := WriteTable(&b, q, rows); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(b.String()), "\n"); len(lines) != 2 || strings.Count(lines[1], " -") != 5 {
		t.Errorf("table:\n%s", b.String())
	}
}
