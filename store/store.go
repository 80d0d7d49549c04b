package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/pgsession"
)

// ErrFenced means another instance claimed one of the batch's partitions (its
// owner is another, or its epoch is newer than the batch's): nothing was
// written, and this instance must stop.
var ErrFenced = errors.New("store: fenced: another instance claimed a partition of this one")

// CommitError is returned when the COMMIT statement itself failed. When
// Ambiguous is true the server may have committed the transaction (the
// connection broke after COMMIT was sent): reconnect, re-read the positions
// with LoadPositions and re-seek; the idempotent upserts absorb the replay.
// When false the server answered, and nothing was committed. A split
// drain's last commit (its positions marked drained) asks the server
// instead, on a new connection: its partitions' commit sequences tell
// whether its fencing statement committed (outcome.go; not txid_status,
// which cannot tell across a failover). Committed is a success, not
// committed an error that is not Ambiguous; only when the server cannot
// tell before the commit's context ends is it Ambiguous.
type CommitError struct {
	Ambiguous bool
	Err       error
}

func (e *CommitError) Error() string {
	if e.Ambiguous {
		return "COMMIT failed, the transaction may have committed: " + e.Err.Error()
	}
	return "COMMIT failed, nothing committed: " + e.Err.Error()
}

func (e *CommitError) Unwrap() error { return e.Err }

// Store writes ovstream's results on one PostgreSQL connection. It is not
// safe for concurrent use: one goroutine owns it.
type Store struct {
	hooks          Hooks
	onNameRefused  func(n aggregate.Name, reason string)
	onServerChange func(from, to string)
	spare          func(to *Store) bool
	chunkRows      int

	config   *pgx.ConnConfig
	settings pgsession.Settings // set on each new session (pgsession.Apply), not sent at its start
	reader   bool               // Reader: a connection that is still sound outlives an error
	conn     *pgx.Conn          // nil after an error: the next call reconnects
	server   string             // host:port of the last connection
	parts    partitionCache     // the delay_aggregates partitions known to exist (partitions.go)
}

// Open connects to databaseURL (postgres://user:password@host:port/db?...),
// after it checked that the connection keeps its server session
// (pgsession.CheckSession: an error wrapping pgsession.ErrSessionPooling
// through a pooler in transaction mode, before anything is written).
// Errors never hold the password.
func Open(ctx context.Context, databaseURL string, opts ...Option) (*Store, error) {
	s, err := Lazy(databaseURL, opts...)
	if err != nil {
		return nil, err
	}
	if err := pgsession.CheckSession(ctx, s.config); err != nil {
		return nil, fmt.Errorf("store: open: %w", err)
	}
	if _, err := s.connection(ctx); err != nil {
		return nil, fmt.Errorf("store: open: %w", err)
	}
	return s, nil
}

// Lazy is Open without connecting (nor checking the session): the first
// call connects. Errors (a URL that does not parse) never hold the
// password.
func Lazy(databaseURL string, opts ...Option) (*Store, error) {
	config, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("store: open: %w", err)
	}
	if config.RuntimeParams == nil {
		config.RuntimeParams = map[string]string{}
	}
	if _, ok := config.RuntimeParams["application_name"]; !ok {
		config.RuntimeParams["application_name"] = "ovstream"
	}
	config.RuntimeParams["timezone"] = "UTC"
	if config.ConnectTimeout == 0 { // no connect_timeout in the URL: do not hang on an unreachable host
		config.ConnectTimeout = 10 * time.Second
	}
	s := &Store{config: config, settings: pgsession.Split(config)}
	for _, o := range opts {
		o(s)
	}
	return s, nil
}

// Clone returns a Store on the same database with a connection of its own,
// opened on first use, that pg_stat_activity shows as applicationName: for
// work that must not wait behind this Store's transactions (the lease
// heartbeat). Options (WithHooks, ...) are not copied.
func (s *Store) Clone(applicationName string) *Store {
	config := s.config.Copy()
	config.RuntimeParams["application_name"] = applicationName
	return &Store{config: config, settings: maps.Clone(s.settings)}
}

// cancelGrace is how long a Reader's statement may take to end after its
// context was cancelled and PostgreSQL was asked to cancel it, before the
// connection is closed instead.
const cancelGrace = 2 * time.Second

// Reader returns a Store like Clone for read-only work on behalf of a client
// that may go away (the dashboard, report): a cancelled context sends
// PostgreSQL a cancel request for the statement running (SQLSTATE 57014),
// so the server stops it instead of running it to its end for nobody;
// statementTimeout > 0 bounds every statement (statement_timeout, the same
// 57014); and a connection still sound after an error (open, outside a
// transaction: a cancelled or refused statement) is kept, so that a client
// that gives up costs no new session: the Store holds at most one.
func (s *Store) Reader(applicationName string, statementTimeout time.Duration) *Store {
	r := s.Clone(applicationName)
	if statementTimeout > 0 {
		r.settings["statement_timeout"] = fmt.Sprint(statementTimeout.Milliseconds())
	}
	r.config.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: pc, DeadlineDelay: cancelGrace}
	}
	r.reader = true
	return r
}

// LimitIdleTransactions makes the server end this Store's sessions that sit
// idle inside a transaction for longer than d
// (idle_in_transaction_session_timeout, SQLSTATE 25P03): a frozen process
// (SIGSTOP) cannot hold its commit's row locks for ever. It applies from the
// next connection on; the current one is closed.
func (s *Store) LimitIdleTransactions(d time.Duration) {
	s.settings["idle_in_transaction_session_timeout"] = fmt.Sprint(d.Milliseconds())
	s.discard()
}

// Close closes the connection. The Store may still be used: the next call reconnects.
func (s *Store) Close(ctx context.Context) error {
	if s.conn == nil {
		return nil
	}
	err := s.conn.Close(ctx)
	s.conn = nil
	return err
}

// Ping checks the connection, reconnecting if it was thrown away.
func (s *Store) Ping(ctx context.Context) error {
	conn, err := s.connection(ctx)
	if err == nil {
		err = conn.Ping(ctx)
	}
	if err != nil {
		s.discard()
		return fmt.Errorf("store: ping: %w", err)
	}
	return nil
}

// connection returns the live connection, connecting if there is none.
func (s *Store) connection(ctx context.Context) (*pgx.Conn, error) {
	if s.conn != nil && !s.conn.IsClosed() {
		return s.conn, nil
	}
	s.discard()
	if s.reader {
		// A Reader's client may give up while it connects: finish
		// connecting (bounded by the connect timeout) rather than leave a
		// session half-open on the server while the next one opens.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.config.ConnectTimeout)
		defer cancel()
		ctx = cctx
	}
	conn, err := pgx.ConnectConfig(ctx, s.config)
	if err != nil && TooManyConnections(err) && s.spare != nil {
		if c := s.takeSpare(ctx); c != nil {
			conn, err = c, nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	if err := pgsession.Apply(ctx, conn, s.settings); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	// A hot standby refuses CREATE TEMP TABLE (25006); only commits use
	// them, and a commit there fails anyway (read-only: Retryable). The
	// server reports in_hot_standby from PostgreSQL 14 on.
	if conn.PgConn().ParameterStatus("in_hot_standby") != "on" {
		_, err := conn.Exec(ctx, createTempTables)
		if err == nil {
			err = matchTempCompression(ctx, conn)
		}
		if err != nil {
			_ = conn.Close(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("create temporary tables: %w", err)
		}
	}
	s.conn = conn
	if addr := conn.PgConn().Conn().RemoteAddr().String(); addr != s.server {
		if s.server != "" && s.onServerChange != nil {
			s.onServerChange(s.server, addr)
		}
		s.server = addr
	}
	return conn, nil
}

// takeSpare takes the connection that s's spare function lends it
// (WithSpare), if it is open and idle, and gives it s's session settings
// (set_config of each run-time parameter s connects with, and of its
// settings); nil when there is none.
func (s *Store) takeSpare(ctx context.Context) *pgx.Conn {
	if !s.spare(s) {
		return nil
	}
	conn := s.conn
	s.conn = nil
	if conn.IsClosed() || conn.PgConn().TxStatus() != 'I' {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil
	}
	settings := maps.Clone(s.settings)
	maps.Copy(settings, s.config.RuntimeParams)
	delete(settings, "options") // a startup-only parameter
	if err := pgsession.Apply(ctx, conn, settings); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil
	}
	return conn
}

// do runs f on the connection; on error the connection is thrown away.
func (s *Store) do(ctx context.Context, f func(*pgx.Conn) error) error {
	conn, err := s.connection(ctx)
	if err != nil {
		return err
	}
	if err := f(conn); err != nil {
		if !s.reader || conn.IsClosed() || conn.PgConn().TxStatus() != 'I' {
			s.discard()
		}
		return err
	}
	return nil
}

// Read runs f, read-only queries of a package under store (e.g.
// store/rollup), on the Store's connection, connecting if needed; after an
// error the connection is thrown away. It returns f's error.
func (s *Store) Read(ctx context.Context, f func(*pgx.Conn) error) error {
	return s.do(ctx, f)
}

// discard closes and forgets the connection. A Reader's connection that
// pgx closed itself (a cancel request that landed between two messages, so
// the statement went on until cancelGrace) is waited for until the server
// closed its end (pgconn's cleanup: cancel, Terminate, then EOF, at most
// 15 s), so that its session is gone before the next one opens.
func (s *Store) discard() {
	if s.conn == nil {
		return
	}
	wait := s.reader && s.conn.IsClosed()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_ = s.conn.Close(ctx)
	cancel()
	if wait {
		<-s.conn.PgConn().CleanupDone()
	}
	s.conn = nil
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// within clamps a statistic that floating-point rounding put a few ulps
// outside [lo, hi] (e.g. the mean of three 0.1s is 0.10000000000000002): the
// exact value lies inside, and the table's CHECK would otherwise reject the
// row for good. NaN is passed through, for the CHECK to reject.
func within(v, lo, hi float64) float64 {
	if math.IsNaN(v) || lo > hi {
		return v
	}
	return min(max(v, lo), hi)
}
