//go:build integration

// Package harness is what the integration test folders share: the ovstream
// binary built once per test process (with crash points), the embedded
// broker on a free port, child processes and their logs, databases of their
// own on the DATABASE_URL server and private PostgreSQL clusters (a replica
// set for failovers), the SQL oracle (aggregates computed by SQL over the
// input) and the uninterrupted reference run a crashed run is compared with,
// the in-process consumer with a skewed clock, a flaky TCP proxy, headless
// Chromium, and the CLI, HTTP and Kafka probes the tests read.
//
// Every file carries the integration build tag, as the tests do.
package harness

import (
	"path/filepath"
	"runtime"
)

// repoRoot is the repository's top folder: two above this file's folder.
var repoRoot = func() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}()

// RepoPath returns rel (a slash-separated path relative to the repository's
// top folder, e.g. "testdata/halifax-20251106") as a path a test can open
// from whichever folder its package runs in.
func RepoPath(rel string) string {
	return filepath.Join(repoRoot, filepath.FromSlash(rel))
}
