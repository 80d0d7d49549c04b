//go:build integration

package integration

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// Static membership (, as KIP-345's group.instance.id): a
// process restarted at once after SIGKILL (an OOM kill; systemd or
// Kubernetes restarts it) is a new owner, and without --instance-id it waits
// its dead predecessor's whole lease (15 s by default) while the pipeline
// stands still. With the same --instance-id it claims at once: the
// predecessor's lease session is gone from pg_stat_activity. A second live
// process with the same id does not take over (no fencing in turn): it waits
// as a standby, saying that two processes share an id. Another id still
// waits the lease. The result equals the SQL oracle.
func TestInstanceIDRestartClaimsAtOnce(t *testing.T) {
	t.Parallel()
	addr, db := startBroker(t), freshDB(t)
	total, half, second := produceFirstHalf(t, addr)
	args := func(id string) []string {
		return runArgs(db, addr, "--pipeline", "static", "--metrics-addr", "127.0.0.1:0", "--flush-interval", "200ms",
			"--log-level", "info", "--instance-id", id)
	}
	committed := func(ops string, n int) func() bool { return committedIn(t, db, "static", ops, n) }

	a := startOvstream(t, nil, args("pod-0")...)
	waitFor(t, time.Minute, "the first half consumed and committed", committed(opsAddr(t, a), half))
	a.kill()
	<-a.done

	restarted := time.Now()
	b := startOvstream(t, nil, args("pod-0")...)
	opsB := opsAddr(t, b)
	waitLog(t, b, claimedLine, 2*time.Minute)
	claimedAfter := time.Since(restarted)
	waitFor(t, time.Minute, "a commit of the restarted process", func() bool { return scrape(t, opsB)["ovstream_commits_total"] > 0 })
	committedAfter := time.Since(restarted)
	line := lineWith(b, claimedLine)
	// Taken while the predecessor's lease was alive: not a wait for its expiry.
	if !strings.Contains(line, "restarted_from=") || !strings.Contains(line, "alive (heartbeat") ||
		strings.Contains(b.output(), standbyLine) {
		t.Fatalf("the restart with the same --instance-id did not take the partitions of its dead predecessor at once:\n%s",
			tail(b.output(), 20))
	}
	t.Logf("restart with the same --instance-id (lease 15s): claimed %v, first commit %v after the start",
		claimedAfter.Round(time.Millisecond), committedAfter.Round(time.Millisecond))

	// A second live process with the same id waits and says why; b goes on.
	twin := startOvstream(t, nil, args("pod-0")...)
	waitLog(t, twin, "two processes share an instance id", time.Minute)
	produceFeeds(t, addr, second)
	waitFor(t, time.Minute, "the second half consumed and committed by the live process", committed(opsB, total))
	if strings.Contains(twin.output(), claimedLine) || strings.Contains(b.output(), "fenced") {
		t.Fatalf("a second process with the same id took over:\ntwin:\n%s\nlive:\n%s", tail(twin.output(), 20), tail(b.output(), 20))
	}
	if err := twin.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := twin.wait(t, time.Minute); code != 0 {
		t.Fatalf("the waiting twin exited %d after SIGTERM:\n%s", code, twin.output())
	}

	// Another id after a SIGKILL still waits for the lease.
	b.kill()
	<-b.done
	c := startOvstream(t, nil, args("pod-1")...)
	waitLog(t, c, standbyLine, time.Minute)
	waitLog(t, c, claimedLine, time.Minute)
	if line := lineWith(c, claimedLine); !strings.Contains(line, "expired (heartbeat") || strings.Contains(line, "restarted_from=") {
		t.Fatalf("another instance id claimed before the lease expired: %s", line)
	}
	waitFor(t, time.Minute, "everything committed again", committed(opsAddr(t, c), total))
	stopDrainCompare(t, c, db, addr, "static", total, "delay_aggregates after restarts with --instance-id vs SQL oracle")
}

// committedIn tells whether n predictions of pipeline are consumed and
// committed in db: the stored consumed offsets (offsets are contiguous
// here) and nothing waiting in the process serving ops.
func committedIn(t *testing.T, db, pipeline, ops string, n int) func() bool {
	return func() bool {
		sum := int64(0)
		for k, v := range storedConsumedOf(t, db, pipeline) {
			if strings.HasPrefix(k, predictionsTopic+"/") {
				sum += v
			}
		}
		m := scrape(t, ops)
		return sum >= int64(n) && m["ovstream_uncommitted_messages"] == 0 && m["ovstream_commits_total"] > 0
	}
}
