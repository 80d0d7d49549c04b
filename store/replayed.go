package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ovstream/ovstream/aggregate"
)

// Replayed dead letters (docs/runbook.md, "Growing dead-letter table").
// `dlq replay` re-produces each dead letter with three headers; a copy the
// consumer accepts is counted by merging it into the stored rows of its
// window once that window is final, in the commit that records its source in
// dead_letter_replays (migration 12). The source is the table's key, so a
// source counts at most once, whatever copies of it the topic holds (a
// replay killed between Kafka's acknowledgement and the database commit
// sends its last batch again) and whatever the offsets say.
const (
	// HeaderSource names the record a copy was replayed from:
	// "topic/partition/offset" (SourceID.String).
	HeaderSource = "ovstream-dlq-source"
	// HeaderReason is the dead letter's reason (ReasonDecode, ...).
	HeaderReason = "ovstream-dlq-reason"
	// HeaderFinal, set to FinalMerge, lets a copy whose window is final be
	// merged into the stored rows; without it such a copy is dead-lettered
	// late again. `dlq replay` sets it for rejected and future dead letters
	// (they arrived on time: a CHECK refused their rows, or the producer's
	// clock was ahead) and, with --into-final-windows, for late and decode
	// ones (an operator's decision: the allowed lateness did not count them).
	HeaderFinal = "ovstream-dlq-final"
	FinalMerge  = "merge"
)

// SourceID names the Kafka record a dead letter came from; the zero value
// names none.
type SourceID struct {
	Topic     string
	Partition int32
	Offset    int64
}

// IsZero tells whether s names no record.
func (s SourceID) IsZero() bool { return s.Topic == "" }

// String returns s as the value of HeaderSource: "topic/partition/offset".
func (s SourceID) String() string {
	return s.Topic + "/" + strconv.Itoa(int(s.Partition)) + "/" + strconv.FormatInt(s.Offset, 10)
}

// ParseSourceID parses a HeaderSource value ("topic/partition/offset"; a
// Kafka topic name holds no '/', but the last two fields are taken from the
// right anyway).
func ParseSourceID(v string) (SourceID, error) {
	rest, off, ok1 := cutLast(v)
	topic, part, ok2 := cutLast(rest)
	p, err1 := strconv.ParseInt(part, 10, 32)
	o, err2 := strconv.ParseInt(off, 10, 64)
	if !ok1 || !ok2 || topic == "" || err1 != nil || err2 != nil || p < 0 || o < 0 {
		return SourceID{}, fmt.Errorf("store: %s %q: want topic/partition/offset", HeaderSource, v)
	}
	return SourceID{Topic: topic, Partition: int32(p), Offset: o}, nil
}

func cutLast(s string) (before, after string, ok bool) {
	i := strings.LastIndexByte(s, '/')
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+1:], true
}

// ReplayedRecord is one copy of a dead letter the consumer accepted, to be
// counted by the commit it goes into (Batch.Replayed): merged into the rows
// of its window, which is final by then (written by this commit or an
// earlier one), unless its source was counted before.
type ReplayedRecord struct {
	Source      SourceID              // from HeaderSource
	Copy        aggregate.PartitionID // where the copy was read
	Offset      int64                 // the copy's offset
	Key, Value  []byte                // the copy's, for a dead letter if its rows are refused
	Prediction  aggregate.Prediction  // decoded
	WindowStart time.Time             // UTC
	WindowEnd   time.Time             // UTC
}

// ReplayOutcome is what a commit did with its batch's Replayed records.
type ReplayOutcome struct {
	Counted    int // merged into their windows; their sources recorded
	Duplicates int // a copy of their source was counted before: skipped
	// DeadLetters are the copies the commit dead-lettered instead (written
	// in it): ReasonRejected when PostgreSQL refused a merged row,
	// ReasonLate when a row of their window holds no distribution (written
	// before schema 5), so they cannot be merged exactly.
	DeadLetters []DeadLetter
}

// mergeReplayed counts recs (mergeWindowCopies), window by window, each in a
// savepoint; a window that fails for a refused row or a row without its
// distribution is counted again copy by copy, and the copies that fail alone
// are dead-lettered (ReplayOutcome.DeadLetters). It fills out.
func mergeReplayed(ctx context.Context, tx pgx.Tx, pipeline string, recs []ReplayedRecord, out *ReplayOutcome) error {
	*out = ReplayOutcome{}
	// Instances of a split pipeline may merge copies into one window at
	// once: a row both find missing would be written by both, the second
	// replacing the first (copyWindows). The pipelines row lock, which a
	// merge of partials takes too, makes them one after the other; FOR
	// UPDATE then reads what the other committed.
	if _, err := tx.Exec(ctx, `SELECT 1 FROM pipelines WHERE name = $1 FOR UPDATE`, pipeline); err != nil {
		return fmt.Errorf("lock the pipeline: %w", err)
	}
	recs = slices.Clone(recs)
	slices.SortStableFunc(recs, func(a, b ReplayedRecord) int { return a.WindowStart.Compare(b.WindowStart) })
	for i := 0; i < len(recs); {
		j := i + 1
		for j < len(recs) && recs[j].WindowStart.Equal(recs[i].WindowStart) {
			j++
		}
		win := recs[i:j]
		i = j
		fresh, err := inSavepoint(ctx, tx, func(sp pgx.Tx) ([]ReplayedRecord, error) { return countCopies(ctx, sp, pipeline, win) })
		if err == nil {
			out.Counted += len(fresh)
			out.Duplicates += len(win) - len(fresh)
			continue
		}
		if !cannotMerge(err) {
			return err
		}
		for _, r := range win { // one at a time: only the copies whose rows fail are dead-lettered
			one := []ReplayedRecord{r}
			fresh, err := inSavepoint(ctx, tx, func(sp pgx.Tx) ([]ReplayedRecord, error) { return countCopies(ctx, sp, pipeline, one) })
			switch {
			case err == nil:
				out.Counted += len(fresh)
				out.Duplicates += 1 - len(fresh)
			case !cannotMerge(err):
				return err
			default:
				out.DeadLetters = append(out.DeadLetters, copyDeadLetter(r, err))
			}
		}
	}
	if err := insertDeadLetters(ctx, tx, pipeline, out.DeadLetters); err != nil {
		return fmt.Errorf("insert dead letters: %w", err)
	}
	return nil
}

// cannotMerge tells whether err is a row the merge cannot write: refused by
// PostgreSQL for a value it holds, or stored without its distribution.
func cannotMerge(err error) bool { return Refused(err) || errors.Is(err, aggregate.ErrNoDistribution) }

// copyDeadLetter is the dead letter of r, whose merge failed with err
// (cannotMerge).
func copyDeadLetter(r ReplayedRecord, err error) DeadLetter {
	p := r.Prediction
	key := fmt.Sprintf("(%s; station %s, line %s, operator %s)", r.WindowStart.Format(time.RFC3339), p.StopID, p.Line, p.Operator)
	d := DeadLetter{Topic: r.Copy.Topic, Partition: r.Copy.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value,
		Source: r.Source, Reason: ReasonRejected}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		d.Error = "replayed from " + r.Source.String() + ": " + refusal("delay_aggregates", key, pgErr)
	} else {
		d.Reason = ReasonLate
		d.Error = fmt.Sprintf("replayed from %s: window %s is final and a row of it was stored without its distribution "+
			"(before schema 5): it cannot take the event exactly", r.Source, key)
	}
	return d
}

// inSavepoint runs fn in a savepoint of tx: released when fn succeeds,
// rolled back when it fails.
func inSavepoint[T any](ctx context.Context, tx pgx.Tx, fn func(pgx.Tx) (T, error)) (T, error) {
	var zero T
	sp, err := tx.Begin(ctx)
	if err != nil {
		return zero, fmt.Errorf("savepoint: %w", err)
	}
	v, err := fn(sp)
	if err != nil {
		if rerr := sp.Rollback(ctx); rerr != nil {
			return v, fmt.Errorf("rollback to savepoint (%v): %w", err, rerr)
		}
		return v, err
	}
	if err := sp.Commit(ctx); err != nil {
		return v, fmt.Errorf("release savepoint: %w", err)
	}
	return v, nil
}

// countCopies records the sources of recs, copies of one window, in
// dead_letter_replays, and merges the copies whose source was not there yet
// (of several copies of one source, the first) into the window's stored
// rows: every statistic from the merged distribution (aggregate.MergeRows),
// a row that does not exist yet is written as the copies' own. It returns
// those copies, also with an error.
func countCopies(ctx context.Context, tx pgx.Tx, pipeline string, recs []ReplayedRecord) ([]ReplayedRecord, error) {
	n := len(recs)
	st, sp, so := make([]string, n), make([]int32, n), make([]int64, n)
	ct, cp, co := make([]string, n), make([]int32, n), make([]int64, n)
	ws := make([]time.Time, n)
	for i, r := range recs {
		st[i], sp[i], so[i] = r.Source.Topic, r.Source.Partition, r.Source.Offset
		ct[i], cp[i], co[i] = r.Copy.Topic, r.Copy.Partition, r.Offset
		ws[i] = r.WindowStart
	}
	rows, err := tx.Query(ctx, `
INSERT INTO dead_letter_replays (pipeline, source_topic, source_partition, source_offset, topic, partition, "offset", window_start)
SELECT $1, * FROM unnest($2::text[], $3::integer[], $4::bigint[], $5::text[], $6::integer[], $7::bigint[], $8::timestamptz[])
ON CONFLICT (pipeline, source_topic, source_partition, source_offset) DO NOTHING
RETURNING topic, partition, "offset"`, pipeline, st, sp, so, ct, cp, co, ws)
	if err != nil {
		return nil, fmt.Errorf("record replayed sources: %w", err)
	}
	type pos struct {
		topic string
		part  int32
		off   int64
	}
	won := map[pos]bool{}
	var p pos
	if _, err := pgx.ForEachRow(rows, []any{&p.topic, &p.part, &p.off}, func() error { won[p] = true; return nil }); err != nil {
		return nil, fmt.Errorf("record replayed sources: %w", err)
	}
	var fresh []ReplayedRecord
	for _, r := range recs {
		if won[pos{r.Copy.Topic, r.Copy.Partition, r.Offset}] {
			fresh = append(fresh, r)
		}
	}
	if len(fresh) == 0 {
		return nil, nil
	}
	return fresh, mergeCopies(ctx, tx, pipeline, fresh)
}

// mergeCopies merges the predictions of recs, copies of one window, into
// its stored delay_aggregates rows (line, station, operator, network), which
// it locks (FOR UPDATE).
func mergeCopies(ctx context.Context, tx pgx.Tx, pipeline string, recs []ReplayedRecord) error {
	w := aggregate.NewWindower(recs[0].WindowEnd.Sub(recs[0].WindowStart))
	for _, r := range recs {
		w.Add(r.Prediction)
	}
	delta := w.ClosedSet(recs[0].WindowEnd).Rows()
	starts, dims, ids := make([]time.Time, len(delta)), make([]string, len(delta)), make([]string, len(delta))
	for i, r := range delta {
		starts[i], dims[i], ids[i] = r.WindowStart, r.Dimension, r.DimensionID
	}
	rows, err := tx.Query(ctx, `
SELECT a.window_start, a.window_end, a.dimension, a.dimension_id, coalesce(a.operator, ''), a.delay_values, a.delay_counts
FROM delay_aggregates a JOIN unnest($2::timestamptz[], $3::text[], $4::text[]) AS u(window_start, dimension, dimension_id)
    USING (window_start, dimension, dimension_id)
WHERE a.pipeline = $1
FOR UPDATE OF a`, pipeline, starts, dims, ids)
	if err != nil {
		return fmt.Errorf("read the stored rows: %w", err)
	}
	type key struct {
		start   int64
		dim, id string
	}
	stored := map[key]aggregate.Row{}
	var s aggregate.Row
	if _, err := pgx.ForEachRow(rows, []any{&s.WindowStart, &s.WindowEnd, &s.Dimension, &s.DimensionID, &s.Operator,
		&s.Values, &s.Counts}, func() error {
		stored[key{s.WindowStart.UnixMicro(), s.Dimension, s.DimensionID}] = s
		s = aggregate.Row{}
		return nil
	}); err != nil {
		return fmt.Errorf("read the stored rows: %w", err)
	}
	merged := make([]aggregate.Row, len(delta))
	for i, d := range delta {
		old, ok := stored[key{d.WindowStart.UnixMicro(), d.Dimension, d.DimensionID}]
		if !ok {
			merged[i] = d
			continue
		}
		if merged[i], err = aggregate.MergeRows(old, d); err != nil {
			return fmt.Errorf("row (%s, %s, %s): %w", d.WindowStart.Format(time.RFC3339), d.Dimension, d.DimensionID, err)
		}
	}
	return writeThenClear(ctx, tx, "ovs_windows", upsertWindows(ctx, tx, pipeline, merged))
}

// replayedStarts returns the window starts of recs.
func replayedStarts(recs []ReplayedRecord) []time.Time {
	starts := make([]time.Time, len(recs))
	for i := range recs {
		starts[i] = recs[i].WindowStart
	}
	return starts
}
