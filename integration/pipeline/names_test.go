//go:build integration

package pipeline

import (
	"bytes"
	"cmp"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/MobilityData/gtfs-realtime-bindings/golang/gtfs"
	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/integration/harness"
	"github.com/ovstream/ovstream/store"
)

// namesTable reads the names table of pipeline: dimension -> id -> row.
func namesTable(t *testing.T, db, pipeline string) map[string]map[string]harness.NameRow {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT dimension, dimension_id, name, coalesce(short_name, '') FROM names WHERE pipeline = $1`, pipeline)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]harness.NameRow{"line": {}, "station": {}}
	var dim, id string
	var nr harness.NameRow
	if _, err := pgx.ForEachRow(rows, []any{&dim, &id, &nr.Name, &nr.Short}, func() error {
		out[dim][id] = nr
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// The Halifax pair produced with its static feed, drained by one instance:
// for every line and station of delay_aggregates, the names table holds
// exactly the route_long_name (and route_short_name) and stop_name that
// routes.txt and stops.txt of the zip give, read here with encoding/csv;
// `report` prints them next to the ids (csv, json, text). Two instances of
// a split pipeline over the same records write the same names table.
func TestNamesHalifaxStaticFeed(t *testing.T) {
	routes := map[string]harness.NameRow{}
	for _, r := range harness.ZipTable(t, harness.HalifaxStatic, "routes.txt") {
		routes[r["route_id"]] = harness.NameRow{Name: cmp.Or(r["route_long_name"], r["route_short_name"]), Short: r["route_short_name"]}
	}
	stops := map[string]harness.NameRow{}
	for _, r := range harness.ZipTable(t, harness.HalifaxStatic, "stops.txt") {
		if r["stop_name"] != "" {
			stops[r["stop_id"]] = harness.NameRow{Name: r["stop_name"]}
		}
	}
	addr, _ := harness.StartBrokerProcess(t, "127.0.0.1:0", "")
	harness.ProduceCLI(t, addr, "--operator", "HFX", "--gtfs-static", harness.HalifaxStatic, "--gtfs-rt", "../../testdata/halifax-20251106")
	db := harness.FreshDB(t)
	harness.Drain(t, db, addr, "--allowed-lateness", "1h")

	got := namesTable(t, db, "ovstream")
	for _, dim := range []struct {
		name string
		zip  map[string]harness.NameRow
	}{{"line", routes}, {"station", stops}} {
		ids := harness.Dump(t, db, `SELECT DISTINCT dimension_id FROM delay_aggregates WHERE dimension = '`+dim.name+`'`)
		want := map[string]harness.NameRow{}
		for _, id := range ids {
			id = strings.Trim(id, "[]")
			if nr, ok := dim.zip[id]; ok {
				want[id] = nr
			}
		}
		if len(want) < 10 {
			t.Fatalf("%s: only %d of %d ids have a name in the zip", dim.name, len(want), len(ids))
		}
		if !maps.Equal(got[dim.name], want) {
			for id, w := range want {
				if got[dim.name][id] != w {
					t.Errorf("%s %s: names table %+v, zip %+v", dim.name, id, got[dim.name][id], w)
				}
			}
			t.Fatalf("%s: names table has %d rows, the zip names %d of the %d ids", dim.name, len(got[dim.name]), len(want), len(ids))
		}
		t.Logf("%s: %d ids, %d named, every name equal to the zip's", dim.name, len(ids), len(want))
	}
	if r := got["line"]["320"]; r != (harness.NameRow{Name: "Airport - Fall River Regional Exp", Short: "320"}) {
		t.Fatalf("line 320: %+v", r)
	}

	// report: the name column holds the zip's name for every id, in csv and json.
	args := []string{"--dimension", "station", "--from", "2025-11-06", "--to", "2025-11-08", "--by", "events", "--top", "40"}
	recs, err := csv.NewReader(bytes.NewReader(harness.Report(t, db, append(args, "--csv")...))).ReadAll()
	if err != nil || len(recs) < 41 || recs[0][1] != "station" || recs[0][2] != "name" {
		t.Fatalf("report --csv: %v, %d lines: %q", err, len(recs), recs[:min(2, len(recs))])
	}
	for _, r := range recs[1:] {
		if r[2] != stops[r[1]].Name {
			t.Errorf("report --csv: station %s named %q, stops.txt says %q", r[1], r[2], stops[r[1]].Name)
		}
	}
	var doc struct {
		Rows []struct {
			ID   string  `json:"id"`
			Name *string `json:"name"`
		} `json:"rows"`
	}
	lineArgs := []string{"--dimension", "line", "--from", "2025-11-06", "--to", "2025-11-08"}
	if err := json.Unmarshal(harness.Report(t, db, append(lineArgs, "--json")...), &doc); err != nil || len(doc.Rows) == 0 {
		t.Fatalf("report --json: %v, %d rows", err, len(doc.Rows))
	}
	for _, r := range doc.Rows {
		if want, ok := routes[r.ID]; ok != (r.Name != nil) || ok && *r.Name != want.Name {
			t.Errorf("report --json: line %s named %v, routes.txt %q", r.ID, r.Name, want.Name)
		}
	}
	if text := string(harness.Report(t, db, lineArgs...)); !strings.Contains(text, "Airport - Fall River Regional Exp") {
		t.Errorf("report (text) does not name line 320:\n%s", text)
	}
	// store.Names, the function for other readers (the dashboard).
	conn, err := pgx.Connect(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	some, err := store.Names(context.Background(), conn, "ovstream", "line", []string{"320", "no-such-line"})
	if err != nil || len(some) != 1 || some["320"].Name != "Airport - Fall River Regional Exp" || some["320"].ShortName != "320" {
		t.Fatalf("store.Names: %v %+v", err, some)
	}

	// Two instances of a split pipeline write the same names table.
	splitDB := harness.FreshDB(t)
	harness.WaitAll(t, harness.StartSplit(t, splitDB, addr, harness.Split2, "--drain", "--allowed-lateness", "1h"), "split drain")
	if split := namesTable(t, splitDB, "ovstream"); !maps.EqualFunc(split, got, maps.Equal) {
		t.Fatalf("split names table (%d lines, %d stations) differs from one instance's (%d, %d)",
			len(split["line"]), len(split["station"]), len(got["line"]), len(got["station"]))
	}
	harness.SameRows(t, "delay_aggregates of the split drain vs one drain", harness.Dump(t, splitDB, harness.DumpAggregates), harness.Dump(t, db, harness.DumpAggregates))
}

// A name carried by a later record replaces the earlier one (updated_at
// moves); an unchanged name rewrites nothing (updated_at stays); a record
// redelivered or produced late with an older event time never brings an old
// name back. Each step is a `run --drain` of its own, as after a restart.
func TestNamesLaterRecordReplaces(t *testing.T) {
	addr := harness.StartBroker(t)
	db := harness.FreshDB(t)
	rec := func(trip, at, lineName, stopName string) string {
		return fmt.Sprintf(`{"trip_id":%q,"line":"L1","stop_id":"S1","operator":"OP","delay_s":30,"event_time":%q,`+
			`"line_name":%q,"line_short_name":"1","stop_name":%q}`, trip, at, lineName, stopName)
	}
	type state struct {
		line, stop       string
		lineAt, stopAt   time.Time // observed_at
		lineUpd, stopUpd time.Time // updated_at
	}
	read := func() state {
		var s state
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		for _, x := range []struct {
			dim           string
			name          *string
			at, updatedAt *time.Time
		}{{"line", &s.line, &s.lineAt, &s.lineUpd}, {"station", &s.stop, &s.stopAt, &s.stopUpd}} {
			err := conn.QueryRow(ctx, `SELECT name, observed_at, updated_at FROM names WHERE pipeline = 'ovstream' AND dimension = $1`,
				x.dim).Scan(x.name, x.at, x.updatedAt)
			if err != nil {
				t.Fatalf("%s: %v", x.dim, err)
			}
		}
		return s
	}
	step := func(lines ...string) state {
		harness.ProduceLines(t, addr, harness.PredictionsTopic, lines...)
		harness.Drain(t, db, addr)
		return read()
	}
	ts := func(s string) time.Time { v, _ := time.Parse(time.RFC3339, s); return v }

	s1 := step(rec("t1", "2025-11-06T21:00:00Z", "Spring Garden", "Mumford Terminal"))
	if s1.line != "Spring Garden" || s1.stop != "Mumford Terminal" || !s1.lineAt.Equal(ts("2025-11-06T21:00:00Z")) {
		t.Fatalf("first names: %+v", s1)
	}
	time.Sleep(10 * time.Millisecond) // updated_at is the commit's now(): let it move
	s2 := step(rec("t2", "2025-11-06T21:10:00Z", "Spring Garden Road", "Mumford Terminal"))
	if s2.line != "Spring Garden Road" || !s2.lineAt.Equal(ts("2025-11-06T21:10:00Z")) || !s2.lineUpd.After(s1.lineUpd) {
		t.Fatalf("renamed line: %+v, before %+v", s2, s1)
	}
	if s2.stop != "Mumford Terminal" || !s2.stopUpd.Equal(s1.stopUpd) || !s2.stopAt.Equal(s1.stopAt) {
		t.Fatalf("unchanged stop was rewritten: %+v, before %+v", s2, s1)
	}
	// Older than the rename (21:05 < 21:10): late for its window, and its
	// old name is not brought back either; same for a redelivered copy of
	// the first record.
	s3 := step(rec("t3", "2025-11-06T21:05:00Z", "Spring Garden", "Mumford Terminal"),
		rec("t1", "2025-11-06T21:00:00Z", "Spring Garden", "Mumford Terminal"))
	if s3 != s2 {
		t.Fatalf("an older record changed the names: %+v, before %+v", s3, s2)
	}
	if late := harness.Dump(t, db, `SELECT count(*) FROM dead_letters WHERE reason = 'late'`); late[0] != "[2]" {
		t.Fatalf("late dead letters: %v, want 2", late)
	}
}

// `produce --line-id route_short_name` keys lines by route_short_name from
// the static feed: on a feed whose route ids differ only by their GTFS
// version suffix (as Auckland's: 00104-20160512154122_v40.34), route 001's
// two versions are one line where --line-id route_id (the default) gives
// two; each line counts the updates of its routes, by a hand count over the
// feed written here. Without --gtfs-static the flag is refused, naming it.
func TestProduceLineIDRouteShortName(t *testing.T) {
	dir := t.TempDir()
	static := filepath.Join(dir, "static")
	if err := os.Mkdir(static, 0o755); err != nil {
		t.Fatal(err)
	}
	shortName := map[string]string{
		"00104-20160512154122_v40.34": "001",
		"00104-20160603101500_v41.2":  "001",
		"02701-20160512154122_v40.34": "027",
	}
	routesTxt := "route_id,route_short_name,route_long_name\n"
	for _, id := range slices.Sorted(maps.Keys(shortName)) {
		routesTxt += id + "," + shortName[id] + ",Route " + shortName[id] + "\n"
	}
	for name, body := range map[string]string{
		"agency.txt":     "agency_id,agency_name,agency_url,agency_timezone\nAT,Auckland Transport,http://at.example,Pacific/Auckland\n",
		"calendar.txt":   "service_id,monday,tuesday,wednesday,thursday,friday,saturday,sunday,start_date,end_date\nS,1,1,1,1,1,1,1,20160501,20160630\n",
		"trips.txt":      "route_id,service_id,trip_id\n",
		"stop_times.txt": "trip_id,arrival_time,departure_time,stop_id,stop_sequence\n",
		"routes.txt":     routesTxt,
	} {
		if err := os.WriteFile(filepath.Join(static, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Trips: (trip, route, updates), at 2016-05-18T20:00:00Z.
	trips := []struct {
		trip, route string
		delays      []int32
	}{
		{"T1", "00104-20160512154122_v40.34", []int32{30, 45, 60}},
		{"T2", "00104-20160603101500_v41.2", []int32{-10, 5}},
		{"T3", "02701-20160512154122_v40.34", []int32{120}},
		{"T4", "00104-20160603101500_v41.2", []int32{15}},
	}
	const ts = 1463601600
	var ents []*gtfs.FeedEntity
	byRoute, byShort := map[string]int{}, map[string]int{} // the hand count
	for _, tr := range trips {
		tu := &gtfs.TripUpdate{Trip: &gtfs.TripDescriptor{TripId: proto.String(tr.trip), RouteId: proto.String(tr.route)}}
		for i, d := range tr.delays {
			tu.StopTimeUpdate = append(tu.StopTimeUpdate, &gtfs.TripUpdate_StopTimeUpdate{StopId: proto.String(fmt.Sprintf("S%d", i)),
				StopSequence: proto.Uint32(uint32(i + 1)), Arrival: &gtfs.TripUpdate_StopTimeEvent{Delay: proto.Int32(d)}})
		}
		ents = append(ents, &gtfs.FeedEntity{Id: proto.String(tr.trip), TripUpdate: tu})
		byRoute[tr.route] += len(tr.delays)
		byShort[shortName[tr.route]] += len(tr.delays)
	}
	b, err := proto.Marshal(&gtfs.FeedMessage{Header: &gtfs.FeedHeader{GtfsRealtimeVersion: proto.String("2.0"),
		Timestamp: proto.Uint64(ts)}, Entity: ents})
	if err != nil {
		t.Fatal(err)
	}
	feed := filepath.Join(dir, "tu.pb")
	if err := os.WriteFile(feed, b, 0o644); err != nil {
		t.Fatal(err)
	}

	lineCounts := func(db string) map[string]int {
		out := map[string]int{}
		for _, r := range harness.Dump(t, db, `SELECT dimension_id || ' ' || sum(event_count) FROM delay_aggregates
			WHERE dimension = 'line' GROUP BY dimension_id`) {
			id, n, _ := strings.Cut(strings.Trim(r, "[]"), " ")
			out[id], _ = strconv.Atoi(n)
		}
		return out
	}
	for _, tc := range []struct {
		args []string
		want map[string]int
	}{
		{nil, byRoute},
		{[]string{"--line-id", "route_short_name"}, byShort},
	} {
		addr := harness.StartBroker(t)
		db := harness.FreshDB(t)
		harness.ProduceCLI(t, addr, append(append([]string{"--operator", "AT", "--gtfs-static", static}, tc.args...), "--gtfs-rt", feed)...)
		harness.Drain(t, db, addr)
		if got := lineCounts(db); !maps.Equal(got, tc.want) {
			t.Fatalf("produce %v: events per line %v, hand count %v", tc.args, got, tc.want)
		}
		if len(tc.args) > 0 {
			if got := namesTable(t, db, "ovstream")["line"]; len(got) != 2 || got["001"] != (harness.NameRow{Name: "Route 001", Short: "001"}) {
				t.Fatalf("names of lines by short name: %+v", got)
			}
		}
	}
	if len(byRoute) != 3 || len(byShort) != 2 || byShort["001"] != byRoute["00104-20160512154122_v40.34"]+byRoute["00104-20160603101500_v41.2"] {
		t.Fatalf("hand count: %v by route, %v by short name", byRoute, byShort)
	}

	p := harness.StartOvstream(t, nil, "produce", "--brokers", "127.0.0.1:1", "--operator", "AT", "--line-id", "route_short_name", "--gtfs-rt", feed)
	if code := p.Wait(t, time.Minute); code != 2 || !strings.Contains(p.Output(), "--line-id route_short_name") ||
		!strings.Contains(p.Output(), "--gtfs-static") {
		t.Fatalf("--line-id route_short_name without --gtfs-static: exit %d:\n%s", code, p.Output())
	}
}

// The names table's upsert (store.Commit): a newer record's name replaces
// the row and moves updated_at; an older record's name (a redelivery after a
// crash) and the same name again leave it as it is; at equal event times
// the greater name wins byte by byte (COLLATE "C": "a" after "B", as
// aggregate.Names decides, whatever the database's collation says). A name
// PostgreSQL refuses (an operator's CHECK) is left out and reported; the
// commit, and the other names, go through.
func TestStoreNamesNewerWins(t *testing.T) {
	var refused []string
	s, url, epoch := harness.OpenStore(t, store.WithNameRefused(func(n aggregate.Name, reason string) { refused = append(refused, n.ID+": "+reason) }))
	ctx := harness.TestCtx(t)
	line := func(id, name string, at time.Time) aggregate.Name {
		return aggregate.Name{NameKey: aggregate.NameKey{Dimension: aggregate.DimLine, ID: id}, Name: name, ShortName: "7", EventTime: at}
	}
	commit := func(names ...aggregate.Name) {
		t.Helper()
		if err := s.Commit(ctx, harness.WithSeqs(t, s, store.Batch{Pipeline: "p", Owner: harness.Owner0, Epoch: epoch, Positions: harness.At0(0), Names: names})); err != nil {
			t.Fatal(err)
		}
	}
	type state struct {
		name    string
		at, upd time.Time
	}
	read := func() state {
		t.Helper()
		var st state
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if err := conn.QueryRow(ctx, `SELECT name, observed_at, updated_at FROM names WHERE pipeline = 'p' AND dimension_id = 'L'`).
			Scan(&st.name, &st.at, &st.upd); err != nil {
			t.Fatal(err)
		}
		return st
	}
	// A collation that orders "a" before "B" (ICU's root locale), as many a
	// database's default does: the upsert must decide by bytes anyway.
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_collation WHERE collname = 'und-x-icu') THEN
		ALTER TABLE names ALTER COLUMN name TYPE text COLLATE "und-x-icu", ALTER COLUMN short_name TYPE text COLLATE "und-x-icu";
		END IF; END $$`); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	commit(line("L", "B", harness.T0))
	first := read()
	for _, tc := range []struct {
		what string
		n    aggregate.Name
		want string
	}{
		{"tie, smaller name", line("L", "A", harness.T0), "B"},
		{"older event time", line("L", "Old", harness.T0.Add(-time.Minute)), "B"},
		{"same name, later", line("L", "B", harness.T0.Add(time.Second)), "B"},
		{"tie, greater in byte order", line("L", "a", harness.T0), "a"},
		{"newer event time", line("L", "New", harness.T0.Add(time.Minute)), "New"},
	} {
		time.Sleep(5 * time.Millisecond)
		before := read()
		commit(tc.n)
		after := read()
		if after.name != tc.want {
			t.Fatalf("%s: name %q, want %q", tc.what, after.name, tc.want)
		}
		changed := after.name != before.name
		if changed && (!after.upd.After(before.upd) || !after.at.Equal(tc.n.EventTime)) || !changed && after != before {
			t.Fatalf("%s: updated_at %v -> %v, observed_at %v -> %v", tc.what, before.upd, after.upd, before.at, after.at)
		}
	}
	if last := read(); !last.at.Equal(harness.T0.Add(time.Minute)) || !last.upd.After(first.upd) {
		t.Fatalf("last state %+v", last)
	}

	conn, err = pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `ALTER TABLE names ADD CONSTRAINT no_refused CHECK (name <> 'Refused Name')`); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	station := aggregate.Name{NameKey: aggregate.NameKey{Dimension: aggregate.DimStation, ID: "S2"}, Name: "Fine", EventTime: harness.T0}
	commit(line("L2", "Refused Name", harness.T0), line("L3", "Also fine", harness.T0), station)
	if len(refused) != 1 || !strings.Contains(refused[0], `L2: PostgreSQL refused the names row (line, L2)`) ||
		!strings.Contains(refused[0], "no_refused") {
		t.Fatalf("refused: %q", refused)
	}
	if n := harness.Query[int64](t, url, `SELECT count(*) FROM names WHERE dimension_id IN ('L3', 'S2')`); n != 2 {
		t.Fatalf("%d of the names beside the refused one written, want 2", n)
	}
	if n := harness.Query[int64](t, url, `SELECT count(*) FROM names WHERE dimension_id = 'L2'`); n != 0 {
		t.Fatal("the refused name was written")
	}
}
