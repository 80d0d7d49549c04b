package produce

import (
	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/feed/gtfsrt"
)

// SkipContract prefixes the skip reason of an event that breaks the data
// contract; the decoder's reason follows, e.g. "breaks the data contract:
// delay_s: out of range: |delay_s| > 86400".
const SkipContract = "breaks the data contract: "

// Conform removes from res the events that `run` would dead-letter as
// undecodable, so a producer emits only records of the data contract
// (docs/design.md "Data contract"): each event is encoded as it would be
// produced (EncodePrediction, EncodePosition) and decoded with the
// consumer's own decoder (aggregate.DecodePrediction, DecodePosition); one
// that fails is counted in res.Skipped under SkipContract + the decoder's
// reason, and dropped. The order of what is kept does not change, and the
// arrays res held are not written to (callers may share them). Rules
// that depend on the wall clock at consumption (max future skew, lateness)
// are not checked.
func Conform(res *gtfsrt.Result) {
	skip := func(err error) {
		if res.Skipped == nil {
			res.Skipped = map[string]int{}
		}
		res.Skipped[SkipContract+err.Error()]++
	}
	res.Predictions = keep(res.Predictions, func(p aggregate.Prediction) error {
		_, err := aggregate.DecodePrediction(EncodePrediction(p))
		return err
	}, skip)
	res.Positions = keep(res.Positions, func(p aggregate.Position) error {
		_, err := aggregate.DecodePosition(EncodePosition(p))
		return err
	}, skip)
}

// keep returns the events of in that check accepts, in order, calling skip
// for the others; in itself when it accepts all, else a new slice.
func keep[E any](in []E, check func(E) error, skip func(error)) []E {
	var out []E
	for i, e := range in {
		err := check(e)
		switch {
		case err != nil && out == nil:
			out = append(make([]E, 0, len(in)-1), in[:i]...)
			skip(err)
		case err != nil:
			skip(err)
		case out != nil:
			out = append(out, e)
		}
	}
	if out == nil {
		return in
	}
	return out
}
