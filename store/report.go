package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Ranked is one row of a top-N list: a dimension id in one window, delays in seconds.
type Ranked struct {
	ID    string
	Name  string // from the names table, "" when the id has none
	Count int64
	Mean  float64
	P90   float64
	Max   float64
}

// StoredPosition is one stream_positions row.
type StoredPosition struct {
	Position
	UpdatedAt time.Time // UTC
}

// Report summarizes what one pipeline's delay_aggregates, stream_positions
// and dead_letters hold.
type Report struct {
	Rows          map[string]int64 // delay_aggregates rows per dimension
	Events        map[string]int64 // sum of event_count per dimension
	BusiestWindow time.Time        // window_start of the window with the most events (network row); zero if none
	BusiestCount  int64
	TopLines      []Ranked         // the ten lines with the highest P90 delay in the busiest window (ties by id), as the dashboard ranks
	TopStations   []Ranked         // the same for stations
	Names         map[string]int64 // rows of the names table per dimension
	// NamedWindow is the window_start of the window whose named lines had
	// the most events (NamedCount); when it is not the busiest window,
	// TopNamedLines and TopNamedStations are its ten named lines and
	// stations with the highest P90 delay (the busiest window may be of
	// a feed without names).
	NamedWindow                     time.Time
	NamedCount                      int64
	TopNamedLines, TopNamedStations []Ranked
	Positions                       []StoredPosition
	DeadLetters                     map[string]int64 // per reason
}

// Report reads the summary the demo and drain print, for pipeline.
func (s *Store) Report(ctx context.Context, pipeline string) (*Report, error) {
	r := &Report{Rows: map[string]int64{}, Events: map[string]int64{}, DeadLetters: map[string]int64{}, Names: map[string]int64{}}
	err := s.do(ctx, func(c *pgx.Conn) error {
		rows, err := c.Query(ctx, `SELECT dimension, count(*), coalesce(sum(event_count), 0)::bigint
			FROM delay_aggregates WHERE pipeline = $1 GROUP BY dimension`, pipeline)
		if err != nil {
			return err
		}
		var dim string
		var n, events int64
		if _, err := pgx.ForEachRow(rows, []any{&dim, &n, &events}, func() error {
			r.Rows[dim], r.Events[dim] = n, events
			return nil
		}); err != nil {
			return err
		}
		err = c.QueryRow(ctx, `SELECT window_start, event_count FROM delay_aggregates
			WHERE pipeline = $1 AND dimension = 'network' ORDER BY event_count DESC, window_start LIMIT 1`, pipeline).Scan(&r.BusiestWindow, &r.BusiestCount)
		if err != nil && err != pgx.ErrNoRows {
			return err
		}
		// top returns the ten rows of dim in window with the highest P90
		// delay (ties by id: the dashboard's order, docs/dashboard.md), with
		// their names; only named ones when named.
		top := func(window time.Time, dim string, named bool) ([]Ranked, error) {
			rows, err := c.Query(ctx, `SELECT a.dimension_id, coalesce(n.name, ''), a.event_count, a.mean_delay_s,
				a.p90_delay_s, a.max_delay_s
				FROM delay_aggregates AS a LEFT JOIN names AS n
				    ON n.pipeline = a.pipeline AND n.dimension = a.dimension AND n.dimension_id = a.dimension_id
				WHERE a.pipeline = $3 AND a.window_start = $1 AND a.dimension = $2 AND (NOT $4 OR n.name IS NOT NULL)
				ORDER BY a.p90_delay_s DESC, a.dimension_id LIMIT 10`, window, dim, pipeline, named)
			if err != nil {
				return nil, err
			}
			var out []Ranked
			var k Ranked
			_, err = pgx.ForEachRow(rows, []any{&k.ID, &k.Name, &k.Count, &k.Mean, &k.P90, &k.Max}, func() error {
				out = append(out, k)
				return nil
			})
			return out, err
		}
		if r.TopLines, err = top(r.BusiestWindow, "line", false); err != nil {
			return err
		}
		if r.TopStations, err = top(r.BusiestWindow, "station", false); err != nil {
			return err
		}
		err = c.QueryRow(ctx, `SELECT a.window_start, sum(a.event_count)::bigint FROM delay_aggregates AS a JOIN names AS n
			    ON n.pipeline = a.pipeline AND n.dimension = a.dimension AND n.dimension_id = a.dimension_id
			WHERE a.pipeline = $1 AND a.dimension = 'line' GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 1`, pipeline).
			Scan(&r.NamedWindow, &r.NamedCount)
		if err != nil && err != pgx.ErrNoRows {
			return err
		}
		if r.NamedCount > 0 && !r.NamedWindow.Equal(r.BusiestWindow) {
			if r.TopNamedLines, err = top(r.NamedWindow, "line", true); err != nil {
				return err
			}
			if r.TopNamedStations, err = top(r.NamedWindow, "station", true); err != nil {
				return err
			}
		}
		rows, err = c.Query(ctx, `SELECT topic, partition, next_offset, consumed_offset, updated_at
			FROM stream_positions WHERE pipeline = $1 AND next_offset IS NOT NULL ORDER BY topic, partition`, pipeline)
		if err != nil {
			return err
		}
		var p StoredPosition
		if _, err := pgx.ForEachRow(rows, []any{&p.Topic, &p.Partition, &p.NextOffset, &p.ConsumedOffset, &p.UpdatedAt}, func() error {
			p.UpdatedAt = p.UpdatedAt.UTC()
			r.Positions = append(r.Positions, p)
			return nil
		}); err != nil {
			return err
		}
		rows, err = c.Query(ctx, `SELECT dimension, count(*) FROM names WHERE pipeline = $1 GROUP BY dimension`, pipeline)
		if err != nil {
			return err
		}
		if _, err := pgx.ForEachRow(rows, []any{&dim, &n}, func() error {
			r.Names[dim] = n
			return nil
		}); err != nil {
			return err
		}
		rows, err = c.Query(ctx, `SELECT reason, count(*) FROM dead_letters WHERE pipeline = $1 GROUP BY reason`, pipeline)
		if err != nil {
			return err
		}
		var reason string
		_, err = pgx.ForEachRow(rows, []any{&reason, &n}, func() error {
			r.DeadLetters[reason] = n
			return nil
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: report: %w", err)
	}
	r.BusiestWindow, r.NamedWindow = r.BusiestWindow.UTC(), r.NamedWindow.UTC()
	return r, nil
}

// Analyze collects the planner statistics of delay_aggregates (each
// partition) and names at once, as autovacuum would within a minute or so:
// for a report right after a bulk load (the demo), whose joins are planned
// as nested loops over tables the planner still thinks empty otherwise
// (seconds instead of milliseconds). PostgreSQL docs, "ANALYZE".
func (s *Store) Analyze(ctx context.Context) error {
	return s.do(ctx, func(c *pgx.Conn) error {
		_, err := c.Exec(ctx, `ANALYZE delay_aggregates, names`)
		return err
	})
}
