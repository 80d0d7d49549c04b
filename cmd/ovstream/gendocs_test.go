package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// The committed reference pages (docs/cli/*.md, docs/metrics.md) are what
// this binary generates: a command, flag, help text or metric changed without
// regenerating them fails here, naming the page and the command that
// regenerates it.
func TestGeneratedDocs(t *testing.T) {
	files, err := generatedDocs()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		got, err := os.ReadFile(filepath.Join("../../docs", filepath.FromSlash(name)))
		if err != nil {
			t.Errorf("docs/%s: %v; regenerate: %s", name, err, genDocsCommand)
			continue
		}
		if want := files[name]; !bytes.Equal(got, want) {
			t.Errorf("docs/%s is not what the binary generates (%s); regenerate: %s", name, firstDiff(got, want), genDocsCommand)
		}
	}
	committed, err := filepath.Glob("../../docs/cli/*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range committed {
		if _, ok := files["cli/"+filepath.Base(f)]; !ok {
			t.Errorf("docs/cli/%s documents no command of the binary; regenerate: %s", filepath.Base(f), genDocsCommand)
		}
	}
	if len(names) != 28 { // 27 command pages and metrics.md
		t.Errorf("generated %d pages, want 28: %v", len(names), names)
	}
}

// firstDiff names the first line where the committed page differs from the
// generated one.
func firstDiff(committed, generated []byte) string {
	c, g := strings.Split(string(committed), "\n"), strings.Split(string(generated), "\n")
	line := func(l []string, i int) string {
		if i < len(l) {
			return strconv.Quote(l[i])
		}
		return "nothing"
	}
	for i := 0; i < len(c) || i < len(g); i++ {
		if i >= len(c) || i >= len(g) || c[i] != g[i] {
			return fmt.Sprintf("line %d: committed %s, generated %s", i+1, line(c, i), line(g, i))
		}
	}
	return "equal lines, other bytes"
}

// The environment changes what a command does, never its reference page.
func TestGeneratedDocsIgnoreTheEnvironment(t *testing.T) {
	before, err := generatedDocs()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("OVSTREAM_WINDOW", "10m")
	t.Setenv("DATABASE_URL", "postgres://other@db.example:5432/x")
	t.Setenv("GOMEMLIMIT", "1GiB")
	after, err := generatedDocs()
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range before {
		if !bytes.Equal(b, after[name]) {
			t.Errorf("docs/%s depends on the environment: %s", name, firstDiff(b, after[name]))
		}
	}
}

// Every series the binary exposes has its row in the operators' table of
// docs/operations.md, and that table names no series the binary lacks.
func TestOperationsListEveryMetric(t *testing.T) {
	m, err := metricsDoc()
	if err != nil {
		t.Fatal(err)
	}
	series := regexp.MustCompile("(?m)^\\| `(ovstream_[a-z_]+)`")
	var generated []string
	for _, s := range series.FindAllStringSubmatch(string(m), -1) {
		generated = append(generated, s[1])
	}
	ops, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, s := range regexp.MustCompile("(?m)^\\| `(ovstream_[a-z_]+)(?:\\{[a-z,]*\\})?`").FindAllStringSubmatch(string(ops), -1) {
		documented[s[1]] = true
	}
	if len(generated) != 23 {
		t.Errorf("docs/metrics.md lists %d series, want 23: %v", len(generated), generated)
	}
	for _, name := range generated {
		if !documented[name] {
			t.Errorf("docs/operations.md \"Metrics\" has no row for %s", name)
		}
		delete(documented, name)
	}
	for name := range documented {
		t.Errorf("docs/operations.md \"Metrics\" has a row for %s, which the binary does not expose", name)
	}
}
