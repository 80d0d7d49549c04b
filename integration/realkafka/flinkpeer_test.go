//go:build integration

package realkafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/integration/flinkpeer"
	"github.com/ovstream/ovstream/integration/harness"
)

// The benchmark's Flink SQL peer (integration/flinkpeer) on the Auckland
// peak in Apache Kafka: the Flink job (MiniCluster, parallelism 2, the Kafka
// and JDBC connectors) writes one row per window and dimension, and those
// rows equal `ovstream run --drain`'s delay_aggregates and the SQL oracle
// (percentile_cont) over the topic: the same keys, window_end, operator,
// count, mean, min and max bit for bit, P90 within flinkpeer.P90Tolerance.
func TestRealKafkaFlinkPeerEqualsDrainAndOracle(t *testing.T) {
	c := sharedKafka(t)
	pred, pos := kafkaTopics(t, c, "flinkpeer", nil)
	db := harness.FreshDB(t)
	produceAuckland(t, c.Bootstrap(), pred, pos)
	harness.Drain(t, db, c.Bootstrap(), "--pipeline", "rk_flink", "--topics", pred+","+pos, "--allowed-lateness", "10m")
	if n := harness.LoadOracleInput(t, db, c.Nodes[0].Addr(), pred); n != 4610 {
		t.Fatalf("topic %s holds %d records, want 4610", pred, n)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, flinkpeer.TableDDL)
	conn.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r, err := flinkpeer.Run(ctx, flinkpeer.Options{Bootstrap: c.Bootstrap(), Topic: pred, DatabaseURL: db})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Flink %s: %v wall, %v CPU, peak RSS %d MB", flinkpeer.Version, r.Elapsed.Round(time.Millisecond),
		r.CPU().Round(time.Millisecond), r.MaxRSS>>20)

	peer := flinkpeer.PeerSource(db)
	for _, other := range []flinkpeer.Source{
		flinkpeer.OvstreamSource(db, "rk_flink"),
		{Name: "SQL oracle", DB: db, Query: harness.OracleAggregates},
	} {
		d, err := flinkpeer.Compare(ctx, other, peer)
		if err != nil {
			t.Fatal(err)
		}
		if !d.OK() || d.RowsA < 1000 {
			t.Errorf("Flink vs %s: %v", other.Name, d)
		} else {
			t.Logf("Flink vs %s: %v", other.Name, d)
		}
	}

	// The comparison sees a P90 off by more than the tolerance, then a count
	// off by one too (the same row: still one inexact row).
	for _, change := range []string{
		`p90_delay_s = p90_delay_s + 1e-6 * greatest(abs(p90_delay_s), 1)`,
		`event_count = event_count + 1`,
	} {
		harness.ExecSQL(t, db, `UPDATE `+flinkpeer.Table+` SET `+change+` WHERE (window_start, dimension, dimension_id) =
			(SELECT window_start, dimension, dimension_id FROM `+flinkpeer.Table+` ORDER BY 1, 2, 3 LIMIT 1)`)
		d, err := flinkpeer.Compare(ctx, flinkpeer.OvstreamSource(db, "rk_flink"), peer)
		if err != nil {
			t.Fatal(err)
		}
		if d.OK() || d.Inexact != 1 || d.OnlyA+d.OnlyB != 0 {
			t.Errorf("after SET %s: want 1 inexact row, got %v", change, d)
		}
	}
}
