package produce

import (
	"fmt"
	"strings"
	"time"

	"github.com/ovstream/ovstream/feed/gtfsrt"
)

// String is the progress line of one poll: per URL its status, bytes, feed
// time (RFC 3339) and new events or its failure, then what was produced,
// what was skipped and why, and what waits for the next poll.
func (r PollReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "poll %d at %s:", r.Poll, r.Started.UTC().Format(time.RFC3339))
	preds, pos := 0, 0
	skipped := map[string]int{}
	for i, f := range r.Fetches {
		if i > 0 {
			b.WriteString(";")
		}
		fmt.Fprintf(&b, " %s", f.URL)
		switch {
		case f.Err != nil:
			fmt.Fprintf(&b, " FAILED (%v)", f.Err)
		case f.NotModified:
			b.WriteString(" 304 not modified")
		default:
			fmt.Fprintf(&b, " %d, %d bytes, feed time %s, %d new predictions, %d new positions",
				f.Status, f.Bytes, f.FeedTime.Format(time.RFC3339), f.Predictions, f.Positions)
		}
		if f.Attempts > 1 {
			fmt.Fprintf(&b, " (%d attempts)", f.Attempts)
		}
		preds += f.Predictions
		pos += f.Positions
		for k, v := range f.Skipped {
			skipped[k] += v
		}
	}
	res := gtfsrt.Result{Skipped: skipped}
	produced := 0
	for _, tc := range r.Produced {
		produced += tc.Produced
	}
	fmt.Fprintf(&b, "; produced %d records", produced)
	fmt.Fprintf(&b, "; skipped: %s", res.SkipSummary())
	if r.Pending > 0 {
		fmt.Fprintf(&b, "; %d records NOT produced yet (retried next poll): %v", r.Pending, r.ProduceErr)
	}
	return b.String()
}
