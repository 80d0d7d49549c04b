//go:build integration

package dashboard

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ovstream/ovstream/integration/harness"
)

// accuracyOracle scores the raw records of the predictions topic
// (oracle_msgs, as sarama reads them; no dead letter, a start_date) with
// SQL alone, without stop_visits: per visit (trip, start_date, stop_sequence
// or else stop_id) the last record by event time, then partition, then
// offset, is the reference; every other record of the visit has horizon =
// the reference's arrival_time (else event time) - its event time and
// error = the reference's delay - its delay; a visit counts only when it
// arrived: its reference was made at most 120 s before the arrival it
// gives (or after it). Per key (%s: the reference's
// line, or 'all') and benchmark bucket, of the visits arriving in [$1, $2):
// predictions, accurate (the band's bounds included), the mean error and
// its P50 and P90.
const accuracyOracle = `WITH p AS (
	SELECT j->>'trip_id' AS trip, j->>'start_date' AS day, coalesce(j->>'stop_sequence', 'stop_id:' || (j->>'stop_id')) AS sk,
		(j->>'event_time')::timestamptz AS et, (j->>'delay_s')::float8 AS d, (j->>'arrival_time')::timestamptz AS arr,
		j->>'line' AS line, partition, "offset"
	FROM (SELECT m.partition, m."offset", convert_from(m.value, 'UTF8')::jsonb AS j FROM oracle_msgs m
		WHERE NOT EXISTS (SELECT 1 FROM dead_letters x WHERE x.topic = m.topic AND x.partition = m.partition AND x."offset" = m."offset")) AS ok
	WHERE j ? 'start_date'
), ref AS (
	SELECT DISTINCT ON (trip, day, sk) trip, day, sk, coalesce(arr, et) AS arrival, et, d AS realized, line, partition, "offset"
	FROM p ORDER BY trip, day, sk, et DESC, partition DESC, "offset" DESC
), s AS (
	SELECT r.line, extract(epoch FROM r.arrival - p.et)::float8 AS horizon, r.realized - p.d AS err
	FROM p JOIN ref r USING (trip, day, sk)
	WHERE (p.partition, p."offset") <> (r.partition, r."offset") AND r.arrival >= $1 AND r.arrival < $2
		AND r.arrival <= r.et + interval '120 seconds'
), b(i, lo, hi, early, late) AS (VALUES (1, 0, 180, -30, 90), (2, 180, 360, -60, 150), (3, 360, 600, -60, 210), (4, 600, 900, -90, 270))
SELECT %s, b.i, count(*), count(*) FILTER (WHERE s.err >= b.early AND s.err <= b.late), avg(s.err),
	percentile_cont('{0.5,0.9}'::float8[]) WITHIN GROUP (ORDER BY s.err)
FROM s JOIN b ON s.horizon >= b.lo AND s.horizon < b.hi GROUP BY 1, 2 ORDER BY 1, 2`

// accBucket is one oracle row: predictions, accurate, mean error, P50, P90.
type accBucket struct {
	n, accurate    int64
	mean, p50, p90 float64
}

func queryAccuracy(t *testing.T, db, key string, from, to time.Time) map[string]map[int]accBucket {
	t.Helper()
	ctx := harness.TestCtx(t)
	conn := harness.Connect(t, ctx, db)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, fmt.Sprintf(accuracyOracle, key), from, to)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]map[int]accBucket{}
	for rows.Next() {
		var id string
		var i int
		var b accBucket
		var qs []float64
		if err := rows.Scan(&id, &i, &b.n, &b.accurate, &b.mean, &qs); err != nil {
			t.Fatal(err)
		}
		b.p50, b.p90 = qs[0], qs[1]
		if out[id] == nil {
			out[id] = map[int]accBucket{}
		}
		out[id][i] = b
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// overallOf is the mean of the shares of an id's buckets, in bucket order.
func overallOf(bs map[int]accBucket) (acc float64, n int64) {
	var sum float64
	for i := 1; i <= 4; i++ {
		if b, ok := bs[i]; ok {
			sum += float64(b.accurate) / float64(b.n)
			n += b.n
		}
	}
	return sum / float64(len(bs)), n
}

// The accuracy page in headless Chromium on the Auckland peak sample (ten
// snapshots a minute apart, up to ten predictions per visit, given the
// service day 2016-05-19) produced through the embedded broker and
// drained: the network's accuracy per benchmark horizon bucket
// (predictions, accurate, share, mean, P50 and P90 error), its overall
// accuracy, and the lines with at least 2 predictions, least accurate
// first, equal SQL written here over the raw records of the topic, which
// regroups them into visits without stop_visits; the bar charts hold the
// same shares. Bad bands are a 400 naming bands.
func TestDashboardAccuracyPage(t *testing.T) {
	started := time.Now()
	bro := harness.NewBrowser(t)
	addr, _ := harness.StartBrokerProcess(t, "127.0.0.1:0", "")
	res := harness.LoadFeeds(t, "AT", "../../testdata/auckland-20160519-peak10min")
	for i := range res.Predictions {
		res.Predictions[i].StartDate = 20160519
	}
	harness.ProduceFeeds(t, addr, res)
	t.Logf("%d predictions produced in %v", len(res.Predictions), time.Since(started).Round(time.Millisecond))
	db := harness.FreshDB(t)
	harness.Drain(t, db, addr)
	harness.LoadOracleInput(t, db, addr, harness.PredictionsTopic)
	srv := harness.StartOvstream(t, nil, "serve", "--database-url", db, "--addr", "127.0.0.1:0", "--pipeline", "ovstream", "--tz", harness.RollupTZ)
	base := harness.Printed(t, srv, regexp.MustCompile(`dashboard of pipeline ovstream: (http://[0-9.:]+/)`))
	loc, _ := time.LoadLocation(harness.RollupTZ)
	// The default range: the service day's midnight to 2 days later.
	from, to := time.Date(2016, 5, 19, 0, 0, 0, 0, loc), time.Date(2016, 5, 21, 0, 0, 0, 0, loc)
	t.Logf("sample drained in %v", time.Since(started).Round(time.Millisecond))

	bro.Open(t, base+"accuracy?"+url.Values{"tz": {harness.RollupTZ}, "min_predictions": {"2"}}.Encode())
	var query struct{ From, To string }
	if err := json.Unmarshal([]byte(harness.Eval[string](t, bro, `JSON.stringify(window.ovs.data.query)`)), &query); err != nil ||
		query.From != from.Format(time.RFC3339) || query.To != to.Format(time.RFC3339) {
		t.Errorf("accuracy: range %+v, want %s to %s", query, from.Format(time.RFC3339), to.Format(time.RFC3339))
	}
	network := queryAccuracy(t, db, "'all'", from, to)["all"]
	rows := tableRows(t, bro, "accuracy-table")
	if len(rows) != len(network) || len(network) != 3 {
		t.Fatalf("accuracy: %d buckets shown, the oracle %d (want 3: no horizon of 10 minutes or more)", len(rows), len(network))
	}
	wantHorizons := []string{"0 min–3 min", "3 min–6 min", "6 min–10 min"}
	c := chart(t, bro, "accuracy")
	for i, r := range rows {
		w := network[i+1]
		what := "accuracy bucket " + wantHorizons[i]
		if r[0].Text != wantHorizons[i] {
			t.Errorf("%s: shown as %q", what, r[0].Text)
		}
		for j, n := range []int64{w.n, w.accurate} {
			if s := strconv.FormatInt(n, 10); r[2+j].Text != s || r[2+j].V != s {
				t.Errorf("%s: column %d shows %q (data-v %q), the oracle %s", what, 2+j, r[2+j].Text, r[2+j].V, s)
			}
		}
		checkShare(t, what, r[4], float64(w.accurate)/float64(w.n))
		for j, v := range []float64{w.mean, w.p50, w.p90} {
			checkSeconds(t, fmt.Sprintf("%s error %d", what, j), r[5+j], &v)
		}
		if v := c.Data[1][i]; v == nil || math.Abs(*v-100*float64(w.accurate)/float64(w.n)) > 1e-9 {
			t.Errorf("%s: the chart's bar is %v", what, v)
		}
	}
	checkDrawn(t, "accuracy", c, 1)
	overall, total := overallOf(network)
	checkCard(t, bro, "acc-overall", fmt.Sprintf("%.1f %%", 100*overall), strconv.FormatFloat(overall, 'g', -1, 64))
	checkCard(t, bro, "acc-predictions", strconv.FormatInt(total, 10), strconv.FormatInt(total, 10))

	lines := queryAccuracy(t, db, "line", from, to)
	var ranked []string
	for id, bs := range lines {
		if _, n := overallOf(bs); n >= 2 {
			ranked = append(ranked, id)
		}
	}
	slices.SortFunc(ranked, func(a, b string) int {
		oa, na := overallOf(lines[a])
		ob, nb := overallOf(lines[b])
		return cmp.Or(cmp.Compare(oa, ob), cmp.Compare(nb, na), strings.Compare(a, b))
	})
	ranked = ranked[:min(25, len(ranked))]
	lrows := tableRows(t, bro, "accuracy-lines-table")
	if len(lrows) != len(ranked) || len(ranked) < 10 {
		t.Fatalf("accuracy: the page ranks %d lines, the oracle %d (want at least 10)", len(lrows), len(ranked))
	}
	lc := chart(t, bro, "accuracy-lines")
	for i, r := range lrows {
		id := ranked[i]
		o, n := overallOf(lines[id])
		if r[0].Text != strconv.Itoa(i+1) || r[1].Text != id || r[2].V != strconv.FormatInt(n, 10) ||
			r[3].V != strconv.Itoa(len(lines[id])) {
			t.Errorf("accuracy: rank %d shows %v; the oracle: line %s, %d predictions in %d buckets", i+1, r, id, n, len(lines[id]))
		}
		checkShare(t, "accuracy line "+id, r[4], o)
		if v := lc.Data[1][i]; v == nil || math.Abs(*v-100*o) > 1e-9 {
			t.Errorf("accuracy line %s: the chart's bar is %v, the oracle %v", id, v, 100*o)
		}
	}
	checkDrawn(t, "accuracy-lines", lc, 1)
	bro.Screenshot(t, "accuracy")

	for _, bad := range []struct{ query, prefix string }{
		{"bands=0-3m", `bands: band "0-3m": want FROM-TO:EARLY..LATE`},
		{"bands=0-3m:-30s..90s,4m-6m:-1m..1m", `bands: band 2 starts at 240s, not where band 1 ends (180s)`},
		{"min_predictions=-1", `min_predictions: "-1": want a whole number from 1 to`},
	} {
		check400(t, base, "api/accuracy?"+bad.query, bad.prefix)
	}
	t.Logf("done in %v", time.Since(started).Round(time.Millisecond))
}
