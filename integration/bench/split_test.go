package main

import (
	"slices"
	"testing"
)

// TestSplitPartitions: every partition of each topic goes to exactly one
// instance, in contiguous blocks whose sizes differ by at most one, and
// two instances get the halves phase (d) has always used.
func TestSplitPartitions(t *testing.T) {
	cases := []struct {
		n    int
		want []string
	}{
		{1, []string{"p:0,p:1,p:2,p:3,p:4,p:5,q:0,q:1,q:2"}},
		{2, []string{"p:0,p:1,p:2,q:0", "p:3,p:4,p:5,q:1,q:2"}},
		{3, []string{"p:0,p:1,q:0", "p:2,p:3,q:1", "p:4,p:5,q:2"}},
		{4, []string{"p:0", "p:1,p:2,q:0", "p:3,q:1", "p:4,p:5,q:2"}},
		{6, []string{"p:0", "p:1,q:0", "p:2", "p:3,q:1", "p:4", "p:5,q:2"}},
	}
	for _, c := range cases {
		got, err := splitPartitions("p:6,q:3", c.n)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("splitPartitions(p:6,q:3, %d) = %q, %v; want %q", c.n, got, err, c.want)
		}
	}
	for _, n := range []int{0, 7} {
		if got, err := splitPartitions("p:6,q:3", n); err == nil {
			t.Errorf("splitPartitions(p:6,q:3, %d) = %q, want an error", n, got)
		}
	}
}
