package aggregate_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/feed/gtfsrt"
	"github.com/ovstream/ovstream/feed/produce"
)

// hotPathMessages returns the message values of the 2 h Auckland sample in
// testdata (120 snapshots, mapped like `ovstream produce --operator AT`),
// in feed order, as the run loop receives them.
func hotPathMessages(b *testing.B) [][]byte {
	b.Helper()
	res, err := gtfsrt.LoadArchive("../testdata/auckland-20160518-2h.tar.gz", gtfsrt.Options{Operator: "AT"})
	if err != nil {
		b.Fatal(err)
	}
	msgs := make([][]byte, len(res.Predictions))
	for i, p := range res.Predictions {
		msgs[i] = produce.EncodePrediction(p)
	}
	return msgs
}

// BenchmarkHotPath is the aggregate side of the run loop per message: decode,
// names (Names.Observe, and Take at each commit), window, and the share of the commit that builds the finalized rows
// (Closed + Drop as the watermark passes each window end, with 10 minutes of
// allowed lateness). One op is one pass over the 2 h sample; allocs/msg and
// ns/msg are per message.
func BenchmarkHotPath(b *testing.B) {
	benchHotPath(b, hotPathMessages(b))
}

// BenchmarkHotPathNamed is BenchmarkHotPath over the same sample with names
// in every record, as `produce --gtfs-static` writes them: line_name,
// line_short_name and stop_name, each the same for every record of its id.
func BenchmarkHotPathNamed(b *testing.B) {
	benchHotPath(b, namedMessages(b))
}

// namedMessages returns hotPathMessages with line_name ("Route " + line),
// line_short_name (the line's first 3 bytes) and stop_name ("Stop " +
// stop_id, 20 bytes of padding) added.
func namedMessages(b *testing.B) [][]byte {
	msgs := hotPathMessages(b)
	for i, v := range msgs {
		p, err := aggregate.DecodePrediction(v)
		if err != nil {
			b.Fatal(err)
		}
		p.LineName, p.LineShortName, p.StopName = "Route "+p.Line, p.Line[:min(3, len(p.Line))], "Stop "+p.StopID+" Main Street North"
		msgs[i] = produce.EncodePrediction(p)
	}
	return msgs
}

func benchHotPath(b *testing.B, msgs [][]byte) {
	var bytes int64
	for _, m := range msgs {
		bytes += int64(len(m))
	}
	b.SetBytes(bytes)
	b.ReportAllocs()
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	rows, named := 0, 0
	names := aggregate.NewNames() // kept across passes, as a run keeps it: the names seen before cost nothing
	for b.Loop() {
		w := aggregate.NewWindower(5 * time.Minute)
		var maxT, wm time.Time
		for _, v := range msgs {
			p, raw, err := aggregate.DecodePredictionNames(v)
			if err != nil {
				b.Fatal(err)
			}
			names.Observe(&p, raw)
			w.Add(p)
			if p.EventTime.After(maxT) {
				maxT = p.EventTime
			}
			// A commit whenever the watermark passes a window end.
			if next := aggregate.WindowStart(maxT.Add(-10*time.Minute), 5*time.Minute); next.After(wm) {
				wm = next
				rows += len(w.Closed(wm))
				w.Drop(wm)
				named += len(names.Take())
			}
		}
		rows += len(w.Closed(w.LastEnd()))
		w.Drop(w.LastEnd())
	}
	runtime.ReadMemStats(&ms1)
	n := float64(b.N) * float64(len(msgs))
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/n, "allocs/msg")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/msg")
	b.ReportMetric(float64(rows)/n, "rows/msg")
	b.ReportMetric(float64(named)/n, "names/msg")
}
