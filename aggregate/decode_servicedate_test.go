package aggregate

import (
	"testing"
	"time"
)

// The optional start_date and arrival_time of a prediction: present, absent
// or null, and every way to get them wrong.
func TestDecodeStartDateArrivalTime(t *testing.T) {
	set := func(field, raw string) string { return withField(validPrediction, field, raw) }
	both := withField(set("start_date", `"20160519"`), "arrival_time", `"2016-05-20T00:10:30.1234567+12:00"`)
	p, err := DecodePrediction([]byte(both))
	if err != nil {
		t.Fatal(err)
	}
	wantArr := time.Date(2016, 5, 19, 12, 10, 30, 123456000, time.UTC)
	if p.StartDate != 20160519 || !p.ArrivalTime.Equal(wantArr) || p.ArrivalTime.Location() != time.UTC {
		t.Fatalf("start_date %d, arrival_time %v; want 20160519, %v UTC", p.StartDate, p.ArrivalTime, wantArr)
	}
	for _, in := range []string{validPrediction, set("start_date", `null`), set("arrival_time", `null`)} {
		p, err := DecodePrediction([]byte(in))
		if err != nil || p.StartDate != 0 || !p.ArrivalTime.IsZero() {
			t.Fatalf("%s: %+v %v, want both absent", in, p, err)
		}
	}
	if p, err := DecodePrediction([]byte(set("start_date", `"2016\u00305\u00319"`))); err != nil || p.StartDate != 20160519 {
		t.Fatalf("escaped digits: %d %v", p.StartDate, err)
	}
	// With names after them, as EncodePrediction writes them.
	if p, n, err := DecodePredictionNames([]byte(withField(both, "stop_name", `"Britomart"`))); err != nil || string(n.Stop) != "Britomart" || p.StartDate != 20160519 {
		t.Fatalf("with a name: %+v %q %v", p, n.Stop, err)
	}

	for _, tc := range []struct{ name, in, want string }{
		{"start_date empty", set("start_date", `""`), "start_date: not a date YYYYMMDD"},
		{"start_date number", set("start_date", `20160519`), "start_date: not a date YYYYMMDD"},
		{"start_date dashes", set("start_date", `"2016-05-19"`), "start_date: not a date YYYYMMDD"},
		{"start_date 7 digits", set("start_date", `"2016051"`), "start_date: not a date YYYYMMDD"},
		{"start_date 9 digits", set("start_date", `"201605190"`), "start_date: not a date YYYYMMDD"},
		{"start_date month 13", set("start_date", `"20161301"`), "start_date: not a date YYYYMMDD"},
		{"start_date 30 February", set("start_date", `"20160230"`), "start_date: not a date YYYYMMDD"},
		{"start_date 29 February 2015", set("start_date", `"20150229"`), "start_date: not a date YYYYMMDD"},
		{"start_date day 0", set("start_date", `"20160500"`), "start_date: not a date YYYYMMDD"},
		{"start_date year 0", set("start_date", `"00000101"`), "start_date: not a date YYYYMMDD"},
		{"start_date sign", set("start_date", `"+2016051"`), "start_date: not a date YYYYMMDD"},
		{"start_date NUL", set("start_date", `"2016051\u0000"`), "start_date: not a date YYYYMMDD"},
		{"start_date object", set("start_date", `{}`), "start_date: not a date YYYYMMDD"},
		{"arrival_time empty", set("arrival_time", `""`), "arrival_time: not RFC 3339 with offset"},
		{"arrival_time no offset", set("arrival_time", `"2016-05-19T10:00:00"`), "arrival_time: not RFC 3339 with offset"},
		{"arrival_time +24:00", set("arrival_time", `"2016-05-19T10:00:00+24:00"`), "arrival_time: not RFC 3339 with offset"},
		{"arrival_time number", set("arrival_time", `1463652000`), "arrival_time: not RFC 3339 with offset"},
		{"arrival_time date only", set("arrival_time", `"2016-05-19"`), "arrival_time: not RFC 3339 with offset"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodePrediction([]byte(tc.in))
			checkDecodeError(t, err, tc.want)
		})
	}
}

func TestParseServiceDate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int32
		ok   bool
	}{
		{"20160519", 20160519, true}, {"20160229", 20160229, true}, {"00010101", 10101, true},
		{"99991231", 99991231, true}, {"20000229", 20000229, true}, {"19000229", 0, false},
		{"20160431", 0, false}, {"2016051a", 0, false}, {"", 0, false},
	} {
		got, ok := ParseServiceDate(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseServiceDate(%q) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
		}
		if ok && ServiceDateString(got) != tc.in {
			t.Errorf("ServiceDateString(%d) = %q, want %q", got, ServiceDateString(got), tc.in)
		}
	}
}
