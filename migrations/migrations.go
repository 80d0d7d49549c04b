// Package migrations holds ovstream's schema as numbered golang-migrate files
// (NNNN_name.up.sql / NNNN_name.down.sql, embedded in the binary) and applies
// them.
//
// Guarantees:
//   - Up on an up-to-date schema is a success (migrate.ErrNoChange is not an error).
//   - Check tells the service, before it writes anything, whether the schema is
//     exactly the version this binary was built for; its *SchemaError says what
//     to run to fix it (behind, dirty after a failed migration, or ahead).
//   - A migration that fails says its version and file, that the schema is now
//     dirty, and the repair (*MigrationError); Up on a dirty schema runs
//     nothing and returns the *SchemaError that Check would; so do Up, UpTo,
//     Down and DownTo on a schema newer than this binary knows.
//   - Each migration file runs in one PostgreSQL transaction: it applies entirely
//     or not at all. Applied files are never edited; changes are new files.
//   - Two processes migrating at once do not hang: the session sets
//     lock_timeout (SET after connecting, not a startup parameter, which a
//     pooler such as PgBouncer refuses), so the loser of golang-migrate's
//     advisory lock fails after LockTimeout with SQLSTATE 55P03 instead of
//     waiting forever; a cancelled context ends that wait at once.
//   - A connection through a pooler in transaction mode is refused before
//     anything runs (pgsession.ErrSessionPooling): the advisory lock is a
//     session's, and the pooler would keep it on a server connection.
//   - Returned errors never hold the database password.
//
// Version 0 means "no migration applied".
package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"strings"
	"time"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	_ "github.com/golang-migrate/migrate/v4/database/pgx/v5" // registers pgx5://
	"github.com/golang-migrate/migrate/v4/source"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// FS holds the migration files.
//
//go:embed *.sql
var FS embed.FS

// MigrationsTable is golang-migrate's version table (its default name), in the
// connection's current schema.
const MigrationsTable = "schema_migrations"

// Defaults added to the database URL of a migration when it does not set them.
const (
	// LockTimeout bounds the wait for golang-migrate's advisory lock (and for
	// table locks of the DDL) when another process is migrating.
	LockTimeout = 15 * time.Second
	// ConnectTimeout bounds connecting to the server.
	ConnectTimeout = 10 * time.Second
)

// SchemaError says that the database schema is not the version this binary
// needs, and what to do about it.
type SchemaError struct {
	Version uint // the version in the database; 0 = no migration applied
	Dirty   bool // a migration to Version failed half-way
	Want    uint // the version this binary needs (Latest())
}

func (e *SchemaError) Error() string {
	switch {
	case e.Dirty:
		return fmt.Sprintf("schema version %d is dirty (a migration to version %d failed half-way): %s",
			e.Version, e.Version, repair(e.Version))
	case e.Version < e.Want:
		return fmt.Sprintf("schema is at version %d, this binary needs %d: run `ovstream migrate up` or start `run` with --migrate",
			e.Version, e.Want)
	default:
		return fmt.Sprintf("schema is at version %d, newer than the %d this binary knows: run a newer ovstream binary "+
			"(or, to go back, `ovstream migrate down` with the binary that applied version %d)", e.Version, e.Want, e.Version)
	}
}

// MigrationError says that the SQL of migration Version failed: golang-migrate
// left the schema at Version marked dirty, and Error words the repair.
type MigrationError struct {
	Version uint   // the migration that failed
	File    string // its file, e.g. "0002_dead_letters_replayed.up.sql"
	Err     error  // the SQL error: a *pgconn.PgError when PostgreSQL refused a statement
}

func (e *MigrationError) Error() string {
	msg := e.Err.Error()
	var pgErr *pgconn.PgError
	if errors.As(e.Err, &pgErr) && pgErr.Detail != "" {
		msg += " (" + pgErr.Detail + ")"
	}
	return fmt.Sprintf("migration %d (%s) failed: %s; the schema is now at version %d, marked dirty: %s",
		e.Version, e.File, msg, e.Version, repair(e.Version))
}

func (e *MigrationError) Unwrap() error { return e.Err }

// repair words the runbook's repair (docs/runbook.md "Dirty migration") of a schema
// marked dirty at version v by a failed `up`.
func repair(v uint) string {
	if v == 0 {
		return "check the tables, mark the version that is really there with `ovstream migrate force V`, " +
			"then run `ovstream migrate up`"
	}
	return fmt.Sprintf("each migration file runs in one transaction, so the tables are usually still as version %d left them; "+
		"check them, mark that version with `ovstream migrate force %d` (or `force %d` if the changes of version %d are all there), "+
		"then run `ovstream migrate up`", v-1, v-1, v, v)
}

// Latest is the highest version among the embedded migrations.
func Latest() uint {
	var latest uint
	entries, err := fs.ReadDir(FS, ".")
	if err != nil {
		panic(err) // embedded: cannot fail
	}
	for _, e := range entries {
		if m, err := source.Parse(e.Name()); err == nil && m.Version > latest {
			latest = m.Version
		}
	}
	return latest
}

// upFile returns the name of the up file of migration version, "" if none.
func upFile(version uint) string {
	entries, _ := fs.ReadDir(FS, ".")
	for _, e := range entries {
		if m, err := source.Parse(e.Name()); err == nil && m.Version == version && m.Direction == source.Up {
			return e.Name()
		}
	}
	return ""
}

// Up applies every migration not yet applied. An up-to-date schema is a
// success. When a migration's SQL fails, the error is a *MigrationError; when
// the schema was dirty already, nothing runs and the error is a *SchemaError;
// both say how to repair it.
func Up(ctx context.Context, databaseURL string) error {
	if err := refuseNewer(ctx, databaseURL); err != nil {
		return err
	}
	err := run(ctx, databaseURL, "up", func(m *migrate.Migrate) error {
		err := m.Up()
		var dirty migrate.ErrDirty
		if errors.As(err, &dirty) {
			return &SchemaError{Version: uint(max(dirty.Version, 0)), Dirty: true, Want: Latest()}
		}
		// The pgx/v5 driver returns a database.Error value (other failures:
		// a pointer) when a migration's SQL fails, after golang-migrate marked
		// the schema dirty at that migration's version.
		var sqlErr database.Error
		if errors.As(err, &sqlErr) && sqlErr.OrigErr != nil {
			if v, dirty, verr := m.Version(); verr == nil && dirty {
				return &MigrationError{Version: v, File: upFile(v), Err: sqlErr.OrigErr}
			}
		}
		return err
	})
	if errors.Is(err, migrate.ErrNoChange) {
		return nil
	}
	return err
}

// UpTo applies the migrations not yet applied up to version v (never one
// above it); a schema already at v is a success.
func UpTo(ctx context.Context, databaseURL string, v uint) error {
	if err := refuseNewer(ctx, databaseURL); err != nil {
		return err
	}
	err := run(ctx, databaseURL, fmt.Sprintf("up to %d", v), func(m *migrate.Migrate) error { return m.Migrate(v) })
	if errors.Is(err, migrate.ErrNoChange) {
		return nil
	}
	return err
}

// Down reverts every migration: it DROPS ALL ovstream TABLES AND THEIR DATA.
// A schema with no migration applied is a success.
func Down(ctx context.Context, databaseURL string) error {
	if err := refuseNewer(ctx, databaseURL); err != nil {
		return err
	}
	if err := guardDown(ctx, databaseURL, 0); err != nil {
		return err
	}
	err := run(ctx, databaseURL, "down", func(m *migrate.Migrate) error { return m.Down() })
	if errors.Is(err, migrate.ErrNoChange) {
		return nil
	}
	return err
}

// DownTo reverts the migrations above version v, newest first, never one at
// or below it; a schema at v is a success, one below v an error. What each
// reverted migration drops is in its .down.sql (0006 keeps every row of
// delay_aggregates; 0007 drops the names; 0005 the distributions).
func DownTo(ctx context.Context, databaseURL string, v uint) error {
	if err := refuseNewer(ctx, databaseURL); err != nil {
		return err
	}
	if err := guardDown(ctx, databaseURL, v); err != nil {
		return err
	}
	err := run(ctx, databaseURL, fmt.Sprintf("down to %d", v), func(m *migrate.Migrate) error {
		cur, _, err := m.Version()
		if errors.Is(err, migrate.ErrNilVersion) {
			cur, err = 0, nil
		}
		if err != nil {
			return err
		}
		if cur < v {
			return fmt.Errorf("the schema is at version %d, below %d: use migrate up", cur, v)
		}
		return m.Migrate(v)
	})
	if errors.Is(err, migrate.ErrNoChange) {
		return nil
	}
	return err
}

// refuseNewer returns the *SchemaError of a schema newer than this binary
// knows: golang-migrate would fail on it with "no migration found for
// version N: read down for version N .: file does not exist". Only the
// binary that applied it can move it. A version it cannot read is left to
// the migration, which says why.
func refuseNewer(ctx context.Context, databaseURL string) error {
	v, dirty, err := Version(ctx, databaseURL)
	if err == nil && v > Latest() {
		return &SchemaError{Version: v, Dirty: dirty, Want: Latest()}
	}
	return nil
}

// guardDown runs checkDownGuards from the schema's current version down to
// to; a dirty schema or one already at or below to is left to golang-migrate.
func guardDown(ctx context.Context, databaseURL string, to uint) error {
	cur, dirty, err := Version(ctx, databaseURL)
	if err != nil || dirty || cur <= to {
		return nil
	}
	return checkDownGuards(ctx, databaseURL, cur, to)
}

// Force records version as applied and clean, WITHOUT running any SQL: the
// repair after a migration failed half-way (see SchemaError). 0 = no
// migration applied.
func Force(ctx context.Context, databaseURL string, version uint) error {
	if version > Latest() {
		return fmt.Errorf("migrations: force %d: this binary knows versions up to %d", version, Latest())
	}
	v := int(version)
	if version == 0 {
		v = -1 // golang-migrate's "nil version"
	}
	return run(ctx, databaseURL, fmt.Sprintf("force %d", version), func(m *migrate.Migrate) error { return m.Force(v) })
}

// Version reads the schema version and whether it is dirty. It only reads: it
// takes no lock and creates nothing, so it is safe while another process
// migrates (which shows as dirty until that migration ends). 0 = no migration
// applied.
func Version(ctx context.Context, databaseURL string) (version uint, dirty bool, err error) {
	u, err := parseURL(databaseURL)
	if err != nil {
		return 0, false, err
	}
	fail := func(what string, err error) (uint, bool, error) {
		return 0, false, redact(fmt.Errorf("migrations: version: %s: %w", what, err), u)
	}
	conn, err := connect(ctx, u)
	if err != nil {
		return fail("connect", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", MigrationsTable).Scan(&exists); err != nil {
		return fail("look for "+MigrationsTable, err)
	}
	if !exists {
		return 0, false, nil
	}
	var v int64
	err = conn.QueryRow(ctx, "SELECT version, dirty FROM "+pgx.Identifier{MigrationsTable}.Sanitize()+" LIMIT 1").Scan(&v, &dirty)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return fail("read "+MigrationsTable, err)
	}
	if v < 0 { // nil version, dirty after a failed down of the first migration
		v = 0
	}
	return uint(v), dirty, nil
}

// Check returns nil when the schema is exactly Latest() and clean, a
// *SchemaError when it is behind, dirty or ahead, and another error when the
// version cannot be read.
func Check(ctx context.Context, databaseURL string) error {
	v, dirty, err := Version(ctx, databaseURL)
	if err != nil {
		return err
	}
	if dirty || v != Latest() {
		return &SchemaError{Version: v, Dirty: dirty, Want: Latest()}
	}
	return nil
}

// run opens golang-migrate on databaseURL, runs op, and closes it. When ctx is
// cancelled, a wait for the migration lock ends at once (its connections
// are closed; nothing was migrated) and golang-migrate is asked to stop after
// the migration in progress (a migration is never cut in half); run always
// waits for op to return. A connection that does not keep its session (a
// transaction pool) is refused before anything runs
// (pgsession.ErrSessionPooling).
func run(ctx context.Context, databaseURL, what string, op func(*migrate.Migrate) error) (err error) {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("migrations: %s: %w", what, err)
	}
	u, err := parseURL(databaseURL)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil && !errors.Is(err, migrate.ErrNoChange) {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "55P03" {
				what += " (another process holds the migration lock or a table lock: is a migration running? try again)"
			}
			err = redact(fmt.Errorf("migrations: %s: %w", what, err), u)
		}
	}()
	src, err := iofs.New(FS, ".")
	if err != nil {
		return err
	}
	db, err := openMigrationDB(ctx, u)
	if err != nil {
		return err
	}
	driver := &lockWait{Driver: db.driver, ctx: ctx, db: db}
	m, err := migrate.NewWithInstance("iofs", src, "pgx5", driver)
	if err != nil {
		_ = driver.Close()
		return err
	}
	m.LockTimeout = db.lockTimeout + lockGrace
	defer func() {
		srcErr, dbErr := m.Close()
		if err == nil {
			err = errors.Join(srcErr, dbErr)
		}
	}()
	done := make(chan error, 1)
	go func() { done <- op(m) }()
	select {
	case err = <-done:
		return err
	case <-ctx.Done():
		m.GracefulStop <- true
		err = <-done
		if err == nil || errors.Is(err, migrate.ErrNoChange) {
			err = ctx.Err()
		}
		return err
	}
}

// parseURL accepts postgres://, postgresql:// and pgx5:// URLs. Its errors do
// not echo the URL (it may hold a password).
func parseURL(databaseURL string) (*url.URL, error) {
	u, err := url.Parse(databaseURL)
	if err != nil || u.Host == "" && u.Path == "" {
		return nil, errors.New("migrations: the database URL does not parse (want postgres://user:password@host:port/dbname?sslmode=...)")
	}
	switch u.Scheme {
	case "postgres", "postgresql", "pgx5":
		return u, nil
	default:
		return nil, fmt.Errorf("migrations: database URL scheme %q: want postgres:// or postgresql://", u.Scheme)
	}
}

// redact returns err with the password of u removed from its text; errors.Is
// and errors.As still see the original chain.
func redact(err error, u *url.URL) error {
	if err == nil || u == nil {
		return err
	}
	pw := u.Query().Get("password")
	if u.User != nil {
		if p, ok := u.User.Password(); ok {
			pw = p
		}
	}
	if pw == "" {
		return err
	}
	msg := err.Error()
	for _, s := range []string{pw, url.QueryEscape(pw), url.PathEscape(pw), (&url.URL{User: url.UserPassword("", pw)}).User.String()[1:]} {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, "xxxxx")
		}
	}
	return &redactedError{msg: msg, err: err}
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }
