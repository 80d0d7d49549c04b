//go:build integration

package pipeline

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/integration/harness"
	"github.com/ovstream/ovstream/store"
)

// refuseRealIDs adds constraints to db's tables that refuse the station rows
// of refusedStation and the trip_delay_latest row of refusedTrip.
func refuseRealIDs(t *testing.T, db string) {
	t.Helper()
	harness.ExecSQL(t, db, fmt.Sprintf(`
ALTER TABLE delay_aggregates ADD CONSTRAINT no_station_7151 CHECK (dimension <> 'station' OR dimension_id <> '%s');
ALTER TABLE trip_delay_latest ADD CONSTRAINT no_trip_7380020909 CHECK (trip_id <> '%s');`, harness.RefusedStation, harness.RefusedTrip))
}

// oracleTrips computes trip_delay_latest from oracle_msgs with SQL alone: per
// trip, the newest record (event time, then offset), except for refusedTrip,
// whose every row is refused. A record rejected for its station row still
// updates its trip's latest state, as a late one does (G5).
var oracleTrips = `
WITH ok AS (
	SELECT m.partition, m."offset", convert_from(m.value, 'UTF8')::jsonb AS j FROM oracle_msgs m
	WHERE m.topic = 'arrival_predictions'
)
SELECT DISTINCT ON (j->>'trip_id') j->>'trip_id', j->>'line', j->>'stop_id', j->>'operator',
	(j->>'delay_s')::float8, (j->>'event_time')::timestamptz, partition, "offset"
FROM ok WHERE j->>'trip_id' <> '` + harness.RefusedTrip + `'
ORDER BY j->>'trip_id', (j->>'event_time')::timestamptz DESC, "offset" DESC`

const dumpTripsShort = `SELECT trip_id, line, stop_id, operator, delay_s, observed_at, kafka_partition, kafka_offset
	FROM trip_delay_latest`

// checkRefusedRealIDs checks the drained tables of db over the Auckland peak
// sample with refuseRealIDs' constraints (oracle_msgs loaded, n records):
// the rejected dead letters are exactly the records of refusedStation and of
// refusedTrip, each with its constraint's message; there is no other dead
// letter; delay_aggregates equals the SQL oracle over the records minus the
// dead letters and trip_delay_latest its own (oracleTrips); every record is
// counted once or dead-lettered once; every stored position is at the high
// water mark.
func checkRefusedRealIDs(t *testing.T, db string, n int) {
	t.Helper()
	want := harness.Dump(t, db, fmt.Sprintf(`SELECT topic, partition, "offset",
		CASE WHEN v->>'stop_id' = '%s' THEN 'no_station_7151' ELSE 'no_trip_7380020909' END
		FROM (SELECT *, convert_from(value, 'UTF8')::jsonb AS v FROM oracle_msgs) m
		WHERE v->>'stop_id' = '%s' OR v->>'trip_id' = '%s'`, harness.RefusedStation, harness.RefusedStation, harness.RefusedTrip))
	got := harness.Dump(t, db, `SELECT topic, partition, "offset",
		CASE WHEN error LIKE '%violates check constraint "no_station_7151"%' THEN 'no_station_7151'
		     WHEN error LIKE '%violates check constraint "no_trip_7380020909"%' THEN 'no_trip_7380020909'
		     ELSE error END
		FROM dead_letters WHERE reason = 'rejected'`)
	if len(want) < 28+11-2 {
		t.Fatalf("the sample holds %d records of station %s or trip %s, want at least 37", len(want), harness.RefusedStation, harness.RefusedTrip)
	}
	harness.SameRows(t, "rejected dead letters vs the records of the refused station and trip", got, want)
	if other := harness.Dump(t, db, `SELECT reason, count(*) FROM dead_letters WHERE reason <> 'rejected' GROUP BY reason`); len(other) != 0 {
		t.Errorf("dead letters other than rejected: %v", other)
	}
	if ex := harness.Dump(t, db, `SELECT error FROM dead_letters WHERE reason = 'rejected' LIMIT 1`); len(ex) == 1 {
		t.Logf("a rejected record's dead letter says: %s", ex[0])
	}
	aggs := harness.Dump(t, db, harness.DumpAggregates)
	if len(aggs) == 0 {
		t.Fatal("no delay_aggregates rows")
	}
	harness.SameRows(t, "delay_aggregates vs SQL oracle (records minus dead letters)", aggs, harness.Dump(t, db, harness.OracleAggregates))
	if s := harness.Dump(t, db, `SELECT count(*) FROM delay_aggregates WHERE dimension_id = '`+harness.RefusedStation+`'`); s[0] != "[0]" {
		t.Errorf("station %s has %v rows", harness.RefusedStation, s)
	}
	harness.SameRows(t, "trip_delay_latest vs SQL oracle (newest record; none of the refused trip)",
		harness.Dump(t, db, dumpTripsShort), harness.Dump(t, db, oracleTrips))
	counted := harness.Dump(t, db, `SELECT coalesce(sum(event_count), 0)::bigint + (SELECT count(*) FROM dead_letters)
		FROM delay_aggregates WHERE dimension = 'network'`)
	if counted[0] != fmt.Sprintf("[%d]", n) {
		t.Errorf("counted + dead letters = %v, want every record once: %d", counted, n)
	}
	if pos := harness.Dump(t, db, `SELECT sum(next_offset)::bigint FROM stream_positions WHERE topic = 'arrival_predictions'`); pos[0] != fmt.Sprintf("[%d]", n) {
		t.Errorf("stored offsets sum to %v, want %d (every partition at its high water mark)", pos, n)
	}
}

// A CHECK constraint refuses the station rows of one real stop and the
// trip_delay_latest row of one real trip. The drain exits 0; every record of
// that stop (in all three windows) and every record of that trip (each of
// its versions is refused in turn) is a dead letter rejected with the
// constraint's message, and counts in no line, operator or network row;
// delay_aggregates equals the SQL oracle over the records minus the dead
// letters.
func TestRejectedRowsAreDeadLettered(t *testing.T) {
	addr, db := harness.StartBroker(t), harness.FreshDB(t)
	harness.ProduceFeeds(t, addr, harness.LoadFeeds(t, "AT", "../../testdata/auckland-20160519-peak10min"))
	refuseRealIDs(t, db)
	out := harness.Drain(t, db, addr)
	if !strings.Contains(out, "refused") {
		t.Errorf("the run did not log the refusal:\n%s", harness.Tail(out, 40))
	}
	checkRefusedRealIDs(t, db, harness.LoadOracleInput(t, db, addr, harness.PredictionsTopic))
}

// Values PostgreSQL refuses for their size, on ids short enough to pass
// decoding (<= 256 bytes): a 200-byte stop_id breaks an index (SQLSTATE
// 54000: an index row larger than a btree page allows) and a 40-byte
// vehicle_id does not fit vehicle_id varchar(32) (22001). The records that
// carry them are dead letters rejected with the database's message; the
// records after them in the same partitions are counted, the drain exits 0,
// and a second drain over newer records of those partitions flows too.
func TestRejectedForSizeKeepsFlowing(t *testing.T) {
	addr, db := harness.StartBroker(t), harness.FreshDB(t)
	// spread maps an id to 3,200 random-looking bytes (incompressible), so
	// an index entry of a long id exceeds the 2,704 bytes a btree allows.
	harness.ExecSQL(t, db, `
CREATE FUNCTION spread(text) RETURNS bytea IMMUTABLE LANGUAGE sql AS
	$$ SELECT string_agg(sha256(convert_to($1 || g::text, 'UTF8')), ''::bytea ORDER BY g) FROM generate_series(1, 100) g $$;
CREATE INDEX delay_aggregates_spread ON delay_aggregates (spread(dimension_id)) WHERE length(dimension_id) > 100;
ALTER TABLE vehicle_latest ALTER COLUMN vehicle_id TYPE varchar(32);`)
	longStop := strings.Repeat("s", 200)
	longVehicle := strings.Repeat("v", 40)
	harness.ProduceRecords(t, addr,
		harness.Rec{Topic: harness.PredictionsTopic, Partition: 0, Key: "t1", Value: harness.Pred("t1", "L1", "S1", "AT", 30, "2016-05-18T20:01:00Z")},
		harness.Rec{Topic: harness.PredictionsTopic, Partition: 0, Key: "t2", Value: harness.Pred("t2", "L1", longStop, "AT", 60, "2016-05-18T20:02:00Z")},
		harness.Rec{Topic: harness.PredictionsTopic, Partition: 0, Key: "t3", Value: harness.Pred("t3", "L1", "S1", "AT", 90, "2016-05-18T20:03:00Z")},
		harness.Rec{Topic: harness.PredictionsTopic, Partition: 1, Key: "t4", Value: harness.Pred("t4", "L2", "S2", "AT", 10, "2016-05-18T20:04:00Z")},
		harness.Rec{Topic: harness.PositionsTopic, Partition: 0, Key: longVehicle, Value: harness.Pos(longVehicle, -36.1, "2016-05-18T20:01:00Z")},
		harness.Rec{Topic: harness.PositionsTopic, Partition: 0, Key: "v1", Value: harness.Pos("v1", -36.2, "2016-05-18T20:02:00Z")},
		harness.Rec{Topic: harness.PositionsTopic, Partition: 0, Key: longVehicle, Value: harness.Pos(longVehicle, -36.3, "2016-05-18T20:03:00Z")},
		harness.Rec{Topic: harness.PositionsTopic, Partition: 0, Key: longVehicle, Value: harness.Pos(longVehicle, -36.4, "2016-05-18T20:04:00Z")},
		harness.Rec{Topic: harness.PositionsTopic, Partition: 0, Key: "v2", Value: harness.Pos("v2", -36.5, "2016-05-18T20:04:00Z")},
	)
	harness.Drain(t, db, addr)
	// The partitions keep flowing: newer records after the refused ones.
	harness.ProduceRecords(t, addr,
		harness.Rec{Topic: harness.PredictionsTopic, Partition: 0, Key: "t5", Value: harness.Pred("t5", "L1", "S1", "AT", 120, "2016-05-18T20:11:00Z")},
		harness.Rec{Topic: harness.PredictionsTopic, Partition: 0, Key: "t6", Value: harness.Pred("t6", "L1", longStop, "AT", 7, "2016-05-18T20:12:00Z")},
		harness.Rec{Topic: harness.PositionsTopic, Partition: 0, Key: "v1", Value: harness.Pos("v1", -36.6, "2016-05-18T20:11:00Z")},
		harness.Rec{Topic: harness.PositionsTopic, Partition: 0, Key: longVehicle, Value: harness.Pos(longVehicle, -36.7, "2016-05-18T20:12:00Z")},
	)
	harness.Drain(t, db, addr)

	n := harness.LoadOracleInput(t, db, addr, harness.PredictionsTopic)
	got := harness.Dump(t, db, `SELECT topic, partition, "offset",
		CASE WHEN error LIKE '%index row size % exceeds btree version % maximum % for index "delay_aggregates_%spread%"%(SQLSTATE 54000)%' THEN 'index'
		     WHEN error LIKE '%value too long for type character varying(32)%(SQLSTATE 22001)%' THEN 'varchar'
		     ELSE error END
		FROM dead_letters WHERE reason = 'rejected'`)
	want := []string{"[arrival_predictions 0 1 index]", "[arrival_predictions 0 4 index]",
		"[vehicle_positions 0 0 varchar]", "[vehicle_positions 0 2 varchar]", "[vehicle_positions 0 3 varchar]",
		"[vehicle_positions 0 6 varchar]"}
	harness.SameRows(t, "rejected dead letters", got, want)
	if all := harness.Dump(t, db, `SELECT count(*) FROM dead_letters`); all[0] != "[6]" {
		t.Errorf("%v dead letters, want the 6 rejected ones", all)
	}
	harness.SameRows(t, "delay_aggregates vs SQL oracle (records minus dead letters)", harness.Dump(t, db, harness.DumpAggregates), harness.Dump(t, db, harness.OracleAggregates))
	if c := harness.Dump(t, db, `SELECT sum(event_count)::bigint FROM delay_aggregates WHERE dimension = 'network'`); c[0] != "[4]" || n != 6 {
		t.Errorf("network rows count %v of %d predictions, want 4 of 6", c, n)
	}
	harness.SameRows(t, "vehicle_latest", harness.Dump(t, db, `SELECT vehicle_id, lat, kafka_offset FROM vehicle_latest`),
		[]string{"[v1 -36.6 5]", "[v2 -36.5 4]"})
	if pos := harness.Dump(t, db, `SELECT topic, partition, next_offset FROM stream_positions WHERE partition = 0`); len(pos) != 2 ||
		pos[0] != "[arrival_predictions 0 5]" || pos[1] != "[vehicle_positions 0 7]" {
		t.Errorf("stored positions of partition 0: %v, want each at its high water mark (5 and 7)", pos)
	}
}

// killAtRound starts `run --drain` and SIGKILLs it as soon as its log reports
// its round-th rejection (the resync that follows, or the next commit, is in
// progress then). It fails the test when the process ends first.
func killAtRound(t *testing.T, db, addr string, round int) {
	t.Helper()
	p := harness.StartOvstream(t, nil, harness.RunArgs(db, addr, "--drain")...)
	deadline := time.Now().Add(2 * time.Minute)
	for strings.Count(p.Output(), "PostgreSQL refused rows") < round {
		select {
		case <-p.Done:
			t.Fatalf("ovstream ended (%v) before rejection round %d:\n%s", p.Err, round, harness.Tail(p.Output(), 40))
		case <-time.After(2 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no rejection round %d within 2 minutes:\n%s", round, harness.Tail(p.Output(), 40))
		}
	}
	p.Kill()
	if ws, _ := p.Cmd.ProcessState.Sys().(syscall.WaitStatus); !ws.Signaled() {
		t.Fatalf("ovstream ended with %v before the SIGKILL at rejection round %d:\n%s", p.Cmd.ProcessState, round, harness.Tail(p.Output(), 40))
	}
	t.Logf("killed at rejection round %d:\n%s", round, harness.Tail(p.Output(), 3))
}

// SIGKILL during the rejection rounds: an incarnation killed in its first
// round (the refused station and the newest record of the refused trip
// found, nothing written), one killed in its second (the older versions of
// the trip), then a drain to the end: the tables equal those of an
// uninterrupted run with the same constraints, and the oracles.
func TestCrashDuringRejectionRounds(t *testing.T) {
	t.Parallel() // its own broker and databases
	addr := harness.StartBroker(t)
	harness.ProduceFeeds(t, addr, harness.LoadFeeds(t, "AT", "../../testdata/auckland-20160519-peak10min"))
	killed := harness.FreshDB(t)
	refuseRealIDs(t, killed)
	killAtRound(t, killed, addr, 1)
	killAtRound(t, killed, addr, 2)
	harness.Drain(t, killed, addr)

	reference := harness.FreshDB(t)
	refuseRealIDs(t, reference)
	harness.Drain(t, reference, addr)
	for _, q := range []struct{ what, sql string }{
		{"delay_aggregates", harness.DumpAggregates}, {"dead_letters", harness.DumpDeadLetters},
		{"trip_delay_latest", harness.DumpTrips}, {"vehicle_latest", harness.DumpVehicles},
	} {
		harness.SameRows(t, q.what+" (killed in rejection rounds vs uninterrupted)", harness.Dump(t, killed, q.sql), harness.Dump(t, reference, q.sql))
	}
	checkRefusedRealIDs(t, killed, harness.LoadOracleInput(t, killed, addr, harness.PredictionsTopic))
}

// Store.Commit on a batch PostgreSQL refuses writes nothing and names exactly
// the refused rows: a CHECK on a window row; the newest versions of a trip,
// in turn, down to the first one accepted (an older refused version behind
// it is never met); a CHECK on a vehicle row. A deferred foreign key
// between the batch's own rows (a vehicle's trip) does not refuse a row the
// commit would accept. Without the refused rows the batch commits. A batch
// refused only for a dead letter, or only at COMMIT by a deferred
// constraint, names no row and is not retryable (terminal).
func TestStoreCommitNamesRefusedRows(t *testing.T) {
	ctx := harness.TestCtx(t)
	s, url, epoch := harness.OpenStore(t)
	harness.ExecSQL(t, url, `
ALTER TABLE delay_aggregates ADD CONSTRAINT no_s2 CHECK (dimension_id <> 'S2');
ALTER TABLE trip_delay_latest ADD CONSTRAINT small_delay CHECK (delay_s < 100);
ALTER TABLE vehicle_latest ADD CONSTRAINT no_vx CHECK (vehicle_id <> 'vx');
ALTER TABLE vehicle_latest ADD CONSTRAINT known_trip FOREIGN KEY (pipeline, trip_id)
	REFERENCES trip_delay_latest (pipeline, trip_id) DEFERRABLE INITIALLY DEFERRED;
ALTER TABLE dead_letters ADD CONSTRAINT no_boom CHECK (error <> 'boom');`)
	trip := func(id string, delay float64, off int64) store.Trip {
		return store.Trip{Prediction: aggregate.Prediction{TripID: id, Line: "L1", StopID: "S1", Operator: "op1",
			DelayS: delay, EventTime: harness.T0.Add(time.Duration(off) * time.Second)}, Offset: off}
	}
	vehicle := func(id, trip string, off int64) store.Vehicle {
		return store.Vehicle{Position: aggregate.Position{VehicleID: id, TripID: trip, EventTime: harness.T0}, Offset: off}
	}
	windows := []aggregate.Row{harness.Row(aggregate.DimStation, "S1", 1, 1, 1, 1, 1), harness.Row(aggregate.DimStation, "S2", 1, 1, 1, 1, 1),
		harness.Row(aggregate.DimStation, "S3", 1, 1, 1, 1, 1), harness.Row(aggregate.DimLine, "L1", 3, 1, 1, 1, 1)}
	trips := []store.Trip{trip("T1", 500, 0), trip("T1", 50, 1), trip("T1", 120, 2), trip("T1", 150, 3), trip("T2", 10, 4)}
	vehicles := []store.Vehicle{vehicle("v1", "T1", 10), vehicle("vx", "", 12)}
	b := store.Batch{Pipeline: "p", Owner: harness.Owner0, Epoch: epoch, Windows: windows, Trips: trips, Vehicles: vehicles,
		DeadLetters: []store.DeadLetter{{Topic: "t", Offset: 5, Reason: store.ReasonDecode, Error: "x"}}, Positions: harness.At0(13)}

	err := s.Commit(ctx, harness.WithSeqs(t, s, b))
	var rej *store.RejectedError
	if !errors.As(err, &rej) {
		t.Fatalf("commit = %v, want a *store.RejectedError", err)
	}
	var got []string
	for _, w := range rej.Windows {
		got = append(got, fmt.Sprintf("window %s %s %s: %s", w.WindowStart.Format(time.RFC3339), w.Dimension, w.DimensionID, w.Reason))
	}
	for _, r := range rej.Trips {
		got = append(got, fmt.Sprintf("trip %s %d/%d: %s", r.Key, r.Partition, r.Offset, r.Reason))
	}
	for _, r := range rej.Vehicles {
		got = append(got, fmt.Sprintf("vehicle %s %d/%d: %s", r.Key, r.Partition, r.Offset, r.Reason))
	}
	// PostgreSQL names the relation that refused the row: for
	// delay_aggregates, the partition of its day (migration 6).
	check := func(table, relation, key, constraint string) string {
		return fmt.Sprintf(`PostgreSQL refused the %s row %s: new row for relation "%s" violates check constraint "%s" (SQLSTATE 23514)`,
			table, key, relation, constraint)
	}
	want := []string{
		"window 2026-03-01T12:00:00Z station S2: " +
			check("delay_aggregates", "delay_aggregates_20260301", "(2026-03-01T12:00:00Z, station, S2)", "no_s2"),
		"trip T1 0/3: " + check("trip_delay_latest", "trip_delay_latest", "(T1)", "small_delay"),
		"trip T1 0/2: " + check("trip_delay_latest", "trip_delay_latest", "(T1)", "small_delay"),
		"vehicle vx 0/12: " + check("vehicle_latest", "vehicle_latest", "(vx)", "no_vx"),
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("refused rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if store.Retryable(err) {
		t.Errorf("%v is retryable", err)
	}
	for _, tbl := range []string{"delay_aggregates", "trip_delay_latest", "vehicle_latest", "dead_letters"} {
		if n := harness.Query[int64](t, url, "SELECT count(*) FROM "+tbl); n != 0 {
			t.Errorf("the refused commit wrote %d rows into %s", n, tbl)
		}
	}
	if n := harness.Query[int64](t, url, "SELECT count(next_offset) FROM stream_positions"); n != 0 {
		t.Errorf("the refused commit stored %d positions", n)
	}

	// Only a deferred foreign key, at COMMIT: no row is refused alone.
	only := store.Batch{Pipeline: "p", Owner: harness.Owner0, Epoch: epoch, Vehicles: []store.Vehicle{vehicle("v2", "NOPE", 11)}, Positions: harness.At0(13)}
	err = s.Commit(ctx, harness.WithSeqs(t, s, only))
	if err == nil || errors.As(err, &rej) || store.Retryable(err) || !strings.Contains(err.Error(), "known_trip") {
		t.Fatalf("commit refused at COMMIT by a deferred constraint = %v, want the terminal refusal itself", err)
	}

	// Without the refused rows the batch commits.
	b.Windows = []aggregate.Row{windows[0], windows[2], windows[3]}
	b.Trips = []store.Trip{trips[0], trips[1], trips[4]}
	b.Vehicles = vehicles[:1]
	if err := s.Commit(ctx, harness.WithSeqs(t, s, b)); err != nil {
		t.Fatalf("commit without the refused rows: %v", err)
	}
	if got := harness.Dump(t, url, `SELECT trip_id, delay_s, kafka_offset FROM trip_delay_latest`); strings.Join(got, " ") != "[T1 50 1] [T2 10 4]" {
		t.Errorf("trip_delay_latest = %v, want T1's newest accepted version (offset 1) and T2", got)
	}

	// A dead letter refused: no row of the batch is, so nothing to reject: terminal.
	boom := store.Batch{Pipeline: "p", Owner: harness.Owner0, Epoch: epoch, Windows: []aggregate.Row{harness.Row(aggregate.DimNetwork, "all", 1, 1, 1, 1, 1)},
		DeadLetters: []store.DeadLetter{{Topic: "t", Offset: 20, Reason: store.ReasonDecode, Error: "boom"}}, Positions: harness.At0(21)}
	err = s.Commit(ctx, harness.WithSeqs(t, s, boom))
	if err == nil || errors.As(err, &rej) || store.Retryable(err) || !strings.Contains(err.Error(), "no_boom") {
		t.Fatalf("commit with a refused dead letter = %v, want the terminal refusal itself", err)
	}
}

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
func TestRefusedSearchNamesOnlyRowsTheCommitRefuses(t *testing.T) {
	ctx := harness.TestCtx(t)
	s, url, epoch := harness.OpenStore(t)
	harness.ExecSQL(t, url, `
ALTER TABLE delay_aggregates ADD CONSTRAINT no_s2 CHECK (dimension_id <> 'S2');
ALTER TABLE trip_delay_latest ADD CONSTRAINT trip_vehicle FOREIGN KEY (pipeline, vehicle_id)
	REFERENCES vehicle_latest (pipeline, vehicle_id);`)
	trip := store.Trip{Prediction: aggregate.Prediction{TripID: "T1", Line: "L1", StopID: "S1", Operator: "op1",
		VehicleID: "v1", DelayS: 10, EventTime: harness.T0}, Offset: 1}
	vehicle := store.Vehicle{Position: aggregate.Position{VehicleID: "v1", TripID: "T1", EventTime: harness.T0}, Offset: 2}
	windows := []aggregate.Row{harness.Row(aggregate.DimStation, "S1", 1, 1, 1, 1, 1), harness.Row(aggregate.DimStation, "S2", 1, 1, 1, 1, 1)}
	b := store.Batch{Pipeline: "p", Owner: harness.Owner0, Epoch: epoch, Windows: windows,
		Trips: []store.Trip{trip}, Vehicles: []store.Vehicle{vehicle}, Positions: harness.At0(3)}

	err := s.Commit(ctx, harness.WithSeqs(t, s, b))
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
	cerr := s.Commit(ctx, harness.WithSeqs(t, s, b))
	if cerr != nil {
		t.Fatalf("commit without S2 (trip T1 and its new vehicle v1 kept): %v", cerr)
	}
	if n := harness.Query[int64](t, url, `SELECT count(*) FROM trip_delay_latest WHERE trip_id = 'T1'`); n != 1 {
		t.Fatalf("trip T1 rows after the commit: %d, want 1", n)
	}
	if len(named) != 1 || named[0] != "window S2" {
		t.Errorf("the search named %q, want only the S2 window row: the trip row it names is one the commit accepts "+
			"(its record would be dead-lettered and counted in no window)", named)
	}
}

// The refused-row search the other way: a constraint two rows of the batch break
// together (here a unique index: one trip per vehicle) refuses neither row
// alone, so the search, which rolls back every probe, names nothing: the
// commit's refusal comes back as it is, terminal (run exits 1). A search that kept
// accepted probes kept the first half, named the second row (rejected,
// dead-lettered) and the pipeline went on.
func TestRefusedSearchRowsRefusedOnlyTogetherRejected(t *testing.T) {
	ctx := harness.TestCtx(t)
	s, url, epoch := harness.OpenStore(t)
	harness.ExecSQL(t, url, `CREATE UNIQUE INDEX one_trip_per_vehicle ON trip_delay_latest (pipeline, vehicle_id);`)
	trip := func(id string, off int64) store.Trip {
		return store.Trip{Prediction: aggregate.Prediction{TripID: id, Line: "L1", StopID: "S1", Operator: "op1",
			VehicleID: "v1", DelayS: 10, EventTime: harness.T0}, Offset: off}
	}
	b := store.Batch{Pipeline: "p", Owner: harness.Owner0, Epoch: epoch, Trips: []store.Trip{trip("T1", 1), trip("T2", 2)}, Positions: harness.At0(3)}
	err := s.Commit(ctx, harness.WithSeqs(t, s, b))
	var rej *store.RejectedError
	if !errors.As(err, &rej) {
		t.Errorf("a batch refused for two rows together: err = %v (retryable %v), want a *store.RejectedError naming one of them",
			err, store.Retryable(err))
	}
}
