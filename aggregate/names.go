package aggregate

import (
	"slices"
	"strings"
	"time"
)

// NameKey names one row of a pipeline's names table: a line (DimLine, id =
// the prediction's line) or a station (DimStation, id = stop_id). Operators
// and the network have no names.
type NameKey struct {
	Dimension string // DimLine or DimStation
	ID        string
}

// Name is the name of one line or station, as a record carried it.
type Name struct {
	NameKey
	// Name is, for a line, line_name, else line_short_name; for a station,
	// stop_name. Never "".
	Name string
	// ShortName is a line's line_short_name (the public number, e.g. "320"),
	// "" when absent and for stations.
	ShortName string
	// EventTime is the event_time (UTC) of the newest record that carried
	// this name: a name carried by an older record never replaces it.
	EventTime time.Time
}

// newer reports whether the name (name, short) carried at t should replace
// the current one (curName, curShort) of time cur: a later event time wins;
// at equal times the greater name, byte by byte (then the greater short
// name), so that the choice depends on no arrival order, as the names
// table's upsert decides (COLLATE "C"). It makes no string (the compiler
// compares string(b) in place).
func newer(t time.Time, name, short []byte, cur time.Time, curName, curShort string) bool {
	if c := t.Compare(cur); c != 0 {
		return c > 0
	}
	if string(name) != curName {
		return string(name) > curName
	}
	return string(short) > curShort
}

// Names keeps the names of one instance's lines and stations: the newest
// one handed to a commit per key, and those that changed since, which the
// next commit writes (docs/design.md "Data contract": line_name,
// line_short_name, stop_name). Only a name that differs from the one last
// handed over for its key is kept, so commits write names only when they
// change, and Observe makes no string (allocates nothing) for a name it has
// seen. Not safe for concurrent use: the run loop owns it.
//
// It holds every key it met, for as long as it lives, in one nameEntry of
// 64 bytes, its map slot and its names' bytes: once a key's name changed,
// the name handed over before is never looked at again, so the entry holds
// the changed one instead (a burst of new stations costs little more than
// their names).
//
// The cycle: Observe every decoded prediction; Take the changed names into
// the next commit. A failed commit is retried with the names it took, so
// nothing is lost while the Names lives; a commit given up (a resync from
// the stored positions) must give up its Names too: a new one writes every
// name it meets once more, which the names table's upsert makes a no-op.
type Names struct {
	byDim   [2]map[string]*nameEntry // DimLine, DimStation: id -> entry
	changed [2][]*nameEntry          // per dimension, the entries whose name changed since the last Take
}

// nameEntry is what Names knows of one key: its newest name, with the
// newest event time it was seen at; changed tells that no Take handed it
// over yet. A name "" is none yet.
type nameEntry struct {
	id          string
	name, short string
	sec         int64 // the event time: Unix seconds
	nsec        int32 // and nanoseconds
	changed     bool
}

func (e *nameEntry) time() time.Time { return time.Unix(e.sec, int64(e.nsec)) }

// NewNames returns an empty Names.
func NewNames() *Names {
	return &Names{byDim: [2]map[string]*nameEntry{{}, {}}}
}

// Observe notes the names of p (raw, from DecodePredictionNames): its line's
// (line_name, else line_short_name) and its stop's. Absent names change
// nothing: the last known name stays.
func (n *Names) Observe(p *Prediction, raw RawNames) {
	line := raw.Line
	if len(line) == 0 {
		line = raw.LineShort
	}
	if len(line) > 0 {
		n.observe(0, p.Line, line, raw.LineShort, p.EventTime)
	}
	if len(raw.Stop) > 0 {
		n.observe(1, p.StopID, raw.Stop, nil, p.EventTime)
	}
}

// same reports whether name and short are e's (no allocation: the compiler
// compares string(b) == s in place).
func same(e *nameEntry, name, short []byte) bool {
	return e.name == string(name) && e.short == string(short)
}

func (n *Names) observe(d int, id string, name, short []byte, t time.Time) {
	e := n.byDim[d][id]
	if e == nil {
		e = &nameEntry{id: id}
		n.byDim[d][id] = e
	}
	switch {
	case e.name == "": // nothing known yet
	case same(e, name, short):
		// Unchanged: remember the newest time it was seen, so that an older
		// record's other name (a lagging partition) does not replace it.
		if t.After(e.time()) {
			e.sec, e.nsec = t.Unix(), int32(t.Nanosecond())
		}
		return
	case !newer(t, name, short, e.time(), e.name, e.short):
		return // older than the name known: the names table would keep that one
	}
	e.name, e.short = string(name), string(short)
	e.sec, e.nsec = t.Unix(), int32(t.Nanosecond())
	if !e.changed {
		e.changed = true
		n.changed[d] = append(n.changed[d], e)
	}
}

// Take returns the names changed since the last Take, ordered by dimension
// then id (byte order), for the next commit; from then on Observe compares
// with them. Call it when a commit takes its batch, and retry that batch
// until it commits (see Names).
func (n *Names) Take() []Name {
	if n.Pending() == 0 {
		return nil
	}
	out := make([]Name, 0, n.Pending())
	for d, dim := range [2]string{DimLine, DimStation} { // in byte order
		start := len(out)
		for _, e := range n.changed[d] {
			out = append(out, Name{NameKey: NameKey{dim, e.id}, Name: e.name, ShortName: e.short, EventTime: e.time().UTC()})
			e.changed = false
		}
		if cap(n.changed[d]) > 4096 {
			n.changed[d] = nil // a burst's room is not kept
		} else {
			clear(n.changed[d])
			n.changed[d] = n.changed[d][:0]
		}
		slices.SortFunc(out[start:], func(a, b Name) int { return strings.Compare(a.ID, b.ID) })
	}
	return out
}

// Pending returns how many names changed since the last Take.
func (n *Names) Pending() int { return len(n.changed[0]) + len(n.changed[1]) }
