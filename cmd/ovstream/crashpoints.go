package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/ovstream/ovstream/consumer/crashpoint"
)

// The crashpoints command exists only in a binary built with -tags
// crashpoints (the crash-injection tests): it lists the crash points the
// binary knows, one per line, for the tests to check against what they drive.
func init() {
	if crashpoint.Enabled {
		register(newCrashpointsCmd)
	}
}

func newCrashpointsCmd() *cobra.Command {
	return &cobra.Command{Use: "crashpoints", Short: "list the crash points compiled in (tests only; see OVSTREAM_CRASHPOINT)",
		Args: noArgs, RunE: run(func(_ context.Context, stdout, _ io.Writer, _ []string) int {
			for _, name := range crashpoint.Names {
				fmt.Fprintln(stdout, name)
			}
			return exitOK
		})}
}
