//go:build crashpoints

package crashpoint

import (
	"fmt"
	"os"
	"runtime"
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
	action = ActionKill
	hits   = map[string]int{}
)

func init() {
	spec := os.Getenv(EnvPoint)
	if spec == "" {
		return
	}
	name, n, ok := strings.Cut(spec, ":")
	target = name
	if ok {
		v, err := strconv.Atoi(n)
		if err != nil || v < 1 {
			fmt.Fprintf(os.Stderr, "%s=%q: N must be a positive integer\n", EnvPoint, spec)
			os.Exit(2)
		}
		nth = v
	}
	known := false
	for _, k := range Names {
		known = known || k == name
	}
	if !known {
		fmt.Fprintf(os.Stderr, "%s=%q: unknown crash point (known: %s)\n", EnvPoint, spec, strings.Join(Names, ", "))
		os.Exit(2)
	}
	switch a := os.Getenv(EnvAction); a {
	case "", ActionKill:
	case ActionStop:
		action = ActionStop
	default:
		fmt.Fprintf(os.Stderr, "%s=%q: want %s or %s\n", EnvAction, a, ActionKill, ActionStop)
		os.Exit(2)
	}
}

// Hit kills the process with SIGKILL (or, with OVSTREAM_CRASHPOINT_ACTION=stop,
// stops it with SIGSTOP) the N-th time the configured point is reached.
func Hit(name string) {
	if name != target {
		return
	}
	mu.Lock()
	hits[name]++
	n := hits[name]
	mu.Unlock()
	if n != nth {
		return
	}
	if action == ActionStop {
		// The whole process stops here until someone sends SIGCONT; the
		// line tells the test it is there. The signal goes to this very
		// thread (tgkill): a SIGSTOP sent to the process is taken by some
		// other thread, and this goroutine ran on past the point (into
		// COMMIT, even) before the stop reached it.
		fmt.Fprintf(os.Stderr, "crashpoint: %s reached %d time(s): SIGSTOP\n", name, n)
		runtime.LockOSThread()
		_ = syscall.Tgkill(os.Getpid(), syscall.Gettid(), syscall.SIGSTOP)
		runtime.UnlockOSThread()
		fmt.Fprintf(os.Stderr, "crashpoint: %s: continued\n", name)
		return
	}
	fmt.Fprintf(os.Stderr, "crashpoint: %s reached %d time(s): SIGKILL\n", name, n)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}
