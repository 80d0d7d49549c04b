//go:build integration

package pipeline

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ovstream/ovstream/feed/gtfsrt"
	"github.com/ovstream/ovstream/feed/gtfsstatic"

	"github.com/ovstream/ovstream/integration/harness"
	"github.com/ovstream/ovstream/integration/otppeer"
)

// otpOraclePy reads the predictions topic as readTopicPy prints it (stdin),
// forms the visits (the last prediction of each trip, start_date and
// stop_sequence, else stop_id, by event time, then partition, then offset)
// and computes what export otp-empirical-delay must write, in Python: the
// nearest-rank quantiles as the smallest delay whose rank reaches p times
// the count, in integer arithmetic. It reads the files written (zip or
// directory) with the csv module and checks them against the format of
// OpenTripPlanner 2.9's parser (headers, integers, p50 and p90 in
// [0, 18000], stop_sequence in [0, 10000], yyyy-mm-dd dates, 0/1 days,
// every day of the week in exactly one service id, service ids of the rows
// in the calendar). It prints JSON: the rows read, the rows wanted, the
// visits in rows and left out, and the format errors.
// Arguments: out, operator, from, to, calendar, min visits, valid from, valid to.
const otpOraclePy = `
import csv, datetime as dt, io, json, math, os, sys, zipfile
out, operator, frm, to, cal, minv, vfrom, vto = sys.argv[1:9]
minv = int(minv)
day = lambda s: dt.date.fromisoformat(s)
ids = {"weekday-saturday-sunday": ["weekday"] * 5 + ["saturday", "sunday"],
       "day-of-week": ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"],
       "all-days": ["all_days"] * 7}[cal]
last = {}
for line in sys.stdin:
    part, off, value = json.loads(line)
    j = json.loads(value)
    if "start_date" not in j:
        continue
    d = dt.datetime.strptime(j["start_date"], "%Y%m%d").date()
    stop = str(j["stop_sequence"]) if "stop_sequence" in j else "stop_id:" + j["stop_id"]
    rank = (dt.datetime.fromisoformat(j["event_time"].replace("Z", "+00:00")), part, off)
    key = (j["trip_id"], d, stop)
    if key not in last or rank > last[key][0]:
        last[key] = (rank, j, d)
groups, skipped = {}, {"no stop_sequence or stop_id": 0, "stop_sequence above 10000": 0,
                       "fewer visits than --min-visits": 0, "p50 or p90 above 18000 s": 0}
for _, j, d in last.values():
    if (operator and j["operator"] != operator) or (frm and d < day(frm)) or (to and d >= day(to)):
        continue
    if "stop_sequence" not in j or j["stop_id"] == "":
        skipped["no stop_sequence or stop_id"] += 1
        continue
    g = groups.setdefault((ids[d.weekday()], j["trip_id"], int(j["stop_sequence"]), j["stop_id"]), [])
    g.append((float(j["delay_s"]), d))
def nearest_rank(xs, num, den):
    xs = sorted(xs)
    return xs[-(-num * len(xs) // den) - 1]
def sec(x):
    return max(0, math.floor(x + 0.5))
want, visits, days = [], 0, []
for (sid, trip, seq, stop), g in sorted(groups.items()):
    delays = [x for x, _ in g]
    p50, p90 = sec(nearest_rank(delays, 1, 2)), sec(nearest_rank(delays, 9, 10))
    if seq > 10000:
        skipped["stop_sequence above 10000"] += len(g)
    elif len(g) < minv:
        skipped["fewer visits than --min-visits"] += len(g)
    elif p50 > 18000 or p90 > 18000:
        skipped["p50 or p90 above 18000 s"] += len(g)
    else:
        want.append([sid, trip, stop, str(seq), str(p50), str(p90)])
        visits += len(g)
        days += [d for _, d in g]
start = day(vfrom) if vfrom else min(days)
end = day(vto) if vto else max(days).replace(year=max(days).year + 1)
want_cal = []
for sid in dict.fromkeys(ids):
    want_cal.append([sid] + ["1" if x == sid else "0" for x in ids] + [start.isoformat(), end.isoformat()])

def read(name):
    if out.endswith(".zip"):
        with zipfile.ZipFile(out) as z:
            text = z.read(name).decode("utf-8")
    else:
        with open(os.path.join(out, name), encoding="utf-8") as f:
            text = f.read()
    return list(csv.reader(io.StringIO(text)))
cal_rows, trip_rows = read("empirical_delay_calendar.csv"), read("empirical_delay_trip_times.csv")
errors = []
if cal_rows[0] != ["empirical_delay_service_id", "monday", "tuesday", "wednesday", "thursday", "friday",
                   "saturday", "sunday", "start_date", "end_date"]:
    errors.append("calendar header %r" % cal_rows[0])
if trip_rows[0] != ["empirical_delay_service_id", "trip_id", "stop_id", "stop_sequence", "p50", "p90"]:
    errors.append("trip times header %r" % trip_rows[0])
covered = [0] * 7
for r in cal_rows[1:]:
    if len(r) != 10 or any(x not in ("0", "1") for x in r[1:8]) or day(r[9]) < day(r[8]) or not r[0]:
        errors.append("calendar row %r" % r)
        continue
    covered = [c + int(x) for c, x in zip(covered, r[1:8])]
if covered != [1] * 7:
    errors.append("days of the week in service ids: %r" % covered)
known = {r[0] for r in cal_rows[1:]}
for r in trip_rows[1:]:
    if len(r) != 6 or r[0] not in known or not r[1] or not r[2] or not 0 <= int(r[3]) <= 10000 \
            or not 0 <= int(r[4]) <= int(r[5]) <= 18000:
        errors.append("trip times row %r" % r)
print(json.dumps({"cal": cal_rows[1:], "rows": trip_rows[1:], "want_cal": want_cal, "want": want,
                  "visits": visits, "skipped": skipped, "errors": errors}))
`

// otpOracle is what otpOraclePy printed.
type otpOracle struct {
	Cal     [][]string       `json:"cal"`
	Rows    [][]string       `json:"rows"`
	WantCal [][]string       `json:"want_cal"`
	Want    [][]string       `json:"want"`
	Visits  int64            `json:"visits"`
	Skipped map[string]int64 `json:"skipped"`
	Errors  []string         `json:"errors"`
}

// checkOTPExport runs the export with args into out and compares the files
// with otpOraclePy over topic (readTopicPy's output), row for row and in
// order; it returns the oracle's numbers.
func checkOTPExport(t *testing.T, db, out string, topic []byte, oracleArgs []string, args ...string) otpOracle {
	t.Helper()
	stdout, stderr, code := harness.RunCLI(t, nil, append([]string{"export", "otp-empirical-delay", "--database-url", db, "--out", out}, args...)...)
	if code != 0 {
		t.Fatalf("export %v: exit %d\n%s%s", args, code, stdout, stderr)
	}
	cmd := exec.Command(harness.PythonWithConfluentKafka(t), append([]string{"-c", otpOraclePy, out}, oracleArgs...)...)
	cmd.Stdin = strings.NewReader(string(topic))
	res, err := cmd.Output()
	if err != nil {
		t.Fatalf("the Python oracle: %v\n%s", err, errText(err))
	}
	var o otpOracle
	if err := json.Unmarshal(res, &o); err != nil {
		t.Fatal(err)
	}
	for _, e := range o.Errors {
		t.Errorf("%v: not OpenTripPlanner's format: %s", args, e)
	}
	lines := func(rows [][]string) []string {
		var s []string
		for _, r := range rows {
			s = append(s, strings.Join(r, ","))
		}
		return s
	}
	for _, c := range []struct {
		what      string
		got, want []string
	}{{"calendar", lines(o.Cal), lines(o.WantCal)}, {"trip times", lines(o.Rows), lines(o.Want)}} {
		harness.SameRows(t, strings.Join(args, " ")+": "+c.what+" vs the Python oracle", c.got, c.want)
		if strings.Join(c.got, "\n") != strings.Join(c.want, "\n") {
			t.Errorf("%v: %s: the rows are not in the oracle's order", args, c.what)
		}
	}
	skipped := "none"
	var parts []string
	for _, r := range []string{"no stop_sequence or stop_id", "stop_sequence above 10000", "fewer visits than --min-visits", "p50 or p90 above 18000 s"} {
		if n := o.Skipped[r]; n > 0 {
			parts = append(parts, strconv.FormatInt(n, 10)+" visits "+r)
		}
	}
	if parts != nil {
		skipped = strings.Join(parts, ", ")
	}
	if want := strconv.Itoa(len(o.Want)) + " rows (" + strconv.Itoa(len(o.WantCal)) + " service ids, "; !strings.Contains(stdout, want) ||
		!strings.Contains(stdout, " from "+strconv.FormatInt(o.Visits, 10)+" visits; left out: "+skipped+"\n") {
		t.Errorf("%v: the summary is %q, want %s ... from %d visits; left out: %s", args, stdout, want, o.Visits, skipped)
	}
	t.Logf("export %v: %d rows, %d service ids, from %d visits; left out %v", args, len(o.Rows), len(o.Cal), o.Visits, o.Skipped)
	return o
}

// checkOTPReads runs OpenTripPlanner's own reader on out: it must record no
// issue (it drops no row), keep every row of the trip times file with the
// same values, and give the dates from first the service ids days.
func checkOTPReads(t *testing.T, out string, o otpOracle, first string, days ...string) {
	t.Helper()
	res, err := otppeer.Read(out, first, len(days))
	if err != nil {
		t.Fatal(err)
	}
	for i, is := range res.Issues {
		if i < 5 {
			t.Errorf("%s: OpenTripPlanner %s: %s", out, otppeer.Version, is)
		}
	}
	var rows []string
	for _, r := range o.Rows {
		rows = append(rows, strings.Join([]string{r[0], r[1], r[2], r[3], r[4], r[5]}, ","))
	}
	harness.SameRows(t, out+": the rows OpenTripPlanner "+otppeer.Version+" kept vs the file", res.Rows, rows)
	if strings.Join(res.Days, ", ") != strings.Join(days, ", ") {
		t.Errorf("%s: OpenTripPlanner's service ids from %s: %v, want %v", out, first, res.Days, days)
	}
	t.Logf("OpenTripPlanner %s read %s: %d rows kept, %d issues", otppeer.Version, out, len(res.Rows), len(res.Issues))
}

// errText returns the stderr of a failed exec.
func errText(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

// shiftedCopies returns the predictions of res once per shift, in order:
// start_date, event time and arrival time moved that many days, the delay
// moved by up to ±300 s, differently per prediction and copy.
func shiftedCopies(res *gtfsrt.Result, shifts ...int) *gtfsrt.Result {
	out := &gtfsrt.Result{}
	for _, k := range shifts {
		for i, p := range res.Predictions {
			d, _ := time.Parse("20060102", strconv.Itoa(int(p.StartDate)))
			n, _ := strconv.Atoi(d.AddDate(0, 0, k).Format("20060102"))
			p.StartDate = int32(n)
			p.EventTime = p.EventTime.AddDate(0, 0, k)
			if !p.ArrivalTime.IsZero() {
				p.ArrivalTime = p.ArrivalTime.AddDate(0, 0, k)
			}
			p.DelayS += float64((k*7919+i*104729)%601 - 300)
			out.Predictions = append(out.Predictions, p)
		}
	}
	return out
}

// otpRecords are hand-written visits of 2016-05-19 (Thursday) and 20
// (Friday), each day's once: one at stop_sequence 10001 (above OTP's
// bound), one 19000 s late (above OTP's 5 hours).
func otpRecords() []harness.Rec {
	var recs []harness.Rec
	for _, date := range []string{"20160519", "20160520"} {
		for _, v := range []struct{ trip, seq, delay string }{{"far", "10001", "60"}, {"late", "3", "19000"}} {
			recs = append(recs, harness.Rec{Topic: harness.PredictionsTopic, Partition: 1, Key: v.trip, Value: []byte(`{"trip_id":"` +
				v.trip + `","line":"H","stop_id":"S8","operator":"HAND","delay_s":` + v.delay + `,"stop_sequence":` + v.seq +
				`,"start_date":"` + date + `","event_time":"2016-05-18T20:10:00Z","arrival_time":"2016-05-18T20:30:00Z"}`)})
		}
	}
	return recs
}

// export otp-empirical-delay writes exactly what a Python oracle computes
// over the topic as confluent-kafka reads it (visits, service ids of the
// calendar, nearest-rank p50 and p90, the minimum of visits, the rows OTP
// would drop left out and counted), and its files pass the checks of
// OpenTripPlanner 2.9's parser read with Python's csv module. Data: the
// Auckland sample on service days 2016-05-19, 21 and 26 (Thursday,
// Saturday, Thursday), the hand visits of visitRecords and otpRecords, the
// Halifax pair with its static feed on 2025-11-06, 07, 08 and 13 (Thursday,
// Friday, Saturday, Thursday), each copy's delays
// moved by up to ±300 s. Two exports: the default calendar, all operators,
// --min-visits 2, into a zip file; day-of-week, Halifax alone, service days
// 2025-11-07 to 2025-11-13, --min-visits 1, a validity given, into a
// directory. Then the refusals: bad flags exit 2, an unknown pipeline 2, a
// range without visits 1 and writes nothing. OpenTripPlanner 2.9's own
// reader (integration/otppeer, the jar from Maven Central) reads both
// exports: no issue, every row kept with the same values, the service id
// of each date as the calendar says.
func TestOTPEmpiricalDelayEqualsPythonOracle(t *testing.T) {
	addr, _ := harness.StartBrokerProcess(t, "127.0.0.1:0", "")
	db := harness.FreshDB(t)
	auckland := harness.LoadFeeds(t, "AT", "../../testdata/auckland-20160519-peak10min")
	for i := range auckland.Predictions {
		auckland.Predictions[i].StartDate = 20160519
	}
	harness.ProduceFeeds(t, addr, shiftedCopies(auckland, 0))
	harness.ProduceRecords(t, addr, append(visitRecords(), otpRecords()...)...)
	harness.ProduceFeeds(t, addr, shiftedCopies(auckland, 2, 7))
	sched, err := gtfsstatic.Load("../../testdata/halifax-20251106/google_transit_trimmed.zip")
	if err != nil {
		t.Fatal(err)
	}
	halifax, err := gtfsrt.Load([]string{"../../testdata/halifax-20251106"}, gtfsrt.Options{Operator: "HFX", Schedule: sched})
	if err != nil {
		t.Fatal(err)
	}
	harness.ProduceFeeds(t, addr, shiftedCopies(halifax, 0, 1, 2, 7))
	harness.Drain(t, db, addr)
	if n := harness.Dump(t, db, `SELECT count(*) FROM dead_letters`); n[0] != "[0]" {
		t.Fatalf("dead letters %v: the oracle counts every record", n)
	}
	py := harness.PythonWithConfluentKafka(t)
	topic, err := exec.Command(py, "-c", readTopicPy, addr, harness.PredictionsTopic, "6").Output()
	if err != nil {
		t.Fatalf("confluent-kafka reader: %v", err)
	}
	if n, want := strings.Count(string(topic), "\n"), 3*4610+11+4+4*16574; n != want {
		t.Fatalf("confluent-kafka read %d records, want %d", n, want)
	}

	dir := t.TempDir()
	zipOut := filepath.Join(dir, "empirical_delay.zip")
	all := checkOTPExport(t, db, zipOut, topic, []string{"", "", "", "weekday-saturday-sunday", "2", "", ""}, "--min-visits", "2")
	if len(all.Want) < 10000 || all.Skipped["fewer visits than --min-visits"] == 0 || all.Skipped["stop_sequence above 10000"] != 2 ||
		all.Skipped["p50 or p90 above 18000 s"] != 2 || all.Skipped["no stop_sequence or stop_id"] == 0 {
		t.Errorf("the first export does not exercise every rule: %d rows, left out %v", len(all.Want), all.Skipped)
	}
	if got := all.WantCal[0][8] + " " + all.WantCal[0][9]; got != "2016-05-19 2026-11-13" {
		t.Errorf("default validity %s, want 2016-05-19 2026-11-13", got)
	}
	checkOTPReads(t, zipOut, all, "2016-05-18", "2016-05-18 -", "2016-05-19 weekday", "2016-05-20 weekday", "2016-05-21 saturday",
		"2016-05-22 sunday", "2016-05-23 weekday", "2016-05-24 weekday")
	hfx := filepath.Join(dir, "hfx_empirical_delay")
	one := checkOTPExport(t, db, hfx, topic, []string{"HFX", "2025-11-07", "2025-11-14", "day-of-week", "1", "2026-01-01", "2026-12-31"},
		"--operator", "HFX", "--from", "2025-11-07", "--to", "2025-11-14", "--calendar", "day-of-week", "--min-visits", "1",
		"--valid-from", "2026-01-01", "--valid-to", "2026-12-31")
	if len(one.Want) != 3*16574 || len(one.WantCal) != 7 {
		t.Errorf("the Halifax export: %d rows, %d service ids", len(one.Want), len(one.WantCal))
	}
	checkOTPReads(t, hfx, one, "2025-12-31", "2025-12-31 -", "2026-01-01 thursday", "2026-01-02 friday", "2026-01-03 saturday",
		"2026-01-04 sunday", "2026-01-05 monday", "2026-01-06 tuesday", "2026-01-07 wednesday")

	empty := filepath.Join(dir, "none.zip")
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{}, 2, "--out is required"},
		{[]string{"--out", empty, "--calendar", "weekly"}, 2, `--calendar: unknown calendar "weekly"`},
		{[]string{"--out", empty, "--from", "2025-11-20", "--to", "2025-11-07"}, 2, "--from 2025-11-20 is not before --to 2025-11-07"},
		{[]string{"--out", empty, "--from", "20251107"}, 2, `--from: "20251107" is not a date yyyy-mm-dd`},
		{[]string{"--out", empty, "--min-visits", "0"}, 2, "--min-visits 0: want 1 or more"},
		{[]string{"--out", empty, "--pipeline", "nosuch"}, 2, `"nosuch"`},
		{[]string{"--out", empty, "--from", "2030-01-01"}, 1, `no stop visit makes a row of pipeline "ovstream", service days from 2030-01-01 (left out: none)`},
		{[]string{"--out", empty, "--operator", "HAND"}, 1, "(left out: 1 visits no stop_sequence or stop_id, 2 visits stop_sequence above 10000, 5 visits fewer visits than --min-visits)"},
	} {
		_, stderr, code := harness.RunCLI(t, nil, append([]string{"export", "otp-empirical-delay", "--database-url", db}, c.args...)...)
		if code != c.code || !strings.Contains(stderr, c.msg) {
			t.Errorf("export %v: exit %d, %q; want exit %d and %q", c.args, code, stderr, c.code, c.msg)
		}
	}
	if _, err := os.Stat(empty); !os.IsNotExist(err) {
		t.Errorf("a refused export wrote %s (%v)", empty, err)
	}
}
