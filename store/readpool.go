package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ovstream/ovstream/pgsession"
)

// ReadPool returns a pgxpool.Pool of at most maxConns read-only sessions on
// databaseURL, for the read queries that take a Querier (ReadStatus,
// ReadInstances, ReadMergeLag, rollup.Run): sessions as a Reader's, that
// pg_stat_activity shows as applicationName, in UTC, whose statements end
// after statementTimeout (0: the server's statement_timeout) and are
// cancelled on the server when the caller's context ends. Every statement is
// an unnamed prepared statement (pgx.QueryExecModeExec) and every session
// setting but those a pooler tracks is set with set_config on each new
// session (package pgsession), so the pool works through a connection pooler
// as the Store does (docs/poolers.md). It opens no connection: the first
// Acquire or query does. Errors: a URL that does not parse.
func ReadPool(databaseURL, applicationName string, statementTimeout time.Duration, maxConns int32) (*pgxpool.Pool, error) {
	template, err := Lazy(databaseURL)
	if err != nil {
		return nil, err
	}
	r := template.Reader(applicationName, statementTimeout)
	pc, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("store: open: %w", err)
	}
	pc.ConnConfig = r.config
	pc.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	pc.MaxConns, pc.MinConns = maxConns, 0
	settings := r.settings
	pc.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error { return pgsession.Apply(ctx, conn, settings) }
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		return nil, fmt.Errorf("store: open: %w", err)
	}
	return pool, nil
}
