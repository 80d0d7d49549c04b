//go:build integration

package ops

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-migrate/migrate/v4/database"
	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/integration/harness"
	"github.com/ovstream/ovstream/migrations"
	"github.com/ovstream/ovstream/store"
)

// pgBouncer is a PgBouncer of the test's own (Debian's package pgbouncer),
// on a free port of 127.0.0.1 in front of the test's PostgreSQL, with the
// configuration the test wrote into a temporary folder: PgBouncer's defaults
// but for the pool mode (and extra, when given). It is stopped when the test
// ends.
type pgBouncer struct {
	t    *testing.T
	port int
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// startPgBouncer starts PgBouncer in poolMode ("session", "transaction")
// with the settings extra (ini lines of its [pgbouncer] section) in front of
// the server of testDatabaseURL, every database name passed through.
func startPgBouncer(t *testing.T, poolMode, extra string) *pgBouncer {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		bin = "/usr/sbin/pgbouncer"
		if _, err := os.Stat(bin); err != nil {
			t.Fatal("the pooler tests need PgBouncer: install pgbouncer (.ci/install-deps.sh)")
		}
	}
	server, err := url.Parse(harness.TestDatabaseURL())
	if err != nil {
		t.Fatal(err)
	}
	host, port, err := net.SplitHostPort(harness.TestServerAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "ovstream-pgbouncer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &pgBouncer{t: t, port: l.Addr().(*net.TCPAddr).Port, log: filepath.Join(dir, "pgbouncer.log"), done: make(chan struct{})}
	l.Close()
	userName := server.User.Username()
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
logfile = %s
pool_mode = %s
%s
`, host, port, b.port, filepath.Join(dir, "userlist.txt"), b.log, poolMode, extra)
	if err := os.WriteFile(filepath.Join(dir, "pgbouncer.ini"), []byte(ini), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "userlist.txt"), []byte(fmt.Sprintf("%q \"\"\n", userName)), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{filepath.Join(dir, "pgbouncer.ini")}
	if os.Geteuid() == 0 { // PgBouncer refuses to run as root
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root, PgBouncer needs the user postgres: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		args = append([]string{"-u", "postgres"}, args...)
	}
	b.cmd = exec.Command(bin, args...)
	out := &harness.LockedWriter{W: new(bytes.Buffer)}
	b.cmd.Stdout, b.cmd.Stderr = out, out
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = b.cmd.Wait(); close(b.done) }()
	t.Cleanup(b.stop)
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", b.port), time.Second)
		if err == nil {
			c.Close()
			return b
		}
		select {
		case <-b.done:
			t.Fatalf("pgbouncer exited: %s\n%s", out.W.String(), b.logText())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("pgbouncer does not listen on %d after 20 s: %s", b.port, b.logText())
		}
	}
}

// url returns db (a URL of the test's server) with PgBouncer's address.
func (b *pgBouncer) url(db string) string {
	b.t.Helper()
	u, err := url.Parse(db)
	if err != nil {
		b.t.Fatal(err)
	}
	u.Host = fmt.Sprintf("127.0.0.1:%d", b.port)
	return u.String()
}

// stop ends PgBouncer (SIGINT: it closes its connections at once).
func (b *pgBouncer) stop() {
	select {
	case <-b.done:
		return
	default:
	}
	_ = b.cmd.Process.Signal(os.Interrupt)
	select {
	case <-b.done:
	case <-time.After(10 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.done
	}
}

func (b *pgBouncer) logText() string {
	text, _ := os.ReadFile(b.log)
	return string(text)
}

// ignoredTimeouts is the ignore_startup_parameters an operator adds so that
// PgBouncer accepts the startup packet of ovstream before this change.
const ignoredTimeouts = "lock_timeout, statement_timeout, idle_in_transaction_session_timeout"

// Through a session-mode PgBouncer with its default configuration (no
// ignore_startup_parameters: it refuses any startup parameter but a few it
// tracks), `migrate up` and `run --drain` of the Auckland peak store exactly
// what the SQL oracle computes from the topic: every session setting is SET
// on the connection, none is a startup parameter.
func TestPgBouncerSessionModeDrainEqualsSQLOracle(t *testing.T) {
	bouncer := startPgBouncer(t, "session", "")
	addr, _ := harness.StartBrokerProcess(t, "127.0.0.1:0", "")
	db := harness.EmptyDB(t)
	harness.ProduceCLI(t, addr, "--operator", "AT", "--gtfs-rt", "../../testdata/auckland-20160519-peak10min")
	via := bouncer.url(db)
	m := harness.StartOvstream(t, nil, "migrate", "up", "--database-url", via)
	if code := m.Wait(t, time.Minute); code != 0 {
		t.Fatalf("migrate up through PgBouncer exited %d:\n%s", code, m.Output())
	}
	harness.DrainedEqualsOracle(t, db, addr, 4610, harness.Drain(t, via, addr, "--connect-timeout", "5s"))
	if !strings.Contains(bouncer.logText(), "login attempt: db="+strings.TrimPrefix(mustPath(t, db), "/")) {
		t.Fatalf("PgBouncer's log shows no login to the test's database:\n%s", bouncer.logText())
	}
}

func mustPath(t *testing.T, db string) string {
	t.Helper()
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	return u.Path
}

// Through PgBouncer in transaction mode (with the ignore_startup_parameters
// an operator adds to get past the startup packet), `run` exits non-zero at
// start-up with one line that names the pool mode and the docs page, and
// writes nothing: its commits keep state in the session (temporary tables,
// prepared statements), which that mode lends to other clients between
// transactions.
func TestPgBouncerTransactionModeRefusedAtStart(t *testing.T) {
	bouncer := startPgBouncer(t, "transaction", "ignore_startup_parameters = "+ignoredTimeouts)
	addr, _ := harness.StartBrokerProcess(t, "127.0.0.1:0", "")
	db := harness.FreshDB(t)
	harness.ProduceCLI(t, addr, "--operator", "AT", "--gtfs-rt", "../../testdata/auckland-20160519-peak10min")
	p := harness.StartOvstream(t, nil, harness.RunArgs(bouncer.url(db), addr, "--drain", "--connect-timeout", "5s")...)
	code := p.Wait(t, time.Minute)
	out := p.Output()
	if code == 0 {
		t.Fatalf("run through a transaction pool exited 0:\n%s", out)
	}
	var refusals []string
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "pool_mode = transaction") && !strings.HasPrefix(line, "time=") { // not the log's record of the exit
			refusals = append(refusals, line)
		}
	}
	if len(refusals) != 1 || !strings.HasPrefix(refusals[0], "ovstream run: ") || !strings.Contains(refusals[0], "docs/poolers.md") ||
		strings.Contains(out, "retrying") {
		t.Fatalf("exit %d; want one line `ovstream run: ...pool_mode = transaction...docs/poolers.md` and no retry:\n%s", code, out)
	}
	for _, table := range []string{"stream_positions", "delay_aggregates", "trip_delay_latest", "vehicle_latest", "dead_letters", "pipeline_instances"} {
		if n := harness.Dump(t, db, "SELECT count(*) FROM "+table); fmt.Sprint(n) != "[[0]]" {
			t.Errorf("%s holds %v rows after the refused run, want 0", table, n)
		}
	}
	t.Logf("exit %d: %s", code, refusals[0])
}

// `migrate up` through PgBouncer in transaction mode (with the
// ignore_startup_parameters an operator adds to get past the startup
// packet) is refused the same way before it takes golang-migrate's advisory
// lock, which would stay with a server connection the pooler keeps: nothing
// is written, not even the version table.
func TestPgBouncerTransactionModeMigrateRefused(t *testing.T) {
	bouncer := startPgBouncer(t, "transaction", "ignore_startup_parameters = "+ignoredTimeouts)
	db := harness.EmptyDB(t)
	p := harness.StartOvstream(t, nil, "migrate", "up", "--database-url", bouncer.url(db))
	code := p.Wait(t, time.Minute)
	out := p.Output()
	if code == 0 || !strings.Contains(out, "pool_mode = transaction") || !strings.Contains(out, "docs/poolers.md") {
		t.Fatalf("migrate up through a transaction pool: exit %d, want non-zero naming pool_mode and docs/poolers.md:\n%s", code, out)
	}
	if n := harness.Dump(t, db, "SELECT to_regclass('schema_migrations') IS NULL"); fmt.Sprint(n) != "[[true]]" {
		t.Fatalf("schema_migrations exists after the refused migrate up")
	}
}

// `migrate up` through a session pool waits for golang-migrate's advisory
// lock, held here by another session, at most migrations.LockTimeout
// (lock_timeout is SET on the session, so ignore_startup_parameters, which
// drops it from the startup packet, cannot lose it) and SIGTERM ends the
// wait at once; once the lock is free, it migrates.
func TestPgBouncerMigrateLockWaitBounded(t *testing.T) {
	bouncer := startPgBouncer(t, "session", "ignore_startup_parameters = "+ignoredTimeouts)
	db := harness.EmptyDB(t)
	ctx := harness.TestCtx(t)
	holder, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	lockID, err := database.GenerateAdvisoryLockId(mustPath(t, db), "public", migrations.MigrationsTable)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_lock($1::bigint)", lockID); err != nil {
		t.Fatal(err)
	}
	via := bouncer.url(db)

	p := harness.StartOvstream(t, nil, "migrate", "up", "--database-url", via)
	time.Sleep(2 * time.Second)
	if err := p.Cmd.Process.Signal(harness.Sigterm); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	code := p.Wait(t, 30*time.Second)
	if took := time.Since(stopped); code == 0 || took > 3*time.Second {
		t.Fatalf("migrate up after SIGTERM: exit %d %v after the signal, want non-zero within 3 s:\n%s", code, took, p.Output())
	}
	t.Logf("SIGTERM: exit %d after %v: %s", code, time.Since(stopped).Round(time.Millisecond), strings.TrimSpace(p.Output()))

	began := time.Now()
	p = harness.StartOvstream(t, nil, "migrate", "up", "--database-url", via)
	code = p.Wait(t, time.Minute)
	took := time.Since(began)
	if code == 0 || !strings.Contains(p.Output(), "SQLSTATE 55P03") || took < migrations.LockTimeout || took > migrations.LockTimeout+10*time.Second {
		t.Fatalf("migrate up behind the lock: exit %d after %v, want non-zero with 55P03 after %v:\n%s", code, took, migrations.LockTimeout, p.Output())
	}
	t.Logf("lock held: exit %d after %v", code, took.Round(time.Millisecond))

	if _, err := holder.Exec(ctx, "SELECT pg_advisory_unlock($1::bigint)", lockID); err != nil {
		t.Fatal(err)
	}
	p = harness.StartOvstream(t, nil, "migrate", "up", "--database-url", via)
	if code := p.Wait(t, time.Minute); code != 0 || !strings.Contains(p.Output(), fmt.Sprintf("schema at version %d (was 0)", migrations.Latest())) {
		t.Fatalf("migrate up with the lock free: exit %d:\n%s", code, p.Output())
	}
}

// A process restarted with the same --instance-id after a SIGKILL claims its
// partitions at once through a session-mode PgBouncer (default
// configuration), which keeps the dead process's server connection, and so
// its backend in pg_stat_activity, for the next client: what marks a live
// owner is an advisory lock its lease session holds, which the pooler's
// DISCARD ALL releases. A second live process with the same id still waits,
// and after both the tables equal the SQL oracle.
func TestPgBouncerInstanceIDRestartClaimsAtOnce(t *testing.T) {
	bouncer := startPgBouncer(t, "session", "")
	addr, db := harness.StartBroker(t), harness.FreshDB(t)
	total, half, second := harness.ProduceFirstHalf(t, addr)
	args := func(id string) []string {
		return harness.RunArgs(bouncer.url(db), addr, "--pipeline", "static", "--metrics-addr", "127.0.0.1:0", "--flush-interval", "200ms",
			"--log-level", "info", "--instance-id", id)
	}
	a := harness.StartOvstream(t, nil, args("pod-0")...)
	harness.WaitFor(t, time.Minute, "the first half consumed and committed", harness.CommittedIn(t, db, "static", harness.OpsAddr(t, a), half))
	a.Kill()

	restarted := time.Now()
	b := harness.StartOvstream(t, nil, args("pod-0")...)
	harness.WaitLog(t, b, harness.ClaimedLine, 2*time.Minute)
	claimedAfter := time.Since(restarted)
	line := harness.LineWith(b, harness.ClaimedLine)
	if !strings.Contains(line, "restarted_from=") || !strings.Contains(line, "alive (heartbeat") ||
		strings.Contains(b.Output(), harness.StandbyLine) || claimedAfter > 10*time.Second {
		t.Fatalf("the restart with the same --instance-id through PgBouncer claimed %v after its start, want at once:\n%s",
			claimedAfter.Round(time.Millisecond), harness.Tail(b.Output(), 20))
	}
	t.Logf("restart with the same --instance-id through PgBouncer (lease 15s): claimed %v after the start", claimedAfter.Round(time.Millisecond))

	twin := harness.StartOvstream(t, nil, args("pod-0")...)
	harness.WaitLog(t, twin, "two processes share an instance id", time.Minute)
	harness.ProduceFeeds(t, addr, second)
	if err := twin.Cmd.Process.Signal(harness.Sigterm); err != nil {
		t.Fatal(err)
	}
	if code := twin.Wait(t, time.Minute); code != 0 || strings.Contains(twin.Output(), harness.ClaimedLine) || strings.Contains(b.Output(), "fenced") {
		t.Fatalf("a second live process with the same id: exit %d, want it to wait and stop:\ntwin:\n%s\nlive:\n%s",
			code, harness.Tail(twin.Output(), 20), harness.Tail(b.Output(), 20))
	}
	harness.StopDrainCompare(t, b, db, addr, "static", total, "delay_aggregates after a restart through PgBouncer vs SQL oracle")
}

// The timeouts ovstream sets hold on its sessions through a session pool
// that an operator configured with ignore_startup_parameters (which drops
// them from the startup packet without a word): a Reader's
// statement_timeout and the commit sessions'
// idle_in_transaction_session_timeout are SET on each new session.
func TestPgBouncerSessionTimeoutsHold(t *testing.T) {
	bouncer := startPgBouncer(t, "session", "ignore_startup_parameters = "+ignoredTimeouts)
	db := harness.FreshDB(t)
	ctx := harness.TestCtx(t)
	st, err := store.Open(ctx, bouncer.url(db))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(context.Background())
	show := func(s *store.Store, name string) string {
		t.Helper()
		var v string
		if err := s.Read(ctx, func(conn *pgx.Conn) error { return conn.QueryRow(ctx, "SHOW "+name).Scan(&v) }); err != nil {
			t.Fatal(err)
		}
		return v
	}
	r := st.Reader("ovstream-report", 1500*time.Millisecond)
	defer r.Close(context.Background())
	st.LimitIdleTransactions(time.Minute)
	got := []string{show(r, "statement_timeout"), show(st, "idle_in_transaction_session_timeout"), show(st, "TimeZone"), show(r, "application_name")}
	if want := []string{"1500ms", "1min", "UTC", "ovstream-report"}; !slices.Equal(got, want) {
		t.Fatalf("through PgBouncer: statement_timeout, idle_in_transaction_session_timeout, TimeZone, application_name = %q, want %q", got, want)
	}
}
