// Package dlq lists dead letters and replays them: `ovstream dlq list` and
// `ovstream dlq replay`.
//
// Guarantee: a replay marks a dead letter replayed only once Kafka
// acknowledged its copy, so nothing is lost; a crash between the
// acknowledgement and the mark sends the copy again at the next replay, and
// run counts a source at most once (the headers of Headers name it; store
// records each counted source in dead_letter_replays in the commit that
// counts it). The copy's headers say whether it may be merged into a window
// already final: rejected and future dead letters always, late and decode
// ones only when the operator asks.
package dlq
