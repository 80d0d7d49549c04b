//go:build integration

package integration

import (
	"net/url"
	"sort"
	"strings"
	"testing"

	"github.com/ovstream/ovstream/store"
)

// The demo says at once, before it starts a broker or produces anything,
// that the database DATABASE_URL names does not exist, and how to create it.
func TestDemoNamesAMissingDatabaseFirst(t *testing.T) {
	u, err := url.Parse(testDatabaseURL())
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/ovs_no_such_database"
	out, errOut, code := runCLI(t, []string{"DATABASE_URL=" + u.String()}, "demo", "--data", "../testdata")
	if code != 1 || !strings.Contains(errOut, `database "ovs_no_such_database" does not exist`) ||
		!strings.Contains(errOut, "createdb ovs_no_such_database") {
		t.Errorf("demo with a missing database: exit %d, stderr:\n%s", code, errOut)
	}
	if strings.Contains(out, "produced") || strings.Contains(out, "embedded broker") {
		t.Errorf("the demo started producing before it checked the database:\n%s", out)
	}
}

// A second demo into the same database succeeds (its new embedded broker's
// topics have other topic IDs than the offsets stored before) and writes the
// same delay_aggregates, distributions included, as the first; another
// pipeline's rows in that database are left alone, even when
// OVSTREAM_PIPELINE names it.
func TestDemoTwiceWritesTheSameTable(t *testing.T) {
	db := emptyDB(t)
	// The production settings of another pipeline in the environment: the
	// demo writes and drops pipeline demo only, and drops no partitions.
	env := []string{"DATABASE_URL=" + db, "OVSTREAM_DATABASE_URL=", "OVSTREAM_PIPELINE=other", "OVSTREAM_RETENTION=1d"}
	var tables [2][]string
	for i := range tables {
		out, errOut, code := runCLI(t, env, "demo", "--data", "../testdata")
		if code != 0 {
			t.Fatalf("demo %d: exit %d\n%s%s", i+1, code, out, errOut)
		}
		tables[i] = append(dump(t, db, dumpAggregates+` WHERE pipeline = 'demo'`),
			dump(t, db, dumpDistributions+` WHERE pipeline = 'demo'`)...)
		if i == 0 {
			exec1(t, db, `INSERT INTO vehicle_latest (pipeline, vehicle_id, lat, lon, observed_at, kafka_partition, kafka_offset)
				VALUES ('other', 'v1', 0, 0, now(), 0, 0)`)
		}
	}
	if len(tables[0]) < 1000 {
		t.Fatalf("the first demo wrote %d rows", len(tables[0]))
	}
	sameRows(t, "second demo vs first", tables[1], tables[0])
	if n := dump(t, db, `SELECT count(*) FROM vehicle_latest WHERE pipeline = 'other'`); n[0] != "[1]" {
		t.Errorf("another pipeline's rows after the second demo: %v, want 1", n)
	}
	// store.DropPipeline, which the demo uses, knows every table keyed by pipeline.
	want := dump(t, db, `SELECT c.relname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
		JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE a.attname = 'pipeline' AND n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition`)
	var got []string
	for _, tbl := range store.PipelineTables {
		got = append(got, "["+tbl+"]")
	}
	sort.Strings(got)
	sameRows(t, "store.PipelineTables vs the tables with a pipeline column", got, want)
}
