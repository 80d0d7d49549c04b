//go:build integration

package integration

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/migrations"
	"github.com/ovstream/ovstream/store"
)

// An instance assigned every partition by --partitions writes final rows (it
// owns every partition: no split). A partition is added to the predictions
// topic; the instance logs it and registers it, and a second instance is
// assigned it. That one is split: it writes partials of the added partition
// and merges a window once every stored watermark passed it. The first one
// goes on writing final rows of the same windows. G7: the windows both wrote
// must equal the SQL oracle over the 7 partitions, as one instance owning
// every partition (claiming the added one) gives.
func TestSplitPartitionAddedToAFullManualAssignment(t *testing.T) {
	every := "arrival_predictions:0,arrival_predictions:1,arrival_predictions:2,arrival_predictions:3," +
		"arrival_predictions:4,arrival_predictions:5,vehicle_positions:0,vehicle_positions:1,vehicle_positions:2"
	partitionAddedElsewhere(t, []string{"--metadata-refresh", "1s", "--partitions", every}, func(x *proc) {
		waitFor(t, time.Minute, "x to log the added partition", func() bool {
			return strings.Contains(x.output(), "partition added to the topic, not assigned to this instance")
		})
	}, nil)
}

// An instance without --partitions (it claims every partition, and the
// ones added later) writes final rows; a partition is added and a second
// instance, assigned it, claims it first. The first one's next commit finds
// the partition owned elsewhere (ErrNotSoleOwner) and it starts again as a
// split instance over the partitions it holds, never reading the added one
// (before the fix of start-up it assigned itself every partition of the
// topics again on that restart and read the other instance's partition).
// The windows both wrote equal the SQL oracle over the 7 partitions.
func TestSplitPartitionAddedClaimedElsewhere(t *testing.T) {
	partitionAddedElsewhere(t, []string{"--metadata-refresh", "60s"}, nil, func(x *proc) {
		if out := x.output(); !strings.Contains(out, "another instance owns a partition of the pipeline") ||
			strings.Contains(out, "partition=arrival_predictions/6") {
			t.Errorf("x (no --partitions) did not start again as a split instance over its own partitions only:\n%s", tail(out, 40))
		}
	})
}

// partitionAddedElsewhere runs instance x (xArgs) over the 6 predictions
// partitions, adds a 7th (then calls added, when set), starts instance y
// assigned only the 7th, produces two more half hours on all 7, waits until
// both committed everything and the merge passed 20:40 (then calls after,
// when set), stops both, and compares the windows of 20:30-20:40 with the
// SQL oracle over the 7 partitions.
func partitionAddedElsewhere(t *testing.T, xArgs []string, added, after func(x *proc)) {
	t.Parallel() // its own broker and database
	addr, db := startBroker(t), freshDB(t)
	old := []int32{0, 1, 2, 3, 4, 5}
	produceRecords(t, addr, spread(old, 10, time.Date(2016, 5, 18, 20, 0, 0, 0, time.UTC))...)
	x := startOvstream(t, nil, runArgs(db, addr, append([]string{"--allowed-lateness", "2m"}, xArgs...)...)...)
	waitFor(t, time.Minute, "x to consume the 6 partitions", func() bool {
		c := storedConsumedOf(t, db, "ovstream")
		return c["arrival_predictions/0"] == 10 && c["arrival_predictions/5"] == 10
	})
	if err := adminClient(t, addr).CreatePartitions(predictionsTopic, 7, nil, false); err != nil {
		t.Fatal(err)
	}
	if added != nil {
		added(x)
	}
	y := startOvstream(t, nil, runArgs(db, addr, "--metadata-refresh", "1s", "--allowed-lateness", "2m",
		"--partitions", "arrival_predictions:6")...)
	waitFor(t, time.Minute, "y to claim partition 6", func() bool {
		return len(dump(t, db, `SELECT 1 FROM stream_positions WHERE partition = 6 AND topic = 'arrival_predictions' AND owner IS NOT NULL`)) == 1
	})
	all := []int32{0, 1, 2, 3, 4, 5, 6}
	produceRecords(t, addr, spread(all, 10, time.Date(2016, 5, 18, 20, 30, 0, 0, time.UTC))...)
	produceRecords(t, addr, spread(all, 10, time.Date(2016, 5, 18, 21, 0, 0, 0, time.UTC))...)
	waitFor(t, 2*time.Minute, "both to commit every record and the merge to pass 20:40", func() bool {
		c := storedConsumedOf(t, db, "ovstream")
		m := dump(t, db, `SELECT 1 FROM pipelines WHERE merged_until >= '2016-05-18 20:40:00Z'`)
		return c["arrival_predictions/0"] == 30 && c["arrival_predictions/5"] == 30 && c["arrival_predictions/6"] == 20 && len(m) == 1
	})
	time.Sleep(time.Second) // a few more commits of x
	if after != nil {
		after(x)
	}
	for _, p := range []*proc{x, y} {
		_ = p.cmd.Process.Signal(sigterm)
		if code := p.wait(t, time.Minute); code != 0 {
			t.Fatalf("run exit %d after SIGTERM:\n%s", code, p.output())
		}
	}
	loadOracleInput(t, db, addr, predictionsTopic)
	const span = ` window_start >= '2016-05-18 20:30:00Z' AND window_start < '2016-05-18 20:40:00Z'`
	got := dump(t, db, dumpAggregates+` WHERE`+span)
	want := dump(t, db, `SELECT * FROM (`+oracleAggregates+`) AS o WHERE ws >= '2016-05-18 20:30:00Z' AND ws < '2016-05-18 20:40:00Z'`)
	sameRows(t, "delay_aggregates of 20:30-20:40 vs SQL oracle over 7 partitions", got, want)
	if t.Failed() {
		t.Logf("network rows: %v", dump(t, db, `SELECT window_start, event_count FROM delay_aggregates WHERE dimension = 'network' AND`+span))
		t.Logf("dead letters: %v", dump(t, db, `SELECT partition, "offset", reason FROM dead_letters`))
	}
}

// Migration 8's SQL builds, from the per-row partials of schema 7, partial
// windows in format 1 that read as exactly what the Go encoder
// (ClosedSet.PartialWindows, format 2 since version 9) wrote: the same rows,
// bit for bit, per window and partition (the reader takes one encoding per
// row in either format, so these are the bytes of format 1), in every
// database of migrationDBs: ids with multibyte UTF-8 that sort differently
// bytewise and by code point, collation or the database's encoding, operators one or several (NULL), a -0 stored at version 7
// (written as 0), fractional delays.
func TestMigration8BytesEqualTheGoEncoder(t *testing.T) {
	for _, m := range migrationDBs {
		t.Run(m.name, func(t *testing.T) { migration8BytesEqualTheGoEncoder(t, m.create(t), m.ids) })
	}
}

func migration8BytesEqualTheGoEncoder(t *testing.T, db string, moreIDs []string) {
	ctx := testCtx(t)
	if err := migrations.UpTo(ctx, db, 7); err != nil {
		t.Fatal(err)
	}
	const w = 5 * time.Minute
	win := aggregate.NewPartitionedWindower(w)
	ids := append([]string{"L1", "L10", "L2", "Ä", "a", "Z", "é", "ß", "ä", "A", "l10"}, moreIDs...)
	r := rand.New(rand.NewPCG(8, 8))
	for i := range 4000 {
		part := int32(r.IntN(3))
		win.AddFrom(part, aggregate.Prediction{TripID: "t", Line: ids[r.IntN(len(ids))], StopID: ids[r.IntN(len(ids))] + "/s",
			Operator: []string{"AT", "ÅT", "AT"}[r.IntN(3)*(i%2)], DelayS: float64(r.IntN(200)-100) + []float64{0, 0.5, 0.1}[r.IntN(3)],
			EventTime: t0.Add(time.Duration(r.IntN(900)) * time.Second)})
	}
	ws := win.ClosedSet(t0.Add(3 * w)).PartialWindows()
	if len(ws) != 9 {
		t.Fatalf("%d partial windows, want 9", len(ws))
	}
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, pw := range ws {
		rows, err := aggregate.MergePartialWindows([]aggregate.PartialWindow{pw})
		if err != nil {
			t.Fatal(err)
		}
		for _, row := range rows {
			var op any
			if row.Operator != "" {
				op = row.Operator
			}
			values := append([]float64(nil), row.Values...)
			if values[0] == 0 {
				values[0] = math.Copysign(0, -1) // schema 7 may hold -0: written as 0
			}
			if _, err := conn.Exec(ctx, `INSERT INTO delay_partials (pipeline, window_start, dimension, dimension_id, topic,
	partition, window_end, operator, event_count, sum_delay_s, min_delay_s, max_delay_s, delay_values, delay_counts)
VALUES ('p', $1, $2, $3, 'arrival_predictions', $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
				pw.WindowStart, row.Dimension, row.DimensionID, pw.Partition, pw.WindowEnd, op, row.Count,
				row.Mean*float64(row.Count), row.Min, row.Max, values, row.Counts); err != nil {
				t.Fatal(err)
			}
		}
	}
	conn.Close(ctx)
	if err := migrations.UpTo(ctx, db, 8); err != nil {
		t.Fatal(err)
	}
	conn, err = pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, pw := range ws {
		sql := pw
		if err := conn.QueryRow(ctx, `SELECT rows, row_count FROM delay_partial_windows WHERE pipeline = 'p'
	AND window_start = $1 AND partition = $2`, pw.WindowStart, pw.Partition).Scan(&sql.Data, &sql.Rows); err != nil {
			t.Fatal(err)
		}
		if len(sql.Data) == 0 || sql.Data[0] == 0x82 {
			t.Fatalf("window %s partition %d: migration 8 wrote %x..., not format 1", pw.WindowStart, pw.Partition, sql.Data[:min(4, len(sql.Data))])
		}
		got, err := aggregate.MergePartialWindows([]aggregate.PartialWindow{sql})
		if err != nil {
			t.Fatalf("window %s partition %d: %v", pw.WindowStart, pw.Partition, err)
		}
		want, _ := aggregate.MergePartialWindows([]aggregate.PartialWindow{pw})
		if sql.Rows != pw.Rows || len(got) != len(want) {
			t.Fatalf("window %s partition %d: migration wrote %d rows (%d read), Go %d", pw.WindowStart, pw.Partition,
				sql.Rows, len(got), pw.Rows)
		}
		for i := range got {
			if fmt.Sprintf("%#v", got[i]) != fmt.Sprintf("%#v", want[i]) {
				t.Fatalf("window %s partition %d row %d: migration's %#v\nGo's %#v", pw.WindowStart, pw.Partition, i, got[i], want[i])
			}
		}
	}
	t.Logf("%d partial windows converted, every row bit for bit", len(ws))
}

// Three "instances" (Stores, one partition each) commit 30 windows side by
// side as fast as they can, every commit after the first Holding (so many
// leave the merge while another decides one), merges in chunks of one
// window: no commit is refused (ErrMergedPast), and once each commits again
// without Holding, every window equals one Windower fed every event.
func TestStoreSplitHoldingCommitsRace(t *testing.T) {
	ctx := testCtx(t)
	url := freshDB(t)
	const w, windows, n = 5 * time.Minute, 30, 3
	plain := aggregate.NewWindower(w)
	type inst struct {
		st    *store.Store
		owner string
		epoch int64
		tp    aggregate.PartitionID
		win   *aggregate.Windower
	}
	var is []*inst
	for p := range int32(n) {
		s, err := store.Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close(context.Background()) })
		s.MergeChunkRows = 1
		tp := aggregate.PartitionID{Topic: "t", Partition: p}
		owner := fmt.Sprintf("i%d", p)
		c, err := s.Claim(ctx, "p", owner, []aggregate.PartitionID{tp}, store.ClaimOptions{Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		is = append(is, &inst{s, owner, c.Epoch, tp, aggregate.NewPartitionedWindower(w)})
	}
	all := make([]aggregate.PartitionID, n)
	for i := range is {
		all[i] = is[i].tp
	}
	if err := is[0].st.RegisterPartitions(ctx, "p", all); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 6000 {
		p := aggregate.Prediction{TripID: "x", Line: fmt.Sprintf("L%d", r.IntN(4)), StopID: fmt.Sprintf("S%d", r.IntN(5)),
			Operator: "A", DelayS: float64(r.IntN(600) - 100), EventTime: t0.Add(time.Duration(r.IntN(windows*300)) * time.Second)}
		part := int32(r.IntN(n))
		plain.Add(p)
		is[part].win.AddFrom(part, p)
	}
	commit := func(in *inst, wm time.Time, holding bool) (store.Merged, error) {
		b := store.Batch{Pipeline: "p", Owner: in.owner, Epoch: in.epoch, Watermark: wm, Partials: in.win.ClosedSet(wm).PartialWindows(),
			Positions: []store.Position{{PartitionID: in.tp, NextOffset: 1, ConsumedOffset: 1}},
			Split: &store.Split{Topic: "t", Topics: []string{"t"}, Window: w, FirstOpen: in.win.FirstEnd(),
				IdleLease: time.Minute, Holding: holding}}
		m, err := in.st.CommitSplit(ctx, withSeqs(t, in.st, b))
		if err == nil {
			in.win.Drop(wm)
		}
		return m, err
	}
	errs := make(chan error, n)
	skipped := make(chan int, n)
	for _, in := range is {
		go func() {
			s := 0
			for k := 1; k <= windows; k++ {
				m, err := commit(in, t0.Add(time.Duration(k)*w), k > 1)
				if err != nil {
					errs <- err
					skipped <- s
					return
				}
				if m.Skipped {
					s++
				}
			}
			errs <- nil
			skipped <- s
		}()
	}
	total := 0
	for range is {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		total += <-skipped
	}
	for _, in := range is {
		if _, err := commit(in, t0.Add(windows*w), false); err != nil {
			t.Fatal(err)
		}
	}
	if got := query[time.Time](t, url, `SELECT merged_until FROM pipelines WHERE name = 'p'`); !got.Equal(t0.Add(windows * w)) {
		t.Fatalf("merged until %v", got)
	}
	sameAggregates(t, url, plain.Closed(t0.Add(windows*w)))
	t.Logf("%d commits left the merge to the next one", total)
}

// A partial window edited by hand (truncated bytes, a row_count far beyond
// its bytes, a NUL in an id) stops the merge with an error that
// names it and is not retried; the process never crashes (before the fix
// in aggregate, the row_count case died with "fatal error: runtime: out of
// memory", and the NUL case failed in the COPY of the merged rows, 22021,
// naming neither window nor partition).
func TestStoreSplitCorruptPartialWindow(t *testing.T) {
	for _, tc := range []struct{ name, edit, want string }{
		{"truncated", `UPDATE delay_partial_windows SET data = substring(data FROM 1 FOR 10)`, "corrupt partial window"},
		{"row_count", `UPDATE delay_partial_windows SET row_count = 2147483647`, "corrupt partial window"},
		// format 2: 0x82, the dimension, the id's length, then the id
		{"nul", `UPDATE delay_partial_windows SET data = overlay(data PLACING '\x00'::bytea FROM 4 FOR 1)`, "corrupt partial window"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			g := newSplitStoreRig(t)
			g.commit(g.sa, g.batch(g.ea, g.ta, g.w1, false))
			execSQL(t, g.url, tc.edit)
			_, err := g.sb.CommitSplit(ctx, withSeqs(t, g.sb, g.batch(g.eb, g.tb, g.w1, false)))
			if err == nil || store.Retryable(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("merge of an edited partial window: %v (retryable %v), want an error naming %q", err, store.Retryable(err), tc.want)
			}
			t.Log(err)
		})
	}
}
