//go:build integration

package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/integration/harness"
	"github.com/ovstream/ovstream/store"
)

// Every instance of a pipeline must share its window size
// and topics. Before, pipelines.window_size was never written: a second split
// instance with --window 10m was not refused (the merger then exited 1 with
// "partials of the window ... partition 3 twice or ends differ" and the
// other waited for ever), and another --topics silently overwrote
// pipelines.topics. Now an instance whose flags differ exits 2 naming each
// setting with both values, and writes nothing; `pipeline set` changes them
// on purpose while no instance runs.
func TestPipelineSettingsShared(t *testing.T) {
	t.Parallel()
	addr, db := harness.StartBroker(t), harness.FreshDB(t)
	harness.ProduceFeeds(t, addr, harness.LoadFeeds(t, "AT", "../../testdata/auckland-20160519-peak10min"))
	harness.Drain(t, db, addr, "--pipeline", "shared")
	if got := harness.Dump(t, db, `SELECT window_size::text, topics::text FROM pipelines WHERE name = 'shared'`); len(got) != 1 ||
		got[0] != "[00:05:00 {arrival_predictions,vehicle_positions}]" {
		t.Fatalf("recorded settings %v, want the first instance's 5m and both topics", got)
	}
	before := harness.Snapshot(t, db)

	for _, tc := range []struct {
		flags []string
		want  []string
	}{
		{[]string{"--window", "10m"}, []string{"--window 5m0s (pipeline) vs 10m0s (this instance)"}},
		{[]string{"--topics", "arrival_predictions,"}, []string{
			"--topics arrival_predictions,vehicle_positions (pipeline) vs arrival_predictions (this instance)"}},
		{[]string{"--window", "7m", "--topics", "vehicle_positions,arrival_predictions"}, []string{"--window 5m0s (pipeline) vs 7m0s",
			"--topics arrival_predictions,vehicle_positions (pipeline) vs vehicle_positions,arrival_predictions (this instance)"}},
	} {
		args := append(harness.RunArgs(db, addr, "--pipeline", "shared", "--drain"), tc.flags...)
		p := harness.StartOvstream(t, nil, args...)
		if code := p.Wait(t, 2*time.Minute); code != 2 {
			t.Fatalf("run %v exited %d, want 2:\n%s", tc.flags, code, p.Output())
		}
		for _, w := range tc.want {
			if !strings.Contains(p.Output(), w) {
				t.Errorf("run %v did not say %q:\n%s", tc.flags, w, harness.Tail(p.Output(), 10))
			}
		}
		harness.SameSnapshot(t, "after the refused run "+strings.Join(tc.flags, " "), before, harness.Snapshot(t, db))
	}

	// On purpose: refused while an instance is live, then done.
	live := harness.StartOvstream(t, nil, harness.RunArgs(db, addr, "--pipeline", "shared")...)
	harness.WaitLog(t, live, harness.ClaimedLine, time.Minute)
	set := []string{"pipeline", "set", "--database-url", db, "--pipeline", "shared", "--window", "10m"}
	if out, errOut, code := harness.RunCLI(t, nil, set...); code != 1 || !strings.Contains(errOut, `pipeline "shared" has live instances (`) {
		t.Fatalf("pipeline set with a live instance: exit %d, %q %q", code, out, errOut)
	}
	if err := live.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := live.Wait(t, time.Minute); code != 0 {
		t.Fatalf("the live instance exited %d after SIGTERM:\n%s", code, live.Output())
	}
	if out, errOut, code := harness.RunCLI(t, nil, set...); code != 0 || out != `pipeline "shared": --window 10m0s (was 5m0s); windows already written keep their size`+"\n" {
		t.Fatalf("pipeline set: exit %d, %q %q", code, out, errOut)
	}
	// Now 10m is the pipeline's, and 5m is refused.
	harness.Drain(t, db, addr, "--pipeline", "shared", "--window", "10m")
	p := harness.StartOvstream(t, nil, harness.RunArgs(db, addr, "--pipeline", "shared", "--drain")...)
	if code := p.Wait(t, time.Minute); code != 2 || !strings.Contains(p.Output(), "--window 10m0s (pipeline) vs 5m0s (this instance)") {
		t.Fatalf("run with the old window after pipeline set: exit %d\n%s", code, harness.Tail(p.Output(), 10))
	}
}

// Two first claims of a pipeline whose settings are not
// recorded yet (pipelines.window_size NULL: a pipeline migration 10 found
// without windows) with different --window both succeed: the second's
// UPDATE ... coalesce(window_size, $2) waits for the first's row lock, then
// keeps the first's value and reports nothing. Claim A's transaction is
// held open after the statement checkSettings runs, exactly as a claim in
// flight holds it; then claim B (another --window, other partitions: a split
// pipeline) runs through store.Claim.
func TestConcurrentFirstClaimsWithDifferentWindowsOneRefused(t *testing.T) {
	ctx := harness.TestCtx(t)
	db := harness.FreshDB(t)
	harness.ExecSQL(t, db, `INSERT INTO pipelines (name, topics) VALUES ('race', ARRAY['t'])`)
	s, err := store.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())

	conn := harness.Connect(t, ctx, db)
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Claim A (--window 5m): checkSettings read NULL and recorded its window.
	if _, err := tx.Exec(ctx, `UPDATE pipelines SET window_size = coalesce(window_size, $2), topics = coalesce(topics, $3)
		WHERE name = $1`, "race", 5*time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.Claim(ctx, "race", "b", []aggregate.PartitionID{{Topic: "t", Partition: 1}},
			store.ClaimOptions{Lease: time.Minute, Topics: []string{"t"}, Window: 10 * time.Minute})
		done <- err
	}()
	time.Sleep(300 * time.Millisecond) // B reads NULL, then waits on A's row lock
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	err = <-done
	stored := harness.Dump(t, db, `SELECT window_size::text FROM pipelines WHERE name = 'race'`)
	var se *store.SettingsError
	if !errors.As(err, &se) {
		t.Errorf("claim B with --window 10m while claim A recorded 5m: err = %v (pipeline's window now %v), want a *store.SettingsError",
			err, stored)
	}

	// The same with two real claims started together, on pipelines that
	// have no settings yet: how often do both succeed?
	both := 0
	const rounds = 40
	for i := 0; i < rounds; i++ {
		name := fmt.Sprintf("race%d", i)
		harness.ExecSQL(t, db, fmt.Sprintf(`INSERT INTO pipelines (name, topics) VALUES ('%s', ARRAY['t'])`, name))
		var wg sync.WaitGroup
		errs := make([]error, 2)
		start := make(chan struct{})
		for j, w := range []time.Duration{5 * time.Minute, 10 * time.Minute} {
			st, err := store.Open(ctx, db)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close(context.Background())
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, errs[j] = st.Claim(ctx, name, fmt.Sprint("o", j), []aggregate.PartitionID{{Topic: "t", Partition: int32(j)}},
					store.ClaimOptions{Lease: time.Minute, Topics: []string{"t"}, Window: w})
			}()
		}
		close(start)
		wg.Wait()
		if errs[0] == nil && errs[1] == nil {
			both++
		}
	}
	t.Logf("real concurrent first claims with 5m and 10m: both succeeded in %d of %d rounds", both, rounds)
	if both > 0 {
		t.Errorf("two instances with different --window both claimed a pipeline in %d of %d rounds", both, rounds)
	}
}

// `pipeline set --window` checks that no instance is live
// but not that a split pipeline has partials of the old size waiting for the
// merge (instances stopped with SIGTERM leave them). Started again with the
// new size, the merge of a window start holding partials of both sizes
// fails ("partials of the window ... ends differ"): every merging instance
// stops (exit 1) until someone deletes partials by hand. (Had the restarted
// instance re-aggregated that window start, its new partial would have
// replaced its old one, with the old one's events.)
func TestPipelineSetWindowRefusedWithPendingPartials(t *testing.T) {
	ctx := harness.TestCtx(t)
	g := harness.NewSplitStoreRig(t)
	// A passes the first 5m window; B has no watermark yet: it waits.
	g.Commit(g.Sa, g.Batch(g.Ea, g.Ta, g.W1, false))
	if n := g.Partials(); n == 0 {
		t.Fatal("no partial pending")
	}
	_, serr := g.Sa.SetSettings(ctx, "p", store.Settings{Window: 10 * time.Minute}, time.Microsecond)
	if serr == nil {
		t.Errorf("pipeline set --window 10m succeeded with %d partials of 5m windows pending", g.Partials())
	} else {
		// Refused: the instances keep 5m (a claim with 10m is refused,
		// TestPipelineSettingsShared), so what follows cannot happen.
		t.Logf("pipeline set refused: %v", serr)
		return
	}
	// Both instances run with 10m now. B writes its first 10m window.
	const w10 = 10 * time.Minute
	end := harness.T0.Add(w10)
	win := aggregate.NewPartitionedWindower(w10)
	for i := range 50 {
		win.AddFrom(1, aggregate.Prediction{TripID: "y", Line: "L1", StopID: "S1", Operator: "A", DelayS: float64(i),
			EventTime: harness.T0.Add(time.Duration(i*10) * time.Second)})
	}
	split := func(first time.Time) *store.Split {
		return &store.Split{Topic: "t", Topics: []string{"t"}, Window: w10, FirstOpen: first, IdleLease: time.Minute}
	}
	bb := store.Batch{Pipeline: "p", Owner: harness.SplitOwner(1), Epoch: g.Eb, Watermark: end, Partials: win.ClosedSet(end).PartialWindows(),
		Positions: []store.Position{{PartitionID: g.Tb, NextOffset: 20, ConsumedOffset: 20}}, Split: split(end.Add(w10))}
	if _, err := g.Sb.CommitSplit(ctx, harness.WithSeqs(t, g.Sb, bb)); err != nil {
		t.Fatalf("B's first 10m commit: %v", err)
	}
	// A passes 12:10 too, with nothing new for 12:00: the merge takes 12:00.
	ba := store.Batch{Pipeline: "p", Owner: harness.SplitOwner(0), Epoch: g.Ea, Watermark: end,
		Positions: []store.Position{{PartitionID: g.Ta, NextOffset: 30, ConsumedOffset: 30}}, Split: split(end.Add(w10))}
	_, err := g.Sa.CommitSplit(ctx, harness.WithSeqs(t, g.Sa, ba))
	t.Logf("the merge after pipeline set: %v", err)
	if err != nil {
		t.Errorf("after pipeline set --window with pending partials, the merge fails: %v (retryable %v)", err, store.Retryable(err))
	}
}
