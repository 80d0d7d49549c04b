//go:build integration

package harness

import (
	"os/exec"
	"testing"
)

// PythonWithConfluentKafka returns a Python interpreter that imports
// confluent_kafka (Debian's python3-confluent-kafka lives in /usr/bin/python3,
// which a pyenv shim may hide). The test fails without one: .ci/run installs it.
func PythonWithConfluentKafka(t *testing.T) string {
	t.Helper()
	for _, py := range []string{"/usr/bin/python3", "python3"} {
		if exec.Command(py, "-c", "import confluent_kafka").Run() == nil {
			return py
		}
	}
	t.Fatal("no python3 with confluent_kafka: apt-get install python3-confluent-kafka (.ci/run does)")
	return ""
}
