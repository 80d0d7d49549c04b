package aggregate

import (
	"math"
	"math/big"
	"math/bits"
	"slices"
)

// Stats accumulates the delays, in seconds, of one delay_aggregates row:
// count, arithmetic mean, exact quantiles, min, max and the operator.
//
// Every statistic is a function of the distribution (value -> count) alone,
// never of the order the delays came in, so the partial aggregates of one
// row kept apart (per source partition) merge into the row one Stats fed
// every delay gives, bit for bit (Merge).
//
// It keeps value -> count, so its memory grows with the distinct delay values,
// not with the number of events (delays are whole seconds in practice). Most
// rows of real data hold one to a few distinct values (a station sees one or
// two predictions per window), so the first smallValues are kept inline,
// sorted, without a map; a map takes over beyond that. The zero value is an
// empty Stats ready to use. It is not safe for concurrent use.
type Stats struct {
	n          int64
	min, max   float64
	operator   string
	multipleOp bool
	nSmall     uint8                   // values in small, when counts is nil
	small      [smallValues]valueCount // sorted by value
	counts     *valueTable             // every value, once more than smallValues are distinct
}

// smallValues is how many distinct values a Stats holds without a map.
const smallValues = 4

type valueCount struct {
	v float64
	n int64
}

// Add counts one delay (seconds, finite; the decoder guarantees it) of an event
// of the given operator.
func (s *Stats) Add(delay float64, operator string) {
	if delay == 0 {
		delay = 0 // one key for -0 and +0, which compare equal
	}
	s.addValue(delay)
	if s.n == 0 {
		s.min, s.max, s.operator = delay, delay, operator
	} else {
		s.min = math.Min(s.min, delay)
		s.max = math.Max(s.max, delay)
		if operator != s.operator {
			s.multipleOp = true
		}
	}
	s.n++
}

func (s *Stats) addValue(v float64) {
	if s.counts != nil {
		s.counts.add(v, 1)
		return
	}
	k := int(s.nSmall)
	i := 0
	for i < k && s.small[i].v < v {
		i++
	}
	if i < k && s.small[i].v == v {
		s.small[i].n++
		return
	}
	if k < smallValues {
		copy(s.small[i+1:k+1], s.small[i:k])
		s.small[i] = valueCount{v, 1}
		s.nSmall++
		return
	}
	s.counts = newValueTable(4 * smallValues)
	for _, vc := range s.small[:k] {
		s.counts.add(vc.v, vc.n)
	}
	s.counts.add(v, 1)
	s.nSmall = 0
}

// valueTable maps value -> count: open addressing with linear probing, a
// power-of-two number of slots at most half full, each slot a value and its
// count side by side (one cache line per probe); a count of 0 marks a free
// slot. For the rows with many distinct values (network, operator, busy
// lines) it is several times cheaper per event than a Go map.
type valueTable struct {
	slots []valueCount
	shift uint // 64 - log2(len(slots))
	n     int  // values held
}

func newValueTable(slots int) *valueTable {
	t := &valueTable{}
	t.resize(slots)
	return t
}

func (t *valueTable) resize(slots int) {
	t.slots = make([]valueCount, slots)
	t.shift = uint(64 - bits.TrailingZeros(uint(slots)))
	t.n = 0
}

// selectRanks returns the values at ranks lo and hi (0-based, lo <= hi <=
// lo+1, hi < total count) of the multiset vcs, in any order, which it
// reorders: a weighted quickselect for lo, O(distinct values) where sorting
// them would be O(d log d), then one scan for hi.
func selectRanks(vcs []valueCount, lo, hi int64) (loV, hiV float64) {
	rank := lo
	part := vcs
	for {
		if len(part) == 1 {
			loV = part[0].v
			break
		}
		pivot := part[len(part)/2].v
		// Three-way partition: [< pivot | == pivot | > pivot].
		lt, i, gt := 0, 0, len(part)
		for i < gt {
			switch v := part[i].v; {
			case v < pivot:
				part[lt], part[i] = part[i], part[lt]
				lt++
				i++
			case v > pivot:
				gt--
				part[i], part[gt] = part[gt], part[i]
			default:
				i++
			}
		}
		var below, equal int64
		for _, vc := range part[:lt] {
			below += vc.n
		}
		for _, vc := range part[lt:gt] {
			equal += vc.n
		}
		switch {
		case rank < below:
			part = part[:lt]
		case rank < below+equal:
			loV = pivot
			part = nil
		default:
			rank -= below + equal
			part = part[gt:]
		}
		if part == nil {
			break
		}
	}
	if hi == lo {
		return loV, loV
	}
	// hi = lo+1: still loV if more of loV follow rank lo, else the next value.
	var atOrBelow int64
	next, haveNext := 0.0, false
	for _, vc := range vcs {
		switch {
		case vc.v <= loV:
			atOrBelow += vc.n
		case !haveNext || vc.v < next:
			next, haveNext = vc.v, true
		}
	}
	if hi < atOrBelow {
		return loV, loV
	}
	return loV, next
}

// add adds n to the count of v.
func (t *valueTable) add(v float64, n int64) {
	if 2*(t.n+1) > len(t.slots) {
		old := t.slots
		t.resize(2 * len(old))
		for _, vc := range old {
			if vc.n != 0 {
				t.add(vc.v, vc.n)
			}
		}
	}
	mask := len(t.slots) - 1
	for i := int((math.Float64bits(v) * 0x9e3779b97f4a7c15) >> t.shift); ; i = (i + 1) & mask {
		sl := &t.slots[i]
		switch {
		case sl.n == 0:
			*sl = valueCount{v, n}
			t.n++
			return
		case sl.v == v:
			sl.n += n
			return
		}
	}
}

// Count returns the number of delays added.
func (s *Stats) Count() int64 { return s.n }

// Distinct returns the number of distinct delay values held.
func (s *Stats) Distinct() int {
	if s.counts != nil {
		return s.counts.n
	}
	return int(s.nSmall)
}

// Mean returns the arithmetic mean in seconds: the sum of the delays, exact
// and rounded once to float64, divided by the count; NaN when empty.
//
// For whole-second delays (the contract's practice) the float64 sum is exact
// in any order, so this is PostgreSQL's avg(float8) (its running float8 sum
// divided by the count) bit for bit. For fractional delays a running sum
// depends on the order of the rows, which neither Kafka across partitions
// nor a table scan fixes; the exactly rounded sum does not, and lies within
// rounding of any order's.
func (s *Stats) Mean() float64 {
	if s.n == 0 {
		return math.NaN()
	}
	return s.Sum() / float64(s.n)
}

// Sum returns the sum of the delays in seconds, exact and rounded once to
// float64 (ties to even); 0 when empty.
func (s *Stats) Sum() float64 {
	if s.counts == nil {
		return exactSum(s.small[:s.nSmall], s.n)
	}
	if sum, ok := s.counts.wholeSum(s.n); ok {
		return sum
	}
	return exactSum(s.counts.values(), s.n)
}

// values returns the table's values and counts, in no particular order.
func (t *valueTable) values() []valueCount {
	vcs := make([]valueCount, 0, t.n)
	for _, vc := range t.slots {
		if vc.n != 0 {
			vcs = append(vcs, vc)
		}
	}
	return vcs
}

// wholeSum is exactSum's fast path over the table, without a copy.
func (t *valueTable) wholeSum(total int64) (float64, bool) {
	if total > maxWholeTotal {
		return 0, false
	}
	sum := 0.0
	for _, vc := range t.slots {
		if vc.n != 0 {
			if vc.v != math.Trunc(vc.v) || math.Abs(vc.v) > maxWhole {
				return 0, false
			}
			sum += vc.v * float64(vc.n)
		}
	}
	return sum, true
}

// Whole values of magnitude <= maxWhole, maxWholeTotal of them at most, sum
// to at most 2^52 in magnitude: every partial float64 sum is an exact
// integer, in any order.
const (
	maxWhole      = 1 << 20
	maxWholeTotal = 1 << 32
)

// exactSum returns sum(v * n) over vcs, total being the sum of the counts:
// exact, rounded once to float64 (ties to even), whatever the order of vcs.
// Whole values (see maxWhole) are summed in float64, exactly; anything else
// in 2400-bit binary floating point, which holds any sum of float64 products
// with int64 counts exactly (2^-1074 to 2^1151, plus carries), rounded once.
func exactSum(vcs []valueCount, total int64) float64 {
	if total <= maxWholeTotal {
		sum, whole := 0.0, true
		for _, vc := range vcs {
			if vc.v != math.Trunc(vc.v) || math.Abs(vc.v) > maxWhole {
				whole = false
				break
			}
			sum += vc.v * float64(vc.n)
		}
		if whole {
			return sum
		}
	}
	const prec = 2400
	acc := new(big.Float).SetPrec(prec)
	term := new(big.Float).SetPrec(prec)
	count := new(big.Float)
	for _, vc := range vcs {
		term.SetFloat64(vc.v)
		acc.Add(acc, term.Mul(term, count.SetInt64(vc.n)))
	}
	f, _ := acc.Float64()
	return f
}

// Distribution returns the distinct delays in ascending order and how many
// events had each; nil, nil when empty. -0 is held as 0.
func (s *Stats) Distribution() (values []float64, counts []int64) {
	vcs := s.sortedValues(nil)
	if len(vcs) == 0 {
		return nil, nil
	}
	values, counts = make([]float64, len(vcs)), make([]int64, len(vcs))
	for i, vc := range vcs {
		values[i], counts[i] = vc.v, vc.n
	}
	return values, counts
}

// sortedValues returns the distribution sorted by value: the inline values
// themselves (read only) or a sorted copy of the table's. keys, when not
// nil, is scratch space that sortValues may keep for the next call.
func (s *Stats) sortedValues(keys *[]uint64) []valueCount {
	if s.counts == nil {
		return s.small[:s.nSmall]
	}
	vcs := s.counts.values()
	sortValues(vcs, keys)
	return vcs
}

// sortValues sorts vcs by value (no NaN; -0 is never held, Add keeps 0).
//
// Delays are whole seconds in practice: when every value is a whole number
// in the int32 range and every count is below 2^32, each pair is packed into
// one uint64 that orders as the value (the value's int32 with its sign bit
// flipped above the count) and the integers are sorted, several times
// faster than sorting the pairs through a comparison function (ClosedSet.Rows
// sorts the distribution of every row with more than smallValues values).
// Anything else is sorted by comparison. keys is scratch space for the
// packed pairs (nil: allocate).
func sortValues(vcs []valueCount, keys *[]uint64) {
	var buf []uint64
	if keys != nil {
		buf = (*keys)[:0]
	}
	for _, vc := range vcs {
		if vc.v != math.Trunc(vc.v) || vc.v < math.MinInt32 || vc.v > math.MaxInt32 || uint64(vc.n) >= 1<<32 {
			slices.SortFunc(vcs, func(a, b valueCount) int { return cmpFloat(a.v, b.v) })
			return
		}
		buf = append(buf, uint64(uint32(int32(vc.v))^1<<31)<<32|uint64(vc.n))
	}
	slices.Sort(buf)
	for i, k := range buf {
		vcs[i] = valueCount{float64(int32(uint32(k>>32) ^ 1<<31)), int64(k & (1<<32 - 1))}
	}
	if keys != nil {
		*keys = buf
	}
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Min returns the smallest delay in seconds; NaN when empty.
func (s *Stats) Min() float64 {
	if s.n == 0 {
		return math.NaN()
	}
	return s.min
}

// Max returns the largest delay in seconds; NaN when empty.
func (s *Stats) Max() float64 {
	if s.n == 0 {
		return math.NaN()
	}
	return s.max
}

// Operator returns the one operator of the events, or "" when they had more
// than one (the row's operator column is then NULL) or when empty.
func (s *Stats) Operator() string {
	if s.multipleOp {
		return ""
	}
	return s.operator
}

// P90 returns Quantile(0.9).
func (s *Stats) P90() float64 { return s.Quantile(0.9) }

// Quantile returns the exact p-quantile in seconds, 0 <= p <= 1, by linear
// interpolation between closest ranks over the sorted delays v[0..n-1]:
//
//	pos = p*(n-1); lo = floor(pos); q = v[lo] + (v[lo+1]-v[lo]) * (pos-lo)
//
// the same number, operation for operation, as PostgreSQL's
// percentile_cont(p) WITHIN GROUP (ORDER BY v) (orderedsetaggs.c,
// float8_lerp). NaN when empty or when p is outside [0, 1] or NaN.
func (s *Stats) Quantile(p float64) float64 {
	if s.n == 0 || !(p >= 0 && p <= 1) {
		return math.NaN()
	}
	return s.quantile(p, nil)
}

// quantile is Quantile over vcs, the table's values when s has a table
// (nil: read them here).
func (s *Stats) quantile(p float64, vcs []valueCount) float64 {
	pos, lo, hi := quantileRanks(s.n, p)
	var loV, hiV float64
	if s.counts != nil {
		if vcs == nil {
			vcs = s.counts.values()
		}
		loV, hiV = selectRanks(vcs, lo, hi)
	} else {
		loV, hiV = sortedRanks(s.small[:s.nSmall], lo, hi)
	}
	return lerp(loV, hiV, pos)
}

// MeanP90 returns Mean() and P90() (NaN, NaN when empty), reading a many-valued
// distribution once for both.
func (s *Stats) MeanP90() (mean, p90 float64) {
	if s.n == 0 {
		return math.NaN(), math.NaN()
	}
	if s.counts == nil {
		return s.Mean(), s.quantile(0.9, nil)
	}
	vcs := s.counts.values()
	mean = exactSum(vcs, s.n) / float64(s.n)
	return mean, s.quantile(0.9, vcs)
}

// quantileRanks returns percentile_cont's position p*(n-1) of the p-quantile
// of n > 0 sorted values and the 0-based ranks around it, lo = floor(pos)
// and hi = ceil(pos).
func quantileRanks(n int64, p float64) (pos float64, lo, hi int64) {
	// The explicit float64 conversion forbids fused multiply-add, so the
	// rounding is that of PostgreSQL's separate multiply and add.
	pos = float64(p * float64(n-1))
	return pos, int64(math.Floor(pos)), int64(math.Ceil(pos))
}

// sortedRanks returns the values at ranks lo and hi (lo <= hi < total count)
// of vcs, sorted by value.
func sortedRanks(vcs []valueCount, lo, hi int64) (loV, hiV float64) {
	var seen int64 // number of values before the current key
	found := false
	for _, vc := range vcs {
		next := seen + vc.n
		if !found && lo < next {
			loV, found = vc.v, true
		}
		if hi < next {
			return loV, vc.v
		}
		seen = next
	}
	return loV, hiV
}

// lerp interpolates between the values at ranks floor(pos) and ceil(pos)
// as PostgreSQL's float8_lerp does: loV + (hiV-loV) * (pos-floor(pos)).
func lerp(loV, hiV, pos float64) float64 {
	first := math.Floor(pos)
	if first == math.Ceil(pos) {
		return loV
	}
	return loV + float64((hiV-loV)*(pos-first))
}
