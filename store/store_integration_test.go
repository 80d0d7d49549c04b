//go:build integration

package store_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/integration/harness"
	"github.com/ovstream/ovstream/migrations"
	"github.com/ovstream/ovstream/store"
)

func TestMigrateUpTwice(t *testing.T) {
	ctx := harness.TestCtx(t)
	url := harness.FreshDB(t)
	if err := migrations.Up(ctx, url); err != nil {
		t.Fatalf("second up: %v", err)
	}
	v, dirty, err := migrations.Version(ctx, url)
	if err != nil || v != migrations.Latest() || dirty {
		t.Fatalf("Version = %d, %t, %v; want %d, false", v, dirty, err, migrations.Latest())
	}
	if err := migrations.Check(ctx, url); err != nil {
		t.Fatalf("Check after up: %v", err)
	}
	if migrations.Latest() < 1 {
		t.Fatalf("Latest = %d", migrations.Latest())
	}
}

func TestMigrateCheckBehindOnEmptyDatabase(t *testing.T) {
	ctx := harness.TestCtx(t)
	url := harness.EmptyDB(t)
	err := migrations.Check(ctx, url)
	var se *migrations.SchemaError
	if !errors.As(err, &se) || se.Version != 0 || se.Dirty {
		t.Fatalf("Check on empty database = %v, want behind at version 0", err)
	}
	for _, want := range []string{"version 0", "ovstream migrate up"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q does not say %q", err, want)
		}
	}
	// Check only reads: it created nothing.
	if exists := harness.Query[bool](t, url, "SELECT to_regclass('schema_migrations') IS NOT NULL"); exists {
		t.Error("Check created schema_migrations")
	}
}

func TestMigrateCheckDirty(t *testing.T) {
	ctx := harness.TestCtx(t)
	url := harness.FreshDB(t)
	harness.Query[int64](t, url, "WITH u AS (UPDATE schema_migrations SET dirty = true RETURNING 1) SELECT count(*) FROM u")
	err := migrations.Check(ctx, url)
	var se *migrations.SchemaError
	latest := migrations.Latest()
	if !errors.As(err, &se) || !se.Dirty || se.Version != latest {
		t.Fatalf("Check on dirty schema = %v, want dirty at version %d", err, latest)
	}
	for _, want := range []string{fmt.Sprintf("version %d is dirty", latest), "ovstream migrate force", "ovstream migrate up"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q does not say %q", err, want)
		}
	}
	if err := migrations.Up(ctx, url); err == nil {
		t.Error("Up on a dirty schema succeeded")
	}
	// The repair the message describes, for a migration whose tables are all there.
	if err := migrations.Force(ctx, url, latest); err != nil {
		t.Fatal(err)
	}
	if err := migrations.Check(ctx, url); err != nil {
		t.Fatalf("Check after force: %v", err)
	}
}

func TestMigrateDownThenUp(t *testing.T) {
	ctx := harness.TestCtx(t)
	url := harness.FreshDB(t)
	if err := migrations.Down(ctx, url); err != nil {
		t.Fatal(err)
	}
	var se *migrations.SchemaError
	if err := migrations.Check(ctx, url); !errors.As(err, &se) || se.Version != 0 {
		t.Fatalf("Check after down = %v", err)
	}
	if n := harness.Query[int64](t, url, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'schema_migrations'"); n != 0 {
		t.Fatalf("%d tables left after down", n)
	}
	if err := migrations.Up(ctx, url); err != nil {
		t.Fatal(err)
	}
	if err := migrations.Check(ctx, url); err != nil {
		t.Fatal(err)
	}
}

func TestMigrateErrorsHidePassword(t *testing.T) {
	ctx := harness.TestCtx(t)
	for _, f := range []func(string) error{
		func(u string) error { return migrations.Up(ctx, u) },
		func(u string) error { return migrations.Check(ctx, u) },
	} {
		err := f("postgres://postgres:Sup3rS3cret@127.0.0.1:1/x?sslmode=disable&connect_timeout=2")
		if err == nil || strings.Contains(err.Error(), "Sup3rS3cret") {
			t.Errorf("error %v: want an error without the password", err)
		}
	}
}

func TestStoreCommitReplacesWindows(t *testing.T) {
	ctx := harness.TestCtx(t)
	s, url, epoch := harness.OpenStore(t)
	first := store.Batch{Pipeline: "p", Owner: harness.Owner0, Epoch: epoch, Windows: []aggregate.Row{
		harness.Row(aggregate.DimLine, "L1", 5, 10, 20, 0, 30),
		harness.Row(aggregate.DimNetwork, aggregate.NetworkID, 5, 10, 20, 0, 30),
	},
		Positions: harness.At0(0),
	}
	first.Windows[1].Operator = "" // several operators -> NULL
	if err := s.Commit(ctx, harness.WithSeqs(t, s, first)); err != nil {
		t.Fatal(err)
	}
	second := store.Batch{Pipeline: "p", Owner: harness.Owner0, Epoch: epoch, Windows: []aggregate.Row{
		harness.Row(aggregate.DimLine, "L1", 3, 7, 8, 1, 9),
	},
		Positions: harness.At0(0),
	}
	if err := s.Commit(ctx, harness.WithSeqs(t, s, second)); err != nil {
		t.Fatal(err)
	}
	if n := harness.Query[int64](t, url, "SELECT event_count FROM delay_aggregates WHERE dimension = 'line' AND dimension_id = 'L1'"); n != 3 {
		t.Fatalf("event_count = %d after 5 then 3, want 3 (replace, never add)", n)
	}
	if m := harness.Query[float64](t, url, "SELECT mean_delay_s + p90_delay_s + min_delay_s + max_delay_s FROM delay_aggregates WHERE dimension_id = 'L1'"); m != 7+8+1+9 {
		t.Fatalf("statistics not replaced: sum %v", m)
	}
	if op := harness.Query[*string](t, url, "SELECT operator FROM delay_aggregates WHERE dimension = 'network'"); op != nil {
		t.Fatalf("operator = %q, want NULL", *op)
	}
	if op := harness.Query[string](t, url, "SELECT operator FROM delay_aggregates WHERE dimension = 'line'"); op != "op1" {
		t.Fatalf("operator = %q", op)
	}
	const dist = "SELECT delay_values::text || ' ' || delay_counts::text FROM delay_aggregates WHERE dimension_id = 'L1'"
	if d := harness.Query[string](t, url, dist); d != "{1,9} {2,1}" {
		t.Fatalf("distribution %s after the upsert path, want {1,9} {2,1} (replaced)", d)
	}
	// Replaying the first batch restores its values exactly.
	if err := s.Commit(ctx, harness.WithSeqs(t, s, first)); err != nil {
		t.Fatal(err)
	}
	if n := harness.Query[int64](t, url, "SELECT sum(event_count) FROM delay_aggregates"); n != 10 {
		t.Fatalf("sum(event_count) = %d after replay, want 10", n)
	}
	if d := harness.Query[string](t, url, dist); d != "{0,30} {4,1}" {
		t.Fatalf("distribution %s after the replay, want {0,30} {4,1}", d)
	}
	// Rounding a few ulps outside [min, max] is clamped, not rejected by the CHECK.
	third := store.Batch{Pipeline: "p", Owner: harness.Owner0, Epoch: epoch, Windows: []aggregate.Row{
		harness.Row(aggregate.DimStation, "S1", 3, (0.1+0.1+0.1)/3, 0.1, 0.1, 0.1),
	},
		Positions: harness.At0(0),
	}
	if err := s.Commit(ctx, harness.WithSeqs(t, s, third)); err != nil {
		t.Fatalf("mean one ulp above max: %v", err)
	}
}

func TestStoreFencedWritesNothing(t *testing.T) {
	ctx := harness.TestCtx(t)
	s, url, old := harness.OpenStore(t)
	if err := s.Commit(ctx, harness.WithSeqs(t, s, store.Batch{Pipeline: "p", Owner: harness.Owner0, Epoch: old, Watermark: harness.T0, Positions: harness.At0(0)})); err != nil {
		t.Fatal(err)
	}
	other, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	c, err := other.Claim(ctx, "p", "other", []aggregate.PartitionID{harness.Tp0}, store.ClaimOptions{Lease: time.Minute, Takeover: true})
	newer := c.Epoch
	if err != nil || newer != old+1 {
		t.Fatalf("second claim = %d, %v; want %d", newer, err, old+1)
	}
	err = s.Commit(ctx, harness.WithSeqs(t, s, store.Batch{
		Pipeline:    "p",
		Owner:       harness.Owner0,
		Epoch:       old,
		Windows:     []aggregate.Row{harness.Row(aggregate.DimLine, "L1", 5, 10, 20, 0, 30)},
		Vehicles:    []store.Vehicle{{Position: aggregate.Position{VehicleID: "v", EventTime: harness.T0}}},
		DeadLetters: []store.DeadLetter{{Topic: "t", Reason: store.ReasonDecode, Error: "x"}},
		Positions:   harness.At0(5),
		Watermark:   harness.T0.Add(time.Hour),
	}))
	if !errors.Is(err, store.ErrFenced) {
		t.Fatalf("commit with stale epoch = %v, want ErrFenced", err)
	}
	if store.Retryable(err) {
		t.Error("ErrFenced is retryable")
	}
	for _, tbl := range []string{"delay_aggregates", "vehicle_latest", "dead_letters"} {
		if n := harness.Query[int64](t, url, "SELECT count(*) FROM "+tbl); n != 0 {
			t.Errorf("fenced commit wrote %d rows into %s", n, tbl)
		}
	}
	if n := harness.Query[int64](t, url, "SELECT next_offset FROM stream_positions WHERE pipeline = 'p'"); n != 0 {
		t.Errorf("fenced commit moved the stored offset to %d", n)
	}
	if wm := harness.Query[time.Time](t, url, "SELECT watermark FROM stream_positions WHERE pipeline = 'p'"); !wm.Equal(harness.T0) {
		t.Errorf("fenced commit moved the watermark to %v", wm)
	}
	// The new owner commits normally.
	if err := other.Commit(ctx, harness.WithSeqs(t, other, store.Batch{Pipeline: "p", Owner: "other", Epoch: newer, Positions: harness.At0(0)})); err != nil {
		t.Fatal(err)
	}
	// A pipeline whose claim the database does not hold writes nothing: its
	// rows are missing, as after a restore to before the claim, so the
	// instance is told to claim again (BehindError.ClaimLost).
	var behind *store.BehindError
	if err := s.Commit(ctx, harness.WithSeqs(t, s, store.Batch{Pipeline: "unclaimed", Owner: harness.Owner0, Epoch: 1, Positions: harness.At0(0)})); !errors.As(err, &behind) || !behind.ClaimLost {
		t.Fatalf("commit to an unclaimed pipeline = %v, want a BehindError with ClaimLost", err)
	}
	if n := harness.Query[int64](t, url, "SELECT count(*) FROM stream_positions WHERE pipeline = 'unclaimed'"); n != 0 {
		t.Errorf("the commit to an unclaimed pipeline wrote %d stream_positions rows", n)
	}
}

func TestStorePositionsNeverMoveBackwards(t *testing.T) {
	ctx := harness.TestCtx(t)
	s, _, _ := harness.OpenStore(t)
	a := aggregate.PartitionID{Topic: "arrival_predictions", Partition: 0}
	b := aggregate.PartitionID{Topic: "vehicle_positions", Partition: 3}
	c, err := s.Claim(ctx, "p", harness.Owner0, []aggregate.PartitionID{a, b}, store.ClaimOptions{Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	epoch := c.Epoch
	commit := func(ps ...store.Position) {
		t.Helper()
		if err := s.Commit(ctx, harness.WithSeqs(t, s, store.Batch{Pipeline: "p", Owner: harness.Owner0, Epoch: epoch, Positions: ps})); err != nil {
			t.Fatal(err)
		}
	}
	commit(store.Position{PartitionID: a, NextOffset: 10, ConsumedOffset: 20},
		store.Position{PartitionID: b, NextOffset: 0, ConsumedOffset: 0})
	commit(store.Position{PartitionID: a, NextOffset: 5, ConsumedOffset: 25}, // next backwards, consumed forwards
		store.Position{PartitionID: b, NextOffset: 7, ConsumedOffset: 7})
	commit(store.Position{PartitionID: a, NextOffset: 12, ConsumedOffset: 12}, // consumed backwards
		store.Position{PartitionID: a, NextOffset: 11, ConsumedOffset: 11}) // same partition twice in one batch
	got, err := s.LoadPositions(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	want := map[aggregate.PartitionID]store.Position{
		a: {PartitionID: a, NextOffset: 12, ConsumedOffset: 25, Seq: 3}, // three commits stored it
		b: {PartitionID: b, NextOffset: 7, ConsumedOffset: 7, Seq: 2},
	}
	if len(got) != len(want) || got[a] != want[a] || got[b] != want[b] {
		t.Fatalf("positions = %+v, want %+v", got, want)
	}
	if other, err := s.LoadPositions(ctx, "other"); err != nil || len(other) != 0 {
		t.Fatalf("positions of another pipeline = %v, %v", other, err)
	}
}

func TestStoreLatestStateTieLaterOffsetWins(t *testing.T) {
	ctx := harness.TestCtx(t)
	s, url, epoch := harness.OpenStore(t)
	speed := 3.5
	veh := func(off int64, at time.Time, lat float64) store.Vehicle {
		return store.Vehicle{Position: aggregate.Position{VehicleID: "v1", Lat: lat, Lon: 2, EventTime: at, SpeedMPS: &speed}, Partition: 1, Offset: off}
	}
	trip := func(off int64, at time.Time, delay float64) store.Trip {
		return store.Trip{Prediction: aggregate.Prediction{TripID: "t1", Line: "L", StopID: "S", Operator: "O", DelayS: delay, EventTime: at}, Partition: 1, Offset: off}
	}
	commit := func(v store.Vehicle, tr store.Trip) {
		t.Helper()
		if err := s.Commit(ctx, harness.WithSeqs(t, s, store.Batch{Pipeline: "p", Owner: harness.Owner0, Epoch: epoch, Vehicles: []store.Vehicle{v}, Trips: []store.Trip{tr}, Positions: harness.At0(0)})); err != nil {
			t.Fatal(err)
		}
	}
	check := func(what string, wantOff int64) {
		t.Helper()
		if off := harness.Query[int64](t, url, "SELECT kafka_offset FROM vehicle_latest WHERE vehicle_id = 'v1'"); off != wantOff {
			t.Errorf("%s: vehicle_latest offset %d, want %d", what, off, wantOff)
		}
		if off := harness.Query[int64](t, url, "SELECT kafka_offset FROM trip_delay_latest WHERE trip_id = 't1'"); off != wantOff {
			t.Errorf("%s: trip_delay_latest offset %d, want %d", what, off, wantOff)
		}
	}
	commit(veh(10, harness.T0, 1), trip(10, harness.T0, 1))
	commit(veh(12, harness.T0, 2), trip(12, harness.T0, 2)) // tie on observed_at: the later offset wins
	check("tie", 12)
	commit(veh(11, harness.T0, 3), trip(11, harness.T0, 3)) // an older offset replayed afterwards
	check("older offset replayed", 12)
	commit(veh(20, harness.T0.Add(-time.Second), 4), trip(20, harness.T0.Add(-time.Second), 4)) // older event time, later offset
	check("older event time", 12)
	commit(veh(13, harness.T0.Add(time.Second), 5), trip(13, harness.T0.Add(time.Second), 5))
	check("newer event time", 13)
	if lat := harness.Query[float64](t, url, "SELECT lat FROM vehicle_latest"); lat != 5 {
		t.Errorf("lat = %v, want 5", lat)
	}
	// Several rows for one key in one batch: the newest wins, no 21000 error.
	err := s.Commit(ctx, harness.WithSeqs(t, s, store.Batch{Pipeline: "p", Owner: harness.Owner0, Epoch: epoch,
		Vehicles:  []store.Vehicle{veh(31, harness.T0.Add(time.Hour), 7), veh(30, harness.T0.Add(time.Hour), 6)},
		Trips:     []store.Trip{trip(30, harness.T0.Add(time.Hour), 6), trip(31, harness.T0.Add(time.Hour), 7)},
		Positions: harness.At0(0),
	}))
	if err != nil {
		t.Fatal(err)
	}
	check("one batch", 31)
	// Optional fields: "" and nil are NULL.
	if n := harness.Query[int64](t, url, "SELECT count(*) FROM vehicle_latest WHERE trip_id IS NULL AND bearing IS NULL AND speed_mps = 3.5"); n != 1 {
		t.Errorf("optional vehicle fields not NULL")
	}
	if n := harness.Query[int64](t, url, "SELECT count(*) FROM trip_delay_latest WHERE vehicle_id IS NULL AND stop_sequence IS NULL"); n != 1 {
		t.Errorf("optional trip fields not NULL")
	}
}

func TestStoreDeadLetterBytes(t *testing.T) {
	ctx := harness.TestCtx(t)
	s, url, epoch := harness.OpenStore(t)
	dl := store.DeadLetter{Topic: "arrival_predictions", Partition: 2, Offset: 41,
		Key: []byte{0x00, 'k', 0xff}, Value: []byte("{\"trip_id\":\"a\x00b\",\xc3\x28}"),
		Reason: store.ReasonDecode, Error: "not a JSON object"}
	noKey := store.DeadLetter{Topic: "arrival_predictions", Partition: 2, Offset: 42, Value: []byte{}, Reason: store.ReasonLate, Error: "late"}
	for range 2 {
		if err := s.Commit(ctx, harness.WithSeqs(t, s, store.Batch{Pipeline: "p", Owner: harness.Owner0, Epoch: epoch, DeadLetters: []store.DeadLetter{dl, noKey, dl}, Positions: harness.At0(0)})); err != nil {
			t.Fatal(err)
		}
	}
	if n := harness.Query[int64](t, url, "SELECT count(*) FROM dead_letters"); n != 2 {
		t.Fatalf("%d dead letters, want 2", n)
	}
	if k := harness.Query[[]byte](t, url, `SELECT key FROM dead_letters WHERE "offset" = 41`); !bytes.Equal(k, dl.Key) {
		t.Errorf("key = %x, want %x", k, dl.Key)
	}
	if v := harness.Query[[]byte](t, url, `SELECT value FROM dead_letters WHERE "offset" = 41`); !bytes.Equal(v, dl.Value) {
		t.Errorf("value = %x, want %x", v, dl.Value)
	}
	if null := harness.Query[bool](t, url, `SELECT key IS NULL AND value IS NOT NULL AND length(value) = 0 FROM dead_letters WHERE "offset" = 42`); !null {
		t.Errorf("nil key / empty value not kept apart")
	}
}

func TestStoreSeedWatermark(t *testing.T) {
	ctx := harness.TestCtx(t)
	s, _, epoch := harness.OpenStore(t)
	seed := func() time.Time {
		t.Helper()
		wm, err := s.SeedWatermark(ctx, "p", []aggregate.PartitionID{harness.Tp0})
		if err != nil {
			t.Fatal(err)
		}
		return wm
	}
	if wm := seed(); !wm.IsZero() {
		t.Fatalf("seed on an empty database = %v, want zero", wm)
	}
	commit := func(b store.Batch) {
		t.Helper()
		b.Pipeline, b.Owner, b.Epoch = "p", harness.Owner0, epoch
		if err := s.Commit(ctx, harness.WithSeqs(t, s, b)); err != nil {
			t.Fatal(err)
		}
	}
	commit(store.Batch{Watermark: harness.T0.Add(-time.Hour), Positions: harness.At0(0)})
	if wm := seed(); !wm.Equal(harness.T0.Add(-time.Hour)) || wm.Location() != time.UTC {
		t.Fatalf("seed = %v, want the stored watermark %v in UTC", wm, harness.T0.Add(-time.Hour))
	}
	commit(store.Batch{Windows: []aggregate.Row{harness.Row(aggregate.DimLine, "L", 1, 1, 1, 1, 1)}, Positions: harness.At0(0)}) // window_end t0+5m
	if wm := seed(); !wm.Equal(harness.T0.Add(5 * time.Minute)) {
		t.Fatalf("seed = %v, want max(window_end) %v", wm, harness.T0.Add(5*time.Minute))
	}
	commit(store.Batch{Watermark: harness.T0.Add(time.Hour), Positions: harness.At0(0)})
	if wm := seed(); !wm.Equal(harness.T0.Add(time.Hour)) {
		t.Fatalf("seed = %v, want the stored watermark %v", wm, harness.T0.Add(time.Hour))
	}
	commit(store.Batch{Watermark: harness.T0, Positions: harness.At0(0)}) // the stored watermark never decreases
	if wm := seed(); !wm.Equal(harness.T0.Add(time.Hour)) {
		t.Fatalf("seed = %v after an older watermark, want %v", wm, harness.T0.Add(time.Hour))
	}
}

func TestStoreCheckViolationIsNotRetryable(t *testing.T) {
	ctx := harness.TestCtx(t)
	s, url, epoch := harness.OpenStore(t)
	bad := store.Batch{Pipeline: "p", Owner: harness.Owner0, Epoch: epoch,
		Windows:   []aggregate.Row{harness.Row(aggregate.DimLine, "L1", 0, 1, 1, 1, 1)},
		Positions: harness.At0(3)}
	err := s.Commit(ctx, harness.WithSeqs(t, s, bad))
	if err == nil {
		t.Fatal("count 0 was accepted")
	}
	if store.Retryable(err) {
		t.Errorf("CHECK violation %v is retryable", err)
	}
	if !strings.Contains(err.Error(), "store: commit 1 windows") {
		t.Errorf("error %q does not say what was being done", err)
	}
	if n := harness.Query[int64](t, url, "SELECT count(next_offset) FROM stream_positions"); n != 0 {
		t.Errorf("failed commit stored %d positions", n)
	}
	// The store reconnects and goes on.
	if err := s.Commit(ctx, harness.WithSeqs(t, s, store.Batch{Pipeline: "p", Owner: harness.Owner0, Epoch: epoch, Windows: []aggregate.Row{harness.Row(aggregate.DimLine, "L1", 1, 1, 1, 1, 1)}, Positions: harness.At0(0)})); err != nil {
		t.Fatalf("commit after a failed one: %v", err)
	}
}

// A connection killed inside the transaction (here at the AfterWindows crash
// point) fails the commit with a retryable error, writes nothing, and the next
// commit reconnects.
func TestStoreConnectionKilledMidCommit(t *testing.T) {
	ctx := harness.TestCtx(t)
	var url, at string // at: the hook that kills the connection ("": none)
	kill := func(hook string) func() {
		return func() {
			if hook == at {
				harness.Query[int64](t, url, `SELECT count(pg_terminate_backend(pid, 10000)) FROM pg_stat_activity
					WHERE datname = current_database() AND application_name = 'ovstream' AND pid <> pg_backend_pid()`)
			}
		}
	}
	s, url, epoch := harness.OpenStore(t, store.WithHooks(store.Hooks{AfterWindows: kill("AfterWindows"), BeforeCommit: kill("BeforeCommit")}))
	if err := s.Commit(ctx, harness.WithSeqs(t, s, store.Batch{Pipeline: "p", Owner: harness.Owner0, Epoch: epoch, Positions: harness.At0(0)})); err != nil { // warm the connection
		t.Fatal(err)
	}
	batch := store.Batch{Pipeline: "p", Owner: harness.Owner0, Epoch: epoch,
		Windows:   []aggregate.Row{harness.Row(aggregate.DimLine, "L1", 2, 1, 1, 1, 1)},
		Positions: harness.At0(3)}
	for _, hook := range []string{"AfterWindows", "BeforeCommit"} {
		at = hook
		err := s.Commit(ctx, harness.WithSeqs(t, s, batch))
		if err == nil || !store.Retryable(err) {
			t.Fatalf("%s: commit on a killed connection = %v, want a retryable error", hook, err)
		}
		// At BeforeCommit the client cannot tell whether COMMIT arrived, so a
		// *CommitError may say Ambiguous; the server rolled back either way.
		var ce *store.CommitError
		if hook == "AfterWindows" && errors.As(err, &ce) {
			t.Errorf("%s: %v is a CommitError, but COMMIT was never sent", hook, err)
		}
		if n := harness.Query[int64](t, url, "SELECT count(*) FROM delay_aggregates") + harness.Query[int64](t, url, "SELECT count(*) FROM stream_positions WHERE next_offset > 0"); n != 0 {
			t.Fatalf("%s: killed commit wrote %d rows", hook, n)
		}
	}
	at = ""
	if err := s.Commit(ctx, harness.WithSeqs(t, s, batch)); err != nil {
		t.Fatalf("retry after reconnect: %v", err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestMigrateCheckAhead(t *testing.T) {
	ctx := harness.TestCtx(t)
	url := harness.FreshDB(t)
	harness.Query[int64](t, url, "WITH u AS (UPDATE schema_migrations SET version = version + 1 RETURNING 1) SELECT count(*) FROM u")
	err := migrations.Check(ctx, url)
	var se *migrations.SchemaError
	if !errors.As(err, &se) || se.Dirty || se.Version != migrations.Latest()+1 {
		t.Fatalf("Check on a newer schema = %v, want ahead", err)
	}
	if !strings.Contains(err.Error(), "newer ovstream binary") {
		t.Errorf("message %q does not say to run a newer binary", err)
	}
}

// Two processes migrating at once: the second waits for the first's advisory
// lock (bounded by lock_timeout), then finds nothing to do.
func TestMigrateUpConcurrently(t *testing.T) {
	ctx := harness.TestCtx(t)
	url := harness.EmptyDB(t)
	errs := make(chan error, 3)
	for range 3 {
		go func() { errs <- migrations.Up(ctx, url) }()
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Errorf("concurrent up: %v", err)
		}
	}
	if err := migrations.Check(ctx, url); err != nil {
		t.Fatal(err)
	}
}
