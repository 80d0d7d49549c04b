package store

import (
	"time"

	"github.com/ovstream/ovstream/aggregate"
)

// Dead-letter reasons (dead_letters.reason).
const (
	ReasonDecode = "decode" // the payload breaks the data contract
	ReasonFuture = "future" // event_time later than wall clock + max future skew
	ReasonLate   = "late"   // the event's window was already finalized when it arrived
	// ReasonRejected: PostgreSQL refused a row the record produced (docs/design.md "The commit").
	ReasonRejected = "rejected"
	// ReasonImplausible: |delay_s| is larger than the pipeline's max_delay,
	// a service-day error of the feed rather than a delay (docs/windows.md).
	ReasonImplausible = "implausible"
)

// DeadLetter is one rejected Kafka record, kept byte for byte.
type DeadLetter struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte // nil when the record had no key
	Value     []byte // nil when the record had no value
	Reason    string // ReasonDecode, ReasonFuture, ReasonLate, ReasonRejected or ReasonImplausible
	Error     string // what a person can act on, e.g. "delay_s: not a finite number"
	// Source is, for a copy `dlq replay` produced, the record it was
	// replayed from (HeaderSource); zero for any other record. A replay of
	// this dead letter sends it again, so the copies of one source count
	// once however often they are dead-lettered and replayed.
	Source SourceID
}

// Vehicle is the newest position of one vehicle, with the Kafka record it came from.
type Vehicle struct {
	aggregate.Position
	Partition int32
	Offset    int64
}

// Trip is the newest prediction of one trip, with the Kafka record it came from.
type Trip struct {
	aggregate.Prediction
	Partition int32
	Offset    int64
}

// Position is the stored progress of one partition (table stream_positions).
// NextOffset is the committable offset: every record below it is durable.
// ConsumedOffset is one past the last record consumed when it was stored
// (>= NextOffset); docs/design.md "Replay after a restart" uses it.
type Position struct {
	aggregate.PartitionID
	NextOffset     int64
	ConsumedOffset int64
	// Watermark is the watermark stored with these offsets (LoadPositions;
	// a commit stores Batch.Watermark), UTC; zero when none. Every record
	// below ConsumedOffset whose window ends at or before it was counted in
	// a written window or dead-lettered.
	Watermark time.Time
	// Seq is the partition's commit sequence (stream_positions.commit_seq):
	// how many commits stored its position. In a Batch it is the sequence
	// the instance last read or wrote; the commit is fenced by it (a
	// *BehindError when the database holds another) and stores Seq+1.
	Seq int64
	// LeaderEpoch is the Kafka leader epoch stored with NextOffset
	// (stream_positions.leader_epoch, KIP-320): the epoch of the leader that
	// served the last record consumed below NextOffset, which bounds that
	// record's batch epoch from above (consumer/truncation.go); -1 when
	// unknown (NULL: rows written before migration 11, a broker without
	// leader epochs, nothing consumed yet, or next_offset moved on without
	// it: stream_positions.leader_epoch_offset). A commit writes it with
	// NextOffset; start-up validates it with OffsetForLeaderEpoch.
	LeaderEpoch int32
	// Idle and Drained are what a commit of a split pipeline tells the merge
	// about the partition (stream_positions.idle, .drained): idle = caught
	// up, quiet, and none of its events in an open window; drained = its
	// owner's --drain wrote every window of it.
	Idle, Drained bool
}

// Batch is everything one commit writes, in ONE transaction.
type Batch struct {
	Pipeline string
	// Owner is the owner (host:pid-nonce, consumer.Config.Owner) whose claim holds the
	// positions; the commit is fenced unless every partition of Positions
	// has this owner and Epoch.
	Owner   string
	Epoch   int64           // the fencing epoch of the claim of Positions' partitions
	Windows []aggregate.Row // finalized windows: replace, never add
	// Closed, when it holds windows, is written like Windows (a batch has
	// one or the other): the finalized windows, whose rows the commit
	// builds one at a time as its COPY sends them (aggregate.RowCursor), so
	// that a window of many keys is never held twice, as Stats and as rows.
	Closed aggregate.ClosedSet
	// Provisional, when set, replaces provisional rows of open windows
	// (provisional.go); a single-owner commit deletes the provisional rows
	// of the windows Watermark finalized either way. Not for split commits.
	Provisional *Provisional
	// Vehicles and Trips: the newest row per key, plus, for keys whose
	// rows PostgreSQL refused before, older versions (the newest is written;
	// RejectedError's search meets the others when it refuses that one).
	Vehicles    []Vehicle
	Trips       []Trip
	DeadLetters []DeadLetter
	Positions   []Position
	Watermark   time.Time // the watermark this commit reached (stream_positions.watermark of each partition)
	// Names are the names of lines and stations that changed since the
	// instance's last commit (aggregate.Names.Take: one per key, in key
	// order), written to the names table.
	Names []aggregate.Name

	// Split is set by an instance that does not own every partition of its
	// pipeline: it writes Partials instead of Windows, and the commit merges
	// the windows every partition of the pipeline finalized (CommitSplit).
	Split    *Split
	Partials []aggregate.PartialWindow // the windows Watermark finalized, per source partition

	// Replayed are copies of dead letters (HeaderSource) whose windows are
	// final, to be counted: the commit merges each into the stored rows of
	// its window unless its source was counted before, and records the
	// source in the same transaction (replayed.go). ReplayOut, when set,
	// receives what it did.
	Replayed  []ReplayedRecord
	ReplayOut *ReplayOutcome

	// Visits are the stop visits the predictions read since the last batch
	// add to (one per visit), NoStartDate the predictions that formed none,
	// per partition; both upserted in the commit (visits.go).
	Visits      []Visit
	NoStartDate []NoStartDate
}

// WindowRows returns the number of delay_aggregates rows b writes (of
// Windows or Closed).
func (b *Batch) WindowRows() int { return len(b.Windows) + b.Closed.Len() }

// Split is what a commit of a split pipeline needs besides its rows
// (docs/design.md "Pipelines, instances and partitions", Split windows).
type Split struct {
	Topic  string        // the predictions topic: Partials are of its partitions
	Topics []string      // the pipeline's topics: every partition of them takes part in the merge
	Window time.Duration // the window size
	// FirstOpen is the end (UTC) of the earliest window the instance held
	// when the batch was taken, written by this commit or still open; zero
	// when none. If the pipeline merged that window already, the commit
	// writes nothing and fails with ErrMergedPast.
	FirstOpen time.Time
	// IdleLease is how long after its owner's last commit an idle partition
	// still stops holding the merge; after it, it holds it again (an owner
	// that stopped must not let windows merge without its partition).
	IdleLease time.Duration
	// Holding says that every partition of the batch held the merge at its
	// stored watermark before this commit: the instance's last successful
	// commit stored none of them idle or drained. Then no merge can pass
	// the windows of this batch's partials, and a commit that finds another
	// one deciding a merge (the pipeline's row locked) need not wait for it:
	// it writes its partials and positions and leaves the merge to the next
	// commit (every flush interval). Without it the commit waits.
	Holding bool
}

// Merged is what the merge step of a split commit did.
type Merged struct {
	Until   time.Time // pipelines.merged_until after the commit, UTC: every window ending at or before it is final; zero: none yet
	Windows int       // windows this commit merged
	Rows    int       // delay_aggregates rows this commit wrote by merging
	Drained bool      // every partition was drained: everything was merged and the drain flags cleared
	Pending int       // windows with partials still waiting for the merge
	Skipped bool      // another commit was deciding a merge: this one left it to the next (Split.Holding)
	// Refused are the merged rows PostgreSQL refused, kept in refused_windows
	// with its message instead of delay_aggregates (mergeChunk).
	Refused []RefusedWindow
	// Frontier is the merge frontier this commit read, UTC: the lowest
	// stored watermark of the partitions that hold the merge (the greatest
	// when none does); zero when a partition that holds it never committed.
	Frontier time.Time
}
