//go:build integration

package realkafka_test

import (
	"context"
	"os"
	"strings"
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
	db := harness.FreshDB(t)
	ctx := flinkPeerEqualsDrainAndOracle(t, db, "flinkpeer", false)

	// The comparison sees a P90 off by more than the tolerance, then a count
	// off by one too (the same row: still one inexact row).
	peer := flinkpeer.PeerSource(db)
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

// The peer's exactly-once form (flinkpeer.Options.ExactlyOnce: the JDBC
// connector's XA sink, committed at checkpoints, the last one when the
// bounded job ends) on the same data: its rows equal run --drain's and the
// SQL oracle's like the at-least-once form's; the rows came through
// prepared transactions (the server's statement log holds at least one
// PREPARE TRANSACTION, and a COMMIT PREPARED for each), and once the JVM
// has exited none is left prepared (pg_prepared_xacts is empty). It runs on
// a PostgreSQL of its own that allows prepared transactions and logs every
// statement, so it never depends on the shared server's settings.
func TestRealKafkaFlinkPeerXAEqualsDrainAndOracle(t *testing.T) {
	pg := harness.StartPrivatePG(t, "max_prepared_transactions = 16", "log_statement = 'all'")
	db := pg.FreshDB()
	flinkPeerEqualsDrainAndOracle(t, db, "flinkxa", true)
	if n := harness.Scalar[int64](t, db, `SELECT count(*) FROM pg_prepared_xacts`); n != 0 {
		t.Errorf("%d transactions left prepared", n)
	}
	log, err := os.ReadFile(pg.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	prepared, committed := strings.Count(string(log), "PREPARE TRANSACTION '"), strings.Count(string(log), "COMMIT PREPARED '")
	if prepared == 0 || committed != prepared {
		t.Errorf("the server's log holds %d PREPARE TRANSACTION and %d COMMIT PREPARED, want as many, at least 1", prepared, committed)
	} else {
		t.Logf("%d transactions prepared and committed", prepared)
	}
}

// flinkPeerEqualsDrainAndOracle produces the Auckland peak into topics of
// its own (prefix), drains them with ovstream into db (pipeline rk_flink),
// runs the Flink peer (its exactly-once form when xa) into flinkpeer.Table
// in db, and fails unless the peer's rows equal ovstream's and the SQL
// oracle's. It returns a context for the test's remaining queries.
func flinkPeerEqualsDrainAndOracle(t *testing.T, db, prefix string, xa bool) context.Context {
	t.Helper()
	c := sharedKafka(t)
	pred, pos := kafkaTopics(t, c, prefix, nil)
	produceAuckland(t, c.Bootstrap(), pred, pos)
	harness.Drain(t, db, c.Bootstrap(), "--pipeline", "rk_flink", "--topics", pred+","+pos, "--allowed-lateness", "10m")
	if n := harness.LoadOracleInput(t, db, c.Nodes[0].Addr(), pred); n != 4610 {
		t.Fatalf("topic %s holds %d records, want 4610", pred, n)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	if xa {
		if err := flinkpeer.CheckExactlyOnce(ctx, db, flinkpeer.DefaultParallelism); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, flinkpeer.TableDDL)
	conn.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r, err := flinkpeer.Run(ctx, flinkpeer.Options{Bootstrap: c.Bootstrap(), Topic: pred, DatabaseURL: db, ExactlyOnce: xa})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Flink %s (exactly-once %v): %v wall, %v CPU, peak RSS %d MB", flinkpeer.Version, xa,
		r.Elapsed.Round(time.Millisecond), r.CPU().Round(time.Millisecond), r.MaxRSS>>20)

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
	return ctx
}
