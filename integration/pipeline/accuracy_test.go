//go:build integration

package pipeline

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/ovstream/ovstream/integration/harness"
)

// accuracyPy scores the predictions with Python alone, from the records of
// the predictions topic as confluent-kafka reads them (readTopicPy's JSON
// lines on stdin). argv[1] is a JSON object: dead (the [partition, offset]
// of the dead letters), bands ([from, to, early, late] in seconds), from
// and to (the range of realized arrivals, RFC 3339), realized_within,
// quantiles and dimensions. A visit is (trip_id, start_date, stop_sequence
// else stop_id); its last record by (event time, partition, offset) gives
// the realized arrival (arrival_time, else event time), the realized delay
// and the dimension ids; the visit counts when that record was made at
// most realized_within seconds before that arrival, and every other record
// of the visit is scored: horizon =
// realized arrival - its event time, error = realized delay - its delay_s.
// It prints one JSON list of [dimension, id, bucket, predictions,
// accurate, mean error, [error quantiles]] sorted by dimension, id and
// bucket; quantiles interpolate linearly between closest ranks.
const accuracyPy = `
import json, sys
from datetime import datetime
a = json.loads(sys.argv[1])
dead = set((p, o) for p, o in a["dead"])
t = lambda s: datetime.fromisoformat(s.replace("Z", "+00:00"))
lo, hi = t(a["from"]), t(a["to"])
visits = {}
for line in sys.stdin:
    part, off, value = json.loads(line)
    if (part, off) in dead:
        continue
    j = json.loads(value)
    if "start_date" not in j:
        continue
    stop = str(j["stop_sequence"]) if "stop_sequence" in j else "stop_id:" + j["stop_id"]
    key = (j["trip_id"], j["start_date"].replace("-", ""), stop)
    visits.setdefault(key, []).append((t(j["event_time"]), part, off, j))
def quantile(xs, q):
    pos = q * (len(xs) - 1)
    i = int(pos)
    return xs[i] if i + 1 >= len(xs) else xs[i] + (xs[i + 1] - xs[i]) * (pos - i)
groups = {}
for preds in visits.values():
    last = max(preds, key=lambda p: p[:3])
    lj = last[3]
    arrival = t(lj["arrival_time"]) if "arrival_time" in lj else last[0]
    if not (lo <= arrival < hi) or (arrival - last[0]).total_seconds() > a["realized_within"]:
        continue
    ids = {"line": lj["line"], "station": lj["stop_id"], "operator": lj["operator"], "network": "all"}
    seen = {(last[0], lj["delay_s"])}  # the reference, and each prediction once
    for p in preds:
        if (p[0], p[3]["delay_s"]) in seen:
            continue
        seen.add((p[0], p[3]["delay_s"]))
        horizon = (arrival - p[0]).total_seconds()
        err = lj["delay_s"] - p[3]["delay_s"]
        for b, (frm, to, early, late) in enumerate(a["bands"], 1):
            if frm <= horizon < to:
                for d in a["dimensions"]:
                    g = groups.setdefault((d, ids[d], b), [0, []])
                    g[0] += early <= err <= late
                    g[1].append(err)
out = []
for (d, i, b), (acc, errs) in sorted(groups.items()):
    errs.sort()
    out.append([d, i, b, len(errs), acc, sum(errs) / len(errs), [quantile(errs, q) for q in a["quantiles"]]])
print(json.dumps(out))
`

// accuracyRow is one row of accuracyPy's output or of ovs_accuracy.
type accuracyRow struct {
	dim, id            string
	bucket             int
	predictions, exact int64
	mean               float64
	quantiles          []float64
}

func (r accuracyRow) String() string {
	return fmt.Sprintf("%s %s bucket %d: %d predictions, %d accurate, mean %g, quantiles %v", r.dim, r.id, r.bucket, r.predictions,
		r.exact, r.mean, r.quantiles)
}

// pythonAccuracy runs accuracyPy over the predictions topic of addr, with
// the dead letters of db and args (bands, from, to, quantiles, dimensions).
func pythonAccuracy(t *testing.T, db, addr string, args map[string]any) []accuracyRow {
	t.Helper()
	py := harness.PythonWithConfluentKafka(t)
	records, err := exec.Command(py, "-c", readTopicPy, addr, harness.PredictionsTopic, "6").Output()
	if err != nil {
		t.Fatalf("confluent-kafka reader: %v", err)
	}
	dead := [][2]int64{}
	for _, s := range harness.Dump(t, db, `SELECT partition, "offset" FROM dead_letters WHERE topic = '`+harness.PredictionsTopic+`'`) {
		var p, o int64
		if _, err := fmt.Sscanf(s, "[%d %d]", &p, &o); err != nil {
			t.Fatal(err)
		}
		dead = append(dead, [2]int64{p, o})
	}
	args["dead"] = dead
	arg, _ := json.Marshal(args)
	cmd := exec.Command(py, "-c", accuracyPy, string(arg))
	cmd.Stdin = bytes.NewReader(records)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python accuracy oracle: %v\n%s", err, stderr.String())
	}
	var raw [][]any
	if err := json.Unmarshal(out, &raw); err != nil {
		t.Fatal(err)
	}
	rows := make([]accuracyRow, 0, len(raw))
	for _, r := range raw {
		row := accuracyRow{dim: r[0].(string), id: r[1].(string), bucket: int(r[2].(float64)), predictions: int64(r[3].(float64)),
			exact: int64(r[4].(float64)), mean: r[5].(float64)}
		for _, q := range r[6].([]any) {
			row.quantiles = append(row.quantiles, q.(float64))
		}
		rows = append(rows, row)
	}
	return rows
}

// sqlAccuracy reads ovs_accuracy(pipeline 'ovstream', dim, from, to, rest)
// of db for each dimension.
func sqlAccuracy(t *testing.T, db string, dims []string, from, to, rest string) []accuracyRow {
	t.Helper()
	var rows []accuracyRow
	for _, d := range dims {
		q := fmt.Sprintf(`SELECT dimension_id, bucket, predictions, accurate, mean_error_s, error_quantiles
			FROM ovs_accuracy('ovstream', '%s', '%s', '%s'%s)`, d, from, to, rest)
		conn := harness.Connect(t, harness.TestCtx(t), db)
		rs, err := conn.Query(harness.TestCtx(t), q)
		if err != nil {
			t.Fatal(err)
		}
		for rs.Next() {
			r := accuracyRow{dim: d}
			if err := rs.Scan(&r.id, &r.bucket, &r.predictions, &r.exact, &r.mean, &r.quantiles); err != nil {
				t.Fatal(err)
			}
			rows = append(rows, r)
		}
		if err := rs.Err(); err != nil {
			t.Fatal(err)
		}
		conn.Close(harness.TestCtx(t))
	}
	return rows
}

// sameAccuracy compares got with the oracle want: every id and bucket, the
// counts exactly; the mean error and its quantiles to 1e-9 s (Python and
// PostgreSQL may round the sum of fractional delays differently).
func sameAccuracy(t *testing.T, what string, got, want []accuracyRow) {
	t.Helper()
	sort.Slice(got, func(i, j int) bool {
		a, b := got[i], got[j]
		if a.dim != b.dim {
			return a.dim < b.dim
		}
		if a.id != b.id {
			return a.id < b.id
		}
		return a.bucket < b.bucket
	})
	if len(got) != len(want) {
		t.Errorf("%s: %d rows, the oracle %d", what, len(got), len(want))
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }
	bad := 0
	for i := 0; i < min(len(got), len(want)) && bad < 10; i++ {
		g, w := got[i], want[i]
		ok := g.dim == w.dim && g.id == w.id && g.bucket == w.bucket && g.predictions == w.predictions && g.exact == w.exact &&
			near(g.mean, w.mean) && len(g.quantiles) == len(w.quantiles)
		for k := 0; ok && k < len(w.quantiles); k++ {
			ok = near(g.quantiles[k], w.quantiles[k])
		}
		if !ok {
			t.Errorf("%s: row %d\n got %v\nwant %v", what, i, g, w)
			bad++
		}
	}
}

// The accuracy by horizon equals a Python oracle over the records of the
// topic as confluent-kafka reads them (not the stored history: the visits
// regrouped from the raw records, the last one by event time, partition and
// offset), after a drain of the 2 h Auckland sample (120 snapshots, a
// start_date on every prediction) whose first quarter was produced twice
// (a repeated prediction is scored once): per line, station, operator and the
// network, with the benchmark's bands (ovs_accuracy's defaults), the count
// and the accurate count of every id and bucket exactly, the mean error and
// its median and P90; with custom bands, a range that cuts the data and
// other quantiles through `report --metric accuracy --json`, the same; the
// overall accuracy is the mean of an id's buckets; the SQL example of
// docs/analysing.md returns rows.
func TestAccuracyEqualsPythonOracle(t *testing.T) {
	dir := t.TempDir()
	if out, err := exec.Command("tar", "-xf", "../../testdata/auckland-20160518-2h.tar.gz", "-C", dir).CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, out)
	}
	res := harness.LoadFeeds(t, "AT", dir)
	for i := range res.Predictions {
		res.Predictions[i].StartDate = 20160519 // the morning of 2016-05-19 in Auckland
	}
	addr, _ := harness.StartBrokerProcess(t, "127.0.0.1:0", "")
	// A producer restarted part-way sends its first predictions again: the
	// copies are records of their own, counted in the visits (not late: the
	// rest comes after them), but the same predictions (event time and
	// delay): each is scored once, and a copy of a visit's last prediction
	// is no prediction of it.
	again := *res
	again.Predictions, again.Positions = res.Predictions[:len(res.Predictions)/4], nil
	harness.ProduceFeeds(t, addr, &again)
	harness.ProduceFeeds(t, addr, res)
	db := harness.FreshDB(t)
	harness.Drain(t, db, addr, "--allowed-lateness", "10m")

	dims := []string{"line", "station", "operator", "network"}
	const from, to = "2000-01-01T00:00:00Z", "2100-01-01T00:00:00Z"
	want := pythonAccuracy(t, db, addr, map[string]any{
		"bands": [][4]float64{{0, 180, -30, 90}, {180, 360, -60, 150}, {360, 600, -60, 210}, {600, 900, -90, 270}},
		"from":  from, "to": to, "quantiles": []float64{0.5, 0.9}, "dimensions": dims, "realized_within": 120})
	var scored, accurate int64
	buckets := map[int]int64{}
	for _, r := range want {
		if r.dim == "network" {
			scored, accurate = scored+r.predictions, accurate+r.exact
			buckets[r.bucket] = r.predictions
		}
	}
	if len(buckets) != 4 || accurate == 0 || accurate == scored {
		t.Fatalf("the oracle scored %d predictions, %d accurate, in buckets %v: want all four buckets, some accurate, some not",
			scored, accurate, buckets)
	}
	t.Logf("benchmark bands: %d predictions scored, %d accurate", scored, accurate)
	sameAccuracy(t, "ovs_accuracy with the benchmark's bands", sqlAccuracy(t, db, dims, from, to, ""), want)

	// Custom bands over 40 minutes of the sample, quantiles 0.25 and 0.75.
	const cFrom, cTo = "2016-05-18T19:40:00Z", "2016-05-18T20:20:00Z"
	custom := pythonAccuracy(t, db, addr, map[string]any{
		"bands": [][4]float64{{0, 60, -10, 10}, {60, 300, -20, 40}, {300, 1800, -60, 120}},
		"from":  cFrom, "to": cTo, "quantiles": []float64{0.25, 0.75}, "dimensions": []string{"line", "network"},
		"realized_within": 120})
	if len(custom) == 0 || len(custom) == len(want) {
		t.Fatalf("the custom range kept %d rows of %d: want a part", len(custom), len(want))
	}
	var fromReport []accuracyRow
	for _, d := range []string{"line", "network"} {
		stdout, stderr, code := harness.RunCLI(t, nil, "report", "--metric", "accuracy", "--json", "--database-url", db,
			"--dimension", d, "--from", cFrom, "--to", cTo, "--quantiles", "0.25,0.75",
			"--bands", "0-1m:-10s..10s,1m-5m:-20s..40s,5m-30m:-1m..2m")
		var rep struct {
			Rows []struct {
				ID          string             `json:"id"`
				Bucket      string             `json:"bucket"`
				From        float64            `json:"horizon_from_s"`
				Predictions int64              `json:"predictions"`
				Accurate    int64              `json:"accurate"`
				Accuracy    float64            `json:"accuracy"`
				Mean        float64            `json:"mean_error_s"`
				Quantiles   map[string]float64 `json:"error_quantiles_s"`
			} `json:"rows"`
			Overall []struct {
				ID       string  `json:"id"`
				Accuracy float64 `json:"accuracy"`
				Buckets  int     `json:"buckets"`
			} `json:"overall"`
		}
		if err := json.Unmarshal([]byte(stdout), &rep); code != 0 || err != nil {
			t.Fatalf("report --metric accuracy --dimension %s: exit %d, %v\n%s", d, code, err, stderr)
		}
		sum, n := map[string]float64{}, map[string]int{}
		for _, r := range rep.Rows {
			b := map[float64]int{0: 1, 60: 2, 300: 3}[r.From]
			fromReport = append(fromReport, accuracyRow{dim: d, id: r.ID, bucket: b, predictions: r.Predictions, exact: r.Accurate,
				mean: r.Mean, quantiles: []float64{r.Quantiles["p25"], r.Quantiles["p75"]}})
			if want := float64(r.Accurate) / float64(r.Predictions); r.Accuracy != want {
				t.Errorf("report: %s %s accuracy %g, want %g", r.ID, r.Bucket, r.Accuracy, want)
			}
			sum[r.ID] += float64(r.Accurate) / float64(r.Predictions)
			n[r.ID]++
		}
		for _, o := range rep.Overall {
			if o.Buckets != n[o.ID] || math.Abs(o.Accuracy-sum[o.ID]/float64(n[o.ID])) > 1e-12 {
				t.Errorf("report: %s overall %g of %d buckets, want %g of %d", o.ID, o.Accuracy, o.Buckets, sum[o.ID]/float64(n[o.ID]), n[o.ID])
			}
		}
		if len(rep.Overall) != len(n) {
			t.Errorf("report: overall of %d ids, rows of %d", len(rep.Overall), len(n))
		}
	}
	sameAccuracy(t, "report --metric accuracy with custom bands", fromReport, custom)
	checkAccuracyDocQueries(t, db)
	if stdout, _, code := harness.RunCLI(t, nil, "report", "--metric", "accuracy", "--database-url", db, "--dimension", "network",
		"--from", from, "--to", to); code != 0 || !strings.Contains(stdout, "overall") ||
		!strings.Contains(stdout, " "+strconv.FormatInt(buckets[1], 10)+" ") {
		t.Errorf("report --metric accuracy table: exit %d\n%s", code, stdout)
	}
}

// accuracyHeading starts the section of docs/analysing.md on accuracy.
const accuracyHeading = "\n## Prediction accuracy by horizon\n"

// checkAccuracyDocQueries runs the SQL examples of the accuracy section of
// docs/analysing.md on db and requires each to return rows.
func checkAccuracyDocQueries(t *testing.T, db string) {
	t.Helper()
	b, err := os.ReadFile("../../docs/analysing.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), accuracyHeading)
	if !ok {
		t.Fatalf("docs/analysing.md has no heading %q", strings.TrimSpace(accuracyHeading))
	}
	blocks := strings.Split(section, "```sql\n")[1:]
	if len(blocks) == 0 {
		t.Fatal("the accuracy section of docs/analysing.md has no SQL example")
	}
	for i, block := range blocks {
		q, _, _ := strings.Cut(block, "```")
		if rows := harness.Dump(t, db, q); len(rows) == 0 {
			t.Errorf("docs/analysing.md accuracy example %d returns no rows:\n%s", i+1, q)
		}
	}
}
