package dlq

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/ovstream/ovstream/consumer/crashpoint"
	"github.com/ovstream/ovstream/feed/produce"
	"github.com/ovstream/ovstream/store"
)

// Replay re-produces the dead letters of filter not replayed yet to topic to
// with cfg (an idempotent producer, acks=all: produce.NewSaramaConfig), with
// the headers of Headers, and marks in st each row Kafka acknowledged
// (dead_letters.replayed_at, replayed_to), so that a second replay does not
// send it again (store.ReplayDeadLetters). It returns how many were marked;
// the error is the producer's or the database's.
func Replay(ctx context.Context, st *store.Store, filter store.DeadLetterFilter, to string, intoFinal bool, cfg produce.Config) (int, error) {
	return st.ReplayDeadLetters(ctx, filter, to, func(dls []store.StoredDeadLetter) ([]bool, error) {
		acked := make([]bool, len(dls))
		var mu sync.Mutex
		i := 0
		_, err := produce.Send(ctx, cfg, func() (produce.Message, bool) {
			if i == len(dls) {
				return produce.Message{}, false
			}
			d, idx := dls[i], i
			i++
			return produce.Message{Topic: to, Key: d.Key, Value: d.Value, Headers: Headers(d, intoFinal),
				Ack: func(err error) {
					mu.Lock()
					acked[idx] = err == nil
					mu.Unlock()
				}}, true
		})
		crashpoint.Hit(crashpoint.ReplayAcked)
		mu.Lock()
		defer mu.Unlock()
		return acked, err
	})
}

// Headers are the headers of the copy of d (store/replayed.go): its
// source, kept from the copy d was itself replayed from, its reason, and
// whether it may be merged into a final window: rejected and future dead
// letters arrived on time (a constraint refused their rows; the producer's
// clock was ahead), late and decode ones only with intoFinal.
func Headers(d store.StoredDeadLetter, intoFinal bool) []produce.Header {
	src := d.Source
	if src.IsZero() {
		src = store.SourceID{Topic: d.Topic, Partition: d.Partition, Offset: d.Offset}
	}
	hs := []produce.Header{
		{Key: []byte(store.HeaderSource), Value: []byte(src.String())},
		{Key: []byte(store.HeaderReason), Value: []byte(d.Reason)},
	}
	if d.Reason == store.ReasonRejected || d.Reason == store.ReasonFuture || intoFinal {
		hs = append(hs, produce.Header{Key: []byte(store.HeaderFinal), Value: []byte(store.FinalMerge)})
	}
	return hs
}

// preview shows at most 120 bytes of b: as text when it is valid UTF-8
// without control characters, else quoted with escapes.
func preview(b []byte) string {
	if b == nil {
		return "(null)"
	}
	cut := b
	more := ""
	if len(cut) > 120 {
		cut, more = cut[:120], "..."
	}
	s := string(cut)
	if !utf8.Valid(cut) || containsControl(s) {
		return strconv.Quote(s) + more
	}
	return s + more
}

func containsControl(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return true
		}
	}
	return false
}

// PrintText prints dls for a reader: per row its source, reason, when
// stored and replayed, the error, and a preview of key and value (at most 120
// bytes each, quoted when not printable text); then the count.
func PrintText(w io.Writer, dls []store.StoredDeadLetter) {
	for _, d := range dls {
		replayed := "not replayed"
		if !d.ReplayedAt.IsZero() {
			replayed = "replayed to " + d.ReplayedTo + " at " + d.ReplayedAt.Format(time.RFC3339)
		}
		if !d.Source.IsZero() {
			replayed += ", a copy of " + d.Source.String()
		}
		fmt.Fprintf(w, "%s/%d/%d %s stored %s, %s\n  error: %s\n  key:   %s\n  value: %s\n",
			d.Topic, d.Partition, d.Offset, d.Reason, d.CreatedAt.Format(time.RFC3339), replayed,
			d.Error, preview(d.Key), preview(d.Value))
	}
	fmt.Fprintf(w, "%d dead letters\n", len(dls))
}

// JSON is one line of `dlq list --json`; key and value are base64 ([]byte).
type JSON struct {
	Topic      string     `json:"topic"`
	Partition  int32      `json:"partition"`
	Offset     int64      `json:"offset"`
	Reason     string     `json:"reason"`
	Error      string     `json:"error"`
	Key        []byte     `json:"key"`
	Value      []byte     `json:"value"`
	CreatedAt  time.Time  `json:"created_at"`
	ReplayedAt *time.Time `json:"replayed_at"`
	ReplayedTo *string    `json:"replayed_to"`
	Source     *string    `json:"source"` // topic/partition/offset of the record a copy was replayed from; null: none
}

// PrintJSON prints dls as one JSON object per line (type JSON): every
// column, key and value base64-encoded, byte for byte.
func PrintJSON(w io.Writer, dls []store.StoredDeadLetter) error {
	enc := json.NewEncoder(w)
	for _, d := range dls {
		j := JSON{Topic: d.Topic, Partition: d.Partition, Offset: d.Offset, Reason: d.Reason, Error: d.Error,
			Key: d.Key, Value: d.Value, CreatedAt: d.CreatedAt}
		if !d.ReplayedAt.IsZero() {
			j.ReplayedAt = &d.ReplayedAt
		}
		if d.ReplayedTo != "" {
			j.ReplayedTo = &d.ReplayedTo
		}
		if !d.Source.IsZero() {
			src := d.Source.String()
			j.Source = &src
		}
		if err := enc.Encode(j); err != nil {
			return err
		}
	}
	return nil
}
