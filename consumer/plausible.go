package consumer

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/store"
)

// DefaultMaxDelay is Config.MaxDelay when it is zero: 12 hours. A delay
// further than half a day from the schedule is nearer to the previous or the
// next service day than to its own: a feed that computed it against the
// wrong day, not a late or early vehicle. It is the bound
// produce already uses when it picks a service day from a static feed
// (feed/gtfsstatic). docs/windows.md, "Implausible delays", has the
// distribution of the bundled feeds it was chosen from.
const DefaultMaxDelay = 12 * time.Hour

// MaxMaxDelay is the largest Config.MaxDelay: one day, the data contract's
// own bound on |delay_s| (aggregate.MaxAbsDelayS).
const MaxMaxDelay = aggregate.MaxAbsDelayS * time.Second

// Where the verdict implausible stands among the others (handle): last,
// after decode, future, classify's replayed and late. After replayed, so
// that a record counted in a written window before a restart is never also
// dead-lettered when the bound was lowered in between; after late, so that
// every implausible record came in time to count: `dlq replay` marks its
// copies to be merged into their windows even when those are final, as
// rejected and future ones. A copy dlq replay produced is judged again
// when first read (the bound may still be the one that set it aside), and
// once accepted it stays so across restarts, as replayed.go says. An implausible
// prediction still moves the watermark (its event_time is sound) and still
// names its line and stop, but it never becomes its trip's latest delay.

// plausible tells whether p's delay is within the pipeline's bound:
// |delay_s| <= Config.MaxDelay in seconds.
func (l *loop) plausible(p *aggregate.Prediction) bool {
	return math.Abs(p.DelayS) <= l.cfg.MaxDelay.Seconds()
}

// implausible dead-letters p, read from r, whose |delay_s| is beyond
// Config.MaxDelay: counted in no window, replayable with `dlq replay` after
// the pipeline's bound was raised (`pipeline set --max-delay`).
func (l *loop) implausible(r *record, p *aggregate.Prediction) {
	l.deadLetter(r, store.ReasonImplausible, fmt.Sprintf("delay_s %s: |delay_s| > max delay %s (%d s), the pipeline's "+
		"bound on a plausible delay: a service-day error of the feed, not a delay",
		strconv.FormatFloat(p.DelayS, 'f', -1, 64), l.cfg.MaxDelay, int64(l.cfg.MaxDelay.Seconds())))
}

// validateMaxDelay checks Config.MaxDelay, defaults set.
func (c *Config) validateMaxDelay() error {
	if c.MaxDelay < time.Second || c.MaxDelay > MaxMaxDelay {
		return fmt.Errorf("consumer: max delay %v: want 1s to %v", c.MaxDelay, MaxMaxDelay)
	}
	return nil
}
