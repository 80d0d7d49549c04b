//go:build integration

package dashboard

import (
	"context"
	"encoding/json"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/ovstream/ovstream/integration/harness"
)

// The dashboard is no way to exhaust the database. With every dashboard
// query held by a lock on delay_aggregates, clients that send a request and
// reset the connection 30 ms later never push serve past its 3 sessions in
// pg_stat_activity, cost no new session each (the connection of a cancelled
// request is kept), and once they stop, no query of theirs still runs: a
// cancelled request cancels its statement on the server. A request that
// waits is answered 503 after serve's --statement-timeout, naming it; so is
// report's --statement-timeout an error within its bound. With the lock gone
// the same serve answers as before. The pages of the stop visits too:
// behind a lock on stop_visits, each answers 503 naming the timeout.
func TestDashboardPoolBoundAndStatementTimeout(t *testing.T) {
	db := harness.ThreeEventsDrained(t)
	ctx := harness.OpsCtx(t)
	locker, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close(context.Background())
	watcher, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Close(context.Background())
	lock := func(tables string) pgx.Tx {
		t.Helper()
		tx, err := locker.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `LOCK TABLE `+tables+` IN ACCESS EXCLUSIVE MODE`); err != nil {
			t.Fatal(err)
		}
		return tx
	}
	// serve's sessions: every client backend of the database but the
	// test's own two, whatever application name it carries.
	var ours [2]uint32
	ours[0], ours[1] = locker.PgConn().PID(), watcher.PgConn().PID()
	sessions := func() (all, active int) {
		t.Helper()
		if err := watcher.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state = 'active')
			FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend'
			AND pid <> ALL ($1)`, ours[:]).Scan(&all, &active); err != nil {
			t.Fatal(err)
		}
		return all, active
	}

	srv := harness.StartOvstream(t, harness.CliEnv(), "serve", "--database-url", db, "--addr", "127.0.0.1:0", "--pipeline", "ovstream")
	base := harness.Printed(t, srv, regexp.MustCompile(`dashboard of pipeline ovstream: (http://[0-9.:]+/)`))
	hostport := strings.TrimSuffix(strings.TrimPrefix(base, "http://"), "/")

	// At start serve pinged on one connection of its pool; the schema
	// check's own connection is gone once its backend has ended.
	if !harness.Eventually(5*time.Second, func() bool { all, _ := sessions(); return all == 1 }) {
		all, _ := sessions()
		t.Fatalf("serve holds %d sessions after its start, want the 1 it pinged on", all)
	}
	tx := lock("delay_aggregates, stop_visits")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			paths := []string{"api/delay", "api/top", "api/line", "api/health", "api/ontime", "api/headway", "api/accuracy"}
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				c, err := net.Dial("tcp", hostport)
				if err != nil {
					continue
				}
				_, _ = c.Write([]byte("GET /" + paths[(i+n)%len(paths)] + " HTTP/1.1\r\nHost: dashboard\r\n\r\n"))
				time.Sleep(30 * time.Millisecond)
				_ = c.(*net.TCPConn).SetLinger(0) // close with a reset
				_ = c.Close()
			}
		})
	}
	most, seen := 0, ""
	pids := map[int32]bool{} // every session of serve seen during the attack
	for end := time.Now().Add(4 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		rows, err := watcher.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database()
			AND backend_type = 'client backend' AND pid <> ALL ($1)`, ours[:])
		if err != nil {
			t.Fatal(err)
		}
		ps, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			pids[p] = true
		}
		if all, _ := sessions(); all > most {
			// On the watcher's connection: a connection of the test's own,
			// opened here, was still ending at the next look and counted
			// as one of serve's (4 of 3 under load).
			most = all
			rows, err := watcher.Query(ctx, `SELECT format('%s %s %s %s', pid, application_name, state, backend_start)
				FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend'`)
			if err != nil {
				t.Fatal(err)
			}
			list, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			seen = strings.Join(list, "\n")
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("serve's sessions during the attack: at most %d at once, %d in all", most, len(pids))
	// An abandoned request keeps its connection (its statement cancelled on
	// the server): no new session per request. A cancel request that lands
	// between two protocol messages is lost and the connection replaced, so
	// a few more are allowed; before, each abandoned request cost one (33
	// and 50 in 4 s).
	if len(pids) > 6 {
		t.Errorf("clients that reset their requests made serve open %d PostgreSQL sessions in 4 s: a new one per abandoned request", len(pids))
	}
	if most > 3 {
		t.Errorf("clients that reset their requests pushed serve to %d PostgreSQL sessions, more than its 3:\n%s", most, seen)
	}
	if !harness.Eventually(5*time.Second, func() bool { _, active := sessions(); return active == 0 }) {
		all, active := sessions()
		t.Errorf("5 s after the clients went away, %d of serve's %d sessions still run a query: their cancelled requests' queries", active, all)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if code, body := harness.HttpGet(t, base+"api/top?day=2026-05-04&min_events=1"); code != 200 || !strings.Contains(body, `"id":"L1"`) {
		t.Errorf("api/top after the clients went away: %d %s", code, body)
	}

	// The statement timeout: serve's flag, report's flag.
	srv2 := harness.StartOvstream(t, harness.CliEnv(), "serve", "--database-url", db, "--addr", "127.0.0.1:0", "--pipeline", "ovstream",
		"--statement-timeout", "1s")
	base2 := harness.Printed(t, srv2, regexp.MustCompile(`dashboard of pipeline ovstream: (http://[0-9.:]+/)`))
	tx = lock("delay_aggregates")
	began := time.Now()
	code, body := harness.HttpGet(t, base2+"api/delay")
	took := time.Since(began)
	var doc map[string]string
	_ = json.Unmarshal([]byte(body), &doc)
	if code != 503 || !strings.Contains(doc["error"], "statement timeout (1s)") || took > 4*time.Second || dbText.MatchString(body) {
		t.Errorf("api/delay behind a lock with --statement-timeout 1s: %d %s after %v; want 503 naming the timeout within about 1 s", code, body, took)
	}
	began = time.Now()
	out, errOut, rc := harness.RunCLI(t, harness.CliEnv(), "report", "--database-url", db, "--from", "2026-05-04", "--to", "2026-05-05",
		"--statement-timeout", "1s")
	if took := time.Since(began); rc != 1 || !strings.Contains(errOut, "ran longer than --statement-timeout 1s") || took > 10*time.Second {
		t.Errorf("report behind a lock with --statement-timeout 1s: exit %d after %v, stdout %q, stderr %q", rc, took, out, errOut)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if code, body := harness.HttpGet(t, base2+"api/delay"); code != 200 || !strings.Contains(body, `"events":3`) {
		t.Errorf("api/delay without the lock: %d %s", code, body)
	}

	// The pages of the stop visits, behind a lock on stop_visits alone.
	tx = lock("stop_visits")
	for _, api := range []string{"api/ontime", "api/headway", "api/accuracy"} {
		began := time.Now()
		code, body := harness.HttpGet(t, base2+api)
		took := time.Since(began)
		var doc map[string]string
		_ = json.Unmarshal([]byte(body), &doc)
		if code != 503 || !strings.Contains(doc["error"], "statement timeout (1s)") || took > 4*time.Second || dbText.MatchString(body) {
			t.Errorf("%s behind a lock on stop_visits with --statement-timeout 1s: %d %s after %v; want 503 naming the timeout within about 1 s",
				api, code, body, took)
		}
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for _, api := range []string{"api/ontime", "api/headway", "api/accuracy"} {
		if code, body := harness.HttpGet(t, base2+api); code != 200 {
			t.Errorf("%s without the lock: %d %s", api, code, body)
		}
	}
}
