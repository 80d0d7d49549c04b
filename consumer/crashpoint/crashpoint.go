// Package crashpoint marks the places where crash-injection tests kill the
// process. Without the build tag crashpoints, Hit does nothing and costs
// nothing. With it, OVSTREAM_CRASHPOINT=NAME[:N] kills the process with
// SIGKILL (no deferred functions, no flush) the N-th time NAME is reached
// (default N=1).
package crashpoint

// The crash points, in the order a message meets them.
const (
	AfterConsume = "after_consume" // message read, not yet processed
	BeforeBegin  = "before_begin"  // windows finalized, transaction not begun
	MidCommit    = "mid_commit"    // windows upserted, stream_positions not yet written
	BeforeCommit = "before_commit" // all statements sent, COMMIT not sent
	AfterCommit  = "after_commit"  // COMMIT returned, ledger not yet released
	Shutdown     = "shutdown"      // during the final commit after SIGTERM
)

// Names lists every crash point this package defines.
var Names = []string{AfterConsume, BeforeBegin, MidCommit, BeforeCommit, AfterCommit, Shutdown}
