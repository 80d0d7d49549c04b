package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// What the PostgreSQL server did during a run, for --instances: its CPU
// time and the WAL it wrote, from samples before and after.
//
// CPU: every process of the server, read from /proc (the server must run on
// this machine). The postmaster's utime+stime plus cutime+cstime (the CPU of
// every child it has reaped: backends and workers that exited) plus
// utime+stime+cutime+cstime of each child still alive (backends, the
// checkpointer, the WAL writer, the background writer, autovacuum). A child
// reaped while the children are listed would be counted twice or not at
// all, so a sample is taken again until the postmaster's cutime+cstime did
// not move across the listing. Exact to the kernel's tick (10 ms) per
// process; it counts the whole server, so other databases' work too.
//
// WAL: pg_current_wal_lsn() before and after (exact bytes inserted, the
// whole cluster); pg_stat_wal's wal_records and wal_fpi (full-page images,
// written by the first change of a page after a checkpoint); the
// checkpoints started (pg_stat_bgwriter, pg_stat_checkpointer from
// PostgreSQL 17). Transactions: the transaction ids assigned (the next
// xid, pg_snapshot_xmax(pg_current_snapshot()): one per transaction that
// wrote, the whole cluster) and pg_stat_database.xact_commit of the
// measured database (every commit, read-only ones too). Rows: its
// tup_inserted + tup_updated + tup_deleted (pg_stat_database): every row
// the run wrote, partials and their merge included.

// pgMeter samples one server; conn is on the bench's admin database.
type pgMeter struct {
	conn       *pgx.Conn
	db         string // the measured database
	postmaster int    // 0: the server is not on this machine (no CPU figure)
	version    int    // server_version_num
}

// pgSample is one sample of pgMeter: the counters pgUsage subtracts.
type pgSample struct {
	cpu                                                       time.Duration // -1: unknown
	lsn, nextXID, xactCommit, walRecords, walFPI, checkpoints int64
	tuples                                                    int64
}

// pgUsage is what the server did between two samples.
type pgUsage struct {
	cpu         time.Duration // every process of the server; -1: unknown
	wal         int64         // bytes of WAL inserted
	xids        int64         // transaction ids assigned: transactions that wrote
	xactCommits int64         // commits in the measured database, read-only ones too
	tuples      int64         // rows inserted, updated and deleted in the measured database
	walRecords  int64
	walFPI      int64 // full-page images
	checkpoints int64
}

func newPGMeter(ctx context.Context, adminURL, db string) (*pgMeter, error) {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return nil, err
	}
	m := &pgMeter{conn: conn, db: db}
	var pid int
	var version string
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid(), current_setting('server_version_num')").Scan(&pid, &version); err != nil {
		conn.Close(ctx)
		return nil, err
	}
	m.version, _ = strconv.Atoi(version)
	// Our backend is local when /proc knows it as a postgres process whose
	// parent is one too: the postmaster.
	if st, ok := readProcStat(pid); ok && isPostgres(pid) && isPostgres(st.ppid) {
		m.postmaster = st.ppid
	} else {
		logf("PostgreSQL's backend %d is not a process of this machine: no PostgreSQL CPU figure", pid)
	}
	return m, nil
}

func isPostgres(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return err == nil && strings.HasPrefix(string(b), "postgres")
}

func (m *pgMeter) close() { m.conn.Close(context.Background()) }

// serverCPU returns the CPU time of every process of the server so far,
// -1 when unknown.
func (m *pgMeter) serverCPU() time.Duration {
	if m.postmaster == 0 {
		return -1
	}
	for range 20 {
		before, ok := readProcStat(m.postmaster)
		if !ok {
			return -1
		}
		var children time.Duration
		entries, err := os.ReadDir("/proc")
		if err != nil {
			return -1
		}
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if st, ok := readProcStat(pid); ok && st.ppid == m.postmaster {
				children += st.cpu + st.children
			}
		}
		after, ok := readProcStat(m.postmaster)
		if !ok {
			return -1
		}
		if after.children == before.children {
			return after.cpu + after.children + children
		}
	}
	return -1
}

// sample reads the server's counters.
func (m *pgMeter) sample(ctx context.Context) (pgSample, error) {
	s := pgSample{cpu: m.serverCPU()}
	checkpoints := "(SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter)"
	if m.version >= 170000 {
		checkpoints = "(SELECT num_timed + num_requested FROM pg_stat_checkpointer)"
	}
	err := m.conn.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint,
		pg_snapshot_xmax(pg_current_snapshot())::text::bigint,
		coalesce((SELECT xact_commit FROM pg_stat_database WHERE datname = $1), 0),
		coalesce((SELECT tup_inserted + tup_updated + tup_deleted FROM pg_stat_database WHERE datname = $1), 0),
		w.wal_records, w.wal_fpi, `+checkpoints+` FROM pg_stat_wal w`, m.db).
		Scan(&s.lsn, &s.nextXID, &s.xactCommit, &s.tuples, &s.walRecords, &s.walFPI, &s.checkpoints)
	if err != nil {
		return s, fmt.Errorf("sample PostgreSQL: %w", err)
	}
	return s, nil
}

// waitIdle waits (at most 10 s) until no backend is connected to the
// measured database, so that the backends of the run have exited and
// flushed their statistics before the last sample.
func (m *pgMeter) waitIdle(ctx context.Context) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var n int
		if err := m.conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = $1", m.db).Scan(&n); err != nil || n == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// minus returns what the server did from b to s.
func (s pgSample) minus(b pgSample) pgUsage {
	cpu := time.Duration(-1)
	if s.cpu >= 0 && b.cpu >= 0 {
		cpu = s.cpu - b.cpu
	}
	return pgUsage{cpu: cpu, wal: s.lsn - b.lsn, xids: s.nextXID - b.nextXID, xactCommits: s.xactCommit - b.xactCommit, tuples: s.tuples - b.tuples,
		walRecords: s.walRecords - b.walRecords, walFPI: s.walFPI - b.walFPI, checkpoints: s.checkpoints - b.checkpoints}
}

// fmtCPU formats a PostgreSQL CPU time, "n/a" when unknown.
func fmtCPU(d time.Duration) string {
	if d < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}
