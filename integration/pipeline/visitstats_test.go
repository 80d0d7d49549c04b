//go:build integration

package pipeline

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ovstream/ovstream/integration/harness"
)

// visitKPIsPy reads the predictions topic as readTopicPy printed it
// (confluent-kafka, librdkafka), forms the stop visits in Python (the
// records that are not dead letters and have a start_date; per trip,
// service day and stop_sequence, else stop_id, the last by event time,
// then partition, then offset) and
// computes, for each query, the on-time counts or the headways per bucket
// and dimension id, with Python's own arithmetic (exact fractions, then
// one float division). Arguments: a file of readTopicPy's lines, a file of
// the dead letters' [partition, offset], a file of the queries.
// Prints one JSON list of rows [bucket start (Unix s), id, values...] per
// query.
const visitKPIsPy = `
import json, sys
from datetime import datetime, timedelta, timezone
from fractions import Fraction
from zoneinfo import ZoneInfo
records, dead = sys.argv[1], {tuple(x) for x in json.load(open(sys.argv[2]))}
queries = json.load(open(sys.argv[3]))
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
def micros(s):
    return (datetime.fromisoformat(s) - EPOCH) // timedelta(microseconds=1)
visits = {}
for line in open(records):
    part, off, value = json.loads(line)
    if (part, off) in dead:
        continue
    j = json.loads(value)
    if j.get("start_date") is None:
        continue
    seq = j.get("stop_sequence")
    key = (j["trip_id"], j["start_date"], str(seq) if seq is not None else "stop_id:" + j["stop_id"])
    et = micros(j["event_time"])
    rank = (et, part, off)
    v = visits.get(key)
    if v is None or rank > v["rank"]:
        arr = j.get("arrival_time")
        visits[key] = {"rank": rank, "n": v["n"] if v else 0, "trip": key[0], "day": key[1], "stop_key": key[2],
                       "line": j["line"], "station": j["stop_id"], "operator": j["operator"], "network": "all",
                       "delay": float(j["delay_s"]), "arrival": micros(arr) if arr is not None else et,
                       "given": arr is not None, "et": et}
    visits[key]["n"] += 1

def bucket(q, v):
    tz = ZoneInfo(q["tz"])
    if q["bucket"] == "service-day":
        d = v["day"]
        return int(datetime(int(d[:4]), int(d[4:6]), int(d[6:]), tzinfo=tz).timestamp())
    if q["bucket"] == "all":
        return q["from"]
    assert q["bucket"] == "hour"
    local = datetime.fromtimestamp(v["arrival"] // 10**6, tz)
    return int(local.replace(minute=0, second=0).timestamp())

def realized(q, v):
    return not q["realized"] or v["arrival"] - v["et"] <= q["realized"] * 10**6

def inside(q, v):
    return q["from"] * 10**6 <= v["arrival"] < q["to"] * 10**6 and (not q["ids"] or v[q["dim"]] in q["ids"]) and realized(q, v)

def on_time(q):
    groups = {}
    for v in visits.values():
        if inside(q, v):
            g = groups.setdefault((bucket(q, v), v[q["dim"]]), [0, 0, 0, 0])
            g[0] += 1
            if v["delay"] < -q["early"]:
                g[1] += 1
            elif v["delay"] > q["late"]:
                g[3] += 1
            else:
                g[2] += 1
    return [[b, i, g[0], g[1], g[2], g[3], g[2] / g[0]] for (b, i), g in groups.items()]

def headways(q):
    runs = {}
    for v in visits.values():
        if v["given"] and realized(q, v):
            v["scheduled"] = v["arrival"] - int(round(v["delay"] * 10**6))
            runs.setdefault((v["line"], v["station"], v["day"]), []).append(v)
    gaps = {}  # id(visit) -> [observed gap, scheduled gap], in seconds
    for run in runs.values():
        for col, at in ((0, "arrival"), (1, "scheduled")):
            run.sort(key=lambda v: (v[at], v["trip"], v["stop_key"]))
            for a, b in zip(run, run[1:]):
                gaps.setdefault(id(b), [None, None])[col] = Fraction(b[at] - a[at], 10**6)
    groups = {}
    for run in runs.values():
        for v in run:
            if id(v) in gaps and inside(q, v):
                groups.setdefault((bucket(q, v), v[q["dim"]]), []).append(gaps[id(v)])
    def wait(xs):
        return float(sum(x * x for x in xs)) / float(2 * sum(xs)) if xs and sum(xs) != 0 else None
    out = []
    for (b, i), gs in groups.items():
        h = [g[0] for g in gs if g[0] is not None]
        s = [g[1] for g in gs if g[1] is not None]
        both = [g for g in gs if g[0] is not None and g[1] is not None]
        within = sum(1 for g in both if float(g[0]) <= float(g[1]) * (1 + q["tolerance"]))
        awt, swt = wait(h), wait(s)
        out.append([b, i, len(h), float(sum(h)) / len(h) if h else None, awt, len(s), float(sum(s)) / len(s) if s else None,
                    swt, awt - swt if awt is not None and swt is not None else None, len(both), within,
                    within / len(both) if both else None])
    return out

print(json.dumps([on_time(q) if q["metric"] == "on-time" else headways(q) for q in queries]))
`

// onTimeVisits sums the visits of on-time lines (kpiLine: the fifth field
// from the end; an id may hold spaces).
func onTimeVisits(lines []string) int64 {
	var n int64
	for _, l := range lines {
		f := strings.Fields(l)
		v, _ := strconv.ParseInt(f[len(f)-5], 10, 64)
		n += v
	}
	return n
}

// kpiQuery is one report the test asks of the oracle, of `report` and of
// the SQL functions.
type kpiQuery struct {
	Metric    string   `json:"metric"`
	Dim       string   `json:"dim"`
	IDs       []string `json:"ids"`
	From      int64    `json:"from"` // Unix seconds
	To        int64    `json:"to"`
	Bucket    string   `json:"bucket"` // all, hour, service-day
	TZ        string   `json:"tz"`
	OnTime    string   `json:"-"` // report's --on-time
	Early     float64  `json:"early"`
	Late      float64  `json:"late"`
	Tolerance float64  `json:"tolerance"`
	Realized  float64  `json:"realized"` // report's --realized-within, seconds; 0: every visit
}

func (q kpiQuery) String() string {
	return fmt.Sprintf("%s %s ids=%v [%s, %s) bucket %s tz %s on-time %s tolerance %v realized within %vs", q.Metric, q.Dim, q.IDs,
		time.Unix(q.From, 0).UTC().Format(time.RFC3339), time.Unix(q.To, 0).UTC().Format(time.RFC3339), q.Bucket, q.TZ,
		q.OnTime, q.Tolerance, q.Realized)
}

// kpiCounts are the columns of each metric that are counts (the others are
// float64 or null).
var kpiCounts = map[string]map[int]bool{
	"on-time": {0: true, 1: true, 2: true, 3: true},
	"headway": {0: true, 3: true, 7: true, 8: true},
}

// kpiLine formats one row for an exact comparison: the bucket start in Unix
// seconds, the id, then each value: a count in decimal, a float64 in its
// shortest form, "null".
func kpiLine(metric string, bucket int64, id string, vals []string) string {
	out := []string{strconv.FormatInt(bucket, 10), id}
	for i, v := range vals {
		switch {
		case v == "null" || v == "" || v == "<nil>":
			out = append(out, "null")
		case kpiCounts[metric][i]:
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				out = append(out, "bad count "+v)
			} else {
				out = append(out, strconv.FormatInt(n, 10))
			}
		default:
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				out = append(out, "bad number "+v)
			} else {
				out = append(out, strconv.FormatFloat(f, 'g', -1, 64))
			}
		}
	}
	return strings.Join(out, " ")
}

// hwRecords are hand-written visits of line HW at stop S1 after the
// Auckland sample: service day 2016-05-19, trips at 08:00, 08:10, 08:25
// (300 s late), 08:30 (scheduled 08:00, 08:10, 08:20, 08:30); hw5 without
// arrival_time, 60 s early (its event time stands in: no headway); service
// day 2016-05-20, hw6 at 08:05, 301 s late (the first of its day: no gap).
func hwRecords() []harness.Rec {
	p := func(part int32, trip, day, arrival string, delay int) harness.Rec {
		v := `{"trip_id":"` + trip + `","line":"HW","stop_id":"S1","operator":"HAND","stop_sequence":3,"delay_s":` +
			strconv.Itoa(delay) + `,"event_time":"2016-05-18T20:09:30Z","start_date":"` + day + `"`
		if arrival != "" {
			v += `,"arrival_time":"` + arrival + `"`
		}
		return harness.Rec{Topic: harness.PredictionsTopic, Partition: part, Key: trip, Value: []byte(v + "}")}
	}
	return []harness.Rec{
		p(1, "hw1", "20160519", "2016-05-19T08:00:00Z", 0), p(2, "hw2", "20160519", "2016-05-19T08:10:00Z", 0),
		p(3, "hw3", "20160519", "2016-05-19T08:25:00Z", 300), p(4, "hw4", "20160519", "2016-05-19T08:30:00Z", 0),
		p(5, "hw5", "20160519", "", -60), p(0, "hw6", "20160520", "2016-05-20T08:05:00Z", 301),
	}
}

// The on-time counts and the headways of `report --metric on-time|headway`
// (--json, and --csv for one query) and of the SQL functions ovs_on_time
// and ovs_headways equal, row for row and bit for bit, those Python
// computes from the topic as confluent-kafka reads it: over the OVapi
// snapshot, the Auckland peak sample, the Halifax pair with its static feed
// and hand-written visits; per line, station, operator and the network;
// over the whole range, by hour (in America/Halifax: 2025-11-06 has many
// hours of arrivals) and by service day; under the North American and CROW
// definitions and bounds given as numbers. The hand-written line HW has
// the figures worked out by hand: NA counts 300 s late on time and 301 s
// late (bounds inclusive), CROW -60 s early; its gaps 600, 900, 300 s
// against 600, 600, 600 s scheduled: an average wait of 350 s, 300 s
// scheduled, 50 s excess, 2 of 3 gaps within +25 %.
func TestVisitKPIsEqualPythonOracle(t *testing.T) {
	addr, _ := harness.StartBrokerProcess(t, "127.0.0.1:0", "")
	db := harness.FreshDB(t)
	produceVisitFeeds(t, addr, hwRecords()...)
	harness.Drain(t, db, addr)

	day := func(s string) int64 {
		d, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return d.Unix()
	}
	all0, all1 := day("2014-01-01T00:00:00Z"), day("2026-01-01T00:00:00Z")
	hfx0, hfx1 := day("2025-11-06T00:00:00Z"), day("2025-11-08T00:00:00Z")
	na := kpiQuery{Metric: "on-time", OnTime: "na", Early: 60, Late: 300, TZ: "UTC", Bucket: "all", From: all0, To: all1}
	crow := na
	crow.OnTime, crow.Early, crow.Late = "crow", 30, 180
	hw := kpiQuery{Metric: "headway", Tolerance: 0.25, TZ: "UTC", Bucket: "all", From: all0, To: all1}
	with := func(q kpiQuery, edit func(*kpiQuery)) kpiQuery { edit(&q); return q }
	queries := []kpiQuery{
		with(na, func(q *kpiQuery) { q.Dim = "line" }),
		with(crow, func(q *kpiQuery) { q.Dim = "line"; q.IDs = []string{"HW", "H"} }),
		with(crow, func(q *kpiQuery) {
			q.Dim = "station"
			q.Bucket, q.TZ, q.From, q.To = "hour", "America/Halifax", hfx0, hfx1
		}),
		with(na, func(q *kpiQuery) {
			q.Dim, q.Bucket, q.TZ, q.OnTime, q.Early, q.Late = "operator", "service-day", "Europe/Amsterdam", "45,120", 45, 120
		}),
		with(na, func(q *kpiQuery) { q.Dim = "network"; q.Bucket, q.TZ = "hour", "Pacific/Auckland" }),
		with(hw, func(q *kpiQuery) { q.Dim = "line" }),
		with(hw, func(q *kpiQuery) {
			q.Dim = "station"
			q.Bucket, q.TZ, q.From, q.To = "hour", "America/Halifax", hfx0, hfx1
		}),
		with(hw, func(q *kpiQuery) {
			q.Dim = "operator"
			q.Bucket, q.TZ, q.Tolerance = "service-day", "Europe/Amsterdam", 0.5
		}),
		with(hw, func(q *kpiQuery) { q.Dim = "network"; q.Bucket = "hour" }),
		with(na, func(q *kpiQuery) { q.Dim = "line"; q.Realized = 120 }),
		with(hw, func(q *kpiQuery) { q.Dim = "station"; q.Realized = 120 }),
	}
	want := visitKPIOracle(t, db, addr, queries)
	// --realized-within 2m leaves out visits whose delay is still a
	// prediction (most of Halifax's single snapshot), but not all.
	if all, realized := onTimeVisits(want[0]), onTimeVisits(want[9]); !(0 < realized && realized < all) {
		t.Errorf("the oracle counts %d realized visits of %d: the data no longer tell them apart", realized, all)
	}

	ctx := harness.TestCtx(t)
	conn := harness.Connect(t, ctx, db)
	defer conn.Close(ctx)
	for i, q := range queries {
		if len(want[i]) == 0 {
			t.Fatalf("%s: the oracle has no rows", q)
		}
		args := []string{"report", "--database-url", db, "--metric", q.Metric, "--dimension", q.Dim, "--bucket", q.Bucket,
			"--tz", q.TZ, "--from", time.Unix(q.From, 0).UTC().Format(time.RFC3339),
			"--to", time.Unix(q.To, 0).UTC().Format(time.RFC3339)}
		if q.IDs != nil {
			args = append(args, "--ids", strings.Join(q.IDs, ","))
		}
		if q.Realized > 0 {
			args = append(args, "--realized-within", strconv.FormatFloat(q.Realized, 'g', -1, 64)+"s")
		}
		if q.Metric == "on-time" {
			args = append(args, "--on-time", q.OnTime)
		} else {
			args = append(args, "--wait-tolerance", strconv.FormatFloat(q.Tolerance, 'g', -1, 64))
		}
		t.Logf("%s: %d rows", q, len(want[i]))
		harness.SameRows(t, q.String()+": report --json vs the Python oracle", reportJSONLines(t, q, args), want[i])
		if i == 2 || i == 6 {
			harness.SameRows(t, q.String()+": report --csv vs the Python oracle", reportCSVLines(t, q, args), want[i])
		}
		harness.SameRows(t, q.String()+": the SQL function vs the Python oracle", sqlKPILines(t, db, q), want[i])
	}
	checkDocVisitQueries(t, db)
	// What report refuses, the SQL functions refuse too, rather than count
	// a NULL or NaN bound as "late" or "early".
	for _, bad := range []string{
		`ovs_on_time('ovstream', 'line', '2014-01-01', '2026-01-01', early_s => NULL)`,
		`ovs_on_time('ovstream', 'line', '2014-01-01', '2026-01-01', early_s => 'NaN')`,
		`ovs_on_time('ovstream', 'line', '2014-01-01', '2026-01-01', late_s => -10)`,
		`ovs_on_time('ovstream', 'line', NULL, '2026-01-01')`,
		`ovs_on_time('ovstream', 'line', '2014-01-01', '2026-01-01', realized_within_s => 'Infinity')`,
		`ovs_headways('ovstream', 'line', '2014-01-01', '2026-01-01', wait_tolerance => NULL)`,
	} {
		_, err := conn.Exec(ctx, "SELECT * FROM "+bad)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "22023" {
			t.Errorf("%s: %v, want SQLSTATE 22023", bad, err)
		}
	}
	for i, w := range map[int][]string{
		0: {strconv.FormatInt(all0, 10) + " HW 6 0 5 1 0.8333333333333334"},
		1: {strconv.FormatInt(all0, 10) + " HW 6 1 3 2 0.5"},
		5: {strconv.FormatInt(all0, 10) + " HW 3 600 350 3 600 300 50 3 2 0.6666666666666666"},
	} {
		var got []string
		for _, r := range want[i] {
			if strings.Contains(r, " HW ") {
				got = append(got, r)
			}
		}
		if strings.Join(got, "\n") != strings.Join(w, "\n") {
			t.Errorf("%s: line HW %v, want %v", queries[i], got, w)
		}
	}
}

// visitKPIOracle runs visitKPIsPy over the topic and returns its rows per
// query as kpiLine lines.
func visitKPIOracle(t *testing.T, db, addr string, queries []kpiQuery) [][]string {
	t.Helper()
	dir := t.TempDir()
	dead := [][2]int64{}
	for _, r := range harness.Dump(t, db, `SELECT partition, "offset" FROM dead_letters`) {
		var po [2]int64
		if _, err := fmt.Sscanf(r, "[%d %d]", &po[0], &po[1]); err != nil {
			t.Fatalf("dead letter %s: %v", r, err)
		}
		dead = append(dead, po)
	}
	if err := os.WriteFile(filepath.Join(dir, "records.json"), readTopicWithPy(t, addr), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]any{"dead.json": dead, "queries.json": queries} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	py := harness.PythonWithConfluentKafka(t)
	cmd := exec.Command(py, "-c", visitKPIsPy, filepath.Join(dir, "records.json"), filepath.Join(dir, "dead.json"),
		filepath.Join(dir, "queries.json"))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the Python oracle: %v\n%s", err, stderr.String())
	}
	d := json.NewDecoder(strings.NewReader(string(out)))
	d.UseNumber()
	var res [][][]any
	if err := d.Decode(&res); err != nil {
		t.Fatal(err)
	}
	lines := make([][]string, len(res))
	for i, rows := range res {
		for _, r := range rows {
			var vals []string
			for _, v := range r[2:] {
				vals = append(vals, fmt.Sprint(v))
			}
			b, err := r[0].(json.Number).Int64()
			if err != nil {
				t.Fatal(err)
			}
			lines[i] = append(lines[i], kpiLine(queries[i].Metric, b, r[1].(string), vals))
		}
	}
	return lines
}

// reportJSONLines runs report --json and returns its rows as kpiLine lines.
func reportJSONLines(t *testing.T, q kpiQuery, args []string) []string {
	t.Helper()
	stdout, stderr, code := harness.RunCLI(t, nil, append(args, "--json")...)
	if code != 0 {
		t.Fatalf("%v: exit %d\n%s", args, code, stderr)
	}
	d := json.NewDecoder(strings.NewReader(stdout))
	d.UseNumber()
	var res struct {
		Rows []map[string]any `json:"rows"`
	}
	if err := d.Decode(&res); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, stdout)
	}
	cols := map[string][]string{
		"on-time": {"visits", "early", "on_time", "late", "on_time_share"},
		"headway": {"gaps", "mean_headway_s", "awt_s", "scheduled_gaps", "scheduled_mean_headway_s", "swt_s",
			"excess_wait_s", "assessed", "within_tolerance", "wait_assessment"},
	}[q.Metric]
	var lines []string
	for _, r := range res.Rows {
		b, err := time.Parse(time.RFC3339, r["bucket_start"].(string))
		if err != nil {
			t.Fatal(err)
		}
		var vals []string
		for _, c := range cols {
			v, ok := r[c]
			if !ok {
				t.Fatalf("%v: row without %q: %v", args, c, r)
			}
			vals = append(vals, fmt.Sprint(v))
		}
		lines = append(lines, kpiLine(q.Metric, b.Unix(), r["id"].(string), vals))
	}
	return lines
}

// reportCSVLines runs report --csv and returns its rows as kpiLine lines.
func reportCSVLines(t *testing.T, q kpiQuery, args []string) []string {
	t.Helper()
	stdout, stderr, code := harness.RunCLI(t, nil, append(args, "--csv")...)
	if code != 0 {
		t.Fatalf("%v: exit %d\n%s", args, code, stderr)
	}
	var lines []string
	for i, l := range strings.Split(strings.TrimSpace(stdout), "\n") {
		f := strings.Split(l, ",")
		if i == 0 {
			if f[0] != "bucket_start" || f[1] != q.Dim {
				t.Fatalf("%v: CSV header %q", args, l)
			}
			continue
		}
		b, err := time.Parse(time.RFC3339, f[0])
		if err != nil {
			t.Fatal(err)
		}
		// The ids here have no comma, quote or leading formula character.
		lines = append(lines, kpiLine(q.Metric, b.Unix(), f[1], f[3:]))
	}
	return lines
}

// sqlKPILines calls ovs_on_time or ovs_headways and returns its rows as
// kpiLine lines.
func sqlKPILines(t *testing.T, db string, q kpiQuery) []string {
	t.Helper()
	bucket, bySD := "NULL", "false"
	switch q.Bucket {
	case "hour":
		bucket = "'1 hour'"
	case "service-day":
		bySD = "true"
	}
	ids := "NULL"
	if q.IDs != nil {
		ids = "ARRAY['" + strings.Join(q.IDs, "','") + "']"
	}
	from, to := time.Unix(q.From, 0).UTC().Format(time.RFC3339), time.Unix(q.To, 0).UTC().Format(time.RFC3339)
	realized := "NULL"
	if q.Realized > 0 {
		realized = strconv.FormatFloat(q.Realized, 'g', -1, 64)
	}
	sql := fmt.Sprintf(`SELECT json_build_array(extract(epoch FROM bucket_start)::bigint, dimension_id, visits, early, on_time,
		late, on_time_share)::text FROM ovs_on_time('ovstream', '%s', '%s', '%s', bucket => %s, tz => '%s', early_s => %v, late_s => %v, ids => %s,
		by_service_day => %s, realized_within_s => %s)`, q.Dim, from, to, bucket, q.TZ, q.Early, q.Late, ids, bySD, realized)
	if q.Metric == "headway" {
		sql = fmt.Sprintf(`SELECT json_build_array(extract(epoch FROM bucket_start)::bigint, dimension_id, gaps,
			mean_headway_s, awt_s, scheduled_gaps, scheduled_mean_headway_s, swt_s, excess_wait_s, assessed,
			within_tolerance, wait_assessment)::text FROM ovs_headways('ovstream', '%s', '%s', '%s', bucket => %s, tz => '%s', ids => %s, by_service_day => %s,
			wait_tolerance => %v, realized_within_s => %s)`, q.Dim, from, to, bucket, q.TZ, ids, bySD, q.Tolerance, realized)
	}
	var lines []string
	for _, r := range harness.Dump(t, db, sql) {
		var row []json.RawMessage
		if err := json.Unmarshal([]byte(strings.TrimSuffix(strings.TrimPrefix(r, "["), "]")), &row); err != nil {
			t.Fatalf("%s: %v", r, err)
		}
		var id string
		if err := json.Unmarshal(row[1], &id); err != nil {
			t.Fatal(err)
		}
		b, _ := strconv.ParseInt(string(row[0]), 10, 64)
		var vals []string
		for _, v := range row[2:] {
			vals = append(vals, string(v))
		}
		lines = append(lines, kpiLine(q.Metric, b, id, vals))
	}
	return lines
}

// visitKPIHeading starts the section of docs/analysing.md on the stop
// visits' figures.
const visitKPIHeading = "\n## On-time performance and headways\n"

// checkDocVisitQueries runs every SQL example of that section on db and
// requires each to return rows.
func checkDocVisitQueries(t *testing.T, db string) {
	t.Helper()
	b, err := os.ReadFile("../../docs/analysing.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), visitKPIHeading)
	if !ok {
		t.Fatalf("docs/analysing.md has no heading %q", strings.TrimSpace(visitKPIHeading))
	}
	blocks := strings.Split(section, "```sql\n")[1:]
	if len(blocks) < 2 {
		t.Fatalf("docs/analysing.md %q: %d SQL examples, want 2", strings.TrimSpace(visitKPIHeading), len(blocks))
	}
	for i, block := range blocks {
		sql, _, _ := strings.Cut(block, "```")
		if rows := harness.Dump(t, db, sql); len(rows) == 0 {
			t.Errorf("docs/analysing.md on-time and headway example %d returns no rows:\n%s", i+1, sql)
		}
	}
}
