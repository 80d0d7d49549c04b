//go:build integration

package ops

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ovstream/ovstream/integration/harness"
)

// The demo ranks the ten most delayed lines of each feed's busiest window
// by P90, as the dashboard's "Most delayed" page does, and says so: each of
// its three tables has that header and its P90 column never rises from one
// row to the next (ties by id), while the mean column is free to.
func TestDemoRanksMostDelayedLinesByP90(t *testing.T) {
	db := harness.EmptyDB(t)
	out, errOut, code := harness.RunCLI(t, []string{"DATABASE_URL=" + db}, "demo", "--data", "../../testdata")
	if code != 0 {
		t.Fatalf("demo: exit %d\n%s%s", code, out, errOut)
	}
	header := regexp.MustCompile(`(?m)^ten most delayed lines of the busiest window .*, ranked by P90 as the dashboard:\n` +
		`\s+id\s+name\s+count\s+p90 s\s+mean s\s+max s\n((?:  \S.*\n)+)`)
	tables := header.FindAllStringSubmatch(out, -1)
	if len(tables) != 3 {
		t.Fatalf("the demo printed %d tables of the most delayed lines ranked by P90 with columns count, p90 s, mean s, max s, want 3:\n%s",
			len(tables), out)
	}
	meanRises := false
	for _, tb := range tables {
		type row struct {
			id        string
			p90, mean float64
		}
		var rows []row
		for _, line := range strings.Split(strings.TrimRight(tb[1], "\n"), "\n") {
			f := strings.Fields(line)
			p90, err1 := strconv.ParseFloat(f[len(f)-3], 64)
			mean, err2 := strconv.ParseFloat(f[len(f)-2], 64)
			if err1 != nil || err2 != nil {
				t.Fatalf("row %q: p90 %v, mean %v", line, err1, err2)
			}
			rows = append(rows, row{f[0], p90, mean})
		}
		if len(rows) != 10 {
			t.Errorf("%d lines ranked, want 10:\n%s", len(rows), tb[0])
		}
		for i := 1; i < len(rows); i++ {
			if a, b := rows[i-1], rows[i]; b.p90 > a.p90 || b.p90 == a.p90 && b.id < a.id {
				t.Errorf("%s (P90 %.1f) ranked after %s (P90 %.1f): not by P90, ties by id:\n%s", b.id, b.p90, a.id, a.p90, tb[0])
			}
			meanRises = meanRises || rows[i].mean > rows[i-1].mean
		}
	}
	if !meanRises {
		t.Errorf("in no table does the mean rise from one row to the next: the samples no longer tell P90 from mean order")
	}
	checkDemoOnTime(t, db, out)
}

// checkDemoOnTime checks the demo's on-time line of each feed against
// counts over its stop_visits written here: the visits, those with
// -60 <= delay_s <= 300 (na) and -30 <= delay_s <= 180 (crow), each share
// to 0.1 %; a feed without visits (Auckland: no start_date) says why.
func checkDemoOnTime(t *testing.T, db, out string) {
	t.Helper()
	lines := regexp.MustCompile(`(?m)^stop visits: .*$`).FindAllString(out, -1)
	for i, pipeline := range []string{"demo-nl-ovapi", "demo-auckland", "demo-halifax"} {
		c := harness.Dump(t, db, `SELECT count(*), count(*) FILTER (WHERE delay_s >= -60 AND delay_s <= 300),
			count(*) FILTER (WHERE delay_s >= -30 AND delay_s <= 180) FROM stop_visits WHERE pipeline = '`+pipeline+`'`)
		var n, na, crow int64
		if _, err := fmt.Sscanf(c[0], "[%d %d %d]", &n, &na, &crow); err != nil {
			t.Fatalf("%s: %v", c[0], err)
		}
		want := "stop visits: none (its predictions carry no start_date, the service day a visit needs)"
		if n > 0 {
			want = fmt.Sprintf("stop visits: %d; on time: %.1f %% (%d) by na (60 s early to 300 s late), %.1f %% (%d) by crow "+
				"(30 s early to 180 s late); per line: ovstream report --metric on-time", n, 100*float64(na)/float64(n), na,
				100*float64(crow)/float64(n), crow)
		}
		if i >= len(lines) || lines[i] != want {
			t.Errorf("%s: the demo's on-time line, want\n%s\nall of them:\n%s", pipeline, want, strings.Join(lines, "\n"))
		}
	}
	if len(lines) != 3 {
		t.Errorf("%d on-time lines, want one per feed (3)", len(lines))
	}
}
