//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/store"
)

// The refused-row search rolls back every probe, so a
// row is judged without the rows of the batch's other parts. A NOT
// DEFERRABLE foreign key from trip_delay_latest to vehicle_latest is
// satisfied in the commit (vehicles are written before trips) by a vehicle
// that is new in the same batch, but not in the search (the vehicles' probe
// was rolled back before the trips are probed): the search names the trip
// row refused although the commit accepts it, and the consumer would
// dead-letter its prediction (reason rejected: counted in no window).
// A search that released an accepted probe instead of rolling it back had
// the vehicle there when the trips were probed.
func TestReviewRefusedSearchNamesRowTheCommitAccepts(t *testing.T) {
	ctx := testCtx(t)
	s, url, epoch := openStore(t)
	execSQL(t, url, `
ALTER TABLE delay_aggregates ADD CONSTRAINT no_s2 CHECK (dimension_id <> 'S2');
ALTER TABLE trip_delay_latest ADD CONSTRAINT trip_vehicle FOREIGN KEY (pipeline, vehicle_id)
	REFERENCES vehicle_latest (pipeline, vehicle_id);`)
	trip := store.Trip{Prediction: aggregate.Prediction{TripID: "T1", Line: "L1", StopID: "S1", Operator: "op1",
		VehicleID: "v1", DelayS: 10, EventTime: t0}, Offset: 1}
	vehicle := store.Vehicle{Position: aggregate.Position{VehicleID: "v1", TripID: "T1", EventTime: t0}, Offset: 2}
	windows := []aggregate.Row{row(aggregate.DimStation, "S1", 1, 1, 1, 1, 1), row(aggregate.DimStation, "S2", 1, 1, 1, 1, 1)}
	b := store.Batch{Pipeline: "p", Owner: owner0, Epoch: epoch, Windows: windows,
		Trips: []store.Trip{trip}, Vehicles: []store.Vehicle{vehicle}, Positions: at0(3)}

	err := s.Commit(ctx, withSeqs(t, s, b))
	var rej *store.RejectedError
	if !errors.As(err, &rej) {
		t.Fatalf("commit = %v, want a *store.RejectedError (station S2)", err)
	}
	var named []string
	for _, w := range rej.Windows {
		named = append(named, "window "+w.DimensionID)
	}
	for _, r := range rej.Trips {
		named = append(named, fmt.Sprintf("trip %s: %s", r.Key, r.Reason))
	}
	for _, r := range rej.Vehicles {
		named = append(named, "vehicle "+r.Key)
	}

	// What the commit accepts: the batch without the S2 row, trip included.
	b.Windows = windows[:1]
	cerr := s.Commit(ctx, withSeqs(t, s, b))
	if cerr != nil {
		t.Fatalf("commit without S2 (trip T1 and its new vehicle v1 kept): %v", cerr)
	}
	if n := query[int64](t, url, `SELECT count(*) FROM trip_delay_latest WHERE trip_id = 'T1'`); n != 1 {
		t.Fatalf("trip T1 rows after the commit: %d, want 1", n)
	}
	if len(named) != 1 || named[0] != "window S2" {
		t.Errorf("the search named %q, want only the S2 window row: the trip row it names is one the commit accepts "+
			"(its record would be dead-lettered and counted in no window)", named)
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
func TestReviewSettingsRaceFirstClaims(t *testing.T) {
	ctx := testCtx(t)
	db := freshDB(t)
	execSQL(t, db, `INSERT INTO pipelines (name, topics) VALUES ('race', ARRAY['t'])`)
	s, err := store.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())

	conn := connect(t, ctx, db)
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
	stored := dump(t, db, `SELECT window_size::text FROM pipelines WHERE name = 'race'`)
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
		execSQL(t, db, fmt.Sprintf(`INSERT INTO pipelines (name, topics) VALUES ('%s', ARRAY['t'])`, name))
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

// A database that lost the FIRST claim of a partition (a
// restore from a backup taken before the pipeline ran, or a failover to an
// asynchronous replica that had not received the claim's INSERT; equally a
// partition added while running, whose row ClaimAdded inserted) holds no
// stream_positions row for it. The fencing statement matches nothing and
// behind() answers ErrFenced for a missing row (!ok), so the instance stops
// with exit 3 "fenced: another instance claimed a partition" although no
// instance claimed anything: the claim that was lost is not claimed again
// (contrast TestRestoreBehindReplays, where the rows exist at a lower commit
// sequence).
func TestReviewRestoreBeforeFirstClaim(t *testing.T) {
	t.Parallel()
	addr, db := startBroker(t), freshDB(t)
	total, half, second := produceFirstHalf(t, addr)
	backupTables(t, db) // nothing of the pipeline yet

	p := startOvstream(t, nil, runArgs(db, addr, "--pipeline", "restore0", "--metrics-addr", "127.0.0.1:0",
		"--flush-interval", "200ms", "--log-level", "info")...)
	ops := opsAddr(t, p)
	consumed := `ovstream_consumed_messages_total{topic="arrival_predictions"}`
	waitFor(t, time.Minute, "the first half consumed and committed", func() bool {
		m := scrape(t, ops)
		return m[consumed] >= float64(half) && m["ovstream_uncommitted_messages"] == 0 && m["ovstream_windows_finalized_total"] > 0
	})
	restoreTables(t, db)
	produceFeeds(t, addr, second)
	select {
	case <-p.done:
		t.Fatalf("after a restore to before its first claim the instance exited %d (want: claim again and replay):\n%s",
			p.wait(t, time.Second), tail(p.output(), 12))
	case <-time.After(20 * time.Second):
	}
	stopDrainCompare(t, p, db, addr, "restore0", total, "delay_aggregates after a restore to before the first claim vs SQL oracle")
}

// restartedOwners compares pg_stat_activity.backend_start
// with the one the holder's heartbeat recorded. For a session of another
// role, a claimer without pg_read_all_stats reads backend_start as NULL, so
// NOT EXISTS holds and a LIVE holder with the same --instance-id counts as
// a dead predecessor: its partitions are taken at once.
func TestReviewInstanceIDOtherRoleTakesLiveHolder(t *testing.T) {
	ctx := testCtx(t)
	db := freshDB(t)
	role := fmt.Sprintf("ovs_review_%d", time.Now().UnixNano()%1_000_000_000)
	execSQL(t, db, fmt.Sprintf(`CREATE ROLE %[1]s LOGIN;
GRANT USAGE, CREATE ON SCHEMA public TO %[1]s;
GRANT ALL ON ALL TABLES IN SCHEMA public TO %[1]s;
GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO %[1]s;`, role))
	t.Cleanup(func() {
		for _, q := range []struct{ db, sql string }{{db, "DROP OWNED BY " + role}, {testDatabaseURL(), "DROP ROLE IF EXISTS " + role}} {
			if c, err := pgx.Connect(context.Background(), q.db); err == nil {
				_, _ = c.Exec(context.Background(), q.sql)
				c.Close(context.Background())
			}
		}
	})
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	dbB := u.String()

	a, err := store.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	parts := []aggregate.PartitionID{{Topic: "t", Partition: 0}}
	opts := store.ClaimOptions{Lease: time.Minute, InstanceID: "pod-0"}
	if _, err := a.Claim(ctx, "sid", "pod-0@a:1-x", parts, opts); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Heartbeat(ctx, "sid", "pod-0@a:1-x", store.RoleActive, parts, true, time.Time{}); err != nil {
		t.Fatal(err)
	}
	b, err := store.Open(ctx, dbB)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(context.Background())
	c, err := b.Claim(ctx, "sid", "pod-0@b:2-y", parts, opts)
	var held *store.HeldError
	if !errors.As(err, &held) {
		t.Errorf("a second process with the same --instance-id (another role) claimed a live holder's partitions: err %v, restarted_from %v",
			err, strings.Join(c.Restarted, ","))
	}
	// a is alive: its heartbeat session is there.
	if _, err := a.Heartbeat(ctx, "sid", "pod-0@a:1-x", store.RoleActive, parts, false, time.Time{}); err != nil {
		t.Fatal(err)
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
func TestReviewPipelineSetWithPendingPartials(t *testing.T) {
	ctx := testCtx(t)
	g := newSplitStoreRig(t)
	// A passes the first 5m window; B has no watermark yet: it waits.
	g.commit(g.sa, g.batch(g.ea, g.ta, g.w1, false))
	if n := g.partials(); n == 0 {
		t.Fatal("no partial pending")
	}
	_, serr := g.sa.SetSettings(ctx, "p", store.Settings{Window: 10 * time.Minute}, time.Microsecond)
	if serr == nil {
		t.Errorf("pipeline set --window 10m succeeded with %d partials of 5m windows pending", g.partials())
	} else {
		// Refused: the instances keep 5m (a claim with 10m is refused,
		// TestPipelineSettingsShared), so what follows cannot happen.
		t.Logf("pipeline set refused: %v", serr)
		return
	}
	// Both instances run with 10m now. B writes its first 10m window.
	const w10 = 10 * time.Minute
	end := t0.Add(w10)
	win := aggregate.NewPartitionedWindower(w10)
	for i := range 50 {
		win.AddFrom(1, aggregate.Prediction{TripID: "y", Line: "L1", StopID: "S1", Operator: "A", DelayS: float64(i),
			EventTime: t0.Add(time.Duration(i*10) * time.Second)})
	}
	split := func(first time.Time) *store.Split {
		return &store.Split{Topic: "t", Topics: []string{"t"}, Window: w10, FirstOpen: first, IdleLease: time.Minute}
	}
	bb := store.Batch{Pipeline: "p", Owner: splitOwner(1), Epoch: g.eb, Watermark: end, Partials: win.ClosedSet(end).PartialWindows(),
		Positions: []store.Position{{PartitionID: g.tb, NextOffset: 20, ConsumedOffset: 20}}, Split: split(end.Add(w10))}
	if _, err := g.sb.CommitSplit(ctx, withSeqs(t, g.sb, bb)); err != nil {
		t.Fatalf("B's first 10m commit: %v", err)
	}
	// A passes 12:10 too, with nothing new for 12:00: the merge takes 12:00.
	ba := store.Batch{Pipeline: "p", Owner: splitOwner(0), Epoch: g.ea, Watermark: end,
		Positions: []store.Position{{PartitionID: g.ta, NextOffset: 30, ConsumedOffset: 30}}, Split: split(end.Add(w10))}
	_, err := g.sa.CommitSplit(ctx, withSeqs(t, g.sa, ba))
	t.Logf("the merge after pipeline set: %v", err)
	if err != nil {
		t.Errorf("after pipeline set --window with pending partials, the merge fails: %v (retryable %v)", err, store.Retryable(err))
	}
}

// The refused-row search the other way: a constraint two rows of the batch break
// together (here a unique index: one trip per vehicle) refuses neither row
// alone, so the search, which rolls back every probe, names nothing: the
// commit's refusal comes back as it is, terminal (run exits 1). A search that kept
// accepted probes kept the first half, named the second row (rejected,
// dead-lettered) and the pipeline went on.
func TestReviewRefusedSearchCrossRowConstraint(t *testing.T) {
	ctx := testCtx(t)
	s, url, epoch := openStore(t)
	execSQL(t, url, `CREATE UNIQUE INDEX one_trip_per_vehicle ON trip_delay_latest (pipeline, vehicle_id);`)
	trip := func(id string, off int64) store.Trip {
		return store.Trip{Prediction: aggregate.Prediction{TripID: id, Line: "L1", StopID: "S1", Operator: "op1",
			VehicleID: "v1", DelayS: 10, EventTime: t0}, Offset: off}
	}
	b := store.Batch{Pipeline: "p", Owner: owner0, Epoch: epoch, Trips: []store.Trip{trip("T1", 1), trip("T2", 2)}, Positions: at0(3)}
	err := s.Commit(ctx, withSeqs(t, s, b))
	var rej *store.RejectedError
	if !errors.As(err, &rej) {
		t.Errorf("a batch refused for two rows together: err = %v (retryable %v), want a *store.RejectedError naming one of them",
			err, store.Retryable(err))
	}
}
