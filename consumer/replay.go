package consumer

import (
	"context"
	"fmt"
	"sort"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/store"
)

// Replay after a restart (docs/design.md "Replay after a restart", G9). Every
// partition is sought to its stored next_offset; the records in
// [next_offset, consumed_offset) were consumed before the restart, and each
// got one verdict then, committed with consumed_offset in one transaction:
//   - dead-lettered (decode, future, late, rejected): skipped now, whatever
//     the wall clock says, so it is never also counted nor dead-lettered and
//     counted in the metrics twice;
//   - counted: counted again if its window is still open (even if the clock
//     now calls it future), skipped if its window was written (classify).
//
// A record is counted once or dead-lettered once, never both, never twice.

// loadReplay reads, for every partition that replays, the offsets of its
// dead letters in [next_offset, consumed_offset).
func (l *loop) loadReplay(ctx context.Context) error {
	var ranges []store.OffsetRange
	for tp, p := range l.parts {
		if from := l.stored[tp].NextOffset; from < p.replayUntil {
			ranges = append(ranges, store.OffsetRange{PartitionID: tp, From: from, To: p.replayUntil})
		}
	}
	l.deadBefore = nil
	return retry(ctx, l.cfg, "load dead-letter offsets to replay", func() (err error) {
		err = l.db.do(func(st *store.Store) (err error) {
			l.deadBefore, err = st.DeadLetterOffsets(ctx, l.cfg.Pipeline, ranges)
			return err
		})
		if err != nil {
			return fmt.Errorf("consumer: %w", err)
		}
		return nil
	})
}

// replaying tells whether r was consumed before the restart: its offset is
// below the stored consumed_offset.
func (l *loop) replaying(r *record) bool {
	return r.offset < l.parts[r.tp].replayUntil
}

// deadLetteredBefore tells whether the replayed record at offset of tp was
// dead-lettered before the restart. Offsets are ascending and sorted.
func (l *loop) deadLetteredBefore(tp aggregate.PartitionID, offset int64) bool {
	offs := l.deadBefore[tp]
	i := sort.Search(len(offs), func(i int) bool { return offs[i] >= offset })
	return i < len(offs) && offs[i] == offset
}

// skipDeadLettered handles r, a record consumed before the restart, if it
// was dead-lettered then: it is skipped without a new dead letter, metric or
// count in the windows (only Summary.ReplayedDead counts it). It reports
// whether r was handled so.
func (l *loop) skipDeadLettered(r *record) bool {
	if !l.deadLetteredBefore(r.tp, r.offset) {
		return false
	}
	l.sum.ReplayedDead++
	l.led.Consumed(r.tp, r.offset)
	return true
}
