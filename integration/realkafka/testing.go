package realkafka

import "testing"

// StartT is Start for a test: it fails the test (never skips) when Java or
// Maven is missing or the cluster does not come up, and stops every JVM with
// t.Cleanup, which runs on failure and on panic too. When the test failed,
// the cleanup logs the tail of every node's log first.
func StartT(t testing.TB, opts Options) *Cluster {
	t.Helper()
	c, err := Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("Kafka logs:\n%s", c.Logs(80))
		}
		c.Close()
	})
	return c
}
