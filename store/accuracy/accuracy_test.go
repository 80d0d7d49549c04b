package accuracy

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseBands(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []Band
		err  string
	}{
		{"", Benchmark, ""},
		{"0-3m:-30s..90s,3m-6m:-1m..2m30s,6m-10m:-1m..3m30s,10m-15m:-1m30s..4m30s", Benchmark, ""},
		{"0-1h:-5m..5m", []Band{{0, 3600, -300, 300}}, ""},
		{"0-3m:-30s..90s,4m-6m:-1m..1m", nil, "band 2 starts at 240s, not where band 1 ends (180s)"},
		{"0-3m:30s..90s", nil, "band 1: error band [30s, 90s] must hold 0"},
		{"3m-3m:-1s..1s", nil, "band 1: horizon [180s, 180s) is empty or negative"},
		{"0-3m", nil, `band "0-3m": want FROM-TO:EARLY..LATE`},
		{"0-3x:-1s..1s", nil, `band "0-3x:-1s..1s": time: unknown unit`},
	} {
		got, err := ParseBands(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ParseBands(%q) = %v, %v; want an error with %q", c.in, got, err, c.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseBands(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}

func TestOverallIsTheMeanOfTheBuckets(t *testing.T) {
	rows := []Row{{ID: "a", Accuracy: 1}, {ID: "a", Accuracy: 0.5}, {ID: "a", Accuracy: 0}, {ID: "b", Accuracy: 0.25}}
	want := []Overall{{ID: "a", Accuracy: 0.5, Buckets: 3}, {ID: "b", Accuracy: 0.25, Buckets: 1}}
	if got := overall(rows); !reflect.DeepEqual(got, want) {
		t.Errorf("overall = %v, want %v", got, want)
	}
}

func TestValidate(t *testing.T) {
	from := time.Date(2016, 5, 19, 0, 0, 0, 0, time.UTC)
	ok := Query{Pipeline: "p", Dimension: "line", From: from, To: from.Add(time.Hour)}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []func(q *Query){
		func(q *Query) { q.Dimension = "trip" },
		func(q *Query) { q.To = q.From },
		func(q *Query) { q.Quantiles = []float64{1.5} },
		func(q *Query) { q.Bands = []Band{{0, 60, 1, 2}} },
	} {
		q := ok
		bad(&q)
		if err := q.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", q)
		}
	}
}

func TestWriteFormats(t *testing.T) {
	from := time.Date(2016, 5, 19, 0, 0, 0, 0, time.UTC)
	q := Query{Pipeline: "p", Dimension: "line", From: from, To: from.Add(24 * time.Hour), Quantiles: []float64{0.5}}
	res := &Result{Rows: []Row{
		{ID: "=L1", Bucket: 1, Band: Benchmark[0], Predictions: 4, Accurate: 3, Accuracy: 0.75, MeanErrorS: 12.5, ErrorQuantiles: []float64{10}},
		{ID: "=L1", Bucket: 3, Band: Benchmark[2], Predictions: 2, Accurate: 1, Accuracy: 0.5, MeanErrorS: -30, ErrorQuantiles: []float64{-30}},
	}}
	res.Overall = overall(res.Rows)
	var b strings.Builder
	if err := WriteCSV(&b, q, res); err != nil {
		t.Fatal(err)
	}
	wantCSV := "line,bucket,horizon_from_s,horizon_to_s,early_s,late_s,predictions,accurate,accuracy,mean_error_s,p50\n" +
		"'=L1,0m-3m,0,180,-30,90,4,3,0.75,12.5,10\n'=L1,6m-10m,360,600,-60,210,2,1,0.5,-30,-30\n"
	if b.String() != wantCSV {
		t.Errorf("CSV:\n%s\nwant\n%s", b.String(), wantCSV)
	}
	b.Reset()
	if err := WriteTable(&b, q, res); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"0m-3m     -30..+90", " 75.0 ", "6m-10m    -60..+210", "overall  (mean of 2)", " 62.5 "} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table without %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	if err := WriteJSON(&b, q, res); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"bucket": "6m-10m"`, `"error_quantiles_s": {`, `"p50": -30`, `"accuracy": 0.625`, `"buckets": 2`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("JSON without %q:\n%s", want, b.String())
		}
	}
}
