//go:build integration

package ops

import (
	"strings"
	"testing"
	"time"

	"github.com/ovstream/ovstream/integration/harness"
)

// --partitions naming a partition the topic does not have is refused before
// anything is written: exit 1 naming every such partition and how many the
// topic has; stream_positions, pipelines and pipeline_instances hold nothing
// of the pipeline afterwards (a registered partition would stay in status
// for ever, lag unknown, and hold a split pipeline's merge); a run of every
// partition then holds only those the topics have.
func TestPartitionsFlagRefusesAMissingPartition(t *testing.T) {
	addr, db := harness.StartBroker(t), harness.FreshDB(t) // arrival_predictions has partitions 0-5, vehicle_positions 0-2
	const pipeline = "missingpart"
	p := harness.StartOvstream(t, harness.CliEnv(), harness.RunArgs(db, addr, "--drain", "--pipeline", pipeline,
		"--partitions", "arrival_predictions:0,arrival_predictions:9,vehicle_positions:0,vehicle_positions:3")...)
	code := p.Wait(t, time.Minute)
	out := p.Output()
	for _, want := range []string{"--partitions", "arrival_predictions/9", "vehicle_positions/3",
		`topic "arrival_predictions" has 6 partitions (0-5)`, `topic "vehicle_positions" has 3 partitions (0-2)`} {
		if !strings.Contains(out, want) {
			t.Errorf("output does not say %q", want)
		}
	}
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
	for _, table := range []string{"stream_positions", "pipeline_instances"} {
		if rows := harness.Dump(t, db, `SELECT * FROM `+table+` WHERE pipeline = '`+pipeline+`'`); len(rows) != 0 {
			t.Errorf("%s holds %d rows of the refused run: %v", table, len(rows), rows)
		}
	}
	if rows := harness.Dump(t, db, `SELECT * FROM pipelines WHERE name = '`+pipeline+`'`); len(rows) != 0 {
		t.Errorf("pipelines holds the refused run's pipeline: %v", rows)
	}

	// The pipeline then runs on what the topics have, and nothing else.
	harness.Drain(t, db, addr, "--pipeline", pipeline)
	rows := harness.Dump(t, db, `SELECT topic || '/' || partition FROM stream_positions WHERE pipeline = '`+pipeline+`'`)
	if got := strings.Join(rows, " "); got != "[arrival_predictions/0] [arrival_predictions/1] [arrival_predictions/2] "+
		"[arrival_predictions/3] [arrival_predictions/4] [arrival_predictions/5] [vehicle_positions/0] [vehicle_positions/1] [vehicle_positions/2]" {
		t.Errorf("stream_positions after a drain of every partition: %s", got)
	}
}
