//go:build integration

package schema

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/consumer"
	"github.com/ovstream/ovstream/integration/harness"
	"github.com/ovstream/ovstream/migrations"
	"github.com/ovstream/ovstream/store"
)

// Fingerprints of delay_aggregates: its rows (every column, updated_at
// included, as text, md5 over all in key order), its columns and its
// constraints.
const (
	aggregatesMD5 = `SELECT count(*) || ' rows, md5 ' || md5(string_agg(t::text, '|' ORDER BY pipeline, window_start, dimension, dimension_id))
		FROM delay_aggregates AS t`
	aggregatesColumns = `SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || ' ' || a.attnotnull || ' ' ||
		coalesce(pg_get_expr(d.adbin, d.adrelid), ''), ', ' ORDER BY a.attnum)
		FROM pg_attribute AS a LEFT JOIN pg_attrdef AS d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		WHERE a.attrelid = 'delay_aggregates'::regclass AND a.attnum > 0 AND NOT a.attisdropped`
	aggregatesConstraints = `SELECT string_agg(conname || ' ' || pg_get_constraintdef(oid), E'\n' ORDER BY conname)
		FROM pg_constraint WHERE conrelid = 'delay_aggregates'::regclass`
	aggregatesKind = `SELECT relkind::text FROM pg_class WHERE oid = 'delay_aggregates'::regclass`
	// dumpPartitions lists delay_aggregates' partitions: name, range.
	dumpPartitions = `SELECT partition_name::text, range_start, range_end FROM ovs_delay_partitions()`
)

// fingerprint returns the fingerprints of db's delay_aggregates.
func fingerprint(t *testing.T, db string) [3]string {
	t.Helper()
	return [3]string{harness.Query[string](t, db, aggregatesMD5), harness.Query[string](t, db, aggregatesColumns),
		harness.Query[string](t, db, aggregatesConstraints)}
}

// Migration 6 on rows written at version 5 (three UTC days, two pipelines,
// rows with and without a distribution, an operator's own CHECK): every row,
// column, default and constraint is the same afterwards (md5 over the rows
// as text), the table is partitioned with one partition per day of data,
// the operator's CHECK still refuses its rows; down to 5 gives back a plain
// table with the same rows, and up again the same partitioned one.
func TestMigration6KeepsRows(t *testing.T) {
	db := harness.EmptyDB(t)
	ctx := harness.TestCtx(t)
	if err := migrations.UpTo(ctx, db, 5); err != nil {
		t.Fatal(err)
	}
	harness.ExecSQL(t, db, `
ALTER TABLE delay_aggregates ADD CONSTRAINT operator_added CHECK (dimension_id <> 'forbidden');
INSERT INTO delay_aggregates (pipeline, window_start, window_end, dimension, dimension_id, operator, event_count,
	mean_delay_s, p90_delay_s, min_delay_s, max_delay_s, delay_values, delay_counts, updated_at)
SELECT CASE WHEN g < 4000 THEN 'feed' ELSE 'other' END, ws, ws + interval '5 minutes',
	(ARRAY['line', 'station', 'operator', 'network'])[g % 4 + 1], 'id' || (g % 8 / 4),
	CASE WHEN g % 3 = 0 THEN NULL ELSE 'op' END, 3 + g % 5, 10.5 + g % 7, 18, -5, 20 + g % 11,
	CASE WHEN g % 5 = 0 THEN NULL ELSE ARRAY[-5, 10, 20 + g % 11]::float8[] END,
	CASE WHEN g % 5 = 0 THEN NULL ELSE ARRAY[1, 1 + g % 5, 1]::bigint[] END,
	'2026-01-01 00:00:00+00'::timestamptz + g * interval '1.5 seconds'
FROM generate_series(0, 4799) AS g
CROSS JOIN LATERAL (SELECT '2016-05-16 20:00:00+00'::timestamptz + (g / 8) * interval '5 minutes' AS ws) AS w`)
	before := fingerprint(t, db)
	t.Logf("version 5: %s", before[0])
	if kind := harness.Query[string](t, db, aggregatesKind); kind != "r" {
		t.Fatalf("relkind %q at version 5, want r", kind)
	}

	if err := migrations.Up(ctx, db); err != nil {
		t.Fatal(err)
	}
	if after := fingerprint(t, db); after != before {
		t.Errorf("after migration 6:\n%q\nwant\n%q", after, before)
	}
	if kind := harness.Query[string](t, db, aggregatesKind); kind != "p" {
		t.Errorf("relkind %q after migration 6, want p (partitioned)", kind)
	}
	harness.SameRows(t, "partitions after migration 6", harness.Dump(t, db, dumpPartitions), []string{
		"[delay_aggregates_20160516 2016-05-16 00:00:00 +0000 UTC 2016-05-17 00:00:00 +0000 UTC]",
		"[delay_aggregates_20160517 2016-05-17 00:00:00 +0000 UTC 2016-05-18 00:00:00 +0000 UTC]",
		"[delay_aggregates_20160518 2016-05-18 00:00:00 +0000 UTC 2016-05-19 00:00:00 +0000 UTC]",
	})
	harness.SameRows(t, "rows per partition", harness.Dump(t, db, `SELECT tableoid::regclass::text, count(*) FROM delay_aggregates GROUP BY 1`),
		[]string{"[delay_aggregates_20160516 384]", "[delay_aggregates_20160517 2304]", "[delay_aggregates_20160518 2112]"})
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `INSERT INTO delay_aggregates (pipeline, window_start, window_end, dimension, dimension_id,
		event_count, mean_delay_s, p90_delay_s, min_delay_s, max_delay_s) VALUES
		('feed', '2016-05-17 10:00:00+00', '2016-05-17 10:05:00+00', 'line', 'forbidden', 1, 1, 1, 1, 1)`)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23514" || pgErr.ConstraintName != "operator_added" {
		t.Errorf("a row the operator's CHECK refuses: %v, want SQLSTATE 23514 from operator_added", err)
	}

	// Down to 5 as an operator does it, through the command line.
	if _, errOut, code := harness.RunCLI(t, nil, "migrate", "--database-url", db, "down", "5"); code != 2 {
		t.Fatalf("migrate down 5 without --yes: exit %d, want 2: %s", code, errOut)
	}
	if out, errOut, code := harness.RunCLI(t, nil, "migrate", "--database-url", db, "down", "5", "--yes"); code != 0 ||
		out != "schema at version 5\n" {
		t.Fatalf("migrate down 5 --yes: exit %d: %s%s", code, out, errOut)
	}
	if back := fingerprint(t, db); back != before {
		t.Errorf("after down to 5:\n%q\nwant\n%q", back, before)
	}
	if kind := harness.Query[string](t, db, aggregatesKind); kind != "r" {
		t.Errorf("relkind %q after down to 5, want r", kind)
	}
	if n := harness.Query[int64](t, db, `SELECT count(*) FROM pg_class WHERE relname ~ '^delay_aggregates_[0-9]'`); n != 0 {
		t.Errorf("%d partitions (or their indexes) left after down to 5", n)
	}
	if err := migrations.Up(ctx, db); err != nil {
		t.Fatal(err)
	}
	if again := fingerprint(t, db); again != before {
		t.Errorf("after up again:\n%q\nwant\n%q", again, before)
	}
}

// A run over predictions of several UTC days, with events on both sides of
// midnight and at 00:00:00 exactly, days apart and two years apart: no
// commit meets a missing partition (no dead letter, no retry), the table
// equals the SQL oracle, and the partitions are the days with windows, the
// day after the newest (made ahead), and at most the day after another day
// with windows (ahead of what was newest when it was written); never a day
// in a gap (2016-05-20).
func TestRunAcrossDaysCreatesPartitions(t *testing.T) {
	addr, db := harness.StartBroker(t), harness.FreshDB(t)
	var recs []harness.Rec
	times := []string{"2014-11-30T10:00:00Z"}
	for _, d := range []string{"2016-05-16", "2016-05-17", "2016-05-18", "2016-05-21"} {
		for _, hms := range []string{"00:00:00", "00:03:10", "11:00:00", "23:57:30", "23:59:59.999999"} {
			times = append(times, d+"T"+hms+"Z")
		}
	}
	for i, ts := range times {
		for j := range 3 {
			trip := fmt.Sprintf("t%d-%d", i, j)
			recs = append(recs, harness.Rec{Topic: harness.PredictionsTopic, Partition: int32((i + j) % 6), Key: trip,
				Value: harness.Pred(trip, fmt.Sprintf("L%d", j), fmt.Sprintf("S%d", (i+j)%4), "AT", 10*i-7*j, ts)})
		}
	}
	harness.ProduceRecords(t, addr, recs...)
	harness.DrainedEqualsOracle(t, db, addr, len(recs), harness.Drain(t, db, addr))
	if dl := harness.Dump(t, db, harness.DumpDeadLetters); len(dl) != 0 {
		t.Errorf("dead letters: %v", dl)
	}

	days := map[string]bool{}
	for _, r := range harness.Dump(t, db, `SELECT to_char(range_start AT TIME ZONE 'UTC', 'YYYY-MM-DD') FROM ovs_delay_partitions()`) {
		days[r[1:len(r)-1]] = true
	}
	for _, d := range []string{"2014-11-30", "2016-05-16", "2016-05-17", "2016-05-18", "2016-05-21", "2016-05-22"} {
		if !days[d] {
			t.Errorf("no partition of %s (windows there, or the day after the newest); partitions %v", d, days)
		}
		delete(days, d)
	}
	for d := range days {
		if d != "2014-12-01" && d != "2016-05-19" {
			t.Errorf("a partition of %s, a day without windows that follows none", d)
		}
	}
	if n := harness.Query[int64](t, db, `SELECT count(*) FROM ONLY delay_aggregates`); n != 0 {
		t.Errorf("%d rows in the parent itself", n)
	}
}

// Two instances (two Stores, two connections) creating the same partitions
// at the same moment both succeed, and each day has one partition; a
// partition is created while a commit transaction holding rows of
// delay_aggregates is open (ATTACH does not wait for it: with CREATE TABLE
// ... PARTITION OF it would, and fail after the 2 s lock_timeout).
func TestEnsurePartitionsRace(t *testing.T) {
	db := harness.FreshDB(t)
	ctx := harness.TestCtx(t)
	var days []time.Time
	first := time.Date(2016, 5, 1, 23, 55, 0, 0, time.UTC)
	for i := range 12 {
		days = append(days, first.Add(time.Duration(i)*store.PartitionSpan))
	}
	for round := range 3 {
		var wg sync.WaitGroup
		errs := make([]error, 2)
		start := make(chan struct{})
		for i := range errs {
			s, err := store.Open(ctx, db)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close(context.Background())
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				// Each asks for the days one by one, as commits do.
				for _, d := range days {
					if err := s.EnsurePartitions(ctx, []time.Time{d.Add(time.Duration(round) * time.Minute)}); err != nil {
						errs[i] = err
						return
					}
				}
			}()
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("round %d, instance %d: %v", round, i, err)
			}
		}
	}
	// 12 days and the 13th, made ahead of the newest.
	if n := harness.Query[int64](t, db, `SELECT count(*) FROM ovs_delay_partitions()`); n != 13 {
		t.Errorf("%d partitions, want 13: %v", n, harness.Dump(t, db, dumpPartitions))
	}
	if n := harness.Query[int64](t, db, `SELECT count(DISTINCT date_trunc('day', range_start, 'UTC')) FROM ovs_delay_partitions()
		WHERE range_end - range_start = interval '1 day'`); n != 13 {
		t.Errorf("%d distinct one-day partitions, want 13", n)
	}

	// A commit in flight: its transaction holds ROW EXCLUSIVE on delay_aggregates.
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `INSERT INTO delay_aggregates (pipeline, window_start, window_end, dimension, dimension_id,
		event_count, mean_delay_s, p90_delay_s, min_delay_s, max_delay_s) VALUES
		('p', '2016-05-02 10:00:00+00', '2016-05-02 10:05:00+00', 'line', 'L', 1, 1, 1, 1, 1)`); err != nil {
		t.Fatal(err)
	}
	s, err := store.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if err := s.EnsurePartitions(ctx, []time.Time{time.Date(2016, 7, 1, 0, 0, 0, 0, time.UTC)}); err != nil {
		t.Errorf("a partition created while a commit is open: %v", err)
	}
	if n := harness.Query[int64](t, db, `SELECT count(*) FROM ovs_delay_partitions() WHERE range_start >= '2016-07-01'`); n != 2 {
		t.Errorf("%d partitions from 2016-07-01 on, want 2 (that day and the next)", n)
	}
}

// A partition the Store believes in, dropped behind its back (another
// instance's retention): the next commit into it fails retryable, not as a
// refusal of its rows (no row would be dead-lettered), and the retry makes
// the partition again and commits.
func TestStoreCommitAfterPartitionDropped(t *testing.T) {
	ctx := harness.TestCtx(t)
	s, url, epoch := harness.OpenStore(t)
	w := harness.Row(aggregate.DimLine, "L1", 2, 5, 9, 1, 9)
	if err := s.Commit(ctx, harness.WithSeqs(t, s, store.Batch{Pipeline: "p", Owner: harness.Owner0, Epoch: epoch, Windows: []aggregate.Row{w}, Positions: harness.At0(1)})); err != nil {
		t.Fatal(err)
	}
	harness.ExecSQL(t, url, `DROP TABLE delay_aggregates_20260301`)
	w2 := harness.Row(aggregate.DimLine, "L2", 3, 6, 9, 2, 9)
	b := store.Batch{Pipeline: "p", Owner: harness.Owner0, Epoch: epoch, Windows: []aggregate.Row{w2}, Positions: harness.At0(2)}
	err := s.Commit(ctx, harness.WithSeqs(t, s, b))
	var rej *store.RejectedError
	if err == nil || !store.Retryable(err) || store.Refused(err) || errors.As(err, &rej) {
		t.Fatalf("commit into a dropped partition: %v; want a retryable error, not a refusal", err)
	}
	if err := s.Commit(ctx, harness.WithSeqs(t, s, b)); err != nil {
		t.Fatalf("the retry: %v", err)
	}
	if got := harness.Dump(t, url, `SELECT dimension_id, event_count, tableoid::regclass::text FROM delay_aggregates`); fmt.Sprint(got) !=
		"[[L2 3 delay_aggregates_20260301]]" {
		t.Errorf("rows after the retry: %v", got)
	}
}

// retentionDays are the days of TestRetentionDuringRun's feed.
var retentionDays = []time.Time{
	time.Date(2016, 5, 10, 0, 0, 0, 0, time.UTC), time.Date(2016, 5, 11, 0, 0, 0, 0, time.UTC),
	time.Date(2016, 5, 12, 0, 0, 0, 0, time.UTC), time.Date(2016, 5, 13, 0, 0, 0, 0, time.UTC),
	time.Date(2016, 5, 14, 0, 0, 0, 0, time.UTC), time.Date(2016, 5, 15, 0, 0, 0, 0, time.UTC),
}

// dayOfPredictions returns predictions every 20 minutes of day d, 00:00 to 23:40.
func dayOfPredictions(d time.Time, k int) [][]byte {
	var out [][]byte
	for m := 0; m < 24*60; m += 20 {
		trip := fmt.Sprintf("t%d-%d", k, m)
		out = append(out, harness.Pred(trip, fmt.Sprintf("L%d", m%3), fmt.Sprintf("S%d", m%5), "AT", (m*7+k*13)%300-60,
			d.Add(time.Duration(m)*time.Minute).Format(time.RFC3339)))
	}
	return out
}

// partitionStarts returns the start days of db's partitions, "YYYY-MM-DD", ascending.
func partitionStarts(t *testing.T, db string) []string {
	t.Helper()
	return harness.Dump(t, db, `SELECT to_char(range_start AT TIME ZONE 'UTC', 'YYYY-MM-DD') FROM ovs_delay_partitions()`)
}

// storedWatermark returns the watermark stored for the predictions topic's
// partition 0 (1970-01-01 if none).
func storedWatermark(t *testing.T, db string) time.Time {
	t.Helper()
	return harness.Query[time.Time](t, db, `SELECT coalesce(max(watermark), 'epoch') FROM stream_positions
		WHERE pipeline = 'ovstream' AND topic = 'arrival_predictions' AND partition = 0`)
}

// Retention during a run: a service fed one day of events at a time, with
// --retention 36h checked every 50 ms, drops the old days while it goes on
// writing new windows (the window at 23:40 of each day is written only
// after the next day's events arrive, after older days were dropped); then
// a drain ends it. Every drop happened while a partition of the run's
// newest day was being written; nothing younger than the cutoff is lost:
// the partitions left are exactly the days from the cutoff's day on, every
// row in them equals the SQL oracle, and the metric counts the dropped
// days. --dead-letter-retention deletes an old dead letter at start.
func TestRetentionDuringRun(t *testing.T) {
	addr, db := harness.OnePartitionBroker(t), harness.FreshDB(t)
	harness.ExecSQL(t, db, `INSERT INTO dead_letters (pipeline, topic, partition, "offset", value, reason, error, created_at)
		VALUES ('ovstream', 'arrival_predictions', 0, 999999, 'x', 'decode', 'old', now() - interval '40 days')`)
	clock := &harness.SkewClock{}
	const retention = 36 * time.Hour
	cfg := consumer.Config{Retention: retention, DeadLetterRetention: 30 * 24 * time.Hour,
		RetentionInterval: 50 * time.Millisecond, AllowedLateness: 2 * time.Minute}
	r := harness.RunInProcess(t, db, addr, clock, cfg)
	var dropped float64
	for k, d := range retentionDays {
		harness.ProduceToZero(t, addr, dayOfPredictions(d, k)...)
		wm := d.Add(23*time.Hour + 38*time.Minute) // the last event, 23:40, minus the allowed lateness
		harness.WaitFor(t, time.Minute, "the watermark of "+d.Format(time.DateOnly)+" stored", func() bool {
			return !storedWatermark(t, db).Before(wm)
		})
		// Floor wm, cutoff wm - 36h = 11:38 of the day before: every day
		// ending by then is dropped, from two days back; the rest stays.
		keep := d.Add(-24 * time.Hour)
		if k == 0 {
			keep = d
		}
		want := []string{}
		for day := keep; !day.After(d.Add(24 * time.Hour)); day = day.Add(24 * time.Hour) {
			want = append(want, "["+day.Format(time.DateOnly)+"]")
		}
		harness.WaitFor(t, time.Minute, fmt.Sprintf("partitions %v after day %d", want, k), func() bool {
			return fmt.Sprint(partitionStarts(t, db)) == fmt.Sprint(want)
		})
		if k == 0 {
			harness.WaitFor(t, 10*time.Second, "the old dead letter deleted", func() bool {
				return harness.Query[int64](t, db, `SELECT count(*) FROM dead_letters`) == 0
			})
		}
	}
	dropped += harness.Value(r.Cfg.Metrics.RetentionDropped)
	deleted := harness.Value(r.Cfg.Metrics.RetentionDeleted)
	r.Stop(t)

	cfg.Drain = true
	d := harness.RunInProcess(t, db, addr, clock, cfg)
	sum := d.Wait(t, time.Minute)
	dropped += harness.Value(d.Cfg.Metrics.RetentionDropped)
	// The drain wrote the last window, [23:40, 23:45) of the 15th, and
	// stored its end: the floor is 2016-05-15 23:45, the cutoff 2016-05-14
	// 11:45: the 14th stays.
	if want := time.Date(2016, 5, 15, 23, 45, 0, 0, time.UTC); !sum.Watermark.Equal(want) {
		t.Errorf("drain watermark %v, want %v", sum.Watermark, want)
	}
	if got := fmt.Sprint(partitionStarts(t, db)); got != "[[2016-05-14] [2016-05-15] [2016-05-16]]" {
		t.Errorf("partitions after the drain: %s", got)
	}
	if dropped != 4 || deleted != 1 {
		t.Errorf("ovstream_retention_dropped_partitions_total %v (want 4: the 10th to the 13th), deleted dead letters %v (want 1)",
			dropped, deleted)
	}
	harness.LoadOracleInput(t, db, addr, harness.PredictionsTopic)
	if dl := harness.Dump(t, db, harness.DumpDeadLetters); len(dl) != 0 {
		t.Errorf("dead letters: %v", dl)
	}
	kept := func(oracle string) string {
		return `SELECT * FROM (` + oracle + `) AS o WHERE o.ws >= '2016-05-14 00:00:00+00'`
	}
	got := harness.Dump(t, db, harness.DumpAggregates)
	if len(got) != 2*72*4 {
		t.Errorf("%d rows kept, want 576 (2 days of 72 windows of one event: 4 rows each)", len(got))
	}
	harness.SameRows(t, "delay_aggregates kept vs SQL oracle of the days from the cutoff on", got,
		harness.Dump(t, db, kept(harness.OracleAggregates)))
	harness.SameRows(t, "distributions kept vs SQL oracle", harness.Dump(t, db, harness.DumpDistributions),
		harness.Dump(t, db, kept(harness.OracleDistributions)))
}

// --dead-letter-retention: the pipeline's dead letters older than the age
// (by created_at) are deleted, replayed or not, in batches of 5,000 (12,001
// of them); younger ones and other pipelines' stay.
func TestDeadLetterRetention(t *testing.T) {
	ctx := harness.TestCtx(t)
	s, url, _ := harness.OpenStore(t)
	harness.ExecSQL(t, url, `
INSERT INTO dead_letters (pipeline, topic, partition, "offset", value, reason, error, created_at, replayed_at, replayed_to)
SELECT 'p', 't', 0, g, 'v', 'decode', 'e', now() - interval '31 days' - g * interval '1 second',
	CASE WHEN g % 2 = 0 THEN now() END, CASE WHEN g % 2 = 0 THEN 't' END
FROM generate_series(0, 12000) AS g;
INSERT INTO dead_letters (pipeline, topic, partition, "offset", value, reason, error, created_at)
SELECT 'p', 't', 1, g, 'v', 'late', 'e', now() - interval '29 days' FROM generate_series(0, 9) AS g;
INSERT INTO dead_letters (pipeline, topic, partition, "offset", value, reason, error, created_at)
SELECT 'q', 't', 0, g, 'v', 'decode', 'e', now() - interval '90 days' FROM generate_series(0, 4) AS g;`)
	n, err := s.DeleteOldDeadLetters(ctx, "p", 30*24*time.Hour)
	if err != nil || n != 12001 {
		t.Errorf("DeleteOldDeadLetters = %d, %v; want 12001 deleted", n, err)
	}
	harness.SameRows(t, "dead letters left", harness.Dump(t, url, `SELECT pipeline, partition, count(*) FROM dead_letters GROUP BY 1, 2`),
		[]string{"[p 1 10]", "[q 0 5]"})
	if n, err := s.DeleteOldDeadLetters(ctx, "p", 30*24*time.Hour); err != nil || n != 0 {
		t.Errorf("again: %d, %v; want 0", n, err)
	}
}
