package dashboard

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/aggregate"
)

// linesSQL lists the lines with windows in [$2, $3), busiest first.
const linesSQL = `
SELECT dimension_id, sum(event_count)::bigint FROM delay_aggregates
WHERE pipeline = $1 AND dimension = 'line' AND window_start >= $2 AND window_start < $3
GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 500`

// lineKnownSQL tells whether line $2 is a line of pipeline $1: it has a
// window in [$3, $4) or a name (the names table). Both read a primary key's
// index; a line with windows only outside the range and no name is not
// looked for in the whole table, whose size has no bound.
const lineKnownSQL = `
SELECT EXISTS (SELECT 1 FROM delay_aggregates
               WHERE pipeline = $1 AND dimension = 'line' AND dimension_id = $2
                 AND window_start >= $3 AND window_start < $4)
    OR EXISTS (SELECT 1 FROM names WHERE pipeline = $1 AND dimension = 'line' AND dimension_id = $2)`

// linesIn returns the lines of pipeline with windows in [from, to), busiest
// first, at most 500, with their events there and their names.
func linesIn(ctx context.Context, c *pgx.Conn, pipeline string, from, to time.Time) ([]LineChoice, error) {
	rows, err := c.Query(ctx, linesSQL, pipeline, from, to)
	if err != nil {
		return nil, fmt.Errorf("dashboard: lines: %w", err)
	}
	out := []LineChoice{}
	var l LineChoice
	if _, err := pgx.ForEachRow(rows, []any{&l.ID, &l.Events}, func() error {
		out = append(out, l)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("dashboard: lines: %w", err)
	}
	return out, nil
}

// nameLines sets the names of lines and returns line's, with its events
// among lines (0 when it is not one of them); one query for all.
func nameLines(ctx context.Context, c *pgx.Conn, pipeline, line string, lines []LineChoice) (LineChoice, error) {
	ids := []string{line}
	for _, l := range lines {
		ids = append(ids, l.ID)
	}
	nm, err := lookupNames(ctx, c, pipeline, aggregate.DimLine, ids)
	if err != nil {
		return LineChoice{}, err
	}
	out := LineChoice{ID: line, Named: nm.of(line)}
	for i := range lines {
		lines[i].Named = nm.of(lines[i].ID)
		if lines[i].ID == line {
			out.Events = lines[i].Events
		}
	}
	return out, nil
}

// checkLine returns a 400 naming the line parameter when line is no line
// of pipeline (lineKnownSQL) with windows in [from, to) or a name.
func checkLine(ctx context.Context, c *pgx.Conn, pipeline, line string, from, to time.Time, lines []LineChoice) error {
	for _, l := range lines {
		if l.ID == line {
			return nil
		}
	}
	var known bool
	if err := c.QueryRow(ctx, lineKnownSQL, pipeline, line, from, to).Scan(&known); err != nil {
		return fmt.Errorf("dashboard: line %q: %w", line, err)
	}
	if !known {
		return badParam("line", "%q is no line of pipeline %q: it has no window from %s to %s and no name "+
			"(the form offers the lines with windows in the range)", line, pipeline,
			from.Format(time.RFC3339), to.Format(time.RFC3339))
	}
	return nil
}
