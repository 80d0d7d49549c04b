//go:build integration

package harness

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// CliEnv empties the variables that settle flags (empty counts as unset), so
// that the machine's DATABASE_URL or OVSTREAM_* do not reach the binary.
func CliEnv(extra ...string) []string {
	env := []string{"DATABASE_URL=", "KAFKA_BROKERS=", "KAFKA_SASL_PASSWORD="}
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "OVSTREAM_") {
			env = append(env, name+"=")
		}
	}
	return append(env, extra...)
}

// RunCLI runs `ovstream ARGS...` to the end with env added; it returns
// stdout, stderr and the exit code.
func RunCLI(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(OvstreamBin(t), args...)
	cmd.Env = append(cmd.Environ(), env...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("ovstream %v: %v", args, err)
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

// StatusJSON mirrors `status --json`.
type StatusJSON struct {
	Pipeline        string     `json:"pipeline"`
	Claimed         bool       `json:"claimed"`
	Epoch           int64      `json:"epoch"`
	Owner           string     `json:"owner"`
	HeartbeatAt     *time.Time `json:"heartbeat_at"`
	Watermark       *time.Time `json:"watermark"`
	NewestWindowEnd *time.Time `json:"newest_window_end"`
	Partitions      []struct {
		Topic      string     `json:"topic"`
		Partition  int32      `json:"partition"`
		NextOffset *int64     `json:"next_offset"`
		Consumed   *int64     `json:"consumed_offset"`
		Held       *int64     `json:"held"`
		LogStart   *int64     `json:"log_start"`
		HighWater  *int64     `json:"high_water"`
		Lag        *int64     `json:"lag"`
		UpdatedAt  *time.Time `json:"updated_at"`
		Owner      string     `json:"owner"`
		Epoch      int64      `json:"epoch"`
		Lease      string     `json:"lease"`
	} `json:"partitions"`
	Instances []struct {
		Owner         string   `json:"owner"`
		Role          string   `json:"role"`
		Partitions    []string `json:"partitions"`
		HeartbeatAgeS float64  `json:"heartbeat_age_s"`
		Alive         bool     `json:"alive"`
	} `json:"instances"`
	TotalLag    *int64 `json:"total_lag"` // null: unknown (Kafka could not be read)
	TotalHeld   int64  `json:"total_held"`
	DeadLetters map[string]struct {
		Total    int64 `json:"total"`
		Replayed int64 `json:"replayed"`
	} `json:"dead_letters"`
}

// Lag is the total lag, -1 when unknown.
func (s StatusJSON) Lag() int64 {
	if s.TotalLag == nil {
		return -1
	}
	return *s.TotalLag
}

// Status runs `ovstream status --json` of pipeline against db and the broker
// at addr and returns its decoded answer; the test fails on a non-zero exit.
func Status(t *testing.T, db, addr, pipeline string) StatusJSON {
	t.Helper()
	out, errOut, code := RunCLI(t, nil, "status", "--json", "--database-url", db, "--brokers", addr, "--pipeline", pipeline)
	if code != 0 {
		t.Fatalf("status exited %d: %s%s", code, out, errOut)
	}
	var s StatusJSON
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	return s
}
