//go:build integration

package ops

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/MobilityData/gtfs-realtime-bindings/golang/gtfs"
	"github.com/ovstream/ovstream/integration/harness"
	"google.golang.org/protobuf/proto"
)

// `produce` emits only records of the data contract: a stop time update
// whose delay is more than a day (|delay_s| > 86400, which `run` would
// dead-letter) and a vehicle position off the globe are skipped, each with
// its reason in the summary; the rest is produced. A drain of it counts the
// delay of 60 s and sets the one of 86400 s aside as implausible (beyond
// run's default --max-delay of 12 h): the contract bounds what a message may
// hold, the pipeline what it counts.
func TestProduceSkipsWhatBreaksTheContract(t *testing.T) {
	addr := harness.StartBroker(t)
	db := harness.FreshDB(t)
	dir := t.TempDir()
	const ts = 1463601600 // 2016-05-18T20:00:00Z
	stu := func(stop string, seq uint32, d int32) *gtfs.TripUpdate_StopTimeUpdate {
		return &gtfs.TripUpdate_StopTimeUpdate{StopId: proto.String(stop), StopSequence: proto.Uint32(seq),
			Arrival: &gtfs.TripUpdate_StopTimeEvent{Delay: proto.Int32(d)}}
	}
	msg := &gtfs.FeedMessage{
		Header: &gtfs.FeedHeader{GtfsRealtimeVersion: proto.String("2.0"), Timestamp: proto.Uint64(ts)},
		Entity: []*gtfs.FeedEntity{
			{Id: proto.String("e1"), TripUpdate: &gtfs.TripUpdate{
				Trip:           &gtfs.TripDescriptor{TripId: proto.String("trip-1"), RouteId: proto.String("R1")},
				StopTimeUpdate: []*gtfs.TripUpdate_StopTimeUpdate{stu("S1", 1, 60), stu("S2", 2, 90000), stu("S3", 3, -86401), stu("S4", 4, 86400)},
			}},
			{Id: proto.String("v1"), Vehicle: &gtfs.VehiclePosition{
				Vehicle:  &gtfs.VehicleDescriptor{Id: proto.String("bus-1")},
				Position: &gtfs.Position{Latitude: proto.Float32(-36.8), Longitude: proto.Float32(174.7)},
			}},
			{Id: proto.String("v2"), Vehicle: &gtfs.VehiclePosition{
				Vehicle:  &gtfs.VehicleDescriptor{Id: proto.String("bus-2")},
				Position: &gtfs.Position{Latitude: proto.Float32(95), Longitude: proto.Float32(174.7)},
			}},
		},
	}
	b, err := proto.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "feed.pb")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out := harness.ProduceCLI(t, addr, "--operator", "AT", "--gtfs-rt", path)
	for _, want := range []string{"produced 2 predictions to arrival_predictions, 1 positions to vehicle_positions",
		"2 breaks the data contract: delay_s: out of range: |delay_s| > 86400",
		"1 breaks the data contract: lat: out of range: |lat| > 90"} {
		if !strings.Contains(out, want) {
			t.Errorf("produce does not say %q:\n%s", want, out)
		}
	}
	if n := len(harness.ReadTopic(t, addr, harness.PredictionsTopic)); n != 2 {
		t.Errorf("arrival_predictions holds %d records, want 2", n)
	}
	harness.Drain(t, db, addr)
	if got := harness.Dump(t, db, `SELECT reason, count(*) FROM dead_letters GROUP BY reason`); strings.Join(got, " ") != "[implausible 1]" {
		t.Errorf("dead letters after a drain: %v, want one implausible", got)
	}
	if got := harness.Dump(t, db, `SELECT event_count, max_delay_s FROM delay_aggregates WHERE dimension = 'network'`); strings.Join(got, " ") != "[1 60]" {
		t.Errorf("network row %v, want 1 event, max 60", got)
	}
}

// `produce --gtfs-rt` reports each file it reads (--progress-interval 0):
// ten Auckland snapshots give ten lines whose new predictions add up to
// what the summary says it produced.
func TestProduceReportsEachFile(t *testing.T) {
	addr := harness.StartBroker(t)
	out := harness.ProduceCLI(t, addr, "--operator", "AT", "--progress-interval", "0", "--gtfs-rt", "../../testdata/auckland-20160519-peak10min")
	var files, preds int
	for _, l := range strings.Split(out, "\n") {
		if !strings.HasPrefix(l, "read file ") {
			continue
		}
		files++
		var n, of, p, pos int
		var path, at string
		if _, err := fmt.Sscanf(l, "read file %d/%d %s (feed time %s %d new predictions, %d new positions;", &n, &of, &path, &at, &p, &pos); err != nil || n != files || of != 10 {
			t.Errorf("progress line %q: %v", l, err)
		}
		preds += p
	}
	if files != 10 || preds != 4610 || !strings.Contains(out, "produced 4610 predictions to arrival_predictions") {
		t.Errorf("%d file lines adding up to %d predictions, want 10 and 4610:\n%s", files, preds, out)
	}
}
