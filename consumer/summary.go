package consumer

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/ovstream/ovstream/aggregate"
)

// Summary describes what a run did, for logs and the drain report.
type Summary struct {
	Consumed       map[string]int64 // records read per topic
	Predictions    int64            // predictions aggregated into windows
	Positions      int64            // positions applied to vehicle_latest
	Skipped        int64            // replayed events of windows written before (docs/design.md "Replay after a restart")
	DeadLetters    map[string]int64 // new dead letters per reason; ReplayedDead: the earlier ones met again
	WindowRows     int64            // delay_aggregates rows written
	Commits        int64
	CommitFailures int64
	Resyncs        int64
	ReplayedDead   int64 // records dead-lettered before a restart, replayed and skipped (replay.go)
	// Copies of dead letters (replayed.go): counted (merged into their
	// windows), and skipped because a copy of their source counted before.
	ReplayedCounted, ReplayedDuplicates int64
	Watermark                           time.Time                       // the last committed watermark
	Stored                              map[aggregate.PartitionID]int64 // committed next offset per partition
	HighWater                           map[aggregate.PartitionID]int64 // high water mark per partition, last seen
	Elapsed                             time.Duration
	progress                            progress // the progress line's memory (progress.go)
	lateUnderIdleFinalize               bool     // the warning of a record late under --idle-finalize was logged
}

// Print writes the run summary of `ovstream run`: elapsed time, commits,
// records per topic, dead letters per reason, the watermark and the stored
// offset and high water mark of each partition, one item a line.
func (s *Summary) Print(w io.Writer) {
	fmt.Fprintf(w, "summary: %s elapsed, %d commits (%d failed, %d resyncs)\n", s.Elapsed.Round(time.Millisecond), s.Commits, s.CommitFailures, s.Resyncs)
	for _, topic := range slices.Sorted(maps.Keys(s.Consumed)) {
		fmt.Fprintf(w, "  consumed %-22s %d records\n", topic, s.Consumed[topic])
	}
	fmt.Fprintf(w, "  predictions aggregated  %d\n  positions applied       %d\n  replayed and skipped    %d\n  window rows written     %d\n",
		s.Predictions, s.Positions, s.Skipped, s.WindowRows)
	for _, r := range slices.Sorted(maps.Keys(s.DeadLetters)) {
		fmt.Fprintf(w, "  dead letters (%s) %d\n", r, s.DeadLetters[r])
	}
	if s.ReplayedDead > 0 {
		fmt.Fprintf(w, "  dead letters replayed   %d (recorded before a restart: skipped, not counted again)\n", s.ReplayedDead)
	}
	if s.ReplayedCounted+s.ReplayedDuplicates > 0 {
		fmt.Fprintf(w, "  replayed copies counted %d (%d skipped: a copy of their dead letter counted before)\n",
			s.ReplayedCounted, s.ReplayedDuplicates)
	}
	if !s.Watermark.IsZero() {
		fmt.Fprintf(w, "  watermark               %s\n", s.Watermark.UTC().Format(time.RFC3339))
	}
	for _, tp := range SortedPartitions(s.Stored) {
		hw := "unknown" // the last reading of the run failed
		if h, ok := s.HighWater[tp]; ok {
			hw = strconv.FormatInt(h, 10)
		}
		fmt.Fprintf(w, "  stored offset %-24s %d (high water %s)\n", tp.String(), s.Stored[tp], hw)
	}
}
