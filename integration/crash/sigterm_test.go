//go:build integration

package crash

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ovstream/ovstream/consumer"
	"github.com/ovstream/ovstream/integration/harness"
)

// SIGTERM during start-up ends the run with exit 0, as it does once the
// service runs (docs/design.md "Shutdown and drain"): nothing was claimed or
// written yet, and stopping is what was asked. A supervisor that stops an
// instance it has just started (a rolling deploy, the crash suite's
// TestSplitCrashRandomKills) must not see a failure. Two moments: PostgreSQL
// accepts the connection and does not answer yet (the run waits inside its
// first connection), and PostgreSQL refuses connections (the run waits
// between attempts). The consumer's own start-up (claim, stored positions,
// seeks) is TestRunStoppedDuringStartup.
func TestSigtermDuringStartup(t *testing.T) {
	t.Parallel()
	addr := harness.StartBroker(t)
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			accepted <- c // held open, never answered
		}
	}()
	refused := harness.FreeAddr(t) // nothing listens there
	for _, tc := range []struct {
		name, db string
		waiting  func(p *harness.Proc) bool
	}{
		{"PostgreSQL silent", "postgres://postgres@" + silent.Addr().String() + "/x?sslmode=disable", func(*harness.Proc) bool {
			select {
			case c := <-accepted:
				t.Cleanup(func() { c.Close() })
				return true
			default:
				return false
			}
		}},
		{"PostgreSQL refusing", "postgres://postgres@" + refused + "/x?sslmode=disable", func(p *harness.Proc) bool {
			return strings.Contains(p.Output(), "cannot reach PostgreSQL yet; retrying")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := harness.StartOvstream(t, nil, harness.RunArgs(tc.db, addr)...)
			harness.WaitFor(t, time.Minute, "the run waiting for PostgreSQL", func() bool {
				if harness.Exited(p) {
					t.Fatalf("ovstream exited before SIGTERM:\n%s", p.Output())
				}
				return tc.waiting(p)
			})
			if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			began := time.Now()
			if code := p.Wait(t, time.Minute); code != 0 {
				t.Fatalf("SIGTERM during start-up: exit %d, want 0; output:\n%s", code, harness.Tail(p.Output(), 20))
			}
			if took := time.Since(began); took > 5*time.Second {
				t.Errorf("SIGTERM during start-up: exit after %v", took.Round(time.Millisecond))
			}
			t.Logf("%s: exit 0, %v after SIGTERM", tc.name, time.Since(began).Round(time.Millisecond))
		})
	}
}

// consumer.Run stopped during its start-up (its context cancelled, as
// SIGTERM does, before it claimed: the claim's query fails for it) returns
// nil, not the error of the step it stopped, and holds no partition.
func TestRunStoppedDuringStartup(t *testing.T) {
	t.Parallel()
	addr := harness.OnePartitionBroker(t)
	db := harness.FreshDB(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	log := &harness.LockedWriter{W: &bytes.Buffer{}}
	cfg := consumer.Config{Brokers: []string{addr}, PredictionsTopic: harness.PredictionsTopic, Owner: "stopped-early",
		Metrics: consumer.NewMetrics(nil), Logger: slog.New(slog.NewTextHandler(log, nil))}
	if _, err := consumer.Run(ctx, cfg, db); err != nil {
		t.Fatalf("Run stopped during start-up: %v, want nil; log:\n%s", err, log.W.String())
	}
	if owned := harness.Dump(t, db, `SELECT count(*) FROM stream_positions WHERE owner IS NOT NULL`); owned[0] != "[0]" {
		t.Errorf("%s partitions owned after a run stopped during start-up", owned[0])
	}
}
