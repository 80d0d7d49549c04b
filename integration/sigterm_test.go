//go:build integration

package integration

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
	addr := startBroker(t)
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
	refused := freeAddr(t) // nothing listens there
	for _, tc := range []struct {
		name, db string
		waiting  func(p *proc) bool
	}{
		{"PostgreSQL silent", "postgres://postgres@" + silent.Addr().String() + "/x?sslmode=disable", func(*proc) bool {
			select {
			case c := <-accepted:
				t.Cleanup(func() { c.Close() })
				return true
			default:
				return false
			}
		}},
		{"PostgreSQL refusing", "postgres://postgres@" + refused + "/x?sslmode=disable", func(p *proc) bool {
			return strings.Contains(p.output(), "cannot reach PostgreSQL yet; retrying")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startOvstream(t, nil, runArgs(tc.db, addr)...)
			waitFor(t, time.Minute, "the run waiting for PostgreSQL", func() bool {
				if exited(p) {
					t.Fatalf("ovstream exited before SIGTERM:\n%s", p.output())
				}
				return tc.waiting(p)
			})
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			began := time.Now()
			if code := p.wait(t, time.Minute); code != 0 {
				t.Fatalf("SIGTERM during start-up: exit %d, want 0; output:\n%s", code, tail(p.output(), 20))
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
	addr := onePartitionBroker(t)
	db := freshDB(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	log := &lockedWriter{w: &bytes.Buffer{}}
	cfg := consumer.Config{Brokers: []string{addr}, PredictionsTopic: predictionsTopic, Owner: "stopped-early",
		Metrics: consumer.NewMetrics(nil), Logger: slog.New(slog.NewTextHandler(log, nil))}
	if _, err := consumer.Run(ctx, cfg, db); err != nil {
		t.Fatalf("Run stopped during start-up: %v, want nil; log:\n%s", err, log.w.String())
	}
	if owned := dump(t, db, `SELECT count(*) FROM stream_positions WHERE owner IS NOT NULL`); owned[0] != "[0]" {
		t.Errorf("%s partitions owned after a run stopped during start-up", owned[0])
	}
}
