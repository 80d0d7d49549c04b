package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

func init() {
	register(func() *cobra.Command {
		return &cobra.Command{Use: "version", Short: "print the module version and VCS commit of this binary (as --version)",
			Args: noArgs, RunE: run(func(_ context.Context, stdout, _ io.Writer, _ []string) int {
				fmt.Fprintln(stdout, versionString())
				return exitOK
			})}
	})
}

// release is the newest released version CHANGELOG.md names (its first
// "## [X.Y.Z] - DATE" heading); TestReleaseIsTheChangelogs fails when they
// differ. Bump both when a release is cut.
const release = "0.6.0"

// versionString describes this binary: the release of CHANGELOG.md it
// belongs to, and its build information
// (runtime/debug.ReadBuildInfo): the main module's version as the go command
// stamped it (a tag, or a pseudo-version with the commit; "(devel)" when it
// had none), the VCS commit, its time and whether the tree was modified, and
// the Go version. For example:
//
//	ovstream v0.0.0-20261201101500-1898df4abcde+dirty (commit 1898df4abcde..., 2026-12-01T10:15:00Z, modified; release 0.6.0; go1.26.8 linux/amd64)
func versionString() string {
	version, commit, at, modified := "(devel)", "unknown", "", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.time":
				at = ", " + s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if modified {
		at += ", modified"
	}
	return fmt.Sprintf("ovstream %s (commit %s%s; release %s; %s %s/%s)", version, commit, at, release, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
