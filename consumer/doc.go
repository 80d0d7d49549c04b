// Package consumer is the run loop: it reads the assigned Kafka partitions,
// counts each record into its tumbling window exactly once, and writes the
// finalized windows together with the offsets that produced them in one
// PostgreSQL transaction (store.Store.Commit).
//
// # Guarantee
//
// A stored offset never points past a record whose window is not yet
// written (the Ledger's committable offset); a record is counted once or
// dead-lettered once, never both, never twice, across restarts, resyncs,
// failovers and split pipelines (replay.go, split.go). A partition leaves the
// watermark only when a reading of its high water mark sent after the
// watermark it allows was computed found it caught up (partitions.go,
// aggregate.Watermark.Propose): a leader change cannot make a record late.
//
// # Goroutines, what each owns, how they talk
//
// Run starts them all and waits for them; nothing outlives it.
//
//   - The run loop (loop.run, one per resync): owns every field of loop: the
//     windower, the watermark, the ledger, the per-partition state (parts,
//     partstate.go), the latest-state buffers, the dead letters and the
//     topology. No locks: other goroutines hand it values over channels.
//   - One reader per assigned partition (source.read, with its error
//     forwarder): owns its sarama PartitionConsumer; decodes records and sends
//     batches on source.out, errors on source.errs; a leader change or an
//     ended consumer is reported on source.errs (leaderChanged, readerEnded).
//   - The commit connection's owner (committer.go): runs every call on the
//     commit Store, one at a time in the order sent: the commit in flight
//     (loop.startCommit, at most one, answering on loop.inflight), claims,
//     start-up reads, the release, a heartbeat while the lease connection is
//     lent. Nobody else holds the Store, so no caller waits for another's
//     call; the loop waits for the commit in flight only where its result
//     decides what comes next (drain, shutdown, claiming added partitions).
//   - The high water mark poll (loop.pollHighWater), at most one: reads the
//     end offsets through source.admin (franz-go) and answers on
//     loop.hwPending.
//   - The instance's heartbeat (lease.go, instance.heartbeat): owns the lease
//     connection (instance.hb, guarded by instance.hbMu; instance.spare takes
//     hbMu on the commit connection's owner to lend hb's connection to the
//     commit Store, store.WithSpare); instance.mu guards its role and
//     partitions.
//   - Retention (retention.go), when configured: its own connection; the loop
//     tells it when the instance is active.
//
// Lock ordering: instance.hbMu before instance.mu (a heartbeat holds hbMu
// and takes mu to read the role); never the reverse.
//
// # Files
//
// run.go (Run, the loop's select), start.go (claim, seek, KIP-320 checks,
// watermark seed), handle.go (one record: count, skip, dead-letter),
// commit.go, committer.go, provisional.go (the open windows' provisional rows),
// partitions.go (high water marks, caught-up, marker probes),
// endoffsets.go (ListOffsets), source.go (sarama readers), truncation.go and
// lost.go (leader changes, truncated or lost logs), split.go (split
// pipelines), lease.go (heartbeat, standby), drain.go, progress.go,
// metrics.go.
package consumer
