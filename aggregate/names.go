package aggregate

import (
	"cmp"
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
// cur: a later event time wins; at equal times the greater name, byte by
// byte (then the greater short name), so that the choice depends on no
// arrival order, as the names table's upsert decides (COLLATE "C"). It
// makes no string (the compiler compares string(b) in place).
func newer(t time.Time, name, short []byte, cur *Name) bool {
	if c := t.Compare(cur.EventTime); c != 0 {
		return c > 0
	}
	if string(name) != cur.Name {
		return string(name) > cur.Name
	}
	return string(short) > cur.ShortName
}

// Names keeps the names of one instance's lines and stations: the newest
// one handed to a commit per key, and those that changed since, which the
// next commit writes (DESIGN.md "Data contract": line_name,
// line_short_name, stop_name). Only a name that differs from the one last
// handed over for its key is kept, so commits write names only when they
// change, and Observe makes no string (allocates nothing) for a name it has
// seen. Not safe for concurrent use: the run loop owns it.
//
// The cycle: Observe every decoded prediction; Take the changed names into
// the next commit. A failed commit is retried with the names it took, so
// nothing is lost while the Names lives; a commit given up (a resync from
// the stored positions) must give up its Names too: a new one writes every
// name it meets once more, which the names table's upsert makes a no-op.
type Names struct {
	byDim   [2]map[string]*nameEntry // DimLine, DimStation: id -> entry
	changed []*nameEntry             // the entries with a pending name, in the order they changed
}

// nameEntry is what Names knows of one key.
type nameEntry struct {
	last       Name // the name the last Take handed over; Name "" when none yet
	pending    Name // changed since; valid when hasPending
	hasPending bool
}

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
		n.observe(0, DimLine, p.Line, line, raw.LineShort, p.EventTime)
	}
	if len(raw.Stop) > 0 {
		n.observe(1, DimStation, p.StopID, raw.Stop, nil, p.EventTime)
	}
}

// same reports whether name and short are cur's (no allocation: the
// compiler compares string(b) == s in place).
func same(cur *Name, name, short []byte) bool {
	return cur.Name == string(name) && cur.ShortName == string(short)
}

func (n *Names) observe(d int, dim, id string, name, short []byte, t time.Time) {
	e := n.byDim[d][id]
	if e == nil {
		e = &nameEntry{}
		n.byDim[d][id] = e
	}
	cur := &e.last
	if e.hasPending {
		cur = &e.pending
	}
	switch {
	case cur.Name == "": // nothing known yet
	case same(cur, name, short):
		// Unchanged: remember the newest time it was seen, so that an older
		// record's other name (a lagging partition) does not replace it.
		if t.After(cur.EventTime) {
			cur.EventTime = t
		}
		return
	case !newer(t, name, short, cur):
		return // older than the name known: the names table would keep that one
	}
	e.pending = Name{NameKey: NameKey{dim, id}, Name: string(name), ShortName: string(short), EventTime: t}
	if !e.hasPending {
		e.hasPending = true
		n.changed = append(n.changed, e)
	}
}

// Take returns the names changed since the last Take, ordered by dimension
// then id (byte order), for the next commit; from then on Observe compares
// with them. Call it when a commit takes its batch, and retry that batch
// until it commits (see Names).
func (n *Names) Take() []Name {
	if len(n.changed) == 0 {
		return nil
	}
	out := make([]Name, len(n.changed))
	for i, e := range n.changed {
		out[i] = e.pending
		e.last, e.pending, e.hasPending = e.pending, Name{}, false
	}
	clear(n.changed)
	n.changed = n.changed[:0]
	slices.SortFunc(out, func(a, b Name) int {
		return cmp.Or(strings.Compare(a.Dimension, b.Dimension), strings.Compare(a.ID, b.ID))
	})
	return out
}

// Pending returns how many names changed since the last Take.
func (n *Names) Pending() int { return len(n.changed) }
