package aggregate

import (
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"testing"
	"time"
)

// FuzzMergeRows: the events of one window split in two at any point, each
// half counted by a Windower of its own, and the two rows of every key
// merged (MergeRows): bit for bit the rows one Windower fed every event
// writes, the distribution included.
func FuzzMergeRows(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}, uint8(1), false)
	f.Add([]byte{0xc0, 0x15, 0, 0, 0, 0, 0, 0, 1, 0x40, 0x15, 0, 0, 0, 0, 0, 0, 2}, uint8(1), true)
	f.Fuzz(func(t *testing.T, data []byte, cut uint8, raw bool) {
		start := time.Date(2016, 5, 18, 20, 0, 0, 0, time.UTC)
		var evs []Prediction
		for len(data) >= 9 {
			d := float64(int8(data[0])%16) + []float64{0, 0.5, 0.1, -0.25}[data[1]%4]
			if raw {
				d = math.Float64frombits(binary.LittleEndian.Uint64(data))
				if math.IsNaN(d) || math.IsInf(d, 0) {
					data = data[9:]
					continue
				}
			}
			evs = append(evs, Prediction{TripID: "t", Line: []string{"L1", "L2"}[data[8]%2], StopID: []string{"S1", "S2", "S3"}[data[8]%3],
				Operator: []string{"A", "B"}[data[8]>>7], DelayS: d, EventTime: start.Add(time.Duration(data[8]) * time.Second)})
			data = data[9:]
		}
		if len(evs) < 2 {
			return
		}
		k := 1 + int(cut)%(len(evs)-1)
		rows := func(evs []Prediction) map[[2]string]Row {
			w := NewWindower(5 * time.Minute)
			for _, p := range evs {
				w.Add(p)
			}
			out := map[[2]string]Row{}
			for _, r := range w.ClosedSet(start.Add(time.Hour)).Rows() {
				out[[2]string{r.Dimension, r.DimensionID}] = r
			}
			return out
		}
		all, a, b := rows(evs), rows(evs[:k]), rows(evs[k:])
		for key, want := range all {
			got, ok := a[key]
			switch add, inB := b[key]; {
			case ok && inB:
				var err error
				if got, err = MergeRows(got, add); err != nil {
					t.Fatal(err)
				}
			case inB:
				got = add
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%v: merged %+v, want %+v", key, got, want)
			}
		}
	})
}

// A row without its distribution (written before schema 5) takes no events:
// ErrNoDistribution; rows of different keys are an error.
func TestMergeRowsRefuses(t *testing.T) {
	start := time.Date(2016, 5, 18, 20, 0, 0, 0, time.UTC)
	a := Row{WindowStart: start, Dimension: DimStation, DimensionID: "S", Count: 1, Values: []float64{3}, Counts: []int64{1}}
	old := a
	old.Values, old.Counts = nil, nil
	if _, err := MergeRows(old, a); !errors.Is(err, ErrNoDistribution) {
		t.Fatalf("merge into a row without distribution: %v, want ErrNoDistribution", err)
	}
	b := a
	b.DimensionID = "T"
	if _, err := MergeRows(a, b); err == nil {
		t.Fatal("rows of different keys merged")
	}
}
