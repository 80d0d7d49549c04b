package consumer

import (
	"testing"
	"time"

	"github.com/ovstream/ovstream/aggregate"
)

// dequeModel is the ledger written the plain way docs/design.md "Offset ledger"
// defines it: per partition, a deque of every consumed record not yet
// released, in offset order, each either in a window (durable once the
// watermark reaches the window's end) or not (durable at the next commit).
// The committable offset is one past the longest durable prefix: the offset of
// the first record that is not durable, else one past the last consumed.
// Memory per message, no cleverness: the reference the Ledger must match.
type dequeModel struct {
	parts map[aggregate.PartitionID]*modelPart
}

type modelPart struct {
	consumed int64 // one past the last consumed offset, or the start
	deque    []modelEntry
}

type modelEntry struct {
	offset    int64
	inWindow  bool
	windowEnd time.Time
}

func (e modelEntry) durable(watermark time.Time) bool {
	return !e.inWindow || !e.windowEnd.After(watermark)
}

func (m *dequeModel) assign(p aggregate.PartitionID, start int64) {
	m.parts[p] = &modelPart{consumed: start}
}

func (m *dequeModel) add(p aggregate.PartitionID, e modelEntry) {
	mp := m.parts[p]
	mp.deque = append(mp.deque, e)
	mp.consumed = e.offset + 1
}

func (m *dequeModel) committable(p aggregate.PartitionID, watermark time.Time) int64 {
	mp := m.parts[p]
	for _, e := range mp.deque {
		if !e.durable(watermark) {
			return e.offset
		}
	}
	return mp.consumed
}

// release pops the durable prefix of every partition: what a successful
// commit at watermark made durable.
func (m *dequeModel) release(watermark time.Time) {
	for _, mp := range m.parts {
		i := 0
		for i < len(mp.deque) && mp.deque[i].durable(watermark) {
			i++
		}
		mp.deque = mp.deque[i:]
	}
}

// FuzzLedger drives the Ledger and the deque model with the same sequence of
// consumed records (positions, dead letters, predictions in windows that may
// arrive out of order), gaps in offsets, rising watermarks, commits that
// succeed (release) or fail (no release), and requires the same committable
// offset for every partition after every step; the committable offset never
// passes a record whose window is still open, never passes the consumed
// offset, and never moves backwards from one successful commit to the next.
//
// Each input byte pair is one step: op = b[0] % 8, arg = b[1].
func FuzzLedger(f *testing.F) {
	f.Add([]byte{0, 0, 1, 5, 2, 3, 4, 1, 5, 0})
	f.Add([]byte{1, 1, 1, 2, 1, 9, 0, 0, 4, 2, 5, 0, 1, 3, 4, 9, 5, 0})
	f.Add([]byte{1, 200, 0, 1, 1, 200, 4, 1, 6, 0, 5, 0, 1, 7, 1, 8, 3, 40, 4, 255, 5, 0})
	f.Add([]byte{2, 7, 1, 1, 1, 0, 1, 4, 7, 3, 4, 3, 6, 0, 4, 3, 5, 0, 7, 9})
	parts := []aggregate.PartitionID{
		{Topic: "arrival_predictions", Partition: 0},
		{Topic: "arrival_predictions", Partition: 1},
		{Topic: "vehicle_positions", Partition: 0},
	}
	base := time.Date(2016, 5, 18, 19, 0, 0, 0, time.UTC)
	const window = 5 * time.Minute
	f.Fuzz(func(t *testing.T, ops []byte) {
		led := NewLedger()
		model := &dequeModel{parts: map[aggregate.PartitionID]*modelPart{}}
		next := map[aggregate.PartitionID]int64{}
		for i, p := range parts {
			start := int64(i * 1000)
			led.Assign(p, start)
			model.assign(p, start)
			next[p] = start
		}
		watermark := base                              // never decreases, as aggregate.Watermark
		committed := map[aggregate.PartitionID]int64{} // last committed offset per partition
		for p := range next {
			committed[p] = next[p]
		}
		check := func(step int, what string) {
			t.Helper()
			for _, p := range parts {
				got, want := led.Committable(p, watermark), model.committable(p, watermark)
				if got != want {
					t.Fatalf("step %d (%s), %s at watermark %s: ledger committable %d, deque model %d",
						step, what, p, watermark.Format("15:04:05"), got, want)
				}
				if c := led.ConsumedOffset(p); got > c {
					t.Fatalf("step %d (%s), %s: committable %d passes consumed offset %d", step, what, p, got, c)
				}
				for _, e := range model.parts[p].deque {
					if e.offset >= got {
						break
					}
					if !e.durable(watermark) {
						t.Fatalf("step %d (%s), %s: committable %d passes offset %d of the open window ending %s",
							step, what, p, got, e.offset, e.windowEnd.Format("15:04:05"))
					}
				}
			}
		}
		for i := 0; i+1 < len(ops); i += 2 {
			op, arg := ops[i]%8, ops[i+1]
			p := parts[int(arg)%len(parts)]
			switch op {
			case 0, 1, 2: // a prediction in an open window, possibly out of order
				off := next[p] + int64(arg%3) // gaps: compaction, transaction markers
				end := watermark.Truncate(window).Add(window * time.Duration(1+int(arg/3)%6))
				if op == 2 {
					// out of order inside the partition: an earlier window
					// that is still open, or already finalized (the run loop
					// never puts such an event in a window, the ledger must
					// not care)
					end = watermark.Truncate(window).Add(window * time.Duration(int(arg/3)%3-1))
				}
				led.InWindow(p, off, end)
				model.add(p, modelEntry{offset: off, inWindow: true, windowEnd: end})
				next[p] = off + 1
			case 3: // a position, dead letter, late or replayed event: no window
				off := next[p] + int64(arg%4)
				led.Consumed(p, off)
				model.add(p, modelEntry{offset: off})
				next[p] = off + 1
			case 4: // the watermark rises
				watermark = watermark.Add(time.Duration(arg) * 7 * time.Second)
			case 5, 6: // a commit at the watermark succeeds: record, then release
				for _, q := range parts {
					c := led.Committable(q, watermark)
					if c < committed[q] {
						t.Fatalf("step %d: %s committable %d is behind the last committed %d", i/2, q, c, committed[q])
					}
					committed[q] = c
				}
				led.Release(watermark)
				model.release(watermark)
			case 7: // a commit fails: nothing is released
			}
			check(i/2, [...]string{"in window", "in window", "out of order", "no window", "watermark",
				"commit", "commit", "failed commit"}[op])
		}
		// Every window finalized: everything consumed is committable.
		watermark = watermark.Add(24 * time.Hour)
		check(len(ops)/2, "final")
		for _, p := range parts {
			if got, want := led.Committable(p, watermark), led.ConsumedOffset(p); got != want {
				t.Fatalf("%s: every window finalized, committable %d, want consumed offset %d", p, got, want)
			}
		}
		led.Release(watermark)
		if n := led.OpenEntries(); n != 0 {
			t.Fatalf("%d open entries after every window was released", n)
		}
	})
}
