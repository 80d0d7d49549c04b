package aggregate_test

import (
	"fmt"
	"time"

	"github.com/ovstream/ovstream/aggregate"
)

// One partition, 5-minute windows, 2 minutes of allowed lateness: decode,
// observe, check lateness, window; then close, commit and drop.
func Example() {
	part := aggregate.PartitionID{Topic: "arrival_predictions", Partition: 0}
	wall := time.Date(2026, 5, 4, 12, 30, 0, 0, time.UTC)
	wm := aggregate.NewWatermark(2*time.Minute, 30*time.Second, time.Time{})
	wm.Assign(part)
	win := aggregate.NewWindower(5 * time.Minute)

	for _, msg := range []string{
		`{"trip_id":"t1","line":"L1","stop_id":"S1","operator":"GVB","delay_s":60,"event_time":"2026-05-04T14:05:00+02:00"}`,
		`{"trip_id":"t2","line":"L1","stop_id":"S1","operator":"GVB","delay_s":-30,"event_time":"2026-05-04T12:07:30Z"}`,
		`{"trip_id":"t3","line":"L1","stop_id":"S1","operator":"GVB","delay_s":"NaN","event_time":"2026-05-04T12:08:00Z"}`,
		`{"trip_id":"t4","line":"L1","stop_id":"S1","operator":"GVB","delay_s":5,"event_time":"2026-05-04T12:12:00Z"}`,
	} {
		p, err := aggregate.DecodePrediction([]byte(msg))
		if err != nil {
			fmt.Println("dead letter:", err)
			continue
		}
		wm.Observe(part, p.EventTime, wall)
		if end := aggregate.WindowStart(p.EventTime, win.Size()).Add(win.Size()); !end.After(wm.Current()) {
			fmt.Println("late:", p.TripID)
			continue
		}
		win.Add(p)
	}

	watermark := wm.Advance(wall) // 12:12 - 2m = 12:10
	for _, r := range win.Closed(watermark) {
		fmt.Printf("%s %s=%s n=%d mean=%g p90=%g\n", r.WindowStart.Format("15:04"), r.Dimension, r.DimensionID, r.Count, r.Mean, r.P90)
	}
	// ... commit the rows, then:
	fmt.Println("dropped windows:", win.Drop(watermark), "open:", win.OpenWindows())
	// Output:
	// dead letter: delay_s: not a number
	// 12:05 line=L1 n=2 mean=15 p90=51
	// 12:05 network=all n=2 mean=15 p90=51
	// 12:05 operator=GVB n=2 mean=15 p90=51
	// 12:05 station=S1 n=2 mean=15 p90=51
	// dropped windows: 1 open: 1
}
