package migrations

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// downGuards are the down migrations that would lose rows no table of the
// older version can hold, by version: a query that returns a reason to
// refuse, or NULL. Down and DownTo run the guard of every migration they
// would revert before anything runs, so a refused down leaves the schema as
// it was, clean (the .down.sql refuses too, but golang-migrate would then
// mark the schema dirty).
var downGuards = map[uint]string{
	8: `SELECT format('%s partial windows of split pipelines wait for the merge (delay_partial_windows), which version 7 ` +
		`cannot hold: merge them first (one ovstream run over every partition of the pipeline, or a split --drain), then migrate down', count(*))
	    FROM delay_partial_windows HAVING count(*) > 0`,
	9: `SELECT format('%s partial windows in format 2 wait for the merge (delay_partial_windows), which version 8 ` +
		`cannot read: merge them first (one ovstream run over every partition of the pipeline, or a split --drain), then migrate down', count(*))
	    FROM delay_partial_windows WHERE substring(data FROM 1 FOR 1) = '\x82'::bytea HAVING count(*) > 0`,
	15: `SELECT format('%s dead letters have reason implausible, which version 14 cannot hold: replay them ` +
		`(dlq replay --reason implausible) after raising --max-delay, or delete them, then migrate down', count(*))
	    FROM dead_letters WHERE reason = 'implausible' HAVING count(*) > 0`,
}

// checkDownGuards returns an error naming the reason when reverting the
// migrations above version to (at version from now) would lose rows.
func checkDownGuards(ctx context.Context, databaseURL string, from, to uint) error {
	var conn *pgx.Conn
	for v := from; v > to; v-- {
		guard, ok := downGuards[v]
		if !ok {
			continue
		}
		if conn == nil {
			u, err := parseURL(databaseURL)
			if err != nil {
				return err
			}
			if conn, err = connect(ctx, u); err != nil {
				return redact(fmt.Errorf("migrations: down to %d: connect: %w", to, err), u)
			}
			defer conn.Close(context.WithoutCancel(ctx))
		}
		var reason *string
		if err := conn.QueryRow(ctx, guard).Scan(&reason); err != nil && err != pgx.ErrNoRows {
			return fmt.Errorf("migrations: down to %d: check migration %d: %w", to, v, err)
		}
		if reason != nil {
			return fmt.Errorf("migrations: down to %d refused, nothing changed: %s", to, *reason)
		}
	}
	return nil
}
