//go:build integration

package harness

import (
	"fmt"
	"testing"
)

// Scan parses s, a value read from a query or a log, into args with
// fmt.Sscanf's format, and fails the test when s does not match: a value
// that did not parse is never taken as zero.
func Scan(t testing.TB, s, format string, args ...any) {
	t.Helper()
	if _, err := fmt.Sscanf(s, format, args...); err != nil {
		t.Fatalf("scan %q as %q: %v", s, format, err)
	}
}
