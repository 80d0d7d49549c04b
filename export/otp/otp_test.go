package otp

import (
	"archive/zip"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestArgsQueryRefusals(t *testing.T) {
	ok := Args{Pipeline: "p", Calendar: "weekday-saturday-sunday", MinVisits: 5}
	for _, c := range []struct {
		edit func(*Args)
		want string
	}{
		{func(a *Args) { a.Calendar = "weekly" }, `--calendar: unknown calendar "weekly": want weekday-saturday-sunday, day-of-week, all-days`},
		{func(a *Args) { a.From = "2025-13-01" }, `--from: "2025-13-01" is not a date yyyy-mm-dd`},
		{func(a *Args) { a.ValidTo = "20251101" }, `--valid-to: "20251101" is not a date yyyy-mm-dd`},
		{func(a *Args) { a.From, a.To = "2025-11-07", "2025-11-07" }, "--from 2025-11-07 is not before --to 2025-11-07"},
		{func(a *Args) { a.ValidFrom, a.ValidTo = "2026-01-02", "2026-01-01" }, "--valid-to 2026-01-01 is before --valid-from 2026-01-02"},
		{func(a *Args) { a.MinVisits = 0 }, "--min-visits 0: want 1 or more"},
		{func(a *Args) { a.Pipeline = "" }, "--pipeline is empty"},
	} {
		a := ok
		c.edit(&a)
		if _, err := a.Query(); err == nil || err.Error() != c.want {
			t.Errorf("%+v: %v, want %q", a, err, c.want)
		}
	}
	q, err := Args{Pipeline: "p", Calendar: "day-of-week", MinVisits: 1, From: "2025-11-07", ValidFrom: "2026-01-01", ValidTo: "2026-01-01"}.Query()
	if err != nil || q.From != time.Date(2025, 11, 7, 0, 0, 0, 0, time.UTC) || !q.To.IsZero() || q.Calendar.ServiceIDs[6] != "sunday" {
		t.Errorf("Query = %+v, %v", q, err)
	}
}

// Whole seconds half away from zero, early arrivals 0.
func TestSeconds(t *testing.T) {
	for d, want := range map[float64]int64{0: 0, 0.49: 0, 0.5: 1, 1.5: 2, 2.5: 3, 59.4: 59, -0.5: 0, -30: 0, 18000.2: 18000} {
		if got := seconds(d); got != want {
			t.Errorf("seconds(%v) = %d, want %d", d, got, want)
		}
	}
}

// The files of a small export, byte for byte, in a zip file and a
// directory: OTP's headers, dates yyyy-mm-dd, a comma in an id quoted.
func TestWriteZipAndDirectory(t *testing.T) {
	c, _ := ParseCalendar("weekday-saturday-sunday")
	day := func(s string) time.Time { d, _ := ParseDate(s); return d }
	e := &Export{Calendar: c.rows(day("2025-11-06"), day("2026-11-13")), Rows: []Row{
		{ServiceID: "weekday", TripID: "T,1", StopID: "S1", StopSequence: 1, P50: 0, P90: 30},
		{ServiceID: "weekday", TripID: "T,1", StopID: "S2", StopSequence: 2, P50: 120, P90: 18000},
	}}
	wantCal := "empirical_delay_service_id,monday,tuesday,wednesday,thursday,friday,saturday,sunday,start_date,end_date\n" +
		"weekday,1,1,1,1,1,0,0,2025-11-06,2026-11-13\nsaturday,0,0,0,0,0,1,0,2025-11-06,2026-11-13\n" +
		"sunday,0,0,0,0,0,0,1,2025-11-06,2026-11-13\n"
	wantTrips := "empirical_delay_service_id,trip_id,stop_id,stop_sequence,p50,p90\n" +
		"weekday,\"T,1\",S1,1,0,30\nweekday,\"T,1\",S2,2,120,18000\n"
	dir := t.TempDir()
	if err := e.Write(filepath.Join(dir, "out")); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{CalendarFile: wantCal, TripTimesFile: wantTrips} {
		if b, err := os.ReadFile(filepath.Join(dir, "out", name)); err != nil || string(b) != want {
			t.Errorf("%s: %q, %v; want %q", name, b, err, want)
		}
	}
	zipPath := filepath.Join(dir, "empirical_delay.ZIP")
	if err := e.Write(zipPath); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(zipPath)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range zr.File {
		names = append(names, f.Name)
		rc, _ := f.Open()
		got, _ := io.ReadAll(rc)
		rc.Close()
		if want := map[string]string{CalendarFile: wantCal, TripTimesFile: wantTrips}[f.Name]; string(got) != want {
			t.Errorf("zip %s: %q, want %q", f.Name, got, want)
		}
	}
	if strings.Join(names, " ") != CalendarFile+" "+TripTimesFile {
		t.Errorf("zip holds %v", names)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}
