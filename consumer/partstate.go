package consumer

import (
	"time"

	"github.com/ovstream/ovstream/aggregate"
)

// partState is what the run loop knows of one assigned partition, beside
// what the ledger (positions), the watermark (event times, idleness) and
// stored (the committed position) hold. Only the loop's goroutine reads or
// writes it; a resync starts from new ones.
type partState struct {
	highWater   int64      // the last high water mark read (partitions.go)
	hwAt        time.Time  // when the reading of highWater was sent; zero: the last reading failed, so unknown
	drainTarget int64      // where a drain of it ends: its last stable offset at start (drain.go)
	replayUntil int64      // the stored consumed_offset: records below it were consumed before the restart (replay.go)
	seek        int64      // the offset reading started at (start.go): held counts from it until a position is stored
	lastSeen    time.Time  // wall time of its last record, its seek or its last marker probe
	probed      int64      // the consumed offset at its last marker probe, -1 for none
	probedHW    int64      // the high water mark when that probe went out
	probeRetry  probeRetry // the backoff of its failing marker probes; zero: none failing
	paused      bool       // by flowControl: far ahead of the others in event time (flow.go)
}

// assign starts the loop's state of tp, whose high water mark was hw at
// start (not yet a reading: unknown until the first poll).
func (l *loop) assign(tp aggregate.PartitionID, hw int64) *partState {
	p := &partState{highWater: hw, drainTarget: hw}
	l.parts[tp] = p
	return p
}
