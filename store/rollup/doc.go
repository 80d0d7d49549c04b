// Package rollup reads exact rollups of the distributions stored with every
// finalized delay_aggregates row (delay_values, delay_counts; migration 5):
// for one pipeline, one dimension, an optional set of ids, a time range and
// a bucket (an hour, a day, a week, a month in a time zone; fixed bins; or
// the whole range), the count, mean, min, max and any quantiles of the
// events of each id in each bucket. `ovstream report` prints them.
//
// Guarantees:
//   - Exact: each statistic is that of the union of the rows' events
//     (aggregate.Summarize): a quantile equals PostgreSQL's percentile_cont
//     over those events bit for bit, the mean is their exactly rounded sum
//     divided by their count (avg, for whole-second delays, bit for bit).
//   - Buckets are those of the SQL function ovs_bucket, which the SQL
//     rollups (ovs_rollup) use too; a window belongs to the bucket of its
//     window_start, and the range selects windows with From <= window_start
//     < To.
//   - The statistics are computed here, in Go, from the merged
//     distributions PostgreSQL groups; ovs_summary computes them in SQL. The
//     two are independent, and the integration tests hold both to
//     percentile_cont, avg, min and max over the raw events.
//   - Rows written before schema version 5 have no distribution: they are
//     left out and counted (Result.WithoutDistribution).
package rollup
