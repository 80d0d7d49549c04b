//go:build integration

package integration

import (
	"fmt"
	"strings"
	"testing"
)

// Issue 24, item 2: a large rejection must not crash. A CHECK refuses every
// station whose id starts with 7 (most of Auckland's stops) over the real 2 h
// slice: the search for the refused rows used a savepoint per probe and kept
// each accepted one, whose subtransaction lock lives until the transaction
// ends, so many refused rows ran the server out of shared memory (SQLSTATE
// 53200, "out of shared memory ... max_locks_per_transaction") and every run
// exited 1. Now the drain exits 0 and the result equals the SQL oracle over
// the records minus the rejected ones, each rejected once.
func TestRejectManyRows(t *testing.T) {
	t.Parallel()
	// A private cluster with a small shared lock table (16 locks per
	// transaction: about 1,100 for the whole server), so the 6,638 station
	// rows the CHECK refuses over the 2 h slice are far more than it holds.
	pg := startPrivatePG(t)
	execSQL(t, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", pg.port),
		`ALTER SYSTEM SET max_locks_per_transaction = 16`)
	pg.restart()
	addr, db := startBroker(t), pg.freshDB()
	res := loadFeeds(t, "AT", extractTarGz(t, "../testdata/auckland-20160518-2h.tar.gz"))
	produceFeeds(t, addr, res)
	execSQL(t, db, `ALTER TABLE delay_aggregates ADD CONSTRAINT no_station_7 CHECK (dimension <> 'station' OR dimension_id NOT LIKE '7%')`)
	out := drain(t, db, addr, "--pipeline", "many")
	n := loadOracleInput(t, db, addr, predictionsTopic)
	want := dump(t, db, `SELECT topic, partition, "offset" FROM (SELECT *, convert_from(value, 'UTF8')::jsonb AS v FROM oracle_msgs) m
		WHERE topic = 'arrival_predictions' AND v->>'stop_id' LIKE '7%'`)
	got := dump(t, db, `SELECT topic, partition, "offset" FROM dead_letters WHERE reason = 'rejected' AND error LIKE '%"no_station_7"%'`)
	t.Logf("%d of %d records rejected; %d station rows refused", len(got), n,
		len(dump(t, db, `SELECT DISTINCT error FROM dead_letters`)))
	if !strings.Contains(out, "refused") {
		t.Errorf("the run did not log the refusal:\n%s", tail(out, 20))
	}
	if len(want) < 10000 {
		t.Fatalf("only %d records of stations 7*: the test proves too little", len(want))
	}
	sameRows(t, "rejected dead letters vs the records of stations 7*", got, want)
	if other := dump(t, db, `SELECT reason, count(*) FROM dead_letters WHERE error NOT LIKE '%"no_station_7"%' GROUP BY reason`); len(other) != 0 {
		t.Errorf("other dead letters: %v", other)
	}
	countedOnceOrDead(t, db, n)
}
