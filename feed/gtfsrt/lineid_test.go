package gtfsrt_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/MobilityData/gtfs-realtime-bindings/golang/gtfs"
	"google.golang.org/protobuf/proto"

	"github.com/ovstream/ovstream/feed/gtfsrt"
	"github.com/ovstream/ovstream/feed/gtfsstatic"
)

// versionedRoutes is a static feed whose route ids carry GTFS version
// suffixes, as Auckland's do: route 001 in two versions, 027 in one, one
// route without a short name.
var versionedRoutes = map[string]string{
	"agency.txt":     "agency_id,agency_name,agency_url,agency_timezone\nAT,Auckland Transport,http://at.example,Pacific/Auckland\n",
	"calendar.txt":   "service_id,monday,tuesday,wednesday,thursday,friday,saturday,sunday,start_date,end_date\nS,1,1,1,1,1,1,1,20160501,20160630\n",
	"trips.txt":      "route_id,service_id,trip_id\n",
	"stop_times.txt": "trip_id,arrival_time,departure_time,stop_id,stop_sequence\n",
	"routes.txt": "route_id,route_short_name,route_long_name\n" +
		"00104-20160512154122_v40.34,001,Mt Albert To City\n" +
		"00104-20160603101500_v41.2,001,Mt Albert To City\n" +
		"02701-20160512154122_v40.34,027,Three Kings To City\n" +
		"03301-20160512154122_v40.34,,Otahuhu Shuttle\n",
}

func TestLineIDRouteShortName(t *testing.T) {
	dir := t.TempDir()
	for name, body := range versionedRoutes {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sched, err := gtfsstatic.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	i := func(v int32) *int32 { return &v }
	feed := filepath.Join(t.TempDir(), "tu.pb")
	writeFeed(t, feed, 1463601620,
		tripEntity("e1", "T1", "00104-20160512154122_v40.34", 0, stu("S1", 1, i(30), nil), stu("S2", 2, i(40), nil)),
		tripEntity("e2", "T2", "00104-20160603101500_v41.2", 0, stu("S1", 1, i(60), nil)),
		tripEntity("e3", "T3", "02701-20160512154122_v40.34", 0, stu("S3", 1, i(-5), nil)),
		tripEntity("e4", "T4", "03301-20160512154122_v40.34", 0, stu("S4", 1, i(1), nil)), // no short name
		tripEntity("e5", "T5", "99999-20160512154122_v40.34", 0, stu("S5", 1, i(2), nil)), // not in routes.txt
		&gtfs.FeedEntity{Id: proto.String("v1"), Vehicle: &gtfs.VehiclePosition{
			Trip:     &gtfs.TripDescriptor{TripId: proto.String("T2"), RouteId: proto.String("00104-20160603101500_v41.2")},
			Vehicle:  &gtfs.VehicleDescriptor{Id: proto.String("V1")},
			Position: &gtfs.Position{Latitude: proto.Float32(-36.85), Longitude: proto.Float32(174.76)}}},
	)
	lines := func(res *gtfsrt.Result) string {
		var out []string
		for _, p := range res.Predictions {
			out = append(out, fmt.Sprintf("%s:%s:%s:%s", p.TripID, p.Line, p.LineName, p.LineShortName))
		}
		return strings.Join(out, " ")
	}

	byRoute, err := gtfsrt.Load([]string{feed}, gtfsrt.Options{Operator: "AT", Schedule: sched})
	if err != nil {
		t.Fatal(err)
	}
	want := "T1:00104-20160512154122_v40.34:Mt Albert To City:001 T1:00104-20160512154122_v40.34:Mt Albert To City:001 " +
		"T2:00104-20160603101500_v41.2:Mt Albert To City:001 T3:02701-20160512154122_v40.34:Three Kings To City:027 " +
		"T4:03301-20160512154122_v40.34:Otahuhu Shuttle: T5:99999-20160512154122_v40.34::"
	if got := lines(byRoute); got != want {
		t.Fatalf("--line-id route_id:\n got %s\nwant %s", got, want)
	}

	byName, err := gtfsrt.Load([]string{feed}, gtfsrt.Options{Operator: "AT", Schedule: sched, LineID: gtfsrt.LineIDRouteShortName})
	if err != nil {
		t.Fatal(err)
	}
	want = "T1:001:Mt Albert To City:001 T1:001:Mt Albert To City:001 T2:001:Mt Albert To City:001 T3:027:Three Kings To City:027"
	if got := lines(byName); got != want {
		t.Fatalf("--line-id route_short_name:\n got %s\nwant %s", got, want)
	}
	if want := map[string]int{gtfsrt.SkipNoShortName: 2}; !equalCounts(byName.Skipped, want) {
		t.Fatalf("skipped %v, want %v", byName.Skipped, want)
	}
	if len(byName.Positions) != 1 || byName.Positions[0].Line != "001" {
		t.Fatalf("positions %+v, want line 001", byName.Positions)
	}
	distinct := func(res *gtfsrt.Result) int {
		var ls []string
		for _, p := range res.Predictions {
			ls = append(ls, p.Line)
		}
		slices.Sort(ls)
		return len(slices.Compact(ls))
	}
	if a, b := distinct(byRoute), distinct(byName); a != 5 || b != 2 {
		t.Fatalf("distinct lines: %d by route_id, %d by short name; want 5 and 2", a, b)
	}

	// Without a static feed the flag says which flag it needs; a wrong value
	// names the choices.
	for _, tc := range []struct {
		opt  gtfsrt.Options
		want []string
	}{
		{gtfsrt.Options{Operator: "AT", LineID: gtfsrt.LineIDRouteShortName}, []string{"--line-id route_short_name", "--gtfs-static"}},
		{gtfsrt.Options{Operator: "AT", LineID: "route_long_name", Schedule: sched}, []string{`--line-id "route_long_name"`, "route_id or route_short_name"}},
	} {
		_, err := gtfsrt.Load([]string{feed}, tc.opt)
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: error %v, want it to say %q", tc.opt.LineID, err, w)
			}
		}
	}
}

// Names from a static feed always meet the data contract: invalid UTF-8
// (a Latin-1 file) replaced, NUL dropped, cut at a character boundary to
// 256 bytes.
func TestContractName(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"Mumford Terminal", "Mumford Terminal"},
		{"Caf\xe9 de la Gare", "Caf\uFFFD de la Gare"},
		{"A\x00B", "AB"},
		{strings.Repeat("x", 300), strings.Repeat("x", 256)},
		{strings.Repeat("x", 255) + "\u20ac", strings.Repeat("x", 255)}, // the euro sign does not fit
	} {
		if got := gtfsrt.ContractName(tc.in); got != tc.want {
			t.Errorf("ContractName(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
