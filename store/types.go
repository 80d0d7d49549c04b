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
	// ReasonRejected: PostgreSQL refused a row the record produced (DESIGN.md "The commit").
	ReasonRejected = "rejected"
)

// DeadLetter is one rejected Kafka record, kept byte for byte.
type DeadLetter struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte // nil when the record had no key
	Value     []byte // nil when the record had no value
	Reason    string // ReasonDecode, ReasonFuture, ReasonLate or ReasonRejected
	Error     string // what a person can act on, e.g. "delay_s: not a finite number"
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
// (>= NextOffset); DESIGN.md "Replay after a restart" uses it.
type Position struct {
	aggregate.PartitionID
	NextOffset     int64
	ConsumedOffset int64
}

// Batch is everything one commit writes, in ONE transaction.
type Batch struct {
	Pipeline string
	Epoch    int64           // the fencing epoch of the claim of Positions' partitions
	Windows  []aggregate.Row // finalized windows: replace, never add
	// Vehicles and Trips: the newest row per key, plus, for keys whose
	// rows PostgreSQL refused before, older versions (the newest is written;
	// RejectedError's search meets the others when it refuses that one).
	Vehicles    []Vehicle
	Trips       []Trip
	DeadLetters []DeadLetter
	Positions   []Position
	Watermark   time.Time // the watermark this commit reached (stream_positions.watermark of each partition)
}
