package consumer

// latest holds the newest row per key of one latest-state table
// (trip_delay_latest by trip id, vehicle_latest by vehicle id) between two
// commits. Each record costs one map lookup of its key (two for a key new
// since the last commit), the rows sit in a slice that the commit takes as
// it is, and the index keeps its room across commits, so it does not grow
// again from empty after each one. The zero value is not usable: newLatest.
type latest[T any] struct {
	index map[string]int32 // key -> position in rows
	rows  []T
}

func newLatest[T any]() *latest[T] { return &latest[T]{index: map[string]int32{}} }

// put keeps row for key when key has no row yet, or when replace says the
// row held (old) is to be replaced by it.
func (b *latest[T]) put(key string, row T, replace func(old *T) bool) {
	if i, ok := b.index[key]; ok {
		if replace(&b.rows[i]) {
			b.rows[i] = row
		}
		return
	}
	b.index[key] = int32(len(b.rows))
	b.rows = append(b.rows, row)
}

// get returns the row held for key, the zero T and false when none.
func (b *latest[T]) get(key string) (T, bool) {
	i, ok := b.index[key]
	if !ok {
		var zero T
		return zero, false
	}
	return b.rows[i], true
}

// take returns the rows held, in the order their keys first came, and
// empties b. The caller owns the slice.
func (b *latest[T]) take() []T {
	rows := b.rows
	b.rows = make([]T, 0, len(rows))
	clear(b.index)
	return rows
}
