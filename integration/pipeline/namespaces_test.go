//go:build integration

package pipeline

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/broker/embedded"
	"github.com/ovstream/ovstream/integration/harness"
	"github.com/ovstream/ovstream/migrations"
)

// pipelineTables dumps one pipeline's rows of every table that holds results,
// without the pipeline column, so that they compare with another database's.
func pipelineTables(t *testing.T, db, pipeline string) map[string][]string {
	t.Helper()
	where := fmt.Sprintf(" WHERE pipeline = '%s'", pipeline)
	return map[string][]string{
		"delay_aggregates":  harness.Dump(t, db, harness.DumpAggregates+where),
		"distributions":     harness.Dump(t, db, harness.DumpDistributions+where),
		"dead_letters":      harness.Dump(t, db, harness.DumpDeadLetters+where),
		"vehicle_latest":    harness.Dump(t, db, harness.DumpVehicles+where),
		"trip_delay_latest": harness.Dump(t, db, harness.DumpTrips+where),
		"stream_positions": harness.Dump(t, db, `SELECT topic, partition, next_offset, consumed_offset, watermark
			FROM stream_positions`+where),
	}
}

func sameTables(t *testing.T, what string, got, want map[string][]string) {
	t.Helper()
	for table, rows := range want {
		harness.SameRows(t, what+": "+table, got[table], rows)
	}
}

// pipelineOracle is oracleAggregates for one pipeline: the records of the
// partitions it reads, minus its own dead letters.
func pipelineOracle(pipeline, topic string, partitions string) string {
	return strings.Replace(strings.Replace(harness.OracleAggregates,
		"FROM oracle_msgs m\n\tWHERE NOT EXISTS (SELECT 1 FROM dead_letters d\n\t\tWHERE d.topic",
		fmt.Sprintf("FROM oracle_msgs m\n\tWHERE m.topic = '%s' AND m.partition IN (%s) AND NOT EXISTS (SELECT 1 FROM dead_letters d\n\t\tWHERE d.pipeline = '%s' AND d.topic",
			topic, partitions, pipeline), 1), "FROM dims GROUP BY", "FROM dims GROUP BY", 1)
}

// G8: pipelines sharing a database are independent. One topic read by two
// pipelines, one of them split across two instances (partitions 0-2 and
// 3-5: G7), run one after the other and side by side; a third pipeline on
// every partition of both topics with another allowed lateness; two feeds on
// topics of their own, side by side. Each pipeline's tables equal what it
// writes alone in a database of its own, and its delay_aggregates equal the
// SQL oracle over its partitions.
func TestPipelinesShareADatabase(t *testing.T) {
	t.Parallel() // its own broker and databases
	b, err := embedded.Start(embedded.Config{Addr: "127.0.0.1:0", Topics: map[string]int32{
		harness.PredictionsTopic: 6, harness.PositionsTopic: 3, "nl_predictions": 2, "akl_predictions": 2}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	addr := b.Addr()
	harness.ProduceCLI(t, addr, "--gtfs-rt", "../../testdata/nl-ovapi-20141130")
	harness.ProduceCLI(t, addr, "--operator", "AT", "--gtfs-rt", "../../testdata/auckland-20160519-peak10min")
	harness.ProduceCLI(t, addr, "--gtfs-rt", "../../testdata/nl-ovapi-20141130", "--predictions-topic", "nl_predictions",
		"--positions-topic", harness.PositionsTopic)
	harness.ProduceCLI(t, addr, "--operator", "AT", "--gtfs-rt", "../../testdata/auckland-20160519-peak10min",
		"--predictions-topic", "akl_predictions", "--positions-topic", harness.PositionsTopic)

	type pipe struct {
		name  string
		args  []string
		split []string // --partitions of each instance; nil: one instance on every partition
	}
	// A pipeline's partitions are every partition of its topics: low runs
	// as two instances on disjoint halves, high as one.
	low := pipe{"low", []string{"--topics", harness.PredictionsTopic + ","}, []string{
		"arrival_predictions:0,arrival_predictions:1,arrival_predictions:2",
		"arrival_predictions:3,arrival_predictions:4,arrival_predictions:5"}}
	high := pipe{"high", []string{"--topics", harness.PredictionsTopic + ","}, nil}
	strict := pipe{"strict", []string{"--allowed-lateness", "30m"}, nil} // every partition, both topics; nothing late (G1)
	nl := pipe{"nl", []string{"--topics", "nl_predictions,"}, nil}
	akl := pipe{"akl", []string{"--topics", "akl_predictions,"}, nil}
	// run drains p: each of its instances with --drain, side by side.
	run := func(db string, p pipe) {
		var wg sync.WaitGroup
		instances := p.split
		if instances == nil {
			instances = []string{""}
		}
		for _, parts := range instances {
			args := append([]string{"--drain", "--pipeline", p.name}, p.args...)
			if parts != "" {
				args = append(args, "--partitions", parts)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				p2 := harness.StartOvstream(t, nil, harness.RunArgs(db, addr, args...)...)
				if code := p2.Wait(t, 3*time.Minute); code != 0 {
					t.Errorf("pipeline %s: run --drain exited %d:\n%s", p.name, code, harness.Tail(p2.Output(), 30))
				}
			}()
		}
		wg.Wait()
	}

	// Each alone, in a database of its own: the reference.
	alone := map[string]map[string][]string{}
	for _, p := range []pipe{low, high, strict, nl, akl} {
		db := harness.FreshDB(t)
		run(db, p)
		alone[p.name] = pipelineTables(t, db, p.name)
		if len(alone[p.name]["delay_aggregates"]) == 0 {
			t.Fatalf("pipeline %s alone wrote no delay_aggregates rows", p.name)
		}
	}

	// One after the other in one database, in both orders; the two feeds too.
	for _, order := range [][]pipe{{low, high, strict}, {strict, high, low}, {nl, akl}, {akl, nl}} {
		db := harness.FreshDB(t)
		var names []string
		for _, p := range order {
			run(db, p)
			names = append(names, p.name)
		}
		for _, p := range order {
			sameTables(t, fmt.Sprintf("%s in order %v", p.name, names), pipelineTables(t, db, p.name), alone[p.name])
		}
	}

	// Side by side in one database: the split topic, and the two feeds.
	for _, group := range [][]pipe{{low, high, strict}, {nl, akl}} {
		db := harness.FreshDB(t)
		var wg sync.WaitGroup
		for _, p := range group {
			wg.Add(1)
			go func() {
				defer wg.Done()
				run(db, p)
			}()
		}
		wg.Wait()
		for _, p := range group {
			sameTables(t, p.name+" side by side", pipelineTables(t, db, p.name), alone[p.name])
		}
		if group[0].name == "low" {
			harness.LoadOracleInput(t, db, addr, harness.PredictionsTopic)
			for _, p := range []string{"low", "high"} {
				harness.SameRows(t, p+" vs SQL oracle", harness.Dump(t, db, harness.DumpAggregates+" WHERE pipeline = '"+p+"'"),
					harness.Dump(t, db, pipelineOracle(p, harness.PredictionsTopic, "0, 1, 2, 3, 4, 5")))
			}
			// The split pipeline writes what one instance on every partition
			// writes (with the same, generous, lateness: nothing is late).
			harness.SameRows(t, "low (two instances) vs high (one)", harness.Dump(t, db, harness.DumpAggregates+" WHERE pipeline = 'low'"),
				harness.Dump(t, db, harness.DumpAggregates+" WHERE pipeline = 'high'"))
		}
	}
}

// Migration 3 moves the rows written before pipelines were namespaces into
// the pipeline stream_positions names, and a run of that pipeline goes on
// from them: its watermark seed and positions are its own.
func TestMigrationMovesRowsIntoThePipeline(t *testing.T) {
	db := harness.EmptyDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := migrations.UpTo(ctx, db, 2); err != nil { // rows as version 2 wrote them
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, sql := range []string{
		`INSERT INTO pipelines (name, epoch, owner, heartbeat_at, watermark) VALUES ('feed', 4, 'h:1', now(), '2016-05-18T20:40:00Z')`,
		`INSERT INTO stream_positions (pipeline, topic, partition, next_offset, consumed_offset, updated_at)
			VALUES ('feed', 'arrival_predictions', 0, 10, 12, now())`,
		`INSERT INTO delay_aggregates (window_start, window_end, dimension, dimension_id, operator, event_count,
			mean_delay_s, p90_delay_s, min_delay_s, max_delay_s)
			VALUES ('2016-05-18T20:30:00Z', '2016-05-18T20:35:00Z', 'network', 'all', 'AT', 2, 5, 9, 1, 9)`,
		`INSERT INTO vehicle_latest (vehicle_id, lat, lon, observed_at, kafka_partition, kafka_offset)
			VALUES ('v1', 1, 2, '2016-05-18T20:30:00Z', 0, 3)`,
		`INSERT INTO trip_delay_latest (trip_id, line, stop_id, operator, delay_s, observed_at, kafka_partition, kafka_offset)
			VALUES ('t1', 'L', 'S', 'AT', 5, '2016-05-18T20:30:00Z', 0, 4)`,
		`INSERT INTO dead_letters (topic, partition, "offset", key, value, reason, error)
			VALUES ('arrival_predictions', 0, 5, NULL, 'x', 'decode', 'not JSON')`,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	if err := migrations.Up(ctx, db); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"delay_aggregates", "vehicle_latest", "trip_delay_latest", "dead_letters"} {
		if got := harness.Dump(t, db, "SELECT pipeline, count(*) FROM "+table+" GROUP BY pipeline"); fmt.Sprint(got) != "[[feed 1]]" {
			t.Errorf("%s after migration 3: %v, want every row in pipeline feed", table, got)
		}
	}
	if got := harness.Dump(t, db, `SELECT pipeline, next_offset, consumed_offset, watermark FROM stream_positions`); fmt.Sprint(got) !=
		"[[feed 10 12 2016-05-18 20:40:00 +0000 UTC]]" {
		t.Errorf("stream_positions after migration 3: %v", got)
	}
}
