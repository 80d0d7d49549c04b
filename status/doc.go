// Package status is what `ovstream status` and the dashboard's health page
// report of a pipeline: per partition the stored (committable) next offset,
// Kafka's log start and high water mark and the lag; the partitions' owners,
// fencing epochs and leases; the running instances; freshness, merge lag,
// dead letters and refused rows.
//
// It only reads: PostgreSQL through package store, Kafka through a sarama
// client the caller opens.
package status
