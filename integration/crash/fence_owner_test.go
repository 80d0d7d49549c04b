//go:build integration

package crash

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/integration/harness"
	"github.com/ovstream/ovstream/store"
)

// ownerRig is pipeline p on a fresh database with two "instances", A and B,
// whose first claims (of different partitions) both hold epoch 1.
type ownerRig struct {
	url  string
	a, b *store.Store
}

// newOwnerRig claims partA as owner "A" and partB as owner "B" and checks
// that both claims have epoch 1.
func newOwnerRig(t *testing.T, partA, partB aggregate.PartitionID) *ownerRig {
	t.Helper()
	ctx := harness.TestCtx(t)
	g := &ownerRig{url: harness.FreshDB(t)}
	for _, c := range []struct {
		s     **store.Store
		owner string
		part  aggregate.PartitionID
	}{{&g.a, "A", partA}, {&g.b, "B", partB}} {
		s, err := store.Open(ctx, g.url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close(context.Background()) })
		claimed, err := s.Claim(ctx, "p", c.owner, []aggregate.PartitionID{c.part}, store.ClaimOptions{Lease: time.Minute})
		if err != nil || claimed.Epoch != 1 {
			t.Fatalf("claim of %s by %s: epoch %d, %v; want 1", c.part, c.owner, claimed.Epoch, err)
		}
		*c.s = s
	}
	return g
}

// tables dumps every row a commit, a position reset or a topic ID update
// may write, whole (stream_positions with its owner, epoch and heartbeat).
func (g *ownerRig) tables(t *testing.T) map[string][]string {
	t.Helper()
	s := harness.Snapshot(t, g.url)
	s["stream_positions"] = harness.Dump(t, g.url, `SELECT t::text FROM stream_positions t`)
	s["delay_partial_windows"] = harness.Dump(t, g.url, `SELECT t::text FROM delay_partial_windows t`)
	s["names"] = harness.Dump(t, g.url, `SELECT t::text FROM names t`)
	return s
}

// fenced runs write, which must fail with store.ErrFenced and change no row.
func (g *ownerRig) fenced(t *testing.T, what string, write func() error) {
	t.Helper()
	before := g.tables(t)
	if err := write(); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("%s: %v; want ErrFenced", what, err)
	}
	harness.SameSnapshot(t, what, before, g.tables(t))
}

// position returns "owner/epoch/next_offset" of partition tp of pipeline p
// (next_offset -1: none).
func (g *ownerRig) position(t *testing.T, tp aggregate.PartitionID) string {
	t.Helper()
	return harness.Query[string](t, g.url, `SELECT coalesce(owner, '') || '/' || epoch || '/' || coalesce(next_offset, -1)
		FROM stream_positions WHERE pipeline = 'p' AND topic = $1 AND partition = $2`, tp.Topic, tp.Partition)
}

// TestFenceOwnerPlain: an instance's commit of final rows (Commit) that
// names a partition another instance holds at the same epoch (both first
// claims: epoch 1) is fenced and writes nothing, alone or with its own
// partition; so are a position reset and a topic ID update of it. The
// owner's own commit succeeds. The partitions are of two topics, so that
// the commit of one of them is a sole owner's (no ErrNotSoleOwner).
func TestFenceOwnerPlain(t *testing.T) {
	ctx := harness.TestCtx(t)
	ta, ub := aggregate.PartitionID{Topic: "t", Partition: 0}, aggregate.PartitionID{Topic: "u", Partition: 0}
	g := newOwnerRig(t, ta, ub)
	batch := func(owner string, next int64, parts ...aggregate.PartitionID) store.Batch {
		b := store.Batch{Pipeline: "p", Owner: owner, Epoch: 1, Watermark: harness.T0.Add(time.Hour),
			Windows:     []aggregate.Row{harness.Row(aggregate.DimLine, owner, next, 10, 20, 0, 30)},
			Vehicles:    []store.Vehicle{{Position: aggregate.Position{VehicleID: "v" + owner, EventTime: harness.T0}}},
			DeadLetters: []store.DeadLetter{{Topic: parts[0].Topic, Offset: next - 1, Reason: store.ReasonDecode, Error: owner}},
			Names: []aggregate.Name{{NameKey: aggregate.NameKey{Dimension: aggregate.DimLine, ID: owner},
				Name: "line " + owner, ShortName: "7", EventTime: harness.T0}}}
		for _, tp := range parts {
			b.Positions = append(b.Positions, store.Position{PartitionID: tp, NextOffset: next, ConsumedOffset: next})
		}
		return b
	}
	g.fenced(t, "B commits A's partition", func() error { return g.b.Commit(ctx, harness.WithSeqs(t, g.b, batch("B", 7, ta))) })
	g.fenced(t, "B commits A's and its own partition", func() error { return g.b.Commit(ctx, harness.WithSeqs(t, g.b, batch("B", 7, ta, ub))) })
	g.fenced(t, "a commit without owner", func() error { return g.a.Commit(ctx, harness.WithSeqs(t, g.a, batch("", 7, ta))) })

	if err := g.a.Commit(ctx, harness.WithSeqs(t, g.a, batch("A", 5, ta))); err != nil {
		t.Fatalf("A commits its own partition: %v", err)
	}
	if got := g.position(t, ta); got != "A/1/5" {
		t.Fatalf("%s after A's commit: owner/epoch/next_offset %s; want A/1/5", ta, got)
	}
	if got := harness.Query[string](t, g.url, `SELECT string_agg(dimension_id || ':' || event_count, ',') FROM delay_aggregates`); got != "A:5" {
		t.Fatalf("delay_aggregates after A's commit: %q; want A:5", got)
	}
	g.fenced(t, "B resets A's position", func() error {
		return g.b.ResetPosition(ctx, "p", "B", 1, store.Position{PartitionID: ta})
	})
	g.fenced(t, "B records the topic ID of A's partition", func() error {
		return g.b.SetTopicIDs(ctx, "p", "B", 1, map[aggregate.PartitionID]string{ta: "AAAAAAAAAAAAAAAAAAAAAA"}, nil)
	})
	g.fenced(t, "B resets A's position along with recording its own topic ID", func() error {
		return g.b.SetTopicIDs(ctx, "p", "B", 1, map[aggregate.PartitionID]string{ub: "AAAAAAAAAAAAAAAAAAAAAA"},
			[]store.Position{{PartitionID: ta}})
	})
	if err := g.b.Commit(ctx, harness.WithSeqs(t, g.b, batch("B", 3, ub))); err != nil {
		t.Fatalf("B commits its own partition: %v", err)
	}
	if got := g.position(t, ub); got != "B/1/3" {
		t.Fatalf("%s after B's commit: owner/epoch/next_offset %s; want B/1/3", ub, got)
	}
	if got := g.position(t, ta); got != "A/1/5" {
		t.Fatalf("%s after B's commit: owner/epoch/next_offset %s; want A/1/5", ta, got)
	}
}

// TestFenceOwnerSplit: a split commit (CommitSplit) of partials of a
// partition another instance holds at the same epoch is fenced and writes
// nothing, alone or with the committer's own partition; the owner's own
// split commit succeeds.
func TestFenceOwnerSplit(t *testing.T) {
	ctx := harness.TestCtx(t)
	ta, tb := aggregate.PartitionID{Topic: "t", Partition: 0}, aggregate.PartitionID{Topic: "t", Partition: 1}
	g := newOwnerRig(t, ta, tb)
	if err := g.a.RegisterPartitions(ctx, "p", []aggregate.PartitionID{ta, tb}); err != nil {
		t.Fatal(err)
	}
	const w = 5 * time.Minute
	wm := harness.T0.Add(2 * w)
	batch := func(owner string, parts ...aggregate.PartitionID) store.Batch {
		win := aggregate.NewPartitionedWindower(w)
		b := store.Batch{Pipeline: "p", Owner: owner, Epoch: 1, Watermark: wm}
		for i, tp := range parts {
			for k := range 4 {
				win.AddFrom(tp.Partition, aggregate.Prediction{TripID: "x", Line: "L1", StopID: "S1", Operator: "A",
					DelayS: float64(10*i + k), EventTime: harness.T0.Add(time.Duration(k) * 2 * time.Minute)})
			}
			b.Positions = append(b.Positions, store.Position{PartitionID: tp, NextOffset: 10, ConsumedOffset: 10})
		}
		b.Partials = win.ClosedSet(wm).PartialWindows()
		b.Split = &store.Split{Topic: "t", Topics: []string{"t"}, Window: w, FirstOpen: win.FirstEnd(), IdleLease: time.Minute}
		return b
	}
	split := func(s *store.Store, b store.Batch) error {
		_, err := s.CommitSplit(ctx, harness.WithSeqs(t, s, b))
		return err
	}
	g.fenced(t, "B commits partials of A's partition", func() error { return split(g.b, batch("B", ta)) })
	g.fenced(t, "B commits partials of A's and its own partition", func() error { return split(g.b, batch("B", ta, tb)) })
	g.fenced(t, "a split commit without owner", func() error { return split(g.a, batch("", ta)) })

	own := batch("A", ta)
	if len(own.Partials) != 2 {
		t.Fatalf("A's batch has %d partial windows; want 2", len(own.Partials))
	}
	if err := split(g.a, own); err != nil {
		t.Fatalf("A commits its own partition: %v", err)
	}
	if got := g.position(t, ta); got != "A/1/10" {
		t.Fatalf("%s after A's commit: owner/epoch/next_offset %s; want A/1/10", ta, got)
	}
	if got := g.position(t, tb); got != "B/1/-1" {
		t.Fatalf("%s after A's commit: owner/epoch/next_offset %s; want B/1/-1", tb, got)
	}
	// t/1 never committed: it holds the merge, so A's partials wait.
	if got := harness.Query[string](t, g.url, `SELECT string_agg(partition || '@' || to_char(window_start AT TIME ZONE 'UTC', 'HH24:MI'), ','
		ORDER BY window_start) FROM delay_partial_windows`); got != "0@"+harness.T0.Format("15:04")+",0@"+harness.T0.Add(w).Format("15:04") {
		t.Fatalf("partials after A's commit: %q", got)
	}
	if n := harness.Query[int64](t, g.url, `SELECT count(*) FROM delay_aggregates`); n != 0 {
		t.Fatalf("delay_aggregates after A's commit: %d rows; want none (t/1 holds the merge)", n)
	}
}
