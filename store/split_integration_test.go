//go:build integration

package store_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/integration/harness"
	"github.com/ovstream/ovstream/store"
)

// The merge step of store.CommitSplit, commit by commit, with two "instances"
// (two Stores, each owning one partition of topic t): a window merges only
// once both partitions' stored watermarks passed it, into rows equal bit for
// bit to one Windower fed every event (fractional delays included); a partial
// written twice replaces itself; a batch holding a window the pipeline merged
// already writes nothing (ErrMergedPast); an idle partition stops holding the
// merge.
func TestStoreSplitMerge(t *testing.T) {
	ctx := harness.TestCtx(t)
	g := harness.NewSplitStoreRig(t)
	url, sa, sb, ea, eb, ta, tb, plain, parts, w1, w2 := g.Url, g.Sa, g.Sb, g.Ea, g.Eb, g.Ta, g.Tb, g.Plain, g.Parts, g.W1, g.W2
	commit, batch, partials := g.Commit, g.Batch, g.Partials

	// A passes the first window; B has no watermark yet: nothing merges.
	m := commit(sa, batch(ea, ta, w1, false))
	n := partials()
	if m.Windows != 0 || !m.Until.IsZero() || m.Pending != 1 || n == 0 {
		t.Fatalf("A alone: %+v, %d partials", m, n)
	}
	// The same batch again (a replay): replaced, not added.
	if m = commit(sa, batch(ea, ta, w1, false)); partials() != n || m.Windows != 0 {
		t.Fatalf("A again: %+v, %d partials, want %d", m, partials(), n)
	}
	parts[0].Drop(w1)
	// B passes it too: the first window merges.
	m = commit(sb, batch(eb, tb, w1, false))
	parts[1].Drop(w1)
	if m.Windows != 1 || !m.Until.Equal(w1) || m.Pending != 0 || partials() != 0 {
		t.Fatalf("A and B past the first window: %+v, %d partials", m, partials())
	}
	want := plain.Closed(w1)
	if m.Rows != len(want) {
		t.Fatalf("merged %d rows, want %d", m.Rows, len(want))
	}
	harness.SameAggregates(t, url, want)

	// A batch that still holds the merged window writes nothing.
	stale := batch(ea, ta, w2, false)
	stale.Split.FirstOpen = w1
	_, err := sa.CommitSplit(ctx, harness.WithSeqs(t, sa, stale))
	if !errors.Is(err, store.ErrMergedPast) {
		t.Fatalf("a batch holding a merged window: %v, want ErrMergedPast", err)
	}
	if got := harness.Query[int64](t, url, `SELECT next_offset FROM stream_positions WHERE partition = 0`); got != 10 || partials() != 0 {
		t.Fatalf("the refused batch wrote: next_offset %d, %d partials", got, partials())
	}

	// A writes the second window and marks its partition idle (nothing of
	// it open): B alone decides the merge of the second window.
	if m = commit(sa, batch(ea, ta, w2, true)); m.Windows != 0 || m.Pending != 1 {
		t.Fatalf("A idle past the second window: %+v", m)
	}
	if m = commit(sb, batch(eb, tb, w2, false)); m.Windows != 1 || !m.Until.Equal(w2) {
		t.Fatalf("B past the second window: %+v", m)
	}
	harness.SameAggregates(t, url, append(want, plain.Closed(w2)[len(want):]...))
}

// A commit whose partitions all held the merge at their stored watermarks
// (Split.Holding) does not wait while another commit decides a merge (the
// pipeline's row locked): it writes its partials and positions and leaves
// the merge to the next commit, which merges exactly; it still refuses a
// batch holding a window merged before (ErrMergedPast). Without Holding a
// commit waits for the lock. Before Split.Holding existed every commit
// waited: this test hung at A's first Holding commit.
func TestStoreSplitMergeLeftWhileAnotherDecides(t *testing.T) {
	ctx := harness.TestCtx(t)
	g := harness.NewSplitStoreRig(t)
	// Both past the first window (their first commits wait for the lock
	// as before): it merges.
	g.Commit(g.Sa, g.Batch(g.Ea, g.Ta, g.W1, false))
	if m := g.Commit(g.Sb, g.Batch(g.Eb, g.Tb, g.W1, false)); m.Windows != 1 || m.Skipped {
		t.Fatalf("first window: %+v", m)
	}
	g.Parts[0].Drop(g.W1)
	g.Parts[1].Drop(g.W1)
	want := g.Plain.Closed(g.W1)

	locker, err := pgx.Connect(ctx, g.Url)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close(ctx)
	tx, err := locker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM pipelines WHERE name = 'p' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	holding := func(epoch int64, tp aggregate.PartitionID, wm time.Time) store.Batch {
		b := g.Batch(epoch, tp, wm, false)
		b.Split.Holding = true
		return b
	}
	// A stale batch is refused though the merge is left.
	stale := holding(g.Ea, g.Ta, g.W2)
	stale.Split.FirstOpen = g.W1
	if _, err := g.Sa.CommitSplit(ctx, harness.WithSeqs(t, g.Sa, stale)); !errors.Is(err, store.ErrMergedPast) {
		t.Fatalf("a Holding batch holding a merged window: %v, want ErrMergedPast", err)
	}
	// A and B past the second window while the lock is held: neither waits.
	if m := g.Commit(g.Sa, holding(g.Ea, g.Ta, g.W2)); !m.Skipped || m.Windows != 0 || m.Pending != 1 || !m.Until.Equal(g.W1) {
		t.Fatalf("A past the second window, lock held: %+v", m)
	}
	if m := g.Commit(g.Sb, holding(g.Eb, g.Tb, g.W2)); !m.Skipped || m.Windows != 0 || m.Pending != 1 {
		t.Fatalf("B past the second window, lock held: %+v", m)
	}
	g.Parts[0].Drop(g.W2)
	g.Parts[1].Drop(g.W2)
	// Without Holding, B's next commit waits for the lock, then merges.
	done := make(chan store.Merged, 1)
	go func() {
		m, err := g.Sb.CommitSplit(ctx, harness.WithSeqs(t, g.Sb, g.Batch(g.Eb, g.Tb, g.W2, false)))
		if err != nil {
			t.Error(err)
		}
		done <- m
	}()
	for harness.Query[int64](t, g.Url, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`) == 0 {
		select {
		case m := <-done:
			t.Fatalf("a commit without Holding did not wait for the lock: %+v", m)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if m := <-done; m.Skipped || m.Windows != 1 || !m.Until.Equal(g.W2) || m.Pending != 0 || g.Partials() != 0 {
		t.Fatalf("B after the lock was released: %+v, %d partials", m, g.Partials())
	}
	harness.SameAggregates(t, g.Url, append(want, g.Plain.Closed(g.W2)[len(want):]...))
}

// The instance that holds the merge frontier (its watermark is the lowest)
// leaves the merge, when it may (Holding), to a live instance past it, whose
// next commit merges exactly; with Holding unset it merges itself.
func TestStoreSplitMergeLeftByTheSlowest(t *testing.T) {
	g := harness.NewSplitStoreRig(t)
	w3 := g.W2.Add(5 * time.Minute)
	holding := func(b store.Batch) store.Batch {
		b.Split.Holding = true
		return b
	}
	if _, err := g.Sb.Heartbeat(harness.TestCtx(t), "p", "instance-1", store.RoleActive, []aggregate.PartitionID{g.Tb}, true, time.Time{}); err != nil {
		t.Fatal(err) // B is alive; A never sends one
	}
	g.Commit(g.Sa, g.Batch(g.Ea, g.Ta, g.W1, false))
	if m := g.Commit(g.Sb, g.Batch(g.Eb, g.Tb, w3, false)); m.Windows != 1 || !m.Frontier.Equal(g.W1) {
		t.Fatalf("B past both windows, A past the first: %+v", m)
	}
	g.Parts[0].Drop(g.W1)
	g.Parts[1].Drop(w3)
	// A, at the frontier (w2) with B past it: leaves the merge.
	if m := g.Commit(g.Sa, holding(g.Batch(g.Ea, g.Ta, g.W2, false))); !m.Skipped || m.Windows != 0 || m.Pending != 1 ||
		!m.Frontier.Equal(g.W2) {
		t.Fatalf("A at the frontier, B past it: %+v", m)
	}
	g.Parts[0].Drop(g.W2)
	// B's next commit (nothing new) merges the second window.
	if m := g.Commit(g.Sb, holding(g.Batch(g.Eb, g.Tb, w3, false))); m.Skipped || m.Windows != 1 || !m.Until.Equal(g.W2) ||
		m.Pending != 0 {
		t.Fatalf("B's next commit: %+v", m)
	}
	harness.SameAggregates(t, g.Url, g.Plain.Closed(g.W2))
}

// A merge of several windows in one commit, taken and written a chunk of
// whole windows at a time (store.WithMergeChunkRows), writes the rows one
// Windower fed every event gives, for every window.
func TestStoreSplitMergeInChunks(t *testing.T) {
	g := harness.NewSplitStoreRig(t, store.WithMergeChunkRows(1)) // each window a chunk of its own
	if m := g.Commit(g.Sa, g.Batch(g.Ea, g.Ta, g.W2, false)); m.Windows != 0 || m.Pending != 2 {
		t.Fatalf("A past both windows: %+v", m)
	}
	m := g.Commit(g.Sb, g.Batch(g.Eb, g.Tb, g.W2, false))
	want := g.Plain.Closed(g.W2)
	if m.Windows != 2 || m.Rows != len(want) || !m.Until.Equal(g.W2) || m.Pending != 0 || g.Partials() != 0 {
		t.Fatalf("B past both windows: %+v, %d partials; want 2 windows, %d rows", m, g.Partials(), len(want))
	}
	harness.SameAggregates(t, g.Url, want)
}

// A split drain's last commit ends the drain (merges every window, clears
// the drained flags) when its instance has no pipeline_instances row, or a
// stale one: the committing instance is alive, whatever its lease heartbeat
// says. That is the state a failover to an asynchronous replica leaves when
// it lost the instance's registration: the drain claims again and marks its
// partitions drained before its next heartbeat. Before, its own drained
// partitions counted as those of a dead drain: the commit merged nothing,
// and both drains waited for ever (all drained, none merging;
// TestFailoverSplitDrainEndLost hung so in 1 of 3 runs).
func TestStoreSplitDrainEndWithoutHeartbeat(t *testing.T) {
	g := harness.NewSplitStoreRig(t)
	drained := func(b store.Batch) store.Batch {
		b.Positions[0].Drained = true
		return b
	}
	// A is alive (its heartbeat fresh) and drained: it waits for B.
	if _, err := g.Sa.Heartbeat(harness.TestCtx(t), "p", harness.SplitOwner(0), store.RoleActive, []aggregate.PartitionID{g.Ta}, true, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if m := g.Commit(g.Sa, drained(g.Batch(g.Ea, g.Ta, g.W2, false))); m.Drained || m.Windows != 0 {
		t.Fatalf("A drained, B not yet: %+v", m)
	}
	// B, without a heartbeat, drains: every partition drained.
	m := g.Commit(g.Sb, drained(g.Batch(g.Eb, g.Tb, g.W2, false)))
	want := g.Plain.Closed(g.W2)
	if !m.Drained || m.Windows != 2 || m.Rows != len(want) || m.Pending != 0 || g.Partials() != 0 {
		t.Fatalf("B's drain-ending commit: %+v, %d partials; want the drain ended, 2 windows, %d rows merged", m, g.Partials(), len(want))
	}
	if n := harness.Query[int](t, g.Url, `SELECT count(*) FROM stream_positions WHERE drained`); n != 0 {
		t.Fatalf("%d partitions still marked drained after the drain ended", n)
	}
	harness.SameAggregates(t, g.Url, want)
}

// Three "instances" (Stores, one partition each) commit 30 windows side by
// side as fast as they can, every commit after the first Holding (so many
// leave the merge while another decides one), merges in chunks of one
// window: no commit is refused (ErrMergedPast), and once each commits again
// without Holding, every window equals one Windower fed every event.
func TestStoreSplitHoldingCommitsRace(t *testing.T) {
	ctx := harness.TestCtx(t)
	url := harness.FreshDB(t)
	const w, windows, n = 5 * time.Minute, 30, 3
	plain := aggregate.NewWindower(w)
	type inst struct {
		st    *store.Store
		owner string
		epoch int64
		tp    aggregate.PartitionID
		win   *aggregate.Windower
	}
	var is []*inst
	for p := range int32(n) {
		s, err := store.Open(ctx, url, store.WithMergeChunkRows(1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close(context.Background()) })
		tp := aggregate.PartitionID{Topic: "t", Partition: p}
		owner := fmt.Sprintf("i%d", p)
		c, err := s.Claim(ctx, "p", owner, []aggregate.PartitionID{tp}, store.ClaimOptions{Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		is = append(is, &inst{s, owner, c.Epoch, tp, aggregate.NewPartitionedWindower(w)})
	}
	all := make([]aggregate.PartitionID, n)
	for i := range is {
		all[i] = is[i].tp
	}
	if err := is[0].st.RegisterPartitions(ctx, "p", all); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 6000 {
		p := aggregate.Prediction{TripID: "x", Line: fmt.Sprintf("L%d", r.IntN(4)), StopID: fmt.Sprintf("S%d", r.IntN(5)),
			Operator: "A", DelayS: float64(r.IntN(600) - 100), EventTime: harness.T0.Add(time.Duration(r.IntN(windows*300)) * time.Second)}
		part := int32(r.IntN(n))
		plain.Add(p)
		is[part].win.AddFrom(part, p)
	}
	commit := func(in *inst, wm time.Time, holding bool) (store.Merged, error) {
		b := store.Batch{Pipeline: "p", Owner: in.owner, Epoch: in.epoch, Watermark: wm, Partials: in.win.ClosedSet(wm).PartialWindows(),
			Positions: []store.Position{{PartitionID: in.tp, NextOffset: 1, ConsumedOffset: 1}},
			Split: &store.Split{Topic: "t", Topics: []string{"t"}, Window: w, FirstOpen: in.win.FirstEnd(),
				IdleLease: time.Minute, Holding: holding}}
		m, err := in.st.CommitSplit(ctx, harness.WithSeqs(t, in.st, b))
		if err == nil {
			in.win.Drop(wm)
		}
		return m, err
	}
	errs := make(chan error, n)
	skipped := make(chan int, n)
	for _, in := range is {
		go func() {
			s := 0
			for k := 1; k <= windows; k++ {
				m, err := commit(in, harness.T0.Add(time.Duration(k)*w), k > 1)
				if err != nil {
					errs <- err
					skipped <- s
					return
				}
				if m.Skipped {
					s++
				}
			}
			errs <- nil
			skipped <- s
		}()
	}
	total := 0
	for range is {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		total += <-skipped
	}
	for _, in := range is {
		if _, err := commit(in, harness.T0.Add(windows*w), false); err != nil {
			t.Fatal(err)
		}
	}
	if got := harness.Query[time.Time](t, url, `SELECT merged_until FROM pipelines WHERE name = 'p'`); !got.Equal(harness.T0.Add(windows * w)) {
		t.Fatalf("merged until %v", got)
	}
	harness.SameAggregates(t, url, plain.Closed(harness.T0.Add(windows*w)))
	t.Logf("%d commits left the merge to the next one", total)
}

// A partial window edited by hand (truncated bytes, a row_count far beyond
// its bytes, a NUL in an id) stops the merge with an error that
// names it and is not retried; the process never crashes (before the fix
// in aggregate, the row_count case died with "fatal error: runtime: out of
// memory", and the NUL case failed in the COPY of the merged rows, 22021,
// naming neither window nor partition).
func TestStoreSplitCorruptPartialWindow(t *testing.T) {
	for _, tc := range []struct{ name, edit, want string }{
		{"truncated", `UPDATE delay_partial_windows SET data = substring(data FROM 1 FOR 10)`, "corrupt partial window"},
		{"row_count", `UPDATE delay_partial_windows SET row_count = 2147483647`, "corrupt partial window"},
		// format 2: 0x82, the dimension, the id's length, then the id
		{"nul", `UPDATE delay_partial_windows SET data = overlay(data PLACING '\x00'::bytea FROM 4 FOR 1)`, "corrupt partial window"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := harness.TestCtx(t)
			g := harness.NewSplitStoreRig(t)
			g.Commit(g.Sa, g.Batch(g.Ea, g.Ta, g.W1, false))
			harness.ExecSQL(t, g.Url, tc.edit)
			_, err := g.Sb.CommitSplit(ctx, harness.WithSeqs(t, g.Sb, g.Batch(g.Eb, g.Tb, g.W1, false)))
			if err == nil || store.Retryable(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("merge of an edited partial window: %v (retryable %v), want an error naming %q", err, store.Retryable(err), tc.want)
			}
			t.Log(err)
		})
	}
}

// Provisional rows of a split pipeline, commit by commit: each instance
// writes its share of the two open windows; the provisional rows are then
// the merge of both shares, equal row for row to the final rows the merge
// writes once both instances passed the first window (which equal one
// Windower fed every event). The commit that merges the window deletes its
// provisional rows and shares; those of the window still open stay.
func TestStoreSplitProvisionalRowsMergeEveryShare(t *testing.T) {
	g := harness.NewSplitStoreRig(t)
	url, sa, sb, ea, eb, ta, tb, plain, parts, w1 := g.Url, g.Sa, g.Sb, g.Ea, g.Eb, g.Ta, g.Tb, g.Plain, g.Parts, g.W1
	provisional := func(s *store.Store, epoch int64, tp aggregate.PartitionID, wm time.Time, all bool) store.Merged {
		b := g.Batch(epoch, tp, wm, false)
		b.Provisional = &store.Provisional{Partials: parts[tp.Partition].ChangedPartials(wm), All: all}
		return g.Commit(s, b)
	}
	cols := `window_start, window_end, dimension, dimension_id, operator, event_count, mean_delay_s, p90_delay_s,
		min_delay_s, max_delay_s, delay_values, delay_counts`
	count := func(q string) int { return harness.Query[int](t, url, q) }

	provisional(sa, ea, ta, harness.T0, true)
	if n := count(`SELECT count(DISTINCT partition) FROM delay_partial_provisional`); n != 1 {
		t.Fatalf("after A's provisional write: shares of %d partitions, want 1", n)
	}
	provisional(sb, eb, tb, harness.T0, true)
	if n := count(`SELECT count(*) FROM (SELECT DISTINCT window_start, partition FROM delay_partial_provisional) AS s`); n != 4 {
		t.Fatalf("after both provisional writes: %d shares, want 2 windows x 2 partitions", n)
	}
	harness.ExecSQL(t, url, `CREATE TABLE snap_w1 AS SELECT `+cols+` FROM delay_aggregates_provisional WHERE window_end = '`+
		w1.Format(time.RFC3339)+`'`)

	// Both pass the first window; B's commit carries provisional rows and
	// merges (it takes the pipeline's lock).
	g.Commit(sa, g.Batch(ea, ta, w1, false))
	parts[0].Drop(w1)
	m := provisional(sb, eb, tb, w1, false)
	parts[1].Drop(w1)
	if m.Windows != 1 || !m.Until.Equal(w1) {
		t.Fatalf("both past the first window: %+v, want it merged", m)
	}
	harness.SameAggregates(t, url, plain.Closed(w1))
	harness.SameRows(t, "provisional rows of the first window (both shares) vs its merged rows",
		harness.Dump(t, url, `SELECT `+cols+` FROM snap_w1`), harness.Dump(t, url, `SELECT `+cols+` FROM delay_aggregates`))
	left := count(`SELECT count(*) FROM delay_aggregates_provisional WHERE window_end <= '` + w1.Format(time.RFC3339) + `'`)
	shares := count(`SELECT count(*) FROM delay_partial_provisional WHERE window_end <= '` + w1.Format(time.RFC3339) + `'`)
	open := count(`SELECT count(DISTINCT partition) FROM delay_partial_provisional WHERE window_end > '` + w1.Format(time.RFC3339) + `'`)
	if left != 0 || shares != 0 || open != 2 {
		t.Fatalf("after the merge: %d provisional rows and %d shares of the merged window left; shares of %d partitions of the open one, want 2",
			left, shares, open)
	}
}
