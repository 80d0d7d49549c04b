//go:build crashpoints

package crashpoint

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Enabled tells whether the binary was built with -tags crashpoints.
const Enabled = true

var (
	mu     sync.Mutex
	target string
	nth    = 1
	hits   = map[string]int{}
)

func init() {
	spec := os.Getenv("OVSTREAM_CRASHPOINT")
	if spec == "" {
		return
	}
	name, n, ok := strings.Cut(spec, ":")
	target = name
	if ok {
		v, err := strconv.Atoi(n)
		if err != nil || v < 1 {
			fmt.Fprintf(os.Stderr, "OVSTREAM_CRASHPOINT=%q: N must be a positive integer\n", spec)
			os.Exit(2)
		}
		nth = v
	}
	known := false
	for _, k := range Names {
		known = known || k == name
	}
	if !known {
		fmt.Fprintf(os.Stderr, "OVSTREAM_CRASHPOINT=%q: unknown crash point (known: %s)\n", spec, strings.Join(Names, ", "))
		os.Exit(2)
	}
}

// Hit kills the process with SIGKILL the N-th time the configured point is reached.
func Hit(name string) {
	if name != target {
		return
	}
	mu.Lock()
	hits[name]++
	n := hits[name]
	mu.Unlock()
	if n == nth {
		fmt.Fprintf(os.Stderr, "crashpoint: %s reached %d time(s): SIGKILL\n", name, n)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
}
