package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// DeadLetterFilter selects dead letters; zero fields select everything.
type DeadLetterFilter struct {
	Pipeline string // the pipeline whose dead letters; required
	Reason   string // ReasonDecode, ReasonFuture, ReasonLate, ReasonRejected, ReasonImplausible; "" = any
	Topic    string // "" = any
	Pending  bool   // only rows not replayed yet
	Limit    int    // at most this many rows; 0 = no limit
}

func (f DeadLetterFilter) where() (string, []any) {
	conds := []string{"pipeline = $1"}
	args := []any{f.Pipeline}
	if f.Reason != "" {
		args = append(args, f.Reason)
		conds = append(conds, fmt.Sprintf("reason = $%d", len(args)))
	}
	if f.Topic != "" {
		args = append(args, f.Topic)
		conds = append(conds, fmt.Sprintf("topic = $%d", len(args)))
	}
	if f.Pending {
		conds = append(conds, "replayed_at IS NULL")
	}
	return " WHERE " + strings.Join(conds, " AND "), args
}

// StoredDeadLetter is one dead_letters row.
type StoredDeadLetter struct {
	DeadLetter
	CreatedAt  time.Time // UTC
	ReplayedAt time.Time // UTC; zero = never replayed
	ReplayedTo string    // the topic of the replay; "" = never replayed
}

const deadLetterColumns = `topic, partition, "offset", key, value, reason, error, created_at, replayed_at, replayed_to,
	source_topic, source_partition, source_offset`

func scanDeadLetters(rows pgx.Rows) ([]StoredDeadLetter, error) {
	var out []StoredDeadLetter
	for rows.Next() {
		var d StoredDeadLetter
		var at *time.Time
		var to, srcTopic *string
		var srcPart *int32
		var srcOffset *int64
		if err := rows.Scan(&d.Topic, &d.Partition, &d.Offset, &d.Key, &d.Value, &d.Reason, &d.Error,
			&d.CreatedAt, &at, &to, &srcTopic, &srcPart, &srcOffset); err != nil {
			rows.Close()
			return nil, err
		}
		d.CreatedAt = d.CreatedAt.UTC()
		if at != nil {
			d.ReplayedAt = at.UTC()
		}
		if to != nil {
			d.ReplayedTo = *to
		}
		if srcTopic != nil && srcPart != nil && srcOffset != nil {
			d.Source = SourceID{Topic: *srcTopic, Partition: *srcPart, Offset: *srcOffset}
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// DeadLetters returns the rows f selects, by topic, partition and offset.
func (s *Store) DeadLetters(ctx context.Context, f DeadLetterFilter) ([]StoredDeadLetter, error) {
	where, args := f.where()
	q := `SELECT ` + deadLetterColumns + ` FROM dead_letters` + where + ` ORDER BY topic, partition, "offset"`
	if f.Limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", f.Limit)
	}
	var out []StoredDeadLetter
	err := s.do(ctx, func(c *pgx.Conn) error {
		rows, err := c.Query(ctx, q, args...)
		if err != nil {
			return err
		}
		out, err = scanDeadLetters(rows)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: list dead letters: %w", err)
	}
	return out, nil
}

// ReplayBatchSize is how many dead letters one replay transaction locks and sends.
const ReplayBatchSize = 1000

// ReplayDeadLetters hands the dead letters f selects that were never
// replayed to send, in batches of ReplayBatchSize by topic, partition and
// offset, and marks those send reports acknowledged as replayed to topic to,
// so a later replay does not send them again. send returns, per row of its
// batch, whether Kafka acknowledged it, and an error when some did not.
//
// Each batch is one transaction that locks its rows (FOR UPDATE SKIP
// LOCKED), so two replays at once never send a row twice. A crash between
// Kafka's acknowledgement and the COMMIT leaves the rows unmarked: the next
// replay sends them again (at least once, never lost).
//
// It returns how many rows were marked, and stops at the first error.
func (s *Store) ReplayDeadLetters(ctx context.Context, f DeadLetterFilter, to string,
	send func([]StoredDeadLetter) ([]bool, error)) (int, error) {
	if to == "" {
		return 0, errors.New("store: replay dead letters: no target topic")
	}
	f.Pending = true
	marked := 0
	for f.Limit == 0 || marked < f.Limit {
		batch := ReplayBatchSize
		if f.Limit > 0 {
			batch = min(batch, f.Limit-marked)
		}
		n, sent, err := s.replayBatch(ctx, f, to, batch, send)
		marked += n
		if err != nil {
			return marked, err
		}
		if sent < batch {
			break // nothing left
		}
	}
	return marked, nil
}

func (s *Store) replayBatch(ctx context.Context, f DeadLetterFilter, to string, limit int,
	send func([]StoredDeadLetter) ([]bool, error)) (marked, selected int, err error) {
	where, args := f.where()
	q := `SELECT ` + deadLetterColumns + ` FROM dead_letters` + where +
		fmt.Sprintf(` ORDER BY topic, partition, "offset" LIMIT %d FOR UPDATE SKIP LOCKED`, limit)
	var sendErr error
	err = s.do(ctx, func(c *pgx.Conn) error {
		marked, selected, sendErr = 0, 0, nil
		return pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, q, args...)
			if err != nil {
				return err
			}
			dls, err := scanDeadLetters(rows)
			if err != nil {
				return err
			}
			selected = len(dls)
			if selected == 0 {
				return nil
			}
			acked, err := send(dls)
			sendErr = err
			var topics []string
			var parts []int32
			var offsets []int64
			for i, d := range dls {
				if i < len(acked) && acked[i] {
					topics, parts, offsets = append(topics, d.Topic), append(parts, d.Partition), append(offsets, d.Offset)
				}
			}
			if len(topics) == 0 {
				return nil
			}
			tag, err := tx.Exec(ctx, `UPDATE dead_letters d SET replayed_at = now(), replayed_to = $4
				FROM unnest($1::text[], $2::integer[], $3::bigint[]) AS u(topic, partition, "offset")
				WHERE d.pipeline = $5 AND d.topic = u.topic AND d.partition = u.partition AND d."offset" = u."offset"`,
				topics, parts, offsets, to, f.Pipeline)
			if err != nil {
				return err
			}
			marked = int(tag.RowsAffected())
			return nil
		})
	})
	if err != nil {
		return 0, selected, fmt.Errorf("store: replay dead letters to %s: %w", to, err)
	}
	if sendErr != nil {
		return marked, selected, fmt.Errorf("store: replay dead letters to %s: %d of %d acknowledged: %w", to, marked, selected, sendErr)
	}
	return marked, selected, nil
}
