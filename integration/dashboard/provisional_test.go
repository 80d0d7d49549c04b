//go:build integration

package dashboard

import (
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ovstream/ovstream/integration/harness"
)

// The delay page under a running service (`run` without --drain, provisional
// rows every 200 ms) over the Auckland sample, once every record is read:
// the windows the watermark has not passed (allowed lateness 10m) are open.
// In headless Chromium the page's 5-minute buckets equal the SQL oracle
// over the topic's events (count, mean, P50, P90, max; exact in data-v), the
// final ones and the open ones alike; a bucket is marked final exactly
// when delay_aggregates holds its window, else "no (provisional)", and the
// provisional buckets are exactly the windows of delay_aggregates_live
// WHERE NOT final. The chart draws the final buckets in the P90, P50 and
// mean series and the open ones in the "provisional" series (plus the last
// final bucket, which joins them), each with the oracle's values and
// painted, and its legend at an open bucket reads "provisional: N events
// so far" with the oracle's N. The form's "final only" (include_open=0)
// shows the final windows alone. api/delay without include_open answers the
// final windows only, as before (no field final).
func TestDashboardDelayPageDrawsProvisionalWindows(t *testing.T) {
	bro := harness.NewBrowser(t)
	addr, _ := harness.StartBrokerProcess(t, "127.0.0.1:0", "")
	harness.ProduceCLI(t, addr, "--operator", "AT", "--gtfs-rt", harness.ExtractTarGz(t, dashboardArchive))
	db := harness.FreshDB(t)
	run := harness.StartOvstream(t, nil, harness.RunArgs(db, addr, "--pipeline", "ovstream", "--metrics-addr", "127.0.0.1:0",
		"--provisional-interval", "200ms", "--flush-interval", "200ms")...)
	ops := harness.OpsAddr(t, run)
	var total int64
	for _, n := range harness.HighWaters(t, addr, nil, harness.PredictionsTopic, harness.PositionsTopic) {
		total += n
	}
	// Every record read and counted by a provisional write: the rows stay
	// as they are from here on (no record is left to change them).
	harness.WaitFor(t, time.Minute, "a provisional write of every record", func() bool {
		var got int64
		harness.SqlRow(t, db, `SELECT coalesce(sum(consumed_offset), 0)::bigint FROM provisional_positions`, &got)
		return got == total
	})
	harness.CreateOracleEvents(t, db, addr)
	want := harness.QueryRollup(t, db, `SELECT to_timestamp(floor(extract(epoch FROM at) / 300) * 300), 'all', count(*), avg(d), min(d), max(d),
		percentile_cont('{0.5,0.9}'::float8[]) WITHIN GROUP (ORDER BY d) FROM oracle_events GROUP BY 1`)
	final, open := windowSet(t, db, `SELECT window_start FROM delay_aggregates WHERE pipeline = 'ovstream' AND dimension = 'network'`),
		windowSet(t, db, `SELECT window_start FROM delay_aggregates_live WHERE pipeline = 'ovstream' AND dimension = 'network' AND NOT final`)
	if len(final) == 0 || len(open) == 0 || len(final)+len(open) != len(want) {
		t.Fatalf("%d final and %d open windows, the oracle %d windows: want both, together the oracle's", len(final), len(open), len(want))
	}

	base := "http://" + ops + "/dashboard/"
	q := url.Values{"tz": {harness.RollupTZ}, "bucket": {"5m"}}
	bro.Open(t, base+"delay?"+q.Encode())
	rows := byTime(t, tableRows(t, bro, "delay-table"))
	if len(rows) != len(want) {
		t.Errorf("the page shows %d buckets, the oracle %d windows", len(rows), len(want))
	}
	for k, w := range want {
		c, ok := rows[k]
		if !ok || len(c) != 6 {
			t.Errorf("bucket %v: cells %v, want events, mean, P50, P90, max, final", time.Unix(k.Bucket, 0).UTC(), c)
			continue
		}
		checkCells(t, fmt.Sprintf("bucket %v", time.Unix(k.Bucket, 0).UTC()), c[:5], w)
		mark := map[bool]string{true: "yes", false: "no (provisional)"}[final[k.Bucket]]
		if c[5].Text != mark {
			t.Errorf("bucket %v: final %q, want %q (final %v, open %v)", time.Unix(k.Bucket, 0).UTC(), c[5].Text, mark,
				final[k.Bucket], open[k.Bucket])
		}
	}

	c := chart(t, bro, "delay")
	series := []string{"P90 (s)", "P50 (s)", "mean (s)", "P90 provisional (s)", "P50 provisional (s)", "mean provisional (s)"}
	if !c.Found || strings.Join(c.Series[1:], ",") != strings.Join(series, ",") || c.Legend != len(series)+1 {
		t.Fatalf("chart: found %v, series %q, %d legend rows; want %q", c.Found, c.Series, c.Legend, series)
	}
	var lastFinal int64
	for ws := range final {
		lastFinal = max(lastFinal, ws)
	}
	valIdx := []int{4, 3, 0} // P90, P50, mean of the oracle's vals
	for j := range series {
		shown := 0
		for i, x := range c.Data[0] {
			v := c.Data[j+1][i]
			ws := int64(*x)
			// The final series hold the final windows; the provisional ones
			// the open windows and the last final one, which joins them.
			in := final[ws]
			if j >= 3 {
				in = open[ws] || ws == lastFinal && open[lastFinal+300]
			}
			if (v != nil) != in {
				t.Errorf("chart series %s at %v: value %v, want one: %v", series[j], time.Unix(ws, 0).UTC(), v, in)
				continue
			}
			if v == nil {
				continue
			}
			shown++
			if w := want[harness.GroupKey{Bucket: ws, Id: "all"}].Vals[valIdx[j%3]]; math.Abs(*v-w) > 1e-9 {
				t.Errorf("chart series %s at %v: %v, the oracle %v", series[j], time.Unix(ws, 0).UTC(), *v, w)
			}
		}
		if shown == 0 {
			t.Errorf("chart series %s: no point", series[j])
		}
	}
	checkDrawn(t, "delay", c, len(series))

	// The legend at each open bucket: provisional, with its events so far.
	for i, x := range c.Data[0] {
		ws := int64(*x)
		if !open[ws] {
			continue
		}
		text := harness.Eval[string](t, bro, fmt.Sprintf(`(() => {
			const u = window.ovs.charts.delay;
			u.setLegend({idx: %d});
			return u.root.querySelector(".u-legend .u-series .u-value").textContent;
		})()`, i))
		n := want[harness.GroupKey{Bucket: ws, Id: "all"}].Count
		if !strings.HasSuffix(text, fmt.Sprintf(", provisional: %d events so far", n)) {
			t.Errorf("legend at the open bucket %v: %q, want provisional with the oracle's %d events", time.Unix(ws, 0).UTC(), text, n)
		}
	}
	if sub := harness.Eval[string](t, bro, `document.getElementById("subtitle").textContent`); !strings.Contains(sub,
		fmt.Sprintf("%d of them provisional", len(open))) {
		t.Errorf("subtitle %q does not say %d buckets are provisional", sub, len(open))
	}
	bro.Screenshot(t, "delay-provisional")

	// The form's "final only" (include_open=0): the final windows alone.
	bro.Open(t, base+"delay?"+with(q, "include_open", "0"))
	if f := field(formFields(t, bro), "include_open"); f.Value != "0" {
		t.Errorf("include_open=0: the form's windows field is %+v", f)
	}
	shown := byTime(t, tableRows(t, bro, "delay-table"))
	for k := range shown {
		if !final[k.Bucket] {
			t.Errorf("include_open=0: the page shows the open window %v", time.Unix(k.Bucket, 0).UTC())
		}
	}
	if len(shown) != len(final) {
		t.Errorf("include_open=0: the page shows %d buckets, %d windows are final", len(shown), len(final))
	}

	// The API without include_open: the final windows, every point final.
	var d struct {
		Points []struct {
			T     int64 `json:"t"`
			Final *bool `json:"final"`
		} `json:"points"`
	}
	if code, body := harness.HttpGet(t, base+"api/delay?"+q.Encode()); code != 200 || json.Unmarshal([]byte(body), &d) != nil {
		t.Fatalf("api/delay without include_open: %d %.300s", code, body)
	}
	for _, p := range d.Points {
		if p.Final != nil || !final[p.T] {
			t.Errorf("api/delay without include_open: point %v final %v (want absent), a final window %v",
				time.Unix(p.T, 0).UTC(), p.Final, final[p.T])
		}
	}
	if len(d.Points) != len(final) {
		t.Errorf("api/delay without include_open: %d points, %d final windows", len(d.Points), len(final))
	}
	t.Logf("%d final and %d provisional windows shown", len(final), len(open))
}

// windowSet reads the window starts a query returns, as Unix seconds.
func windowSet(t *testing.T, db, query string) map[int64]bool {
	t.Helper()
	var starts []time.Time
	harness.SqlRow(t, db, `SELECT coalesce(array_agg(window_start), '{}') FROM (`+query+`) AS w`, &starts)
	out := map[int64]bool{}
	for _, s := range starts {
		out[s.Unix()] = true
	}
	return out
}
