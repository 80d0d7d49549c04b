// Package dashboard serves ovstream's web UI: per pipeline, the network
// delay over time, the most delayed lines and stations of a day, one line's
// delay by hour of day, the on-time performance, headways and prediction
// accuracy of the stop visits, and the pipeline's health. `ovstream serve` serves it
// alone; `ovstream run` serves it under /dashboard/ of --metrics-addr.
//
// Guarantees:
//   - Every statistic shown is an exact rollup of the stored distributions
//     (migration 5): the delay over time and the rankings come from
//     store/rollup (the code of `ovstream report`), the hour-of-day profile
//     from the SQL function ovs_summary. Each equals PostgreSQL's
//     percentile_cont, avg, min and max over the events themselves. The
//     pages of the stop visits read the SQL functions ovs_on_time,
//     ovs_headways and ovs_accuracy through store/visitstats and
//     store/accuracy (the code of `ovstream report --metric
//     on-time|headway|accuracy`); only the on-time share by hour of day
//     is added up here, from the exact counts of the hourly buckets. The
//     browser computes no statistic: it draws and formats the numbers of the
//     JSON API (api/...), which carries them exactly (shortest round-trip
//     decimal); the pages show them rounded to 0.1 s, each cell holding the
//     exact number in its data-v attribute.
//   - Every page reads final rows only, but the delay over time asked with
//     include_open=1 (its page asks unless the URL says include_open=0),
//     which reads view delay_aggregates_live, the provisional rows of the
//     windows not yet final too, and marks each point final or not: a
//     provisional point counts exactly the records read so far
//     (docs/windows.md "Provisional rows"), and its numbers change.
//   - Lines and stations are labelled by id, with the name the pipeline's
//     names table holds (store.Names, one query per request) where it has
//     one; an id without a name is shown alone, never given one.
//   - The pages work offline: HTML, JavaScript, CSS and the charting library
//     (uPlot, vendored at a pinned version: assets/vendor/uplot/README.md)
//     are embedded in the binary; no page loads anything from elsewhere.
//   - The handler only reads the database, on a pgxpool.Pool of at most
//     Config.MaxConns connections of its own (store.ReadPool), opened on
//     first use; a request holds one connection for all its queries, and is
//     bounded by Config.QueryTimeout. Bad parameters get 400 with a message naming
//     the parameter.
//
// Times: the API takes and returns RFC 3339 (local times without an offset
// are read in the page's time zone, tz), buckets are those of ovs_bucket in
// tz, and every duration and delay is in seconds.
package dashboard
