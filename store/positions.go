package store

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/aggregate"
)

// LoadPositions returns the stored progress of every partition of pipeline;
// a partition without committed offsets (never claimed, or claimed and never
// committed) is absent from the map: its commit sequence (Position.Seq) is 0.
func (s *Store) LoadPositions(ctx context.Context, pipeline string) (map[aggregate.PartitionID]Position, error) {
	positions := map[aggregate.PartitionID]Position{}
	err := s.do(ctx, func(conn *pgx.Conn) error {
		clear(positions)
		rows, err := conn.Query(ctx, `SELECT topic, partition, next_offset, consumed_offset, watermark, commit_seq,
			COALESCE(CASE WHEN leader_epoch_offset = next_offset THEN leader_epoch END, -1)
			FROM stream_positions WHERE pipeline = $1 AND next_offset IS NOT NULL`, pipeline)
		if err != nil {
			return err
		}
		var p Position
		var wm *time.Time
		_, err = pgx.ForEachRow(rows, []any{&p.Topic, &p.Partition, &p.NextOffset, &p.ConsumedOffset, &wm, &p.Seq, &p.LeaderEpoch}, func() error {
			p.Watermark = time.Time{}
			if wm != nil {
				p.Watermark = wm.UTC()
			}
			positions[p.PartitionID] = p
			return nil
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: load positions of pipeline %q: %w", pipeline, err)
	}
	return positions, nil
}

// SeedWatermark returns the watermark an instance owning parts starts from,
// in UTC (docs/design.md "Watermark and lateness"): the latest of max(window_end)
// of pipeline's delay_aggregates rows, the lowest watermark stored for parts
// (a partition of parts without one, never committed, makes that part none:
// its events may be older than any other partition's watermark) and the end of the last window the pipeline merged from partials
// (pipelines.merged_until: events of a merged window are late); the zero
// time when none exists. Other pipelines' rows play no part.
func (s *Store) SeedWatermark(ctx context.Context, pipeline string, parts []aggregate.PartitionID) (time.Time, error) {
	topics, nums := partitionArrays(parts)
	var wm *time.Time
	err := s.do(ctx, func(conn *pgx.Conn) error {
		// max(window_start) through the primary key; the rows of that start
		// hold the greatest window_end (one window size per pipeline).
		return conn.QueryRow(ctx, `
SELECT GREATEST(
    (SELECT CASE WHEN count(s.watermark) = cardinality($2::text[]) THEN min(s.watermark) END
        FROM unnest($2::text[], $3::integer[]) AS u(topic, partition)
        LEFT JOIN stream_positions s ON s.pipeline = $1 AND s.topic = u.topic AND s.partition = u.partition),
    (SELECT max(window_end) FROM delay_aggregates WHERE pipeline = $1
        AND window_start = (SELECT max(window_start) FROM delay_aggregates WHERE pipeline = $1)),
    (SELECT merged_until FROM pipelines WHERE name = $1))`,
			pipeline, topics, nums).Scan(&wm)
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("store: seed watermark of pipeline %q: %w", pipeline, err)
	}
	if wm == nil {
		return time.Time{}, nil
	}
	return wm.UTC(), nil
}

// fence is a commit's first statement (docs/design.md "The commit", step 2): it
// checks that owner holds every partition of ps at epoch (its owner is owner
// and its epoch is epoch) and that the database holds what this instance last
// committed of each (its commit_seq is the Position's Seq), renews the
// owner's lease (heartbeat_at) and adds one to each commit_seq, locking the
// partitions' rows in a fixed order. Epochs are per claim: two instances that
// claimed different partitions may hold the same epoch, so the epoch alone
// does not tell whose a partition is.
//
// Errors: ErrFenced when one of them has a newer epoch, or another owner at
// epoch (an empty owner owns nothing); *BehindError when a commit sequence is
// not the one this instance wrote, or the epoch is older than epoch
// (ClaimLost): the database lost commits, or the claim, it acknowledged. The
// caller rolls back either way.
func fence(ctx context.Context, tx pgx.Tx, pipeline, owner string, epoch int64, ps []Position) error {
	topics, parts := make([]string, len(ps)), make([]int32, len(ps))
	seqs := make([]int64, len(ps))
	for i, p := range ps {
		topics[i], parts[i], seqs[i] = p.Topic, p.Partition, p.Seq
	}
	var n int
	err := tx.QueryRow(ctx, `
WITH fenced AS (
    UPDATE stream_positions AS t SET heartbeat_at = now(), commit_seq = t.commit_seq + 1
    FROM (SELECT * FROM unnest($2::text[], $3::integer[], $6::bigint[]) AS u(topic, partition, seq) ORDER BY 1, 2) AS u
    WHERE t.pipeline = $1 AND t.topic = u.topic AND t.partition = u.partition AND t.epoch = $4 AND t.owner = $5
        AND t.commit_seq = u.seq
    RETURNING 1)
SELECT count(*) FROM fenced`, pipeline, topics, parts, epoch, owner, seqs).Scan(&n)
	if err != nil {
		return err
	}
	if n == len(ps) {
		return nil
	}
	return behind(ctx, tx, pipeline, owner, epoch, ps)
}

// behind tells why fence matched fewer rows than ps: ErrFenced when one of
// them is not owner's at epoch, else a *BehindError naming the partitions
// whose stored commit sequence is not the one ps expects.
func behind(ctx context.Context, tx pgx.Tx, pipeline, owner string, epoch int64, ps []Position) error {
	topics, parts := make([]string, len(ps)), make([]int32, len(ps))
	for i, p := range ps {
		topics[i], parts[i] = p.Topic, p.Partition
	}
	type row struct {
		owner    *string
		epoch    int64
		seq      int64
		next     *int64
		consumed *int64
	}
	stored := map[aggregate.PartitionID]row{}
	rows, err := tx.Query(ctx, `
SELECT t.topic, t.partition, t.owner, t.epoch, t.commit_seq, t.next_offset, t.consumed_offset
FROM stream_positions t JOIN unnest($2::text[], $3::integer[]) AS u(topic, partition)
    ON t.topic = u.topic AND t.partition = u.partition
WHERE t.pipeline = $1`, pipeline, topics, parts)
	if err != nil {
		return fmt.Errorf("read the stored commit sequences: %w", err)
	}
	var tp aggregate.PartitionID
	var r row
	if _, err := pgx.ForEachRow(rows, []any{&tp.Topic, &tp.Partition, &r.owner, &r.epoch, &r.seq, &r.next, &r.consumed}, func() error {
		stored[tp] = r
		return nil
	}); err != nil {
		return fmt.Errorf("read the stored commit sequences: %w", err)
	}
	e := &BehindError{Pipeline: pipeline}
	for _, p := range ps {
		r, ok := stored[p.PartitionID]
		switch {
		case !ok: // the claim made the row: the database lost it with the claim
			e.ClaimLost = true
			e.Partitions = append(e.Partitions, Behind{PartitionID: p.PartitionID, WantSeq: p.Seq, NextOffset: -1, ConsumedOffset: -1})
			continue
		case r.epoch > epoch:
			return ErrFenced
		case r.epoch < epoch:
			// Epochs never go down: the database lost the claim of epoch
			// (with the commits after it).
			e.ClaimLost = true
			e.Partitions = append(e.Partitions, Behind{PartitionID: p.PartitionID, Seq: r.seq, WantSeq: p.Seq,
				NextOffset: offsetOr(r.next), ConsumedOffset: offsetOr(r.consumed)})
			continue
		case r.owner == nil || *r.owner != owner:
			return ErrFenced
		}
		if r.seq == p.Seq {
			continue
		}
		e.Partitions = append(e.Partitions, Behind{PartitionID: p.PartitionID, Seq: r.seq, WantSeq: p.Seq,
			NextOffset: offsetOr(r.next), ConsumedOffset: offsetOr(r.consumed)})
	}
	if len(e.Partitions) == 0 { // cannot be: fence matched fewer rows
		return fmt.Errorf("fencing matched fewer partitions than the batch names, yet each is the owner's: %w", ErrFenced)
	}
	return e
}

// BehindError says that the database does not hold what this instance last
// committed: its commit sequence of Partitions is not the one the instance
// wrote (usually lower: commits the database acknowledged were lost, as in a
// failover to an asynchronous replica, a restore from a backup or a
// point-in-time recovery). The commit wrote nothing. The commits lost took
// their offsets with them, so re-reading the stored positions
// (LoadPositions) and consuming again from them counts every event once:
// never write later offsets over the hole.
type BehindError struct {
	Pipeline   string
	Partitions []Behind
	// ClaimLost: the database holds a lower fencing epoch for a partition
	// than the batch's (epochs never go down): it lost this instance's claim
	// too, so the instance must claim again before it replays.
	ClaimLost bool
}

// offsetOr returns *o, or -1 when o is nil (no commit stored).
func offsetOr(o *int64) int64 {
	if o == nil {
		return -1
	}
	return *o
}

// Behind is one partition of a BehindError.
type Behind struct {
	aggregate.PartitionID
	Seq     int64 // the commit sequence the database holds
	WantSeq int64 // the one the instance last read or wrote
	// NextOffset and ConsumedOffset are the stored offsets, -1 when none
	// (the database holds no commit of the partition).
	NextOffset, ConsumedOffset int64
}

func (e *BehindError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "store: the database is behind what pipeline %q committed (lost commits: a failover, a restore):", e.Pipeline)
	for i, p := range e.Partitions {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, " %s commit %d stored, %d written, next offset %d stored", p.PartitionID, p.Seq, p.WantSeq, p.NextOffset)
	}
	return b.String()
}

// mergePositions returns one Position per partition of ps, sorted by topic
// and partition (a fixed lock order), keeping the greatest of each offset:
// two rows of one partition would fail an upsert with 21000.
func mergePositions(ps []Position) []Position {
	merged := map[aggregate.PartitionID]Position{}
	for _, p := range ps {
		if m, ok := merged[p.PartitionID]; ok {
			if m.NextOffset > p.NextOffset || m.NextOffset == p.NextOffset && p.LeaderEpoch < 0 {
				p.LeaderEpoch = m.LeaderEpoch
			}
			p.NextOffset = max(p.NextOffset, m.NextOffset)
			p.ConsumedOffset = max(p.ConsumedOffset, m.ConsumedOffset)
		}
		merged[p.PartitionID] = p
	}
	out := make([]Position, 0, len(merged))
	for _, p := range merged {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	return out
}

// storePositions stores the offsets of ps (never backwards), the leader
// epoch with the next offset it belongs to (leader_epoch_offset; an unknown
// one, -1, never replaces a known one of the same offset), the watermark wm (never
// backwards; zero keeps it) and the idle and drained flags in rows fence
// checked.
func storePositions(ctx context.Context, tx pgx.Tx, pipeline string, wm time.Time, ps []Position) error {
	topics, parts := make([]string, len(ps)), make([]int32, len(ps))
	next, consumed := make([]int64, len(ps)), make([]int64, len(ps))
	idle, drained := make([]bool, len(ps)), make([]bool, len(ps))
	epochs := make([]*int32, len(ps))
	for i, p := range ps {
		topics[i], parts[i], next[i], consumed[i] = p.Topic, p.Partition, p.NextOffset, p.ConsumedOffset
		idle[i], drained[i] = p.Idle, p.Drained
		if p.LeaderEpoch >= 0 {
			epochs[i] = &ps[i].LeaderEpoch
		}
	}
	var w any // NULL keeps the stored watermark
	if !wm.IsZero() {
		w = wm.UTC()
	}
	_, err := tx.Exec(ctx, `
UPDATE stream_positions AS t SET
    leader_epoch = CASE WHEN t.next_offset IS NULL OR u.next_offset > t.next_offset
        OR u.next_offset = t.next_offset AND u.leader_epoch IS NOT NULL THEN u.leader_epoch ELSE t.leader_epoch END,
    leader_epoch_offset = CASE WHEN t.next_offset IS NULL OR u.next_offset > t.next_offset
        OR u.next_offset = t.next_offset AND u.leader_epoch IS NOT NULL THEN u.next_offset ELSE t.leader_epoch_offset END,
    next_offset = GREATEST(t.next_offset, u.next_offset),
    consumed_offset = GREATEST(t.consumed_offset, u.consumed_offset),
    watermark = GREATEST(t.watermark, $6),
    idle = u.idle, drained = u.drained,
    updated_at = now()
FROM unnest($2::text[], $3::integer[], $4::bigint[], $5::bigint[], $7::boolean[], $8::boolean[], $9::integer[])
    AS u(topic, partition, next_offset, consumed_offset, idle, drained, leader_epoch)
WHERE t.pipeline = $1 AND t.topic = u.topic AND t.partition = u.partition`,
		pipeline, topics, parts, next, consumed, w, idle, drained, epochs)
	return err
}
