// Package demo is `ovstream demo`: the bundled real GTFS-realtime samples
// (testdata/README.md has their provenance), each produced into topics of
// its own pipeline on an embedded broker, run to the end and summed up: what
// run wrote, whether every stored offset reached its high water mark, the
// rows per dimension, the dead letters and the most delayed lines of the
// busiest window (ranked by P90, as the dashboard).
//
// A demo pipeline starts afresh each time: the embedded broker's topics are
// new (new topic IDs), so the rows an earlier demo wrote under that pipeline
// are dropped first; other pipelines are never touched.
package demo
