//go:build integration

package harness

import (
	"archive/zip"
	"encoding/csv"
	"strings"
	"testing"
)

// HalifaxStatic is the trimmed Halifax Transit static GTFS zip of testdata/.
var HalifaxStatic = RepoPath("testdata/halifax-20251106/google_transit_trimmed.zip")

// ZipTable reads one CSV file of a GTFS zip as rows by column name, with
// encoding/csv (independently of the producer's reader).
func ZipTable(t *testing.T, zipPath, name string) []map[string]string {
	t.Helper()
	z, err := zip.OpenReader(zipPath)
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	f, err := z.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil || len(recs) == 0 {
		t.Fatalf("%s: %v", name, err)
	}
	head := recs[0]
	head[0] = strings.TrimPrefix(head[0], "\uFEFF")
	var out []map[string]string
	for _, r := range recs[1:] {
		m := map[string]string{}
		for i, c := range head {
			m[c] = r[i]
		}
		out = append(out, m)
	}
	return out
}

// NameRow is one row of the names table without its times.
type NameRow struct{ Name, Short string }
