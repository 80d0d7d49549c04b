//go:build integration

package dashboard

import (
	"fmt"
	"testing"

	"github.com/ovstream/ovstream/integration/harness"
)

// `report --csv` on stations whose ids and names (from the feed, untrusted)
// start like a spreadsheet formula: each such text cell is written with a
// leading ' (OWASP "CSV Injection"), every other cell as it is, the numbers
// (a negative delay, -12.5) exactly. The expected bytes are written out here.
func TestReportCSVFormulaInjection(t *testing.T) {
	addr := harness.StartBroker(t)
	db := harness.FreshDB(t)
	stations := []struct{ id, name string }{
		{"S1", `=HYPERLINK("http://x","y")`},
		{"+1+2", "-2+3"},
		{"S3", "@SUM(1)"},
		{"S4", "\tTab"},
		{"S5", "\rCR"},
		{"S6", "Plain - Name"},
		{"-7", "'quoted"},
	}
	var lines []string
	for i, s := range stations {
		lines = append(lines, fmt.Sprintf(`{"trip_id": "t%d", "line": "L1", "stop_id": %q, "operator": "OP", "delay_s": -12.5, `+
			`"event_time": "2026-05-04T10:00:00Z", "stop_name": %q}`, i, s.id, s.name))
	}
	harness.ProduceLines(t, addr, harness.PredictionsTopic, lines...)
	harness.Drain(t, db, addr)

	got := string(harness.Report(t, db, "--from", "2026-05-04", "--to", "2026-05-05", "--dimension", "station", "--quantiles", "0.5", "--csv"))
	const want = "bucket_start,station,name,events,mean,min,max,p50\n" +
		"2026-05-04T00:00:00Z,'+1+2,'-2+3,1,-12.5,-12.5,-12.5,-12.5\n" +
		"2026-05-04T00:00:00Z,'-7,'quoted,1,-12.5,-12.5,-12.5,-12.5\n" +
		"2026-05-04T00:00:00Z,S1,\"'=HYPERLINK(\"\"http://x\"\",\"\"y\"\")\",1,-12.5,-12.5,-12.5,-12.5\n" +
		"2026-05-04T00:00:00Z,S3,'@SUM(1),1,-12.5,-12.5,-12.5,-12.5\n" +
		"2026-05-04T00:00:00Z,S4,'\tTab,1,-12.5,-12.5,-12.5,-12.5\n" +
		"2026-05-04T00:00:00Z,S5,\"'\rCR\",1,-12.5,-12.5,-12.5,-12.5\n" +
		"2026-05-04T00:00:00Z,S6,Plain - Name,1,-12.5,-12.5,-12.5,-12.5\n"
	if got != want {
		t.Errorf("report --csv:\n got %q\nwant %q", got, want)
	}
}
