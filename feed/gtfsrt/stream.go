package gtfsrt

import (
	"fmt"
	"time"

	"github.com/MobilityData/gtfs-realtime-bindings/golang/gtfs"
	"google.golang.org/protobuf/proto"
)

// DefaultRetention is how long Stream remembers an emitted key after the
// feed stopped carrying it.
const DefaultRetention = 2 * time.Hour

// Stream maps successive FeedMessages of one live feed (one URL polled
// again and again) with the once-only rule of Load across all of them: each
// (trip_id, stop_id, stop_sequence, event_time) prediction and each
// (vehicle_id, event_time) position is emitted the first time it is seen.
//
// Memory stays bounded: a key is forgotten once the feed no longer carries
// it AND its event time is older than the feed's header timestamp minus the
// retention. A key the feed still carries is never forgotten, however old,
// so an unchanged update repeated for hours is still emitted once.
type Stream struct {
	l         loader
	retention time.Duration
}

// NewStream returns a Stream; retention <= 0 means DefaultRetention.
func NewStream(opt Options, retention time.Duration) *Stream {
	if retention <= 0 {
		retention = DefaultRetention
	}
	return &Stream{
		l:         loader{opt: opt, predSeen: make(map[predKey]uint64), posSeen: make(map[posKey]uint64), track: true},
		retention: retention,
	}
}

// Feed maps one FeedMessage (protobuf bytes) and returns its new events
// (Files = 1) and its header timestamp (zero when absent). On error nothing
// of the message is remembered, so a corrected copy is mapped in full.
func (s *Stream) Feed(b []byte) (*Result, time.Time, error) {
	var msg gtfs.FeedMessage
	if err := proto.Unmarshal(b, &msg); err != nil {
		return nil, time.Time{}, fmt.Errorf("gtfsrt: not a GTFS-realtime FeedMessage: %w", err)
	}
	var header time.Time
	if ts := msg.GetHeader().GetTimestamp(); ts != 0 {
		header = unixUTC(ts)
	}
	s.l.res = &Result{Skipped: make(map[string]int)}
	s.l.newPred, s.l.newPos = s.l.newPred[:0], s.l.newPos[:0]
	if err := s.l.feed(&msg); err != nil {
		// Forget what this feed added, so a corrected copy emits it.
		for _, k := range s.l.newPred {
			delete(s.l.predSeen, k)
		}
		for _, k := range s.l.newPos {
			delete(s.l.posSeen, k)
		}
		s.l.res = nil
		return nil, header, fmt.Errorf("gtfsrt: %w", err)
	}
	s.l.res.Files = 1
	res := s.l.res
	s.l.res = nil
	if !header.IsZero() {
		s.prune(header.Add(-s.retention).Unix())
	}
	return res, header, nil
}

// Remembered returns how many prediction and position keys Stream holds.
func (s *Stream) Remembered() (predictions, positions int) {
	return len(s.l.predSeen), len(s.l.posSeen)
}

// prune forgets keys absent from the last feed whose event time is before cutoff (Unix s).
func (s *Stream) prune(cutoff int64) {
	for k, n := range s.l.predSeen {
		if n != s.l.feeds && k.t < cutoff {
			delete(s.l.predSeen, k)
		}
	}
	for k, n := range s.l.posSeen {
		if n != s.l.feeds && k.t < cutoff {
			delete(s.l.posSeen, k)
		}
	}
}
