package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ovstream/ovstream/aggregate"
)

// upsertNamesSQL writes the names of a commit (table names, migration 0007).
// The rows are inserted in key order (dimension, dimension_id, byte order):
// two instances of a split pipeline that write the same names lock their
// rows in the same order, so they wait for each other and never deadlock.
// A row is replaced only when the name (or short name) differs and the new
// one is newer: (observed_at, name, short_name) greater, COLLATE "C", as
// aggregate.Names decides in memory. So an unchanged name writes nothing
// (no dead tuple, no WAL), and the names that records redelivered after a
// crash carry again (a new instance knows no name, and writes each it meets
// once) are harmless: the same name is a no-op, and an older record's name
// never replaces a newer one.
const upsertNamesSQL = `
INSERT INTO names AS n (pipeline, dimension, dimension_id, name, short_name, observed_at, updated_at)
SELECT $1, u.dimension, u.dimension_id, u.name, nullif(u.short_name, ''), u.observed_at, now()
FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[])
    AS u(dimension, dimension_id, name, short_name, observed_at)
ORDER BY u.dimension COLLATE "C", u.dimension_id COLLATE "C"
ON CONFLICT (pipeline, dimension, dimension_id) DO UPDATE SET
    name = excluded.name, short_name = excluded.short_name, observed_at = excluded.observed_at, updated_at = now()
WHERE (n.name, coalesce(n.short_name, '')) IS DISTINCT FROM (excluded.name, coalesce(excluded.short_name, ''))
  AND (excluded.observed_at, excluded.name COLLATE "C", coalesce(excluded.short_name, '') COLLATE "C")
    > (n.observed_at, n.name COLLATE "C", coalesce(n.short_name, '') COLLATE "C")`

// namesPerStatement bounds the names one statement of upsertNames sends:
// its five arrays, Go's and pgx's encoding of them, are made per statement,
// so a burst of new stations costs a few MB at a time, not hundreds.
const namesPerStatement = 8192

// upsertNames writes names, one row per key (aggregate.Names.Take gives
// them so), in one statement per namesPerStatement of them, in their order:
// the key order of upsertNamesSQL across statements too.
func upsertNames(ctx context.Context, tx pgx.Tx, pipeline string, names []aggregate.Name) error {
	for len(names) > 0 {
		n := min(len(names), namesPerStatement)
		dims, ids, ns, shorts, ats := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]time.Time, n)
		for i, nm := range names[:n] {
			dims[i], ids[i], ns[i], shorts[i], ats[i] = nm.Dimension, nm.ID, nm.Name, nm.ShortName, nm.EventTime.UTC()
		}
		if _, err := tx.Exec(ctx, upsertNamesSQL, pipeline, dims, ids, ns, shorts, ats); err != nil {
			return err
		}
		names = names[n:]
	}
	return nil
}

// writeNames writes a commit's names inside a savepoint. When PostgreSQL
// refuses some of them (Refused: a constraint an operator added, an
// encoding the database cannot hold), the others are written and each
// refused one is reported to s.onNameRefused: a name is a label, and must
// never stall a partition (G10, docs/design.md "Guarantees the tests assert"). Other errors fail the commit.
func (s *Store) writeNames(ctx context.Context, tx pgx.Tx, pipeline string, names []aggregate.Name) error {
	return refusedRows(ctx, func() pgx.Tx { return tx }, names, probeMode[aggregate.Name]{keep: true}, func(tx pgx.Tx, ns []aggregate.Name) error {
		return upsertNames(ctx, tx, pipeline, ns)
	}, func(nm aggregate.Name, e *pgconn.PgError) {
		if s.onNameRefused != nil {
			s.onNameRefused(nm, refusal("names", fmt.Sprintf("(%s, %s)", nm.Dimension, nm.ID), e))
		}
	})
}

// Name is one row of a pipeline's names table: the name of a line or
// station as the newest record that carried one gave it.
type Name struct {
	Name       string    // line: line_name, else line_short_name; station: stop_name
	ShortName  string    // line: line_short_name, "" when none; station: ""
	ObservedAt time.Time // event_time of the newest record seen with this name, UTC
	UpdatedAt  time.Time // when the commit that wrote it ran, UTC
}

// Querier is what the store's read queries need of a connection (pgx's
// Query and QueryRow): *pgx.Conn, pgx.Tx, *pgxpool.Conn and *pgxpool.Pool
// have it, so reads need no *Store.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Names returns the names of pipeline's ids of dimension (aggregate.DimLine
// or DimStation; other dimensions have none), by id: those of ids, or every
// one when ids is nil. An id without a name is absent from the map (names
// are optional in the data contract). Errors: the query's, wrapped.
//
// Example: store.Names(ctx, conn, "halifax", aggregate.DimLine, []string{"320"})
// returns {"320": {Name: "Airport - Fall River Regional Exp", ShortName: "320", ...}}.
func Names(ctx context.Context, db Querier, pipeline, dimension string, ids []string) (map[string]Name, error) {
	var idArg any // NULL: every id
	if ids != nil {
		idArg = ids
	}
	rows, err := db.Query(ctx, `
SELECT n.dimension_id, n.name, coalesce(n.short_name, ''), n.observed_at, n.updated_at
FROM names AS n
WHERE n.pipeline = $1 AND n.dimension = $2 AND ($3::text[] IS NULL OR n.dimension_id = ANY ($3::text[]))`,
		pipeline, dimension, idArg)
	if err != nil {
		return nil, fmt.Errorf("store: names of %s %s: %w", pipeline, dimension, err)
	}
	out := map[string]Name{}
	var id string
	var nm Name
	_, err = pgx.ForEachRow(rows, []any{&id, &nm.Name, &nm.ShortName, &nm.ObservedAt, &nm.UpdatedAt}, func() error {
		nm.ObservedAt, nm.UpdatedAt = nm.ObservedAt.UTC(), nm.UpdatedAt.UTC()
		out[id] = nm
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: names of %s %s: %w", pipeline, dimension, err)
	}
	return out, nil
}
