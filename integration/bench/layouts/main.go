// Command layouts measures what PostgreSQL pays to store the distributions of
// delay_aggregates rows in each candidate layout (docs/benchmarks-history.md
// "Distributions"), on the rows of a finished `make bench` run:
//
//	none        the rows without distributions (schema 4)
//	arrays      delay_values float8[] and delay_counts bigint[] in the row, with the CHECK of migration 5
//	arrays-nock the same without that CHECK
//	arrays-multi the arrays only in rows with more than one distinct delay (NULL when min = max)
//	side        the rows as in none, plus a side table with the same key holding the two arrays
//	compact     one bytea in the row: whole seconds as zigzag varint deltas and uvarint counts
//	            (else 8-byte floats), about 9 bytes per row on the Auckland data
//
// Each trial COPYs every layout's rows, in turn, from a binary file on the
// server (COPY ... FROM 'file' (FORMAT binary): no client in the way) into an
// empty table with the layout's indexes and constraints, in one transaction,
// and records the backend's CPU time (/proc/PID/stat of the server process,
// so other sessions' load counts less than in wall-clock time), the wall
// time and the table's size with its indexes and TOAST. (Not the WAL: the
// server's WAL position moves with every session's writes.)
// Layouts alternate within each trial, each trial starting with another, so
// a change in the machine's load, or a checkpoint, touches all of them.
//
// Usage (PostgreSQL on this machine, superuser; --source is a database that
// `go run ./integration/bench --keep` left, written by a binary with
// migration 5):
//
//	go run ./integration/bench/layouts --source postgres://postgres@127.0.0.1/ovsbench_run_... --trials 5
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

type layout struct {
	name   string
	tables []string // tables to truncate and measure
	copies []string // COPY statements, %s = the folder of the files
}

const rowColumns = "pipeline, window_start, window_end, dimension, dimension_id, operator, event_count, " +
	"mean_delay_s, p90_delay_s, min_delay_s, max_delay_s"

// schema creates the layouts' tables: l_none is delay_aggregates of schema
// 4 (its primary key and CHECKs), the others add to it.
const schema = `
DROP TABLE IF EXISTS l_none, l_arrays, l_arrays_nock, l_side, l_side_dist, l_compact;
CREATE TABLE l_none (
    pipeline text NOT NULL, window_start timestamptz NOT NULL, window_end timestamptz NOT NULL,
    dimension text NOT NULL CHECK (dimension IN ('line', 'station', 'operator', 'network')),
    dimension_id text NOT NULL, operator text NULL,
    event_count bigint NOT NULL CHECK (event_count > 0),
    mean_delay_s double precision NOT NULL, p90_delay_s double precision NOT NULL,
    min_delay_s double precision NOT NULL, max_delay_s double precision NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (pipeline, window_start, dimension, dimension_id),
    CHECK (window_end > window_start),
    CHECK (min_delay_s <= p90_delay_s AND p90_delay_s <= max_delay_s
           AND min_delay_s <= mean_delay_s AND mean_delay_s <= max_delay_s));
CREATE TABLE l_arrays_nock (LIKE l_none INCLUDING ALL);
ALTER TABLE l_arrays_nock ADD COLUMN delay_values double precision[], ADD COLUMN delay_counts bigint[];
CREATE TABLE l_arrays (LIKE l_arrays_nock INCLUDING ALL);
ALTER TABLE l_arrays ADD CONSTRAINT l_arrays_distribution CHECK (
    num_nulls(delay_values, delay_counts) <> 1
    AND cardinality(delay_values) = cardinality(delay_counts)
    AND delay_values[1] = min_delay_s
    AND delay_values[cardinality(delay_values)] = max_delay_s);
CREATE TABLE l_side (LIKE l_none INCLUDING ALL);
CREATE TABLE l_side_dist (
    pipeline text NOT NULL, window_start timestamptz NOT NULL, dimension text NOT NULL, dimension_id text NOT NULL,
    delay_values double precision[] NOT NULL, delay_counts bigint[] NOT NULL,
    PRIMARY KEY (pipeline, window_start, dimension, dimension_id),
    CHECK (cardinality(delay_values) = cardinality(delay_counts)));
CREATE TABLE l_compact (LIKE l_none INCLUDING ALL);
ALTER TABLE l_compact ADD COLUMN delay_dist bytea;`

var layouts = []layout{
	{"none", []string{"l_none"}, []string{"COPY l_none (" + rowColumns + ") FROM '%s/none.bin' (FORMAT binary)"}},
	{"arrays", []string{"l_arrays"}, []string{"COPY l_arrays (" + rowColumns + ", delay_values, delay_counts) FROM '%s/arrays.bin' (FORMAT binary)"}},
	{"arrays-nock", []string{"l_arrays_nock"}, []string{"COPY l_arrays_nock (" + rowColumns + ", delay_values, delay_counts) FROM '%s/arrays.bin' (FORMAT binary)"}},
	{"arrays-multi", []string{"l_arrays_nock"}, []string{"COPY l_arrays_nock (" + rowColumns + ", delay_values, delay_counts) FROM '%s/multi.bin' (FORMAT binary)"}},
	{"side", []string{"l_side", "l_side_dist"}, []string{
		"COPY l_side (" + rowColumns + ") FROM '%s/none.bin' (FORMAT binary)",
		"COPY l_side_dist (pipeline, window_start, dimension, dimension_id, delay_values, delay_counts) FROM '%s/side.bin' (FORMAT binary)"}},
	{"compact", []string{"l_compact"}, []string{"COPY l_compact (" + rowColumns + ", delay_dist) FROM '%s/compact.bin' (FORMAT binary)"}},
}

type sample struct {
	cpu, wall time.Duration
	size      int64
}

func main() {
	source := flag.String("source", "", "database with delay_aggregates rows and distributions (a kept bench run)")
	trials := flag.Int("trials", 5, "trials; each COPYs every layout once")
	dir := flag.String("dir", filepath.Join(os.TempDir(), "ovstream-layouts"), "folder for the binary COPY files (the server writes and reads them)")
	flag.Parse()
	if *source == "" {
		fail(fmt.Errorf("--source is required"))
	}
	ctx := context.Background()
	if err := os.MkdirAll(*dir, 0o777); err != nil {
		fail(err)
	}
	_ = os.Chmod(*dir, 0o777)
	src, err := pgx.Connect(ctx, *source)
	if err != nil {
		fail(err)
	}
	rows, err := export(ctx, src, *dir)
	if err != nil {
		fail(err)
	}
	scratchURL, err := scratch(ctx, src, *source)
	if err != nil {
		fail(err)
	}
	src.Close(ctx)
	db, err := pgx.Connect(ctx, scratchURL)
	if err != nil {
		fail(err)
	}
	if _, err := db.Exec(ctx, schema); err != nil {
		fail(err)
	}
	var pid int
	if err := db.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		fail(err)
	}
	res := map[string][]sample{}
	for trial := range *trials {
		for i := range layouts {
			l := layouts[(i+trial)%len(layouts)] // each trial starts with another layout
			s, err := measure(ctx, db, pid, l, *dir)
			if err != nil {
				fail(fmt.Errorf("%s: %w", l.name, err))
			}
			res[l.name] = append(res[l.name], s)
			fmt.Fprintf(os.Stderr, "trial %d %-12s cpu %6.2fs wall %6.2fs size %6.1f MB load %s\n", trial+1, l.name,
				s.cpu.Seconds(), s.wall.Seconds(), float64(s.size)/1e6, loadavg())
		}
	}
	fmt.Printf("%d rows, %d trials; medians (server backend CPU, wall, table + indexes + TOAST)\n", rows, *trials)
	fmt.Printf("%-12s %9s %9s %9s %9s %12s\n", "layout", "CPU s", "wall s", "size MB", "B/row", "CPU vs none")
	base := median(res["none"], func(s sample) float64 { return s.cpu.Seconds() })
	for _, l := range layouts {
		ss := res[l.name]
		cpu := median(ss, func(s sample) float64 { return s.cpu.Seconds() })
		size := median(ss, func(s sample) float64 { return float64(s.size) })
		fmt.Printf("%-12s %9.2f %9.2f %9.1f %9.0f %+11.0f%%\n", l.name, cpu,
			median(ss, func(s sample) float64 { return s.wall.Seconds() }), size/1e6, size/float64(rows), 100*(cpu/base-1))
	}
	if _, err := db.Exec(ctx, "DROP TABLE l_none, l_arrays, l_arrays_nock, l_side, l_side_dist, l_compact"); err != nil {
		fail(err)
	}
}

// export writes the source's rows as binary COPY files for each layout.
func export(ctx context.Context, src *pgx.Conn, dir string) (int64, error) {
	for file, sql := range map[string]string{
		"none.bin":   "SELECT " + rowColumns + " FROM delay_aggregates WHERE delay_values IS NOT NULL",
		"arrays.bin": "SELECT " + rowColumns + ", delay_values, delay_counts FROM delay_aggregates WHERE delay_values IS NOT NULL",
		"side.bin":   "SELECT pipeline, window_start, dimension, dimension_id, delay_values, delay_counts FROM delay_aggregates WHERE delay_values IS NOT NULL",
		"multi.bin": "SELECT " + rowColumns + ", CASE WHEN cardinality(delay_values) > 1 THEN delay_values END, " +
			"CASE WHEN cardinality(delay_values) > 1 THEN delay_counts END FROM delay_aggregates WHERE delay_values IS NOT NULL",
	} {
		if _, err := src.Exec(ctx, fmt.Sprintf("COPY (%s) TO '%s' (FORMAT binary)", sql, filepath.Join(dir, file))); err != nil {
			return 0, fmt.Errorf("export %s: %w", file, err)
		}
	}
	// compact: encoded here, stored as a bytea by a temporary table.
	if _, err := src.Exec(ctx, `CREATE TEMP TABLE compact_src AS SELECT `+rowColumns+`, NULL::bytea AS delay_dist,
		delay_values, delay_counts FROM delay_aggregates WHERE delay_values IS NOT NULL`); err != nil {
		return 0, err
	}
	rows, err := src.Query(ctx, "SELECT ctid::text, delay_values, delay_counts FROM compact_src")
	if err != nil {
		return 0, err
	}
	var ctids []string
	var dists [][]byte
	var ctid string
	var vs []float64
	var cs []int64
	if _, err := pgx.ForEachRow(rows, []any{&ctid, &vs, &cs}, func() error {
		ctids, dists = append(ctids, ctid), append(dists, compact(vs, cs))
		return nil
	}); err != nil {
		return 0, err
	}
	if _, err := src.Exec(ctx, `UPDATE compact_src s SET delay_dist = u.d FROM unnest($1::text[], $2::bytea[]) AS u(t, d)
		WHERE s.ctid = u.t::tid`, ctids, dists); err != nil {
		return 0, err
	}
	if _, err := src.Exec(ctx, fmt.Sprintf("COPY (SELECT %s, delay_dist FROM compact_src) TO '%s' (FORMAT binary)",
		rowColumns, filepath.Join(dir, "compact.bin"))); err != nil {
		return 0, err
	}
	return int64(len(ctids)), nil
}

// compact encodes a distribution: 0, then per value the zigzag varint of its
// difference from the previous one and the uvarint count, when every value
// is a whole number of at most 2^31 in magnitude; else 1, then per value its
// 8 bytes and the uvarint count.
func compact(vs []float64, cs []int64) []byte {
	whole := true
	for _, v := range vs {
		whole = whole && v == math.Trunc(v) && math.Abs(v) <= 1<<31
	}
	if !whole {
		b := []byte{1}
		for i, v := range vs {
			b = binary.BigEndian.AppendUint64(b, math.Float64bits(v))
			b = binary.AppendUvarint(b, uint64(cs[i]))
		}
		return b
	}
	b := []byte{0}
	prev := int64(0)
	for i, v := range vs {
		b = binary.AppendVarint(b, int64(v)-prev)
		prev = int64(v)
		b = binary.AppendUvarint(b, uint64(cs[i]))
	}
	return b
}

// scratch creates an empty database next to the source and returns its URL.
func scratch(ctx context.Context, src *pgx.Conn, sourceURL string) (string, error) {
	const name = "ovstream_layouts"
	if _, err := src.Exec(ctx, "DROP DATABASE IF EXISTS "+name); err != nil {
		return "", err
	}
	if _, err := src.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", err
	}
	u, err := url.Parse(sourceURL)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	return u.String(), nil
}

func measure(ctx context.Context, db *pgx.Conn, pid int, l layout, dir string) (sample, error) {
	var s sample
	if _, err := db.Exec(ctx, "TRUNCATE "+strings.Join(l.tables, ", ")); err != nil {
		return s, err
	}
	cpu0, err := procCPU(pid)
	if err != nil {
		return s, err
	}
	began := time.Now()
	tx, err := db.Begin(ctx)
	if err != nil {
		return s, err
	}
	for _, c := range l.copies {
		if _, err := tx.Exec(ctx, fmt.Sprintf(c, dir)); err != nil {
			tx.Rollback(ctx)
			return s, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return s, err
	}
	s.wall = time.Since(began)
	cpu1, err := procCPU(pid)
	if err != nil {
		return s, err
	}
	s.cpu = cpu1 - cpu0
	sizes := make([]string, len(l.tables))
	for i, t := range l.tables {
		sizes[i] = fmt.Sprintf("pg_total_relation_size('%s')", t)
	}
	err = db.QueryRow(ctx, "SELECT "+strings.Join(sizes, " + ")).Scan(&s.size)
	return s, err
}

// procCPU returns utime+stime of pid (/proc/PID/stat, clock ticks of 10 ms).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * 10 * time.Millisecond, nil
}

func median(ss []sample, f func(sample) float64) float64 {
	vs := make([]float64, len(ss))
	for i, s := range ss {
		vs[i] = f(s)
	}
	slices.Sort(vs)
	return vs[(len(vs)-1)/2]
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], "/")
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "layouts:", err)
	os.Exit(1)
}
