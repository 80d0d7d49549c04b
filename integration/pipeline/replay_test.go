//go:build integration

package pipeline

import (
	"fmt"
	"testing"
	"time"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/consumer"
	"github.com/ovstream/ovstream/integration/harness"
	"github.com/ovstream/ovstream/store"
)

// clockCase is a run stopped with SIGTERM after it consumed every record of
// phases, the wall clock stepping by jump, and a run --drain.
type clockCase struct {
	phases       func(base time.Time) [][][]byte // groups of records produced one after the other
	skew         time.Duration                   // max future skew of both runs
	jump         time.Duration                   // the clock's step between the runs
	idleFinalize bool                            // of the second run
	dead         map[int64]string                // the dead letters at the end, offset -> reason
}

func (c clockCase) run(t *testing.T) {
	addr := harness.OnePartitionBroker(t)
	db := harness.FreshDB(t)
	clock := &harness.SkewClock{}
	base := clock.Now().Truncate(time.Second)
	first := harness.RunInProcess(t, db, addr, clock, consumer.Config{MaxFutureSkew: c.skew})
	produced := int64(0)
	for _, group := range c.phases(base) {
		harness.ProduceToZero(t, addr, group...)
		produced += int64(len(group))
		harness.WaitFor(t, time.Minute, fmt.Sprintf("a commit of consumed offset %d", produced),
			func() bool { return harness.StoredConsumed(t, db) == produced })
	}
	sum1 := first.Stop(t)

	clock.Jump(c.jump)
	second := harness.RunInProcess(t, db, addr, clock, consumer.Config{MaxFutureSkew: c.skew, Drain: true,
		IdleFinalize: c.idleFinalize})
	sum2 := second.Wait(t, 2*time.Minute)

	harness.CheckOnce(t, db, addr, c.dead)
	// New dead letters only: the restart replays old ones without counting them.
	if n := harness.Total(sum1.DeadLetters) + harness.Total(sum2.DeadLetters); n != len(c.dead) {
		t.Errorf("summaries count %d + %d dead letters (%v then %v), want %d, each once",
			harness.Total(sum1.DeadLetters), harness.Total(sum2.DeadLetters), sum1.DeadLetters, sum2.DeadLetters, len(c.dead))
	}
	// Here every dead letter lies in the replayed range [next_offset, consumed_offset).
	if sum2.ReplayedDead != int64(len(c.dead)) {
		t.Errorf("the restart met %d earlier dead letters, want %d", sum2.ReplayedDead, len(c.dead))
	}
	if got, want := second.NewDeadLetters(), harness.Total(sum2.DeadLetters); got != want {
		t.Errorf("ovstream_dead_letters_total of the restart = %d, summary %d", got, want)
	}
}

// Verdicts kept across a restart while the clock moves: offset 0 an event 60 s old (its window stays
// open), offset 1 an event 25 s ahead with max future skew 10 s
// (dead-lettered future), offset 2 undecodable; SIGTERM; the clock moves 20
// s; run --drain. The event at offset 1 is no longer ahead of the clock, but
// it was dead-lettered before: it must not be counted too, and neither dead
// letter is counted again.
func TestReplayKeepsDeadLetterVerdict(t *testing.T) {
	clockCase{
		phases: func(base time.Time) [][][]byte {
			return [][][]byte{{harness.Pred("t0", "L", "S", "AT", 60, harness.Rfc(base.Add(-60*time.Second))),
				harness.Pred("t1", "L", "S", "AT", 25, harness.Rfc(base.Add(25*time.Second))), []byte("not json")}}
		},
		skew: 10 * time.Second,
		jump: 20 * time.Second,
		dead: map[int64]string{1: store.ReasonFuture, 2: store.ReasonDecode},
	}.run(t)
}

// The clock jumps between a SIGTERM and the restart, forward and backward:
// every record below the stored consumed_offset keeps its first verdict.
func TestReplayAcrossClockJumps(t *testing.T) {
	open2 := func(base time.Time) [][][]byte { // two events whose window stays open
		return [][][]byte{{harness.Pred("t0", "L", "S", "AT", 60, harness.Rfc(base.Add(-60*time.Second))),
			harness.Pred("t1", "L", "S", "AT", 30, harness.Rfc(base.Add(-30*time.Second)))}}
	}
	cases := map[string]clockCase{
		// Still ahead of the clock: not dead-lettered (or counted in a metric) again.
		"future, then the clock goes back": {
			phases: func(base time.Time) [][][]byte {
				return [][][]byte{{harness.Pred("t0", "L", "S", "AT", 60, harness.Rfc(base.Add(-60*time.Second))),
					harness.Pred("t1", "L", "S", "AT", 25, harness.Rfc(base.Add(25*time.Second)))}}
			},
			skew: 10 * time.Second, jump: -time.Hour,
			dead: map[int64]string{1: store.ReasonFuture},
		},
		// Counted in a window still open: counted again, though the clock now calls it future.
		"counted, then the clock goes back": {
			phases: open2, skew: 10 * time.Second, jump: -time.Hour, dead: map[int64]string{},
		},
		// Counted, then the clock jumps an hour ahead with a processing-time
		// watermark: still counted, never late.
		"counted, then the clock goes forward": {
			phases: open2, skew: 10 * time.Second, jump: time.Hour, idleFinalize: true, dead: map[int64]string{},
		},
		// Out of order: offset 2 is late (its window was written), offset
		// 3 undecodable, while offset 0 holds the committable offset; the
		// clock goes back, so offsets 0 and 1 now look future.
		"late and decode, then the clock goes back": {
			phases: func(base time.Time) [][][]byte {
				ws := base.Add(-15 * time.Minute).Truncate(5 * time.Minute)
				return [][][]byte{
					{harness.Pred("t0", "L", "S", "AT", 1, harness.Rfc(ws.Add(4*time.Minute))), harness.Pred("t1", "L", "S", "AT", 2, harness.Rfc(ws.Add(6*time.Minute)))},
					{harness.Pred("t2", "L", "S", "AT", 3, harness.Rfc(ws.Add(-time.Minute))), []byte(`{"trip_id":"t3"}`)},
				}
			},
			skew: 10 * time.Second, jump: -time.Hour,
			dead: map[int64]string{2: store.ReasonLate, 3: store.ReasonDecode},
		},
	}
	for name, c := range cases {
		t.Run(name, c.run)
	}
}

// DeadLetterOffsets reads the offsets in each range of the pipeline's own
// dead letters, ascending, whatever their reason, and nothing else.
func TestStoreDeadLetterOffsets(t *testing.T) {
	ctx := harness.TestCtx(t)
	s, url, _ := harness.OpenStore(t)
	n := harness.Query[int64](t, url, `WITH ins AS (INSERT INTO dead_letters (pipeline, topic, partition, "offset", reason, error)
		VALUES ('p', 't', 0, 7, 'late', ''), ('p', 't', 0, 1, 'decode', ''), ('p', 't', 0, 5, 'rejected', ''),
		('p', 't', 0, 3, 'future', ''), ('p', 't', 1, 2, 'decode', ''), ('q', 't', 0, 4, 'decode', '')
		RETURNING 1) SELECT count(*) FROM ins`)
	if n != 6 {
		t.Fatalf("inserted %d dead letters", n)
	}
	tp1 := aggregate.PartitionID{Topic: "t", Partition: 1}
	tp2 := aggregate.PartitionID{Topic: "t", Partition: 2}
	got, err := s.DeadLetterOffsets(ctx, "p", []store.OffsetRange{
		{PartitionID: harness.Tp0, From: 3, To: 7}, {PartitionID: tp1, From: 0, To: 2}, {PartitionID: tp2, From: 0, To: 100}})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(map[aggregate.PartitionID][]int64{harness.Tp0: {3, 5}}) {
		t.Fatalf("dead-letter offsets %v, want t/0: [3 5] only", got)
	}
	if got, err := s.DeadLetterOffsets(ctx, "p", nil); err != nil || len(got) != 0 {
		t.Fatalf("no ranges: %v, %v", got, err)
	}
}
