package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// UnknownPipelineError is a pipeline name the database holds nothing of: a
// misspelt --pipeline, or a pipeline that never ran here. Commands that
// read a pipeline (report, status, the dashboard) return it instead of an
// empty answer that looks like an idle pipeline.
type UnknownPipelineError struct {
	Name  string
	Known []string // the pipelines of the database (KnownPipelines), sorted; empty when it has none
}

func (e *UnknownPipelineError) Error() string {
	if len(e.Known) == 0 {
		return fmt.Sprintf("no pipeline %q in this database: it has none yet (the first `ovstream run --pipeline NAME` makes one)", e.Name)
	}
	quoted := make([]string, len(e.Known))
	for i, k := range e.Known {
		quoted[i] = strconv.Quote(k)
	}
	return fmt.Sprintf("no pipeline %q in this database; known pipelines: %s", e.Name, strings.Join(quoted, ", "))
}

// KnownPipelines returns the names of the database's pipelines, sorted
// byte-wise: the rows of the pipelines table, which the first claim of a
// pipeline makes (`run`) and `pipeline drop` deletes.
func KnownPipelines(ctx context.Context, db Querier) ([]string, error) {
	rows, err := db.Query(ctx, `SELECT name FROM pipelines ORDER BY name COLLATE "C"`)
	if err != nil {
		return nil, fmt.Errorf("store: pipelines: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("store: pipelines: %w", err)
	}
	return names, nil
}

// CheckPipelineKnown returns nil when the database knows pipeline: it has a
// row in pipelines (its first claim made it) or, asked only when it has
// none, rows in delay_aggregates (results loaded or restored without a
// claim; one index probe). Otherwise it returns an *UnknownPipelineError
// naming the known pipelines. Other errors are the queries', wrapped.
func CheckPipelineKnown(ctx context.Context, db Querier, pipeline string) error {
	for _, q := range []string{`SELECT EXISTS (SELECT 1 FROM pipelines WHERE name = $1)`,
		`SELECT EXISTS (SELECT 1 FROM delay_aggregates WHERE pipeline = $1)`} {
		rows, err := db.Query(ctx, q, pipeline)
		if err != nil {
			return fmt.Errorf("store: pipeline %q: %w", pipeline, err)
		}
		known, err := pgx.CollectExactlyOneRow(rows, pgx.RowTo[bool])
		if err != nil {
			return fmt.Errorf("store: pipeline %q: %w", pipeline, err)
		}
		if known {
			return nil
		}
	}
	names, err := KnownPipelines(ctx, db)
	if err != nil {
		return err
	}
	return &UnknownPipelineError{Name: pipeline, Known: names}
}

// CheckPipelineKnown is the package's CheckPipelineKnown on s's connection.
func (s *Store) CheckPipelineKnown(ctx context.Context, pipeline string) error {
	return s.do(ctx, func(c *pgx.Conn) error { return CheckPipelineKnown(ctx, c, pipeline) })
}

// IsUnknownPipeline tells whether err is, or wraps, an *UnknownPipelineError.
func IsUnknownPipeline(err error) bool {
	var u *UnknownPipelineError
	return errors.As(err, &u)
}
