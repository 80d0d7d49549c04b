// Package pgsession sets up ovstream's PostgreSQL sessions so that they work
// the same directly and through a connection pooler, and refuses a pooler
// that does not keep a session.
//
// Guarantees:
//   - Only the run-time parameters PgBouncer tracks (application_name,
//     client_encoding, DateStyle, TimeZone, standard_conforming_strings) are
//     sent as startup parameters; every other one (lock_timeout,
//     statement_timeout, idle_in_transaction_session_timeout, search_path,
//     from ovstream or from the URL) is set with set_config on the new
//     session, so a pooler with its default configuration (no
//     ignore_startup_parameters) accepts the connection and no setting is
//     dropped.
//   - CheckSession refuses, before anything is written, a connection whose
//     server session does not last for the client's connection: a pooler in
//     transaction or statement pool mode. ovstream keeps state in its session
//     (temporary tables, prepared statements, advisory locks).
package pgsession

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// tracked are the run-time parameters PgBouncer accepts in a startup packet
// without ignore_startup_parameters (it tracks them and sets them on the
// server connection it lends): PgBouncer's docs, "ignore_startup_parameters"
// and "track_extra_parameters". "options" is the URL's own choice, kept.
var tracked = map[string]bool{
	"application_name": true, "client_encoding": true, "datestyle": true, "timezone": true,
	"standard_conforming_strings": true, "options": true,
}

// Settings are session settings (name to value) set on each new session.
type Settings map[string]string

// Split moves every run-time parameter of config but those a pooler tracks
// out of config.RuntimeParams and returns them, to be set with Apply once
// connected.
func Split(config *pgx.ConnConfig) Settings {
	s := Settings{}
	for k, v := range config.RuntimeParams {
		if !tracked[strings.ToLower(k)] {
			s[k] = v
			delete(config.RuntimeParams, k)
		}
	}
	return s
}

// Apply sets s on conn's session (set_config, not local to a transaction) in
// one statement of an unnamed prepared statement (pgx.QueryExecModeExec:
// nothing is kept on the server, so any pooler passes it; pgx's simple
// protocol would need client_encoding UTF8). An unknown
// name or a bad value is PostgreSQL's error (42704, 22023).
func Apply(ctx context.Context, conn *pgx.Conn, s Settings) error {
	if len(s) == 0 {
		return nil
	}
	names := slices.Sorted(maps.Keys(s))
	values := make([]string, len(names))
	for i, k := range names {
		values[i] = s[k]
	}
	_, err := conn.Exec(ctx, `SELECT set_config(k, v, false) FROM unnest($1::text[], $2::text[]) AS s(k, v)`,
		pgx.QueryExecModeExec, names, values)
	if err != nil {
		return fmt.Errorf("set %s: %w", strings.Join(names, ", "), err)
	}
	return nil
}

// ErrSessionPooling is returned (wrapped in the one-line error of
// CheckSession) when the connection's server session does not last: a
// pooler in transaction or statement pool mode lends the client another
// server connection from one transaction to the next.
var ErrSessionPooling = errors.New("the connection does not keep its PostgreSQL session between transactions " +
	"(a pooler in transaction or statement mode, e.g. PgBouncer pool_mode = transaction); ovstream needs one session per connection " +
	"(temporary tables, prepared statements, advisory locks): connect directly or through pool_mode = session, see docs/poolers.md")

// probeRounds is how many times CheckSession compares the two sessions.
const probeRounds = 3

// CheckSession connects twice with config and tells whether the first
// connection keeps one server session: it asks each connection for its
// backend's process id (pg_backend_pid(), each question a transaction of
// its own) in turn, probeRounds times. Directly or through a session pool,
// the first connection always answers the same id and the second another
// one. A transaction pool lends the second connection the server
// connection the first one just gave back (PgBouncer lends the most
// recently used, server_round_robin = 0, its default) or the first one
// another: either answer gives it away. It returns nil, an error wrapping
// ErrSessionPooling, or the error of connecting or asking.
func CheckSession(ctx context.Context, config *pgx.ConnConfig) error {
	a, err := pgx.ConnectConfig(ctx, config)
	if err != nil {
		return err
	}
	defer a.Close(context.WithoutCancel(ctx))
	b, err := pgx.ConnectConfig(ctx, config)
	if err != nil {
		return err
	}
	defer b.Close(context.WithoutCancel(ctx))
	first, err := backendPID(ctx, a)
	if err != nil {
		return err
	}
	for range probeRounds {
		other, err := backendPID(ctx, b)
		if err != nil {
			return err
		}
		again, err := backendPID(ctx, a)
		if err != nil {
			return err
		}
		if other == first || again != first {
			return fmt.Errorf("%w (pg_backend_pid() of one connection: %d then %d; of another: %d)", ErrSessionPooling, first, again, other)
		}
	}
	return nil
}

// backendPID is pg_backend_pid() of conn's session, asked with the simple
// protocol (no prepared statement, which a transaction pool may not keep).
func backendPID(ctx context.Context, conn *pgx.Conn) (int64, error) {
	res, err := conn.PgConn().Exec(ctx, "SELECT pg_backend_pid()").ReadAll()
	if err != nil {
		return 0, fmt.Errorf("pg_backend_pid(): %w", err)
	}
	if len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) != 1 {
		return 0, errors.New("pg_backend_pid(): no row")
	}
	return strconv.ParseInt(string(res[0].Rows[0][0]), 10, 64)
}
