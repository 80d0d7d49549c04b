package consumer

import (
	"time"

	"github.com/ovstream/ovstream/aggregate"
)

// Ledger tracks, per partition, what was consumed but is not yet durable, and
// from that the committable offset: one past the longest durable prefix of
// the partition (a commit is a prefix, not a set; docs/design.md "Offset ledger").
//
// A record is durable once its rows are in a committed transaction. A
// prediction in an open window becomes durable when its window is finalized;
// every other record (position, dead letter, late or skipped event) is durable
// at the next commit. So the committable offset is the smallest offset still in
// a window that is open at the commit's watermark, else last consumed + 1. The
// ledger keeps one entry per open window per partition, never one per message.
//
// The ledger is pure: no I/O, no clock, no goroutines. It is not safe for
// concurrent use; the run loop owns it.
type Ledger struct {
	parts map[aggregate.PartitionID]*partLedger
}

type partLedger struct {
	consumed int64           // last consumed offset + 1 (or the seek offset)
	windows  map[int64]int64 // window end (Unix ns) -> smallest offset of this partition in it
	epochs   []epochRun      // the leader epochs records were read under, by offset (Epoch)
}

// epochRun says that the records of a partition from offset first on (up to
// the next run's) were read under leader epoch epoch.
type epochRun struct {
	first int64
	epoch int32
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger {
	return &Ledger{parts: map[aggregate.PartitionID]*partLedger{}}
}

// Assign registers p, whose consumption starts at offset start.
func (l *Ledger) Assign(p aggregate.PartitionID, start int64) {
	l.parts[p] = &partLedger{consumed: start, windows: map[int64]int64{}}
}

// Consumed records offset of p as consumed with no open window: it is durable
// at the next commit. Offsets must increase per partition; gaps are allowed.
func (l *Ledger) Consumed(p aggregate.PartitionID, offset int64) {
	pl := l.parts[p]
	if offset+1 > pl.consumed {
		pl.consumed = offset + 1
	}
}

// Epoch records that the records of p from offset first on were read under
// leader epoch epoch (-1 unknown; truncation.go), until the next call; at
// Assign, first belowStart gives the epoch stored with the seek offset.
// first must not decrease.
func (l *Ledger) Epoch(p aggregate.PartitionID, first int64, epoch int32) {
	pl := l.parts[p]
	if n := len(pl.epochs); n == 0 || pl.epochs[n-1].epoch != epoch {
		pl.epochs = append(pl.epochs, epochRun{first: first, epoch: epoch})
	}
}

// CommittableEpoch returns the leader epoch the last record of p below next
// was read under, -1 when unknown: the epoch a commit stores with next (KIP-
// 320). It forgets the runs below that one: next must not decrease between
// calls (a committable offset never does).
func (l *Ledger) CommittableEpoch(p aggregate.PartitionID, next int64) int32 {
	pl := l.parts[p]
	i := len(pl.epochs) - 1
	for i >= 0 && pl.epochs[i].first >= next {
		i--
	}
	if i < 0 {
		return -1
	}
	pl.epochs = pl.epochs[i:]
	return pl.epochs[0].epoch
}

// InWindow records offset of p as consumed into the open window ending at end.
func (l *Ledger) InWindow(p aggregate.PartitionID, offset int64, end time.Time) {
	pl := l.parts[p]
	k := end.UnixNano()
	if _, ok := pl.windows[k]; !ok {
		pl.windows[k] = offset // offsets increase: the first one is the smallest
	}
	if offset+1 > pl.consumed {
		pl.consumed = offset + 1
	}
}

// Committable returns p's committable offset for a commit that finalizes every
// window with end <= watermark: the smallest offset in a window still open
// after it, else last consumed + 1. It never exceeds ConsumedOffset(p).
func (l *Ledger) Committable(p aggregate.PartitionID, watermark time.Time) int64 {
	pl := l.parts[p]
	wm := watermark.UnixNano()
	next := pl.consumed
	for end, off := range pl.windows {
		if end > wm && off < next {
			next = off
		}
	}
	return next
}

// ConsumedOffset returns one past the last offset consumed from p (or the seek
// offset when nothing was consumed).
func (l *Ledger) ConsumedOffset(p aggregate.PartitionID) int64 { return l.parts[p].consumed }

// Release forgets every window with end <= watermark: call it only after the
// commit that wrote those windows has returned from COMMIT.
func (l *Ledger) Release(watermark time.Time) {
	wm := watermark.UnixNano()
	for _, pl := range l.parts {
		for end := range pl.windows {
			if end <= wm {
				delete(pl.windows, end)
			}
		}
	}
}

// OpenEntries returns the number of (partition, open window) entries held:
// the ledger's memory, which grows with open windows, not with messages.
func (l *Ledger) OpenEntries() int {
	n := 0
	for _, pl := range l.parts {
		n += len(pl.windows)
	}
	return n
}
