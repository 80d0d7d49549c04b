// Package crashpoint marks the places where crash-injection tests kill the
// process. Without the build tag crashpoints, Hit does nothing and costs
// nothing. With it, OVSTREAM_CRASHPOINT=NAME[:N] kills the process with
// SIGKILL (no deferred functions, no flush) the N-th time NAME is reached
// (default N=1). OVSTREAM_CRASHPOINT_ACTION=stop makes it stop there with
// SIGSTOP instead, until the test sends SIGCONT (to act on the database at that
// exact moment, e.g. terminate the connection or claim the pipeline); the line
// "crashpoint: NAME reached N time(s): SIGSTOP" on stderr says it is there.
// `ovstream crashpoints` lists the points a binary knows.
package crashpoint

// Environment variables read by a binary built with -tags crashpoints.
const (
	EnvPoint  = "OVSTREAM_CRASHPOINT"        // NAME[:N]
	EnvAction = "OVSTREAM_CRASHPOINT_ACTION" // ActionKill (default) or ActionStop
)

// Actions taken at the N-th hit.
const (
	ActionKill = "kill" // SIGKILL: the process dies at once
	ActionStop = "stop" // SIGSTOP: the process waits for SIGCONT, then goes on
)

// The crash points, in the order a message meets them.
const (
	AfterConsume = "after_consume" // message read, not yet processed
	BeforeBegin  = "before_begin"  // windows finalized, transaction not begun
	MidCommit    = "mid_commit"    // windows upserted, stream_positions not yet written
	BeforeCommit = "before_commit" // all statements sent, COMMIT not sent
	AfterCommit  = "after_commit"  // COMMIT returned, ledger not yet released
	Shutdown     = "shutdown"      // during the final commit after SIGTERM
)

// ReplayAcked is `dlq replay`'s: Kafka acknowledged a batch of copies, the
// dead letters are not marked replayed yet (the next replay sends them again).
const ReplayAcked = "replay_acked"

// Names lists every crash point this package defines.
var Names = []string{AfterConsume, BeforeBegin, MidCommit, BeforeCommit, AfterCommit, Shutdown, ReplayAcked}
