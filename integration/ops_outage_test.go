//go:build integration

package integration

import (
	"os"
	"os/exec"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// localCluster returns the PostgreSQL version of the local cluster "main"
// (the newest in /etc/postgresql) that serves 127.0.0.1:5432.
func localCluster(t *testing.T) string {
	t.Helper()
	entries, err := os.ReadDir("/etc/postgresql")
	if err != nil || len(entries) == 0 {
		t.Fatalf("the outage test stops and starts the local PostgreSQL cluster: none in /etc/postgresql (%v)", err)
	}
	var vs []string
	for _, e := range entries {
		vs = append(vs, e.Name())
	}
	sort.Strings(vs)
	return vs[len(vs)-1]
}

func pgctl(t *testing.T, version, action string) {
	t.Helper()
	args := []string{"--skip-systemctl-redirect", version, "main", action}
	if action == "stop" {
		args = append(args, "-m", "fast")
	}
	if out, err := exec.Command("pg_ctlcluster", args...).CombinedOutput(); err != nil {
		t.Fatalf("pg_ctlcluster %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func pgReady() bool {
	return exec.Command("pg_isready", "-q", "-h", "127.0.0.1", "-p", "5432").Run() == nil
}

// PostgreSQL stopped for 30 s during a run over the real 2 h Auckland
// slice: the service keeps running, pauses fetching at
// --max-uncommitted-messages, /readyz turns false (database unreachable) and
// true again, and the result equals the SQL oracle.
//
// It stops the machine's PostgreSQL cluster for everyone: it is the one test
// of `make test` that does, and it restarts the cluster whatever happens.
func TestOpsPostgresOutage(t *testing.T) {
	if os.Getenv("DATABASE_URL") != "" && !strings.Contains(os.Getenv("DATABASE_URL"), "127.0.0.1:5432") {
		t.Fatalf("the outage test needs the local cluster on 127.0.0.1:5432, DATABASE_URL points elsewhere")
	}
	version := localCluster(t)
	addr := startBroker(t)
	db := freshDB(t)
	res := loadFeeds(t, "AT", extractTarGz(t, "../testdata/auckland-20160518-2h.tar.gz"))
	total := len(res.Predictions)
	half := total / 2
	first, second := *res, *res
	first.Predictions, second.Predictions = res.Predictions[:half], res.Predictions[half:]
	produceFeeds(t, addr, &first)

	const maxUncommitted = 3000
	p := startOvstream(t, nil, runArgs(db, addr, "--pipeline", "outage", "--metrics-addr", "127.0.0.1:0",
		"--max-uncommitted-messages", "3000", "--log-level", "info")...)
	ops := opsAddr(t, p)
	consumed := `ovstream_consumed_messages_total{topic="arrival_predictions"}`
	var m map[string]float64
	waitFor(t, time.Minute, "the first half consumed and committed", func() bool {
		m = scrape(t, ops)
		return m[consumed] == float64(half) && m["ovstream_uncommitted_messages"] == 0 && m["ovstream_windows_finalized_total"] > 0
	})

	t.Cleanup(func() {
		if !pgReady() {
			_ = exec.Command("pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "start").Run()
		}
	})
	down := time.Now()
	pgctl(t, version, "stop")
	produceFeeds(t, addr, &second)

	var body string
	waitFor(t, 15*time.Second, "/readyz 503 with the database down", func() bool {
		c, b := httpGet(t, "http://"+ops+"/readyz")
		body = b
		return c == 503 && strings.Contains(b, "database: unreachable")
	})
	if !strings.Contains(body, "partitions: assigned") {
		t.Errorf("/readyz during the outage: %q", body)
	}
	// Fetching pauses at the bound: the uncommitted records stop growing.
	waitFor(t, 15*time.Second, "fetching paused at --max-uncommitted-messages", func() bool {
		m = scrape(t, ops)
		return m["ovstream_uncommitted_messages"] >= maxUncommitted
	})
	time.Sleep(time.Second)
	paused := scrape(t, ops)
	u0, u1 := m["ovstream_uncommitted_messages"], paused["ovstream_uncommitted_messages"]
	if u1 != u0 || paused[consumed] != m[consumed] || u1 < maxUncommitted || u1 >= maxUncommitted+512 {
		t.Errorf("during the outage: uncommitted %v then %v, consumed %v then %v; want fetching stopped in [%d, %d)",
			u0, u1, m[consumed], paused[consumed], maxUncommitted, maxUncommitted+512)
	}
	if paused[consumed] >= float64(total) || paused[`ovstream_commit_failures_total{reason="retryable"}`] < 1 {
		t.Errorf("during the outage: consumed %v of %d, retryable commit failures %v", paused[consumed], total,
			paused[`ovstream_commit_failures_total{reason="retryable"}`])
	}
	time.Sleep(time.Until(down.Add(30 * time.Second)))
	select {
	case <-p.done:
		t.Fatalf("ovstream exited during the outage:\n%s", p.output())
	default:
	}
	pgctl(t, version, "start")
	waitFor(t, 30*time.Second, "PostgreSQL back", pgReady)
	back := time.Now()

	waitFor(t, 90*time.Second, "/readyz 200 after the outage", func() bool { c, _ := httpGet(t, "http://"+ops+"/readyz"); return c == 200 })
	t.Logf("database down %v; ready again %v after it came back", back.Sub(down).Round(time.Second), time.Since(back).Round(100*time.Millisecond))
	waitFor(t, time.Minute, "every record consumed and committed", func() bool {
		m = scrape(t, ops)
		return m[consumed] == float64(total) && m["ovstream_uncommitted_messages"] == 0
	})
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, time.Minute); code != 0 {
		t.Fatalf("run exited %d after SIGTERM:\n%s", code, p.output())
	}
	// The windows still open at SIGTERM are finalized by a drain.
	drain(t, db, addr, "--pipeline", "outage")

	if n := loadOracleInput(t, db, addr, predictionsTopic); n != total {
		t.Fatalf("topic holds %d records, want %d", n, total)
	}
	if dl := dump(t, db, `SELECT count(*) FROM dead_letters`); dl[0] != "[0]" {
		t.Errorf("dead letters %v, want none (allowed lateness 10m)", dl)
	}
	sameRows(t, "delay_aggregates after a 30 s outage vs SQL oracle", dump(t, db, dumpAggregates), dump(t, db, oracleAggregates))
}
