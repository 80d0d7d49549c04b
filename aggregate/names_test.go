package aggregate

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

func named(line, stop string, t time.Time) Prediction {
	return Prediction{TripID: "t", Line: line, StopID: stop, Operator: "OP", EventTime: t}
}

func raw(line, short, stop string) RawNames {
	b := func(s string) []byte {
		if s == "" {
			return nil
		}
		return []byte(s)
	}
	return RawNames{Line: b(line), LineShort: b(short), Stop: b(stop)}
}

func TestNamesObserveAndTake(t *testing.T) {
	t0 := time.Date(2025, 11, 6, 21, 0, 0, 0, time.UTC)
	n := NewNames()
	obs := func(line, stop string, at time.Duration, names RawNames) {
		p := named(line, stop, t0.Add(at))
		n.Observe(&p, names)
	}
	obs("320", "7610", 0, raw("Airport - Fall River", "320", "Bridge Terminal"))
	obs("1", "8001", 0, raw("", "1", "")) // short name only: it is the name
	obs("2", "8002", 0, raw("", "", ""))  // no names: nothing
	obs("320", "7610", time.Minute, raw("Airport - Fall River", "320", "Bridge Terminal"))
	want := []Name{
		{NameKey{DimLine, "1"}, "1", "1", t0},
		{NameKey{DimLine, "320"}, "Airport - Fall River", "320", t0.Add(time.Minute)},
		{NameKey{DimStation, "7610"}, "Bridge Terminal", "", t0.Add(time.Minute)},
	}
	if got := n.Take(); !equalNames(got, want) {
		t.Fatalf("first take:\n got %+v\nwant %+v", got, want)
	}
	if got := n.Take(); got != nil {
		t.Fatalf("second take without changes: %+v", got)
	}
	// Unchanged names, absent names: nothing to write.
	obs("320", "7610", 2*time.Minute, raw("Airport - Fall River", "320", "Bridge Terminal"))
	obs("320", "7610", 3*time.Minute, raw("", "", ""))
	if n.Pending() != 0 {
		t.Fatalf("%d pending after unchanged names", n.Pending())
	}
	// A renamed stop; an older record (a lagging partition) with the old name
	// does not bring it back; nor does an older record with a third name.
	obs("320", "7610", 5*time.Minute, raw("Airport - Fall River", "320", "Bridge Terminal Bay 10"))
	obs("320", "7610", 4*time.Minute, raw("Airport - Fall River", "320", "Bridge Terminal"))
	obs("320", "7610", 4*time.Minute, raw("Airport - Fall River", "320", "Bridge"))
	// A new short name is a change of the line's name row too.
	obs("320", "7610", 5*time.Minute, raw("Airport - Fall River", "320X", ""))
	want = []Name{
		{NameKey{DimLine, "320"}, "Airport - Fall River", "320X", t0.Add(5 * time.Minute)},
		{NameKey{DimStation, "7610"}, "Bridge Terminal Bay 10", "", t0.Add(5 * time.Minute)},
	}
	if got := n.Take(); !equalNames(got, want) {
		t.Fatalf("after renames:\n got %+v\nwant %+v", got, want)
	}
	// After the take, the same older name is still refused (the new one was
	// seen at 5m, later than 4m30s).
	obs("320", "7610", 4*time.Minute+30*time.Second, raw("Airport - Fall River", "320", "Bridge Terminal"))
	if n.Pending() != 0 {
		t.Fatalf("an older name became pending: %+v", n.Take())
	}
	// At equal event times the greater name wins, in either order.
	for _, order := range [][2]string{{"Alpha", "Beta"}, {"Beta", "Alpha"}} {
		m := NewNames()
		for _, s := range order {
			p := named("L", "S", t0)
			m.Observe(&p, raw("", "", s))
		}
		if got := m.Take(); len(got) != 1 || got[0].Name != "Beta" {
			t.Errorf("tie %v: %+v, want Beta", order, got)
		}
	}
}

func equalNames(a, b []Name) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].NameKey != b[i].NameKey || a[i].Name != b[i].Name || a[i].ShortName != b[i].ShortName ||
			!a[i].EventTime.Equal(b[i].EventTime) {
			return false
		}
	}
	return true
}

// A name seen before costs no allocation.
func TestNamesObserveKnownAllocatesNothing(t *testing.T) {
	n := NewNames()
	p := named("320", "7610", time.Date(2025, 11, 6, 21, 0, 0, 0, time.UTC))
	r := raw("Airport - Fall River", "320", "Bridge Terminal")
	n.Observe(&p, r)
	n.Take()
	r = raw("Airport - Fall River", "320", "Bridge Terminal") // other buffers, same bytes
	if a := testing.AllocsPerRun(1000, func() {
		p.EventTime = p.EventTime.Add(time.Second)
		n.Observe(&p, r)
	}); a != 0 {
		t.Fatalf("%v allocations per known name", a)
	}
	if n.Pending() != 0 {
		t.Fatal("a known name became pending")
	}
}

// One instance's commits leave in the names table, per key, the name of the
// newest record (greatest event time, then name, then short name), in
// whatever order the records come and whenever the commits happen: Take's
// names applied with the table's upsert rule (store.upsertNames: replace
// when the name differs and (event time, name, short name) is greater)
// against that plain model.
func TestNamesTableEqualsNewestModel(t *testing.T) {
	type row struct {
		name, short string
		at          time.Time
	}
	greater := func(a, b row) bool {
		if !a.at.Equal(b.at) {
			return a.at.After(b.at)
		}
		if a.name != b.name {
			return a.name > b.name
		}
		return a.short > b.short
	}
	t0 := time.Date(2025, 11, 6, 21, 0, 0, 0, time.UTC)
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, 15))
		n := NewNames()
		table := map[NameKey]row{}
		model := map[NameKey]row{}
		apply := func() {
			for _, nm := range n.Take() {
				cur, ok := table[nm.NameKey]
				nw := row{nm.Name, nm.ShortName, nm.EventTime}
				if !ok || (cur.name != nw.name || cur.short != nw.short) && greater(nw, cur) {
					table[nm.NameKey] = nw
				}
			}
		}
		names := []string{"", "A", "B", "C"}
		for range 1 + r.IntN(60) {
			line, stop := []string{"L1", "L2"}[r.IntN(2)], []string{"S1", "S2", "S3"}[r.IntN(3)]
			at := t0.Add(time.Duration(r.IntN(8)) * time.Minute)
			ln, sn, st := names[r.IntN(4)], names[r.IntN(3)], names[r.IntN(4)]
			p := named(line, stop, at)
			n.Observe(&p, raw(ln, sn, st))
			if ln != "" || sn != "" {
				nw, k := row{ln, sn, at}, NameKey{DimLine, line}
				if ln == "" {
					nw.name = sn
				}
				if cur, ok := model[k]; !ok || greater(nw, cur) {
					model[k] = nw
				}
			}
			if st != "" {
				nw, k := row{st, "", at}, NameKey{DimStation, stop}
				if cur, ok := model[k]; !ok || greater(nw, cur) {
					model[k] = nw
				}
			}
			if r.IntN(5) == 0 {
				apply()
			}
		}
		apply()
		if len(table) != len(model) {
			t.Fatalf("seed %d: table %v, model %v", seed, table, model)
		}
		for k, m := range model {
			if got := table[k]; got.name != m.name || got.short != m.short {
				t.Fatalf("seed %d: %v: table %+v, model %+v", seed, k, got, m)
			}
		}
	}
}

// A burst of new keys in random order: Take hands over each one once, in
// key order (dimension, then id, byte order), with its newest name; the
// next Take has none of them.
func TestNamesTakeBurstInKeyOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	t0 := time.Date(2025, 11, 6, 21, 0, 0, 0, time.UTC)
	n := NewNames()
	const keys = 20000
	for _, i := range r.Perm(keys) {
		p := named(fmt.Sprint("L", i%50), fmt.Sprint("S", i), t0.Add(time.Duration(i)*time.Millisecond))
		n.Observe(&p, raw(fmt.Sprint("Line ", i%50), "", fmt.Sprint("old ", i)))
		p.EventTime = p.EventTime.Add(time.Second)
		n.Observe(&p, raw(fmt.Sprint("Line ", i%50), "", fmt.Sprint("Stop ", i)))
	}
	got := n.Take()
	if len(got) != keys+50 {
		t.Fatalf("%d names, want %d", len(got), keys+50)
	}
	if !slices.IsSortedFunc(got, func(a, b Name) int {
		return cmp.Or(strings.Compare(a.Dimension, b.Dimension), strings.Compare(a.ID, b.ID))
	}) {
		t.Fatal("names not in key order")
	}
	for _, nm := range got[50:] {
		var i int
		if _, err := fmt.Sscanf(nm.ID, "S%d", &i); err != nil {
			t.Fatalf("name id %q: %v", nm.ID, err)
		}
		if nm.Dimension != DimStation || nm.Name != fmt.Sprint("Stop ", i) ||
			!nm.EventTime.Equal(t0.Add(time.Duration(i)*time.Millisecond+time.Second)) {
			t.Fatalf("%+v", nm)
		}
	}
	if n.Pending() != 0 || n.Take() != nil {
		t.Fatal("names pending after Take")
	}
}
