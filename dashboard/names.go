package dashboard

import (
	"context"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/store"
)

// Named is the name of a line or station from the pipeline's names table
// (migration 7, filled from the records' line_name, line_short_name and
// stop_name: docs/data-contract.md and docs/tables.md). Both are null when the id
// has none; ids stay the key, names only label them.
type Named struct {
	// Name is a line's line_name (else its line_short_name) or a station's
	// stop_name; null when the id has none (operators never have one).
	Name *string `json:"name"`
	// ShortName is a line's line_short_name (a route's public number, e.g.
	// "320"); null for stations, operators and lines without one.
	ShortName *string `json:"short_name"`
}

// names are the names of one dimension's ids, read once per request.
type names map[string]store.Name

// lookupNames reads the names of ids of dimension in pipeline: one query
// (store.Names) for all of them, none for a dimension without names.
func lookupNames(ctx context.Context, c *pgx.Conn, pipeline, dimension string, ids []string) (names, error) {
	if len(ids) == 0 || (dimension != aggregate.DimLine && dimension != aggregate.DimStation) {
		return nil, nil
	}
	ids = slices.Clone(ids)
	slices.Sort(ids)
	return store.Names(ctx, c, pipeline, dimension, slices.Compact(ids))
}

// of returns id's names, null where it has none.
func (n names) of(id string) Named { return namedOf(n[id]) }

// namedOf is nm as the API gives it: null for each name nm lacks.
func namedOf(nm store.Name) Named {
	var out Named
	if nm.Name != "" {
		out.Name = &nm.Name
	}
	if nm.ShortName != "" {
		out.ShortName = &nm.ShortName
	}
	return out
}

// nameEach names n rows of dimension with one query: id(i) is row i's id,
// set(i, nm) gives it its names.
func nameEach(ctx context.Context, c *pgx.Conn, pipeline, dimension string, n int, id func(int) string, set func(int, Named)) error {
	ids := make([]string, n)
	for i := range n {
		ids[i] = id(i)
	}
	nm, err := lookupNames(ctx, c, pipeline, dimension, ids)
	for i := range n {
		set(i, nm.of(ids[i]))
	}
	return err
}
