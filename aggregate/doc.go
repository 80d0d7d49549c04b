// Package aggregate holds ovstream's pure core: the event types of the Kafka
// data contract, their strict decoding, tumbling-window keys, exact delay
// statistics, the windower and the watermark.
//
// It imports the standard library only: no Kafka, no database, no clock
// (time is always passed in), no goroutines, no logging. The same input gives
// the same output.
//
// Guarantees:
//   - A window is [start, start+W) with start = floor(t/W)*W, aligned to the
//     Unix epoch in UTC; an event at exactly 12:05:00 belongs to [12:05,12:10).
//   - P90 is exact: linear interpolation between closest ranks, the same number
//     as PostgreSQL's percentile_cont(0.9). Memory per open row grows with the
//     distinct delay values, not with the number of events.
//   - Every statistic of a row is a function of its distribution (value ->
//     count), never of the order of its events: Merge of the partial
//     aggregates of a row (one per source partition) equals, bit for bit,
//     the row of one Stats fed every event. The mean is the exactly rounded
//     sum divided by the count (PostgreSQL's avg for whole-second delays).
//   - Every finalized Row carries its exact distribution (Values, Counts:
//     distinct delays ascending, events per delay), and Summarize merges any
//     set of distributions into count, mean, min, max and any quantiles,
//     each equal to what PostgreSQL's count, avg, min, max and
//     percentile_cont give over the union of their events.
//   - The watermark never decreases.
package aggregate
