// Package status is what `ovstream status` and the dashboard's health page
// report of a pipeline: per partition the stored (committable) next offset,
// the consumed position the last commit stored, Kafka's log start and high
// water mark, the lag and the records held; the partitions' owners, fencing
// epochs and leases; the running instances; freshness, merge lag, dead
// letters and refused rows.
//
// The lag is the records not yet read: high water mark - consumed position
// (the log start when nothing is stored). Held = consumed position - stored
// next offset: records read but in windows still open, which a restart reads
// again. Once a feed stops, the lag returns to 0 while held stays until the
// watermark closes the last windows; their sum is the lag Kafka tooling shows
// for the consumer group (package groupoffsets).
//
// Readiness is run's /readyz probe: the database answers, the partitions are
// assigned, the last commit is recent, the high water marks are known.
//
// It only reads: PostgreSQL through package store (the probe on a
// connection of its own), Kafka through a sarama client the caller opens.
package status
