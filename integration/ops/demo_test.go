//go:build integration

package ops

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/ovstream/ovstream/integration/harness"
	"github.com/ovstream/ovstream/store"
)

// The demo says at once, before it starts a broker or produces anything,
// that the database DATABASE_URL names does not exist, and how to create it.
func TestDemoNamesAMissingDatabaseFirst(t *testing.T) {
	u, err := url.Parse(harness.TestDatabaseURL())
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/ovs_no_such_database"
	out, errOut, code := harness.RunCLI(t, []string{"DATABASE_URL=" + u.String()}, "demo", "--data", "../../testdata")
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
	db := harness.EmptyDB(t)
	// The production settings of another pipeline in the environment: the
	// demo writes and drops its pipelines demo-* only, and drops no partitions.
	env := []string{"DATABASE_URL=" + db, "OVSTREAM_DATABASE_URL=", "OVSTREAM_PIPELINE=other", "OVSTREAM_RETENTION=1d"}
	var tables [2][]string
	var out string
	for i := range tables {
		var errOut string
		var code int
		out, errOut, code = harness.RunCLI(t, env, "demo", "--data", "../../testdata")
		if code != 0 {
			t.Fatalf("demo %d: exit %d\n%s%s", i+1, code, out, errOut)
		}
		tables[i] = append(harness.Dump(t, db, harness.DumpAggregates+` WHERE pipeline LIKE 'demo-%'`),
			harness.Dump(t, db, harness.DumpDistributions+` WHERE pipeline LIKE 'demo-%'`)...)
		if i == 0 {
			harness.Exec1(t, db, `INSERT INTO vehicle_latest (pipeline, vehicle_id, lat, lon, observed_at, kafka_partition, kafka_offset)
				VALUES ('other', 'v1', 0, 0, now(), 0, 0)`)
		}
	}
	if len(tables[0]) < 1000 {
		t.Fatalf("the first demo wrote %d rows", len(tables[0]))
	}
	demoFeedsApart(t, db, out)
	harness.SameRows(t, "second demo vs first", tables[1], tables[0])
	if n := harness.Dump(t, db, `SELECT count(*) FROM vehicle_latest WHERE pipeline = 'other'`); n[0] != "[1]" {
		t.Errorf("another pipeline's rows after the second demo: %v, want 1", n)
	}
	// store.DropPipeline, which the demo uses, knows every table keyed by pipeline.
	want := harness.Dump(t, db, `SELECT c.relname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
		JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE a.attname = 'pipeline' AND n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition`)
	var got []string
	for _, tbl := range store.PipelineTables {
		got = append(got, "["+tbl+"]")
	}
	sort.Strings(got)
	harness.SameRows(t, "store.PipelineTables vs the tables with a pipeline column", got, want)
}

// demoFeedsApart checks that each bundled feed went into a pipeline and
// topics of its own (with one pipeline for three feeds from 2014, 2016
// and 2025, the dashboard opened on an empty last 24 hours): each pipeline's
// network rows count exactly the records stored in its own predictions
// topic, all in its feed's year, and the dashboard address the demo printed
// for the feed (demo output out) opens on points of that year.
func demoFeedsApart(t *testing.T, db, out string) {
	t.Helper()
	years := map[string]string{"demo-nl-ovapi": "2014", "demo-auckland": "2016", "demo-halifax": "2025"}
	for pipeline, year := range years {
		got := harness.Dump(t, db, fmt.Sprintf(`SELECT (SELECT sum(event_count)::bigint FROM delay_aggregates WHERE pipeline = '%[1]s' AND dimension = 'network'),
			(SELECT sum(next_offset)::bigint FROM stream_positions WHERE pipeline = '%[1]s' AND topic = '%[1]s.arrival_predictions'),
			(SELECT count(*) FROM stream_positions WHERE pipeline = '%[1]s' AND topic NOT LIKE '%[1]s.%%'),
			(SELECT string_agg(DISTINCT extract(year FROM window_start)::text, ',') FROM delay_aggregates WHERE pipeline = '%[1]s')`, pipeline))
		var events, stored int64
		var foreign int
		var gotYears string
		if _, err := fmt.Sscanf(strings.Trim(got[0], "[]"), "%d %d %d %s", &events, &stored, &foreign, &gotYears); err != nil {
			t.Fatalf("%s: %v: %v", pipeline, got, err)
		}
		if events == 0 || events != stored || foreign != 0 || gotYears != year {
			t.Errorf("%s: %d events in its network rows, %d records stored in its predictions topic, %d positions of other topics, "+
				"windows of %s; want equal counts, 0, %s", pipeline, events, stored, foreign, gotYears, year)
		}
	}
	srv := harness.StartOvstream(t, nil, "serve", "--database-url", db, "--addr", "127.0.0.1:0")
	base := harness.Printed(t, srv, regexp.MustCompile(`dashboard of pipeline \S+: (http://[0-9.:]+/)`))
	links := regexp.MustCompile(`http://127\.0\.0\.1:8080/\?(pipeline=(demo-[a-z-]+)&tz=\S+)`).FindAllStringSubmatch(out, -1)
	if len(links) != len(years) {
		t.Fatalf("the demo printed %d dashboard addresses, want %d:\n%s", len(links), len(years), out)
	}
	for _, l := range links {
		resp, err := http.Get(base + "api/delay?" + l[1])
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Points []struct{ Start string } `json:"points"`
		}
		err = json.NewDecoder(resp.Body).Decode(&doc)
		resp.Body.Close()
		if err != nil || len(doc.Points) == 0 {
			t.Errorf("%s: the delay page's default range has no points (%v)", l[0], err)
		}
		for _, p := range doc.Points {
			if !strings.HasPrefix(p.Start, years[l[2]]) {
				t.Errorf("%s: a point at %s, want %s", l[0], p.Start, years[l[2]])
			}
		}
	}
}
