//go:build integration

package pipeline

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ovstream/ovstream/integration/harness"
)

// The partition count of arrival_predictions goes from 6 to 8 while two
// pipelines run: "all" owns every partition, "manual" is assigned partitions
// 0-5 by --partitions. Within seconds "all" claims and consumes partitions 6
// and 7 (from the earliest offset) and "manual" logs them; `status` shows them
// unowned for "manual" and owned for "all". Newer records then move the
// watermark past the windows of the added partitions' first records: after a
// restart nothing is late, and delay_aggregates of "all" equals the SQL
// oracle over all 8 partitions.
func TestPartitionsAddedWhileRunning(t *testing.T) {
	addr, db := harness.StartBroker(t), harness.FreshDB(t)
	old := []int32{0, 1, 2, 3, 4, 5}
	harness.ProduceRecords(t, addr, harness.Spread(old, 10, time.Date(2016, 5, 18, 20, 0, 0, 0, time.UTC))...)

	manualParts := "arrival_predictions:0,arrival_predictions:1,arrival_predictions:2,arrival_predictions:3," +
		"arrival_predictions:4,arrival_predictions:5,vehicle_positions:0,vehicle_positions:1,vehicle_positions:2"
	all := harness.StartOvstream(t, nil, harness.RunArgs(db, addr, "--pipeline", "all", "--metadata-refresh", "1s")...)
	manual := harness.StartOvstream(t, nil, harness.RunArgs(db, addr, "--pipeline", "manual", "--metadata-refresh", "1s",
		"--partitions", manualParts)...)
	for _, pipeline := range []string{"all", "manual"} {
		harness.WaitFor(t, time.Minute, pipeline+" to consume the 6 partitions", func() bool {
			c := harness.StoredConsumedOf(t, db, pipeline)
			return c["arrival_predictions/0"] == 10 && c["arrival_predictions/5"] == 10
		})
	}

	if err := harness.AdminClient(t, addr).CreatePartitions(harness.PredictionsTopic, 8, nil, false); err != nil {
		t.Fatal(err)
	}
	added := time.Now()
	harness.ProduceRecords(t, addr, harness.Spread([]int32{0, 1, 2, 3, 4, 5, 6, 7}, 10, time.Date(2016, 5, 18, 20, 30, 0, 0, time.UTC))...)
	if harness.Eventually(30*time.Second, func() bool {
		c := harness.StoredConsumedOf(t, db, "all")
		return c["arrival_predictions/6"] == 10 && c["arrival_predictions/7"] == 10
	}) {
		t.Logf("the added partitions were consumed and committed %v after they were added", time.Since(added).Round(time.Millisecond))
	} else {
		t.Errorf("the running instance did not consume the added partitions within 30s: stored consumed offsets %v", harness.StoredConsumedOf(t, db, "all"))
	}
	if out := all.Output(); !strings.Contains(out, "partition added: consuming") {
		t.Errorf("pipeline all does not log that it consumes the added partitions:\n%s", out)
	}
	if !harness.Eventually(30*time.Second, func() bool {
		out := manual.Output()
		return strings.Contains(out, "partition added to the topic, not assigned to this instance") &&
			strings.Contains(out, "partition=arrival_predictions/6") && strings.Contains(out, "partition=arrival_predictions/7")
	}) {
		t.Errorf("pipeline manual did not log the added partitions within 30s:\n%s", manual.Output())
	}
	// The watermark moves past the windows of the added partitions' records:
	// counted already if they were consumed, late if read only after a restart.
	harness.ProduceRecords(t, addr, harness.Spread([]int32{0, 1, 2, 3, 4, 5, 6, 7}, 10, time.Date(2016, 5, 18, 21, 0, 0, 0, time.UTC))...)
	harness.WaitFor(t, time.Minute, "pipeline all to consume the newest records of partitions 0-5", func() bool {
		c := harness.StoredConsumedOf(t, db, "all")
		return c["arrival_predictions/0"] == 30 && c["arrival_predictions/5"] == 30
	})
	if !harness.Eventually(30*time.Second, func() bool {
		c := harness.StoredConsumedOf(t, db, "all")
		return c["arrival_predictions/6"] == 20 && c["arrival_predictions/7"] == 20
	}) {
		t.Errorf("the running instance did not consume the newest records of the added partitions: stored consumed offsets %v", harness.StoredConsumedOf(t, db, "all"))
	}
	unowned := func(pipeline string) []string {
		out, errOut, code := harness.RunCLI(t, nil, "status", "--json", "--database-url", db, "--brokers", addr, "--pipeline", pipeline)
		if code != 0 {
			t.Fatalf("status exited %d: %s%s", code, out, errOut)
		}
		var s struct {
			Unowned []string `json:"unowned_partitions"`
		}
		if err := json.Unmarshal([]byte(out), &s); err != nil {
			t.Fatalf("status --json: %v\n%s", err, out)
		}
		return s.Unowned
	}
	if got := unowned("manual"); fmt.Sprint(got) != "[arrival_predictions/6 arrival_predictions/7]" {
		t.Errorf("status of pipeline manual: unowned partitions %v, want [arrival_predictions/6 arrival_predictions/7]", got)
	}
	// Registered, the added partitions hold pipeline manual's merge (a
	// split pipeline: no instance owns every partition) until one reads them.
	if got := harness.Dump(t, db, `SELECT partition, watermark FROM stream_positions WHERE pipeline = 'manual' AND partition >= 6`); fmt.Sprint(got) != "[[6 <nil>] [7 <nil>]]" {
		t.Errorf("pipeline manual's added partitions in stream_positions: %v, want [[6 <nil>] [7 <nil>]]", got)
	}
	if got := unowned("all"); len(got) != 0 {
		t.Errorf("status of pipeline all: unowned partitions %v, want none", got)
	}
	for _, p := range []*harness.Proc{all, manual} {
		_ = p.Cmd.Process.Signal(harness.Sigterm)
		if code := p.Wait(t, time.Minute); code != 0 {
			t.Fatalf("run exit %d after SIGTERM:\n%s", code, p.Output())
		}
	}

	// A restart finalizes every window: nothing is late, and the result is the oracle's.
	out := harness.Drain(t, db, addr, "--pipeline", "all")
	if late := harness.Dump(t, db, `SELECT topic, partition, "offset" FROM dead_letters WHERE pipeline = 'all'`); len(late) != 0 {
		t.Fatalf("dead letters after the restart %v, want none:\n%s", late, out)
	}
	harness.LoadOracleInput(t, db, addr, harness.PredictionsTopic)
	harness.SameRows(t, "delay_aggregates of pipeline all vs SQL oracle over 8 partitions",
		harness.Dump(t, db, harness.DumpAggregates+` WHERE pipeline = 'all'`), harness.Dump(t, db, harness.OracleAggregates))
}
