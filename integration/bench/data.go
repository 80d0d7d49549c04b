package main

import (
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/feed/gtfsrt"
	"github.com/ovstream/ovstream/feed/produce"
)

// archiveSpan is the time the Auckland archive covers; copy k of it is
// shifted by k*archiveSpan, so event times keep increasing from copy to copy.
const archiveSpan = 48 * time.Hour

// dataset is the Auckland 48 h archive as predictions, and the positions
// synthesized from it, both in event-time order.
type dataset struct {
	predictions []aggregate.Prediction
	positions   []aggregate.Position
	files       int
	// serviceDays gives each prediction a start_date (serviceDay), so that
	// the predictions form stop visits: the archive's trip updates have
	// none.
	serviceDays bool
}

// auckland is the time zone of the archive's service days.
var auckland = func() *time.Location {
	loc, err := time.LoadLocation("Pacific/Auckland")
	if err != nil {
		panic(err)
	}
	return loc
}()

// serviceDay is the service day, YYYYMMDD, of a prediction made at t in
// Auckland: the local date of t four hours earlier, so that the trips
// after midnight keep the day before, as GTFS service days do.
func serviceDay(t time.Time) int32 {
	y, m, d := t.Add(-4 * time.Hour).In(auckland).Date()
	return int32(y*10000 + int(m)*100 + d)
}

// extractArchive unpacks the .tar.xz archive into cacheDir (once; an existing
// non-empty folder is reused) and returns the folder holding the *.pb files.
func extractArchive(archive, cacheDir string) (string, error) {
	dir := filepath.Join(cacheDir, "auckland-48h")
	if m, _ := filepath.Glob(filepath.Join(dir, "*", "*.pb")); len(m) > 0 {
		return dir, nil
	}
	tmp := dir + ".part"
	_ = os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return "", err
	}
	// Go's standard library has no xz reader; tar -J calls xz(1).
	out, err := exec.Command("tar", "-xJf", archive, "-C", tmp).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("extract %s: %v: %s", archive, err, out)
	}
	_ = os.RemoveAll(dir)
	if err := os.Rename(tmp, dir); err != nil {
		return "", err
	}
	return dir, nil
}

// loadDataset reads the archive with the same mapping as `ovstream produce`
// (operator AT) and synthesizes positions: the archive holds trip updates
// only, so each vehicle gets one position per positionEvery bucket in which
// it reported a trip update, at the time of that trip update, with a
// deterministic made-up point in the Auckland area, bearing and speed. The
// vehicle ids, trip ids, lines and times are the archive's.
func loadDataset(dir string, positionEvery time.Duration) (*dataset, error) {
	res, err := gtfsrt.Load([]string{dir}, gtfsrt.Options{Operator: "AT"})
	if err != nil {
		return nil, err
	}
	d := &dataset{predictions: res.Predictions, files: res.Files}
	if positionEvery <= 0 {
		return d, nil
	}
	type bucket struct {
		vehicle string
		b       int64
	}
	seen := map[bucket]bool{}
	for _, p := range res.Predictions {
		if p.VehicleID == "" {
			continue
		}
		k := bucket{p.VehicleID, p.EventTime.UnixNano() / int64(positionEvery)}
		if seen[k] {
			continue
		}
		seen[k] = true
		d.positions = append(d.positions, synthPosition(p))
	}
	return d, nil
}

// synthPosition makes up a position of p's vehicle at p's event time: a
// point that depends on the vehicle and drifts slowly with time, inside
// Auckland's bounding box.
func synthPosition(p aggregate.Prediction) aggregate.Position {
	h := fnv.New64a()
	h.Write([]byte(p.VehicleID))
	seed := h.Sum64()
	phase := float64(p.EventTime.Unix()%7200) / 7200 * 2 * math.Pi
	lat := -36.85 + float64(seed%1000)/1000*0.3 - 0.15 + 0.01*math.Sin(phase)
	lon := 174.76 + float64(seed>>10%1000)/1000*0.3 - 0.15 + 0.01*math.Cos(phase)
	bearing := float64((seed>>20)%360 + uint64(p.EventTime.Unix()/60%7)*7%360)
	if bearing > 360 {
		bearing -= 360
	}
	speed := float64((seed>>30)%200) / 10
	return aggregate.Position{
		VehicleID: p.VehicleID,
		Lat:       math.Round(lat*1e6) / 1e6,
		Lon:       math.Round(lon*1e6) / 1e6,
		EventTime: p.EventTime,
		TripID:    p.TripID,
		Line:      p.Line,
		Operator:  p.Operator,
		Bearing:   &bearing,
		SpeedMPS:  &speed,
	}
}

// generator yields the messages of n predictions: the archive repeated with
// times shifted by 48 h per copy (copy 0 unshifted), predictions and the
// positions of the same copy merged in event-time order, the last copy cut
// after the n-th prediction (and its positions up to that time).
type generator struct {
	d                   *dataset
	n                   int
	predTopic, posTopic string

	copy, i, j int // current copy, next prediction, next position
	emitted    int // predictions emitted
	positions  int // positions emitted
	bytes      int64
}

func newGenerator(d *dataset, n int, predTopic, posTopic string) *generator {
	return &generator{d: d, n: n, predTopic: predTopic, posTopic: posTopic}
}

// next returns the next message, false when done.
func (g *generator) next() (produce.Message, bool) {
	for {
		if g.emitted >= g.n {
			return produce.Message{}, false
		}
		preds, poss := g.d.predictions, g.d.positions
		if g.i >= len(preds) && g.j >= len(poss) {
			g.copy++
			g.i, g.j = 0, 0
			continue
		}
		shift := time.Duration(g.copy) * archiveSpan
		takePos := g.j < len(poss) && (g.i >= len(preds) || !poss[g.j].EventTime.After(preds[g.i].EventTime))
		if takePos {
			p := poss[g.j]
			g.j++
			p.EventTime = p.EventTime.Add(shift)
			g.positions++
			v := produce.EncodePosition(p)
			g.bytes += int64(len(v))
			return produce.Message{Topic: g.posTopic, Key: []byte(p.VehicleID), Value: v}, true
		}
		p := preds[g.i]
		g.i++
		p.EventTime = p.EventTime.Add(shift)
		if g.d.serviceDays && p.StartDate == 0 {
			p.StartDate = serviceDay(p.EventTime)
			if !p.ArrivalTime.IsZero() {
				p.ArrivalTime = p.ArrivalTime.Add(shift)
			}
		}
		g.emitted++
		v := produce.EncodePrediction(p)
		g.bytes += int64(len(v))
		return produce.Message{Topic: g.predTopic, Key: []byte(p.TripID), Value: v}, true
	}
}
