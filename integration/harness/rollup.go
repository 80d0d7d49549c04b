//go:build integration

package harness

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// RollupTZ is the time zone of the rollups compared: the data's own.
const RollupTZ = "Pacific/Auckland"

// Stats is one group of a rollup: count, mean, min, max, then the quantiles.
type Stats struct {
	Count int64
	Vals  []float64 // mean, min, max, quantiles...
}

// GroupKey is a bucket start (Unix seconds) and a dimension id.
type GroupKey struct {
	Bucket int64
	Id     string
}

// CreateOracleEvents copies every record of the predictions topic at addr
// into oracle_msgs (LoadOracleInput) and makes the table oracle_events of
// the events of those that are not dead letters: at (event_time), d
// (delay_s), line, stop, op. It returns how many records it read.
func CreateOracleEvents(t *testing.T, db, addr string) int {
	t.Helper()
	n := LoadOracleInput(t, db, addr, PredictionsTopic)
	Exec1(t, db, `CREATE TABLE oracle_events AS
		SELECT (j->>'event_time')::timestamptz AS at, (j->>'delay_s')::float8 AS d,
		       j->>'line' AS line, j->>'stop_id' AS stop, j->>'operator' AS op
		FROM (SELECT convert_from(m.value, 'UTF8')::jsonb AS j FROM oracle_msgs m
		      WHERE NOT EXISTS (SELECT 1 FROM dead_letters d
		          WHERE d.topic = m.topic AND d.partition = m.partition AND d."offset" = m."offset")) AS ok`)
	return n
}

// Exec1 runs one SQL statement with args on db (5 minutes at most); the test
// fails on an error.
func Exec1(t *testing.T, db, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// QueryRollup runs a query whose rows are (bucket, id, count, mean, min,
// max, quantiles[]) and returns them by group.
func QueryRollup(t *testing.T, db, sql string, args ...any) map[GroupKey]Stats {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	out := map[GroupKey]Stats{}
	var (
		b          time.Time
		id         string
		s          Stats
		mean, l, h float64
		qs         []float64
	)
	_, err = pgx.ForEachRow(rows, []any{&b, &id, &s.Count, &mean, &l, &h, &qs}, func() error {
		k := GroupKey{b.Unix(), id}
		if _, dup := out[k]; dup {
			return fmt.Errorf("group %v twice", k)
		}
		out[k] = Stats{s.Count, append([]float64{mean, l, h}, qs...)}
		return nil
	})
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return out
}

// Report runs `ovstream report` on db and returns its standard output.
func Report(t *testing.T, db string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(OvstreamBin(t), append([]string{"report", "--database-url", db}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("report %v: %v\n%s", args, err, stderr.String())
	}
	return out
}
