// Package store writes ovstream's results to PostgreSQL and reads back its
// progress, with pgx v5 on ONE connection owned by one goroutine.
//
// The invariant (docs/design.md "The commit"): the finalized windows, the
// latest-state rows, the dead letters and the stream positions that produced
// them are committed in ONE transaction, behind the fencing owner and epoch. So a stored
// position never points past a record whose rows are not stored, and a commit
// either writes all of its batch or nothing.
//
// Guarantees:
//   - Windows are replaced, never added to: replaying a batch leaves the same rows.
//     Each window row is written with its exact distribution (delay_values,
//     delay_counts), on the binary COPY fast path and on the upsert path
//     alike, and a merged split window with the merged distribution; the
//     rollups (store/rollup, the SQL function ovs_rollup) read them.
//   - Latest-state rows keep, per key, the greatest (observed_at, offset) ever
//     committed; an older one replayed later does not overwrite it.
//   - Dead letters are stored byte for byte (bytea), once per (topic, partition, offset).
//   - Stored positions never move backwards (GREATEST), never by delete-then-insert.
//   - A commit whose owner no longer holds every one of its partitions at
//     its epoch writes nothing and returns ErrFenced.
//   - A claim takes a partition only when it is released, its owner's lease
//     expired (heartbeat older than the lease, by the database's clock), or
//     under takeover; else it returns *HeldError. It never blocks on a frozen
//     owner's row lock: after a bounded wait it terminates that session.
//   - After any error the connection is thrown away; the next call reconnects.
//     An error of the COMMIT statement itself is a *CommitError: when it is
//     Ambiguous the transaction may have committed, so re-read the positions.
//     A split drain's last commit resolves it first from its partitions'
//     commit sequences (outcome.go): whether it ended the drain cannot be
//     read back from the stored rows, and txid_status cannot tell across a
//     failover.
//   - Split pipelines (CommitSplit): partials are keyed by source partition
//     and replaced, never added to; a window is merged into delay_aggregates
//     only once every partition of the pipeline's topics passed it (none
//     unclaimed, none without a watermark; idle and drained ones excepted),
//     in the transaction of the commit that finds it so, under the
//     pipeline's row lock; its partials are deleted in that transaction, and
//     no partial of a merged window is written again (ErrMergedPast).
//   - Provisional rows (provisional.go, provisional_split.go) are exact for
//     the records below provisional_positions, in the transaction that
//     stores them; in a split pipeline a window's provisional rows are the
//     merge of every instance's provisional partials of it, replaced under
//     the pipeline's row lock, and the merge deletes both with the
//     transaction that writes the window's final rows.
//   - delay_aggregates is partitioned by day (migration 6). Commit and
//     CommitSplit create the days their windows need before their
//     transaction, never inside it (EnsurePartitions, partitions.go); a day
//     dropped meanwhile fails the commit retryably (never as a refusal that
//     would dead-letter its records), and the retry makes it again.
//   - Retention (retention.go) drops whole days, each ending at or before the
//     lowest watermark stored by any pipeline minus the retention, read again
//     under the table's ACCESS EXCLUSIVE lock: never a day that holds a window
//     still to be written. Dead letters age out by created_at, in batches.
//   - Retryable tells transient failures (connection lost, serialization
//     failure, deadlock, server shutting down) from terminal ones (fenced).
//   - A batch PostgreSQL refuses for a value it holds (Refused: SQLSTATE
//     classes 22 and 23, 54000) writes nothing and returns a *RejectedError
//     naming every refused row, found again in a transaction that is rolled
//     back, so the caller can rebuild the batch without their records.
//
// A Store is not safe for concurrent use.
package store
