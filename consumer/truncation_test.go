package consumer

import (
	"strings"
	"testing"

	"github.com/ovstream/ovstream/aggregate"
)

// The rule of Kafka's consumer (SubscriptionState.maybeCompleteValidation),
// case by case: an end offset at or above the position validates it; below
// it, or an answer without epoch or offset, is a truncation.
func TestTruncationRule(t *testing.T) {
	tp := aggregate.PartitionID{Topic: "p", Partition: 2}
	for _, c := range []struct {
		next int64
		end  epochEnd
		want int64 // EndOffset of the error; -2 for none
	}{
		{100, epochEnd{offset: 100, epoch: 3}, -2}, // the current epoch's log end offset, or the next epoch starts at the position
		{100, epochEnd{offset: 250, epoch: 3}, -2},
		{100, epochEnd{offset: 60, epoch: 3}, 60}, // a later epoch starts at 60: [60, 100) diverged
		{100, epochEnd{offset: 60, epoch: 1}, 60}, // answered for an older epoch, below the position
		{100, epochEnd{offset: 400, epoch: 1}, -2},
		{100, epochEnd{offset: -1, epoch: -1}, -1}, // the broker does not know the epoch
		{100, epochEnd{offset: 80, epoch: -1}, -1},
	} {
		e := truncation(tp, c.next, 3, c.end, false)
		switch {
		case c.want == -2 && e != nil:
			t.Errorf("next %d, answer %+v: %v, want none", c.next, c.end, e)
		case c.want != -2 && (e == nil || e.EndOffset != c.want):
			t.Errorf("next %d, answer %+v: %v, want a truncation with end offset %d", c.next, c.end, e, c.want)
		}
	}
	e := truncation(tp, 100, 3, epochEnd{offset: 60, epoch: 3}, false)
	want := "p/2: the log was truncated below the stored offset 100 (KIP-320): the broker's end offset for leader epoch 3 is 60"
	if !strings.HasPrefix(e.Error(), want) {
		t.Errorf("message %q, want it to start %q", e.Error(), want)
	}
	for _, c := range []struct {
		policy   string
		end      int64
		from     int64
		endEpoch int32
	}{
		{"earliest", 60, 60, 3}, {"latest", 60, 60, 3}, // Kafka: the first offset known to diverge, whatever the policy
		{"earliest", 5, 10, 3},                            // not below the log start
		{"earliest", -1, 10, -1}, {"latest", -1, 500, -1}, // unknown epoch: reset per policy
	} {
		e := &LogTruncationError{PartitionID: tp, Offset: 100, LeaderEpoch: 3, EndOffset: c.end, EndEpoch: 3}
		if c.end < 0 {
			e.EndEpoch = -1
		}
		if from, ep := resumeAt(c.policy, 10, 500, e); from != c.from || ep != c.endEpoch {
			t.Errorf("%s, end offset %d: resume at %d epoch %d, want %d epoch %d", c.policy, c.end, from, ep, c.from, c.endEpoch)
		}
	}
}

// The epoch a commit stores with next is the one the last record below next
// was read under: the stored one until a record is consumed, then each
// batch's.
func TestLedgerCommittableEpoch(t *testing.T) {
	p := aggregate.PartitionID{Topic: "p", Partition: 0}
	l := NewLedger()
	l.Assign(p, 40)
	if e := l.CommittableEpoch(p, 40); e != -1 {
		t.Fatalf("nothing stored, nothing consumed: epoch %d, want -1", e)
	}
	l = NewLedger()
	l.Assign(p, 40)
	l.Epoch(p, belowStart, 2)
	l.Epoch(p, 40, 2) // same epoch: no new run
	l.Epoch(p, 50, 4)
	l.Epoch(p, 70, 5)
	for _, c := range []struct {
		next int64
		want int32
	}{{40, 2}, {41, 2}, {50, 2}, {51, 4}, {70, 4}, {71, 5}, {1000, 5}} {
		if e := l.CommittableEpoch(p, c.next); e != c.want {
			t.Errorf("next %d: epoch %d, want %d", c.next, e, c.want)
		}
	}
	if n := len(l.parts[p].epochs); n != 1 {
		t.Errorf("%d epoch runs kept, want 1 (the ones below the committable offset are forgotten)", n)
	}
}
