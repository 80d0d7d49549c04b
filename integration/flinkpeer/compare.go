package flinkpeer

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Source is one side of a comparison: a query on a database returning the
// columns window_start, window_end, dimension, dimension_id, operator,
// event_count, mean_delay_s, p90_delay_s, min_delay_s, max_delay_s in that
// order (harness.OracleAggregates does too).
type Source struct {
	Name, DB, Query string
}

// OvstreamSource is pipeline's rows of delay_aggregates in db.
func OvstreamSource(db, pipeline string) Source {
	return Source{Name: "ovstream", DB: db, Query: `SELECT window_start, window_end, dimension, dimension_id, operator,
		event_count, mean_delay_s, p90_delay_s, min_delay_s, max_delay_s FROM delay_aggregates
		WHERE pipeline = '` + strings.ReplaceAll(pipeline, "'", "''") + `'`}
}

// PeerSource is the peer's rows (Table) in db.
func PeerSource(db string) Source {
	return Source{Name: "Flink", DB: db, Query: `SELECT window_start, window_end, dimension, dimension_id, operator,
		event_count, mean_delay_s, p90_delay_s, min_delay_s, max_delay_s FROM ` + Table}
}

// P90Tolerance bounds the difference of two P90s that still agree:
// |a - b| <= P90Tolerance * max(|a|, |b|, 1 s). Flink's PERCENTILE rounds
// its interpolation differently from percentile_cont.
const P90Tolerance = 1e-9

// Diff is how two sources' rows differ, matched by (window_start,
// dimension, dimension_id).
type Diff struct {
	A, B         string // the sources' names
	RowsA, RowsB int
	OnlyA, OnlyB int // rows of one source whose key the other lacks
	// Inexact counts matched rows that differ in window_end, operator,
	// event_count, mean_delay_s, min_delay_s or max_delay_s (compared
	// exactly, bit for bit) or whose P90s differ beyond P90Tolerance.
	Inexact int
	// P90Identical and P90Close count matched rows whose P90s are
	// bit-identical, or differ within P90Tolerance.
	P90Identical, P90Close int
	MaxP90Rel              float64 // the largest relative P90 difference of a matched row
	First                  string  // the first difference that counts (in key order), "" when none
}

// OK reports whether the sources agree: the same keys, every other column
// equal, P90 within P90Tolerance.
func (d *Diff) OK() bool { return d.OnlyA+d.OnlyB+d.Inexact == 0 && d.RowsA > 0 }

// String says how the sources compare, on one line.
func (d *Diff) String() string {
	s := fmt.Sprintf("%s %d rows, %s %d rows: %d only in %s, %d only in %s, %d inexact; P90 bit-identical in %d rows, within %.0e in %d more (largest relative difference %.1e)",
		d.A, d.RowsA, d.B, d.RowsB, d.OnlyA, d.A, d.OnlyB, d.B, d.Inexact, d.P90Identical, P90Tolerance, d.P90Close, d.MaxP90Rel)
	if d.First != "" {
		s += "; first difference: " + d.First
	}
	return s
}

// row is one window row.
type row struct {
	start, end        time.Time
	dim, id           string
	op                *string
	count             int64
	mean, p90, lo, hi float64
}

func (r *row) key() string {
	return fmt.Sprintf("%s %s %q", r.start.UTC().Format(time.RFC3339), r.dim, r.id)
}

func (r *row) String() string {
	op := "NULL"
	if r.op != nil {
		op = *r.op
	}
	return fmt.Sprintf("(%s, end %s, operator %s, count %d, mean %v, p90 %v, min %v, max %v)",
		r.key(), r.end.UTC().Format(time.RFC3339), op, r.count, r.mean, r.p90, r.lo, r.hi)
}

// Compare reads a and b in key order and returns how they differ. The error
// is a failure to read, not a difference: see Diff.OK.
func Compare(ctx context.Context, a, b Source) (*Diff, error) {
	ra, err := readRows(ctx, a)
	if err != nil {
		return nil, err
	}
	rb, err := readRows(ctx, b)
	if err != nil {
		return nil, err
	}
	d := &Diff{A: a.Name, B: b.Name, RowsA: len(ra), RowsB: len(rb)}
	note := func(s string) {
		if d.First == "" {
			d.First = s
		}
	}
	i, j := 0, 0
	for i < len(ra) || j < len(rb) {
		var c int
		switch {
		case i == len(ra):
			c = 1
		case j == len(rb):
			c = -1
		default:
			c = compareKeys(&ra[i], &rb[j])
		}
		switch {
		case c < 0:
			d.OnlyA++
			note(fmt.Sprintf("only in %s: %s", a.Name, &ra[i]))
			i++
		case c > 0:
			d.OnlyB++
			note(fmt.Sprintf("only in %s: %s", b.Name, &rb[j]))
			j++
		default:
			x, y := &ra[i], &rb[j]
			rel := math.Abs(x.p90-y.p90) / math.Max(1, math.Max(math.Abs(x.p90), math.Abs(y.p90)))
			d.MaxP90Rel = math.Max(d.MaxP90Rel, rel)
			exact := x.end.Equal(y.end) && sameOp(x.op, y.op) && x.count == y.count &&
				sameFloat(x.mean, y.mean) && sameFloat(x.lo, y.lo) && sameFloat(x.hi, y.hi)
			switch {
			case !exact || rel > P90Tolerance:
				d.Inexact++
				note(fmt.Sprintf("%s %s, %s %s", a.Name, x, b.Name, y))
			case sameFloat(x.p90, y.p90):
				d.P90Identical++
			default:
				d.P90Close++
			}
			i++
			j++
		}
	}
	return d, nil
}

// sameFloat is bit equality, with -0 equal to 0.
func sameFloat(x, y float64) bool { return x == y || (math.IsNaN(x) && math.IsNaN(y)) }

func sameOp(x, y *string) bool {
	if x == nil || y == nil {
		return x == nil && y == nil
	}
	return *x == *y
}

// compareKeys orders rows by window_start, then dimension and dimension_id
// as bytes (the queries sort with COLLATE "C").
func compareKeys(x, y *row) int {
	if c := x.start.Compare(y.start); c != 0 {
		return c
	}
	if c := strings.Compare(x.dim, y.dim); c != 0 {
		return c
	}
	return strings.Compare(x.id, y.id)
}

func readRows(ctx context.Context, s Source) ([]row, error) {
	conn, err := pgx.Connect(ctx, s.DB)
	if err != nil {
		return nil, fmt.Errorf("flinkpeer: rows of %s: %w", s.Name, err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT * FROM (`+s.Query+`) q(ws, we, dim, id, op, n, mean, p90, lo, hi)
		ORDER BY ws, dim COLLATE "C", id COLLATE "C"`)
	if err != nil {
		return nil, fmt.Errorf("flinkpeer: rows of %s: %w", s.Name, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		err := r.Scan(&x.start, &x.end, &x.dim, &x.id, &x.op, &x.count, &x.mean, &x.p90, &x.lo, &x.hi)
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("flinkpeer: rows of %s: %w", s.Name, err)
	}
	return out, nil
}
