//go:build integration

package crash

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ovstream/ovstream/integration/harness"
)

// Two processes on one host with one pid (containers with the host's
// network, or with one fixed hostname, each running ovstream as pid 1) are
// two owners: the second waits as a standby while the first holds the
// partitions, and the first is not fenced. With host:pid as the owner string
// both were "host:1": the second took the first's live partitions at once
// as its own, and a claim of partitions added to a topic, at the same epoch,
// let both count their events. Each process runs as pid 1 of a pid namespace
// of its own (unshare, in a user namespace: no privilege needed).
func TestOwnerUniqueAtOnePid(t *testing.T) {
	t.Parallel()
	wrap := []string{"unshare", "--user", "--map-root-user", "--pid", "--fork", "--kill-child"}
	if out, err := exec.Command(wrap[0], append(wrap[1:], "true")...).CombinedOutput(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("unshare (util-linux) cannot make a pid namespace here: %v: %s", err, out)
		}
		t.Skipf("unshare cannot make a pid namespace on this machine: %v: %s", err, out)
	}
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	db, brokers := harness.FreshDB(t), harness.StartBroker(t)
	args := harness.RunArgs(db, brokers, "--lease", "3s")
	a := harness.StartWrapped(t, wrap, nil, args...)
	harness.WaitLog(t, a, harness.ClaimedLine, time.Minute)
	b := harness.StartWrapped(t, wrap, nil, args...)
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(b.Output(), harness.StandbyLine) {
		if strings.Contains(b.Output(), harness.ClaimedLine) {
			t.Fatalf("B claimed A's live partitions at once (owners %q and %q):\n%s", ownerOf(t, a), ownerOf(t, b),
				harness.Tail(b.Output(), 20))
		}
		if time.Now().After(deadline) {
			t.Fatalf("B neither waited as a standby nor claimed within a minute:\n%s", harness.Tail(b.Output(), 20))
		}
		time.Sleep(20 * time.Millisecond)
	}
	oa, ob := ownerOf(t, a), ownerOf(t, b)
	if !strings.HasPrefix(oa, host+":1-") || !strings.HasPrefix(ob, host+":1-") || oa == ob {
		t.Fatalf("owners %q and %q: want two distinct owners, both %s:1-...", oa, ob, host)
	}
	if l := harness.LineWith(b, harness.StandbyLine); !strings.Contains(l, "holder="+oa) {
		t.Fatalf("B's standby line does not name A (%s) as the holder: %s", oa, l)
	}
	time.Sleep(4 * time.Second) // more than a lease: A renews, B keeps waiting
	select {
	case <-a.Done:
		t.Fatalf("A ended while B waited:\n%s", harness.Tail(a.Output(), 20))
	default:
	}
	if strings.Contains(a.Output(), "fenced") || strings.Contains(b.Output(), harness.ClaimedLine) {
		t.Fatalf("A fenced or B claimed while A lives:\nA:\n%s\nB:\n%s", harness.Tail(a.Output(), 10), harness.Tail(b.Output(), 10))
	}
}
