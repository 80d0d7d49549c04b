package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// `ovstream version` names the release CHANGELOG.md names last: its first
// versioned heading, after [Unreleased].
func TestReleaseIsTheChangelogs(t *testing.T) {
	b, err := os.ReadFile("../../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	headings := regexp.MustCompile(`(?m)^## \[([^\]]+)\]`).FindAllStringSubmatch(string(b), -1)
	if len(headings) < 2 || headings[0][1] != "Unreleased" {
		t.Fatalf("CHANGELOG.md: want ## [Unreleased] first, then the released versions; headings %v", headings)
	}
	m := regexp.MustCompile(`(?m)^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$`).FindStringSubmatch(string(b))
	if m == nil || m[1] != headings[1][1] {
		t.Fatalf("CHANGELOG.md: the heading after [Unreleased] is %q, want \"## [X.Y.Z] - YYYY-MM-DD\"", headings[1][0])
	}
	if m[1] != release {
		t.Errorf("CHANGELOG.md names release %s last, the binary says %s (cmd/ovstream/version.go, const release): make them agree", m[1], release)
	}
	cleanEnv(t)
	out, _, code := ovstream(t, "version")
	if code != 0 || !strings.Contains(out, "; release "+m[1]+"; ") {
		t.Errorf("ovstream version: exit %d, %q; want it to name release %s", code, out, m[1])
	}
}
