package migrations

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-migrate/migrate/v4/database"
	pgxmigrate "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/ovstream/ovstream/pgsession"
)

// connConfig parses u (postgres://, postgresql:// or pgx5://) into the
// configuration of a migration's connections and the session settings set
// on each (pgsession): lock_timeout (LockTimeout unless u sets it) and any
// other run-time parameter of u a pooler would refuse at connection start.
// connect_timeout is ConnectTimeout unless u sets it. golang-migrate's own
// x- options are not PostgreSQL's and are left out.
func connConfig(u *url.URL) (*pgx.ConnConfig, pgsession.Settings, error) {
	c := *u
	c.Scheme = "postgres"
	q := c.Query()
	for k := range q {
		if strings.HasPrefix(k, "x-") {
			q.Del(k)
		}
	}
	if q.Get("connect_timeout") == "" {
		q.Set("connect_timeout", fmt.Sprint(int(ConnectTimeout.Seconds())))
	}
	c.RawQuery = q.Encode()
	config, err := pgx.ParseConfig(c.String())
	if err != nil {
		return nil, nil, err
	}
	settings := pgsession.Split(config)
	if settings["lock_timeout"] == "" {
		settings["lock_timeout"] = fmt.Sprint(LockTimeout.Milliseconds())
	}
	return config, settings, nil
}

// connect opens one connection of u with its session settings (connConfig),
// for a few reads (Version, the down guards): their statements are unnamed
// (pgx.QueryExecModeExec), so that they read the same through any pooler (a
// transaction pool does not keep prepared statements) and in any
// client_encoding (pgx's simple protocol needs UTF8).
func connect(ctx context.Context, u *url.URL) (*pgx.Conn, error) {
	config, settings, err := connConfig(u)
	if err != nil {
		return nil, err
	}
	config.DefaultQueryExecMode = pgx.QueryExecModeExec
	conn, err := pgx.ConnectConfig(ctx, config)
	if err != nil {
		return nil, err
	}
	if err := pgsession.Apply(ctx, conn, settings); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	return conn, nil
}

// migrationDB is golang-migrate's PostgreSQL driver on connections that
// carry the session settings of connConfig, after pgsession.CheckSession
// found that they keep their session (golang-migrate's advisory lock is a
// session's: through a transaction pool it would stay with a server
// connection the pooler keeps, and the next migration would wait for it).
// abort closes every connection it opened, which ends a statement that
// waits (the advisory lock) at once.
type migrationDB struct {
	driver      database.Driver
	lockTimeout time.Duration // the sessions' lock_timeout; 0: none
	mu          sync.Mutex
	conns       []*pgx.Conn
}

// openMigrationDB opens golang-migrate's driver on u. The database name
// keys golang-migrate's advisory lock as its own URL parsing does (the URL's
// path, with its slash), so that a migration of an older binary and one of
// this binary exclude each other.
func openMigrationDB(ctx context.Context, u *url.URL) (*migrationDB, error) {
	config, settings, err := connConfig(u)
	if err != nil {
		return nil, err
	}
	if err := pgsession.CheckSession(ctx, config); err != nil {
		return nil, err
	}
	d := &migrationDB{}
	if ms, err := strconv.ParseInt(settings["lock_timeout"], 10, 64); err == nil {
		d.lockTimeout = time.Duration(ms) * time.Millisecond
	}
	db := stdlib.OpenDB(*config, stdlib.OptionAfterConnect(func(ctx context.Context, conn *pgx.Conn) error {
		if err := pgsession.Apply(ctx, conn, settings); err != nil {
			return err
		}
		d.mu.Lock()
		d.conns = append(d.conns, conn)
		d.mu.Unlock()
		return nil
	}))
	type opened struct {
		driver database.Driver
		err    error
	}
	done := make(chan opened, 1)
	go func() {
		// WithInstance takes the advisory lock to create the version table.
		driver, err := pgxmigrate.WithInstance(db, &pgxmigrate.Config{DatabaseName: u.Path,
			MigrationsTable: u.Query().Get("x-migrations-table")})
		done <- opened{driver, err}
	}()
	select {
	case o := <-done:
		if o.err != nil {
			_ = db.Close()
			return nil, o.err
		}
		d.driver = o.driver
		return d, nil
	case <-ctx.Done():
		d.abort()
		if o := <-done; o.err == nil {
			_ = o.driver.Close()
		}
		_ = db.Close()
		return nil, ctx.Err()
	}
}

// abort closes the network connection of every session opened so far.
func (d *migrationDB) abort() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		_ = c.PgConn().Conn().Close()
	}
}

// lockWait wraps the driver so that a wait for the migration lock ends when
// ctx does: golang-migrate's Lock has no context. Only the lock's wait is
// cut; once the lock is held, a migration runs to its end.
type lockWait struct {
	database.Driver
	ctx     context.Context
	db      *migrationDB
	waiting atomic.Bool // a Lock is under way
}

func (l *lockWait) Lock() error {
	l.waiting.Store(true)
	defer l.waiting.Store(false)
	done := make(chan error, 1)
	go func() { done <- l.Driver.Lock() }()
	select {
	case err := <-done:
		return err
	case <-l.ctx.Done():
		l.db.abort()
		return fmt.Errorf("waiting for the migration lock: %w", errors.Join(l.ctx.Err(), <-done))
	}
}

// Close closes the driver; a Lock still waiting (golang-migrate gave up on it
// after its own LockTimeout) is ended first, or closing would wait for it.
func (l *lockWait) Close() error {
	if l.waiting.Load() {
		l.db.abort()
	}
	return l.Driver.Close()
}

// lockGrace is how much longer golang-migrate waits for its lock than the
// session's lock_timeout, so that PostgreSQL's 55P03 ends the wait first.
const lockGrace = 5 * time.Second
