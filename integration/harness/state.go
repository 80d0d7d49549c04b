//go:build integration

package harness

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/feed/gtfsrt"
	"github.com/ovstream/ovstream/store"
)

// DbState is what a node holds of the service's progress.
type DbState struct {
	positions  map[aggregate.PartitionID][3]int64 // next_offset, consumed_offset, commit_seq
	LastCommit time.Time                          // max(stream_positions.updated_at)
	WindowRows int64
}

// State reads the service's progress on node n.
func (n *pgNode) State() DbState {
	n.t.Helper()
	s := DbState{positions: map[aggregate.PartitionID][3]int64{}}
	db := n.Url("ovs")
	for _, row := range Scalar[[]string](n.t, db, `SELECT coalesce(array_agg(topic || ' ' || partition || ' ' || next_offset || ' ' || consumed_offset
		|| ' ' || commit_seq), '{}') FROM stream_positions WHERE next_offset IS NOT NULL`) {
		var tp aggregate.PartitionID
		var next, consumed, seq int64
		Scan(n.t, row, "%s %d %d %d %d", &tp.Topic, &tp.Partition, &next, &consumed, &seq)
		s.positions[tp] = [3]int64{next, consumed, seq}
	}
	s.LastCommit = Scalar[time.Time](n.t, db, `SELECT coalesce(max(updated_at), 'epoch') FROM stream_positions`)
	s.WindowRows = Scalar[int64](n.t, db, `SELECT count(*) FROM delay_aggregates`)
	return s
}

// SeqsAhead is the most commits (commit_seq) by which a partition of s is
// ahead of o.
func (s DbState) SeqsAhead(o DbState) int64 {
	var n int64
	for tp, p := range s.positions {
		n = max(n, p[2]-o.positions[tp][2])
	}
	return n
}

// Ahead lists the partitions whose offsets in s are past those in o, with
// the number of records by which next_offset is ahead in total.
func (s DbState) Ahead(o DbState) (parts []string, records int64) {
	for tp, p := range s.positions {
		q := o.positions[tp]
		if p[0] > q[0] || p[1] > q[1] {
			parts = append(parts, fmt.Sprintf("%s next %d/%d consumed %d/%d", tp, p[0], q[0], p[1], q[1]))
			records += max(0, p[0]-q[0])
		}
	}
	sort.Strings(parts)
	return parts, records
}

// Snapshot dumps every table ovstream writes, whole rows with their
// timestamps (updated_at, heartbeat_at, created_at): any write shows.
func Snapshot(t *testing.T, db string) map[string][]string {
	t.Helper()
	s := map[string][]string{}
	for _, table := range []string{"pipelines", "delay_aggregates", "vehicle_latest",
		"trip_delay_latest", "dead_letters"} {
		s[table] = Dump(t, db, fmt.Sprintf("SELECT t::text FROM %s t", table))
	}
	// A claim writes owner, epoch and heartbeat_at; what a commit writes
	// (offsets, watermark, updated_at) shows in the rest.
	s["stream_positions"] = Dump(t, db, `SELECT (pipeline, topic, partition, next_offset, consumed_offset,
		watermark, topic_id, updated_at)::text FROM stream_positions`)
	return s
}

// SameSnapshot fails the test unless a and b hold the same rows, table by
// table, leaving out the tables in except.
func SameSnapshot(t *testing.T, what string, a, b map[string][]string, except ...string) {
	t.Helper()
	for table, rows := range a {
		skip := false
		for _, e := range except {
			skip = skip || e == table
		}
		if !skip {
			SameRows(t, what+": "+table, rows, b[table])
		}
	}
}

// Exited tells whether p has ended.
func Exited(p *Proc) bool {
	select {
	case <-p.Done:
		return true
	default:
		return false
	}
}

// CommittedIn tells whether n predictions of pipeline are consumed and
// committed in db: the stored consumed offsets (offsets are contiguous
// here) and nothing waiting in the process serving ops.
func CommittedIn(t *testing.T, db, pipeline, ops string, n int) func() bool {
	return func() bool {
		sum := int64(0)
		for k, v := range StoredConsumedOf(t, db, pipeline) {
			if strings.HasPrefix(k, PredictionsTopic+"/") {
				sum += v
			}
		}
		m := Scrape(t, ops)
		return sum >= int64(n) && m["ovstream_uncommitted_messages"] == 0 && m["ovstream_commits_total"] > 0
	}
}

// DrainedEqualsOracle checks the tables of db after a drain of the
// predictions topic of the broker at addr (runOutput: the run's output,
// shown when nothing was stored): the topic holds records records, and
// delay_aggregates and its distributions equal the SQL oracle's.
func DrainedEqualsOracle(t *testing.T, db, addr string, records int, runOutput string) {
	t.Helper()
	if n := LoadOracleInput(t, db, addr, PredictionsTopic); n != records {
		t.Fatalf("topic holds %d records, want %d", n, records)
	}
	got := Dump(t, db, DumpAggregates)
	if len(got) == 0 {
		t.Fatalf("no delay_aggregates rows; run output:\n%s", runOutput)
	}
	SameRows(t, "delay_aggregates vs SQL oracle", got, Dump(t, db, OracleAggregates))
	SameRows(t, "stored distributions vs SQL oracle", Dump(t, db, DumpDistributions), Dump(t, db, OracleDistributions))
}

// Connect opens a connection to db for the test; the caller closes it.
func Connect(t *testing.T, ctx context.Context, db string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// StopDrainCompare stops the service p with SIGTERM (exit 0 wanted), drains
// what it left open (pipeline's windows still open at SIGTERM), checks that
// the predictions topic holds total records and compares delay_aggregates
// with the SQL oracle over them.
func StopDrainCompare(t *testing.T, p *Proc, db, addr, pipeline string, total int, what string) {
	t.Helper()
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.Wait(t, time.Minute); code != 0 {
		t.Fatalf("run exited %d after SIGTERM:\n%s", code, p.Output())
	}
	Drain(t, db, addr, "--pipeline", pipeline)
	if n := LoadOracleInput(t, db, addr, PredictionsTopic); n != total {
		t.Fatalf("topic holds %d records, want %d", n, total)
	}
	SameRows(t, what, Dump(t, db, DumpAggregates), Dump(t, db, OracleAggregates))
}

// WithSeqs returns b with each position's commit sequence (store.Position.Seq)
// set to the one stored now, read through st: for the tests that write
// batches by hand and are not about lost commits (the consumer keeps the
// sequence it wrote; TestRestoreBehindReplays proves what it is for).
func WithSeqs(t testing.TB, st *store.Store, b store.Batch) store.Batch {
	t.Helper()
	stored, err := st.LoadPositions(context.Background(), b.Pipeline)
	if err != nil {
		t.Fatal(err)
	}
	b.Positions = slices.Clone(b.Positions)
	for i := range b.Positions {
		b.Positions[i].Seq = stored[b.Positions[i].PartitionID].Seq
	}
	return b
}

// ProduceFirstHalf produces the first half of the predictions of the real
// 2 h Auckland slice (and its positions) to the broker at addr; it returns
// how many predictions the slice holds, how many it produced, and the second
// half, to produce later.
func ProduceFirstHalf(t *testing.T, addr string) (total, half int, second *gtfsrt.Result) {
	t.Helper()
	res := LoadFeeds(t, "AT", ExtractTarGz(t, RepoPath("testdata/auckland-20160518-2h.tar.gz")))
	total, half = len(res.Predictions), len(res.Predictions)/2
	first, rest := *res, *res
	first.Predictions, rest.Predictions = res.Predictions[:half], res.Predictions[half:]
	ProduceFeeds(t, addr, &first)
	return total, half, &rest
}
