// Package visitstats reads the key performance indicators agencies publish
// from the stop visits (table stop_visits: one row per trip, service day
// and stop, with the realized delay and arrival time of its last
// prediction): on-time performance and headways, per line, station,
// operator or the network, per bucket of arrival time (an hour, a day in a
// time zone, fixed bins, the whole range) or per service day. `ovstream
// report --metric on-time|headway` prints them.
//
// Guarantees:
//   - One implementation: every figure comes from the SQL functions
//     ovs_on_time and ovs_headways (migration 18), which an analyst calls
//     too (docs/analysing.md "On-time performance and headways"); this
//     package chooses their arguments, adds the names and formats the rows.
//   - Exact: counts are counts; the means and waits are float64 divisions
//     of exact sums (PostgreSQL numeric), so they are the correctly rounded
//     quotient of the float64 nearest each sum.
//   - The range selects visits by arrival_time: From <= arrival_time < To,
//     whatever the bucket (a service-day bucket too).
package visitstats
