//go:build integration

package harness

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/store"
)

// CountedOnceOrDead checks that delay_aggregates equals the SQL oracle over
// the n records of oracle_msgs minus the dead letters, and that every record
// is counted once or dead-lettered once.
func CountedOnceOrDead(t *testing.T, db string, n int) {
	t.Helper()
	SameRows(t, "delay_aggregates vs SQL oracle (records minus dead letters)", Dump(t, db, DumpAggregates), Dump(t, db, OracleAggregates))
	counted := Dump(t, db, `SELECT coalesce(sum(event_count), 0)::bigint + (SELECT count(*) FROM dead_letters)
		FROM delay_aggregates WHERE dimension = 'network'`)
	if counted[0] != fmt.Sprintf("[%d]", n) {
		t.Errorf("counted + dead letters = %v, want every record once: %d", counted, n)
	}
}

// splitStoreRig is two "instances" of pipeline p (two Stores, each owning
// one partition of topic t) and the events of two 5-minute windows on both
// partitions, which a plain Windower sees all of.
type splitStoreRig struct {
	Url      string
	Sa, Sb   *store.Store
	Ea, Eb   int64
	Ta, Tb   aggregate.PartitionID
	Plain    *aggregate.Windower
	Parts    map[int32]*aggregate.Windower
	W1, W2   time.Time // window ends
	Commit   func(s *store.Store, b store.Batch) store.Merged
	Batch    func(epoch int64, tp aggregate.PartitionID, wm time.Time, idle bool) store.Batch
	Partials func() int
}

// SplitOwner is the owner that claims partition part of topic t in NewSplitStoreRig.
func SplitOwner(part int32) string { return fmt.Sprintf("instance-%d", part) }

// NewSplitStoreRig opens Stores of one split pipeline on a fresh database.
func NewSplitStoreRig(t *testing.T, opts ...store.Option) *splitStoreRig {
	ctx := TestCtx(t)
	url := FreshDB(t)
	open := func(part int32) (*store.Store, int64, aggregate.PartitionID) {
		s, err := store.Open(ctx, url, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close(context.Background()) })
		tp := aggregate.PartitionID{Topic: "t", Partition: part}
		c, err := s.Claim(ctx, "p", SplitOwner(part), []aggregate.PartitionID{tp}, store.ClaimOptions{Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return s, c.Epoch, tp
	}
	g := &splitStoreRig{Url: url}
	g.Sa, g.Ea, g.Ta = open(0)
	g.Sb, g.Eb, g.Tb = open(1)
	const w = 5 * time.Minute
	g.W1, g.W2 = T0.Add(w), T0.Add(2*w)

	r := rand.New(rand.NewPCG(4, 2))
	g.Plain = aggregate.NewWindower(w)
	g.Parts = map[int32]*aggregate.Windower{0: aggregate.NewPartitionedWindower(w), 1: aggregate.NewPartitionedWindower(w)}
	for range 3000 {
		p := aggregate.Prediction{TripID: "x", Line: []string{"L1", "L2"}[r.IntN(2)], StopID: []string{"S1", "S2", "S3"}[r.IntN(3)],
			Operator: []string{"A", "B"}[r.IntN(2)], DelayS: float64(r.IntN(900)-300) + []float64{0, 0.1, 0.25}[r.IntN(3)],
			EventTime: T0.Add(time.Duration(r.IntN(600)) * time.Second)}
		part := int32(r.IntN(2))
		g.Plain.Add(p)
		g.Parts[part].AddFrom(part, p)
	}
	g.Batch = func(epoch int64, tp aggregate.PartitionID, wm time.Time, idle bool) store.Batch {
		win := g.Parts[tp.Partition]
		return store.Batch{Pipeline: "p", Owner: SplitOwner(tp.Partition), Epoch: epoch, Watermark: wm, Partials: win.ClosedSet(wm).PartialWindows(),
			Positions: []store.Position{{PartitionID: tp, NextOffset: 10, ConsumedOffset: 10, Idle: idle}},
			Split:     &store.Split{Topic: "t", Topics: []string{"t"}, Window: w, FirstOpen: win.FirstEnd(), IdleLease: time.Minute}}
	}
	g.Commit = func(s *store.Store, b store.Batch) store.Merged {
		t.Helper()
		m, err := s.CommitSplit(ctx, WithSeqs(t, s, b))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	g.Partials = func() int { return Query[int](t, url, `SELECT count(*) FROM delay_partial_windows`) }
	return g
}

// SameAggregates compares p's delay_aggregates with want, every statistic
// bit for bit (after the clamp into [min, max] a commit applies to the mean
// and P90 of every row, split or not).
func SameAggregates(t *testing.T, url string, want []aggregate.Row) {
	t.Helper()
	ctx := TestCtx(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT window_start, window_end, dimension, dimension_id, coalesce(operator, ''),
		event_count, mean_delay_s, p90_delay_s, min_delay_s, max_delay_s FROM delay_aggregates WHERE pipeline = 'p'
		ORDER BY window_start, dimension, dimension_id`)
	if err != nil {
		t.Fatal(err)
	}
	var got []aggregate.Row
	var r aggregate.Row
	if _, err := pgx.ForEachRow(rows, []any{&r.WindowStart, &r.WindowEnd, &r.Dimension, &r.DimensionID, &r.Operator,
		&r.Count, &r.Mean, &r.P90, &r.Min, &r.Max}, func() error {
		got = append(got, r)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d delay_aggregates rows, want %d", len(got), len(want))
	}
	bits := math.Float64bits
	for i, g := range got {
		w := want[i]
		w.Mean, w.P90 = min(max(w.Mean, w.Min), w.Max), min(max(w.P90, w.Min), w.Max)
		if !g.WindowStart.Equal(w.WindowStart) || !g.WindowEnd.Equal(w.WindowEnd) || g.Dimension != w.Dimension ||
			g.DimensionID != w.DimensionID || g.Operator != w.Operator || g.Count != w.Count || bits(g.Mean) != bits(w.Mean) ||
			bits(g.P90) != bits(w.P90) || bits(g.Min) != bits(w.Min) || bits(g.Max) != bits(w.Max) {
			t.Fatalf("row %d: stored %+v, want %+v", i, g, w)
		}
	}
}

// splits are partitions of the two topics (6 + 3) among instances: each
// entry is one instance's --partitions.
var (
	Split2 = []string{
		"arrival_predictions:0,arrival_predictions:1,arrival_predictions:2,vehicle_positions:0",
		"arrival_predictions:3,arrival_predictions:4,arrival_predictions:5,vehicle_positions:1,vehicle_positions:2",
	}
	Split3 = []string{
		"arrival_predictions:0,arrival_predictions:3,vehicle_positions:2",
		"arrival_predictions:1,arrival_predictions:4,vehicle_positions:0",
		"arrival_predictions:2,arrival_predictions:5,vehicle_positions:1",
	}
)

// StartSplit starts one instance per entry of split on db, with extra flags.
func StartSplit(t *testing.T, db, addr string, split []string, extra ...string) []*Proc {
	t.Helper()
	var ps []*Proc
	for _, parts := range split {
		ps = append(ps, StartOvstream(t, nil, RunArgs(db, addr, append([]string{"--partitions", parts}, extra...)...)...))
	}
	return ps
}

// WaitAll waits for every process and requires exit 0.
func WaitAll(t *testing.T, ps []*Proc, what string) {
	t.Helper()
	for i, p := range ps {
		if code := p.Wait(t, 4*time.Minute); code != 0 {
			t.Fatalf("%s: instance %d exited %d:\n%s", what, i, code, Tail(p.Output(), 60))
		}
	}
}

// CompareWithReference compares every result table of db with the
// uninterrupted run and returns the rows compared and the rows that differ.
func CompareWithReference(t *testing.T, db string, ref *Reference, what string) (compared, differing int) {
	t.Helper()
	for _, q := range ResultTables {
		got, want := Dump(t, db, q.Sql), ref.Tables[q.Sql]
		SameRows(t, q.What+" ("+what+" vs one uninterrupted instance)", got, want)
		compared += len(got)
		differing += DiffCount(got, want)
	}
	return compared, differing
}

// DiffCount counts the rows of a and b that have no equal row in the other.
func DiffCount(a, b []string) int {
	n := map[string]int{}
	for _, r := range a {
		n[r]++
	}
	for _, r := range b {
		n[r]--
	}
	d := 0
	for _, c := range n {
		d += max(c, -c)
	}
	return d
}
