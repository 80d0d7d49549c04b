package main

import (
	"context"
	"fmt"

	"github.com/ovstream/ovstream/consumer/crashpoint"
)

// The crashpoints command exists only in a binary built with -tags
// crashpoints (the crash-injection tests): it lists the crash points the
// binary knows, one per line, for the tests to check against what they drive.
func init() {
	if crashpoint.Enabled {
		register("crashpoints", "list the crash points compiled in (tests only; see OVSTREAM_CRASHPOINT)", cmdCrashpoints)
	}
}

func cmdCrashpoints(_ context.Context, args []string) int {
	if len(args) > 0 {
		fmt.Println("usage: ovstream crashpoints")
		return exitUsage
	}
	for _, name := range crashpoint.Names {
		fmt.Println(name)
	}
	return exitOK
}
