package consumer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestLatestAgainstMap feeds latest and a plain map the same records over
// several commit intervals and requires the same newest row per key (the
// greater sequence number wins, as newer decides), each key once per take,
// and nothing carried over a take.
func TestLatestAgainstMap(t *testing.T) {
	type row struct {
		key string
		seq int
	}
	rng := rand.New(rand.NewPCG(1, 2))
	b := newLatest[row]()
	for interval := range 20 {
		model := map[string]row{}
		for range rng.IntN(500) {
			r := row{key: string(rune('a' + rng.IntN(40))), seq: rng.IntN(1000)}
			b.put(r.key, r, func(old *row) bool { return r.seq >= old.seq })
			if old, ok := model[r.key]; !ok || r.seq >= old.seq {
				model[r.key] = r
			}
			if got, ok := b.get(r.key); !ok || got != model[r.key] {
				t.Fatalf("interval %d: get(%q) = %v, %v; want %v", interval, r.key, got, ok, model[r.key])
			}
		}
		got := b.take()
		var want []row
		for _, r := range model {
			want = append(want, r)
		}
		cmp := func(x, y row) int { return strings.Compare(x.key, y.key) }
		slices.SortFunc(got, cmp)
		slices.SortFunc(want, cmp)
		if !slices.Equal(got, want) {
			t.Fatalf("interval %d: take = %v, want %v", interval, got, want)
		}
		if _, ok := b.get("a"); ok || len(b.rows) != 0 {
			t.Fatalf("interval %d: rows left after take", interval)
		}
	}
}
