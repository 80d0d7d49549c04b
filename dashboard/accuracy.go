package dashboard

import (
	"cmp"
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/store/accuracy"
)

// AccuracyBucket is one horizon bucket of the network: its band, in
// seconds, and its predictions' accuracy and error (seconds: the realized
// arrival minus the predicted one).
type AccuracyBucket struct {
	HorizonFromS float64 `json:"horizon_from_s"`
	HorizonToS   float64 `json:"horizon_to_s"`
	EarlyS       float64 `json:"early_s"` // accurate when early_s <= error <= late_s
	LateS        float64 `json:"late_s"`
	Predictions  int64   `json:"predictions"`
	Accurate     int64   `json:"accurate"`
	Accuracy     float64 `json:"accuracy"` // accurate / predictions
	MeanErrorS   float64 `json:"mean_error_s"`
	P50ErrorS    float64 `json:"p50_error_s"`
	P90ErrorS    float64 `json:"p90_error_s"`
}

// AccuracyLine is one line of the accuracy ranking: its overall accuracy
// (the mean of its buckets' shares, as the benchmark's single number), the
// buckets that have predictions and its predictions in all of them.
type AccuracyLine struct {
	ID string `json:"id"`
	Named
	Accuracy    float64 `json:"accuracy"`
	Buckets     int     `json:"buckets"`
	Predictions int64   `json:"predictions"`
}

// AccuracyQuery is what the accuracy page asked for, with the defaults.
type AccuracyQuery struct {
	Pipeline       string `json:"pipeline"`
	TZ             string `json:"tz"`
	From           string `json:"from"`
	To             string `json:"to"`
	Bands          string `json:"bands"` // "" = the benchmark's
	MinPredictions int64  `json:"min_predictions"`
	Top            int64  `json:"top"`
}

// Accuracy is GET
// api/accuracy?pipeline&tz&from&to&bands&min_predictions&top: the accuracy
// of the predictions of the stop visits whose realized arrival is in the
// range, by horizon bucket (bands: FROM-TO:EARLY..LATE, comma-separated Go
// durations; default the ETA Accuracy Benchmark's), from ovs_accuracy
// through store/accuracy (the code of `ovstream report --metric
// accuracy`): the network's buckets and overall accuracy (null without
// predictions), and the lines with at least min_predictions predictions
// (default 50), the least accurate first (ties: more predictions, then id),
// at most top (default 25).
type Accuracy struct {
	Query       AccuracyQuery    `json:"query"`
	ServiceDays ServiceDays      `json:"service_days"`
	Overall     *float64         `json:"overall"`
	Buckets     []AccuracyBucket `json:"buckets"`
	Lines       []AccuracyLine   `json:"lines"`
}

// accuracyQuantiles are the error's quantiles the page shows.
var accuracyQuantiles = []float64{0.5, 0.9}

func (h *Handler) accuracy(ctx context.Context, r *http.Request) (any, error) {
	v := r.URL.Query()
	bandsParam := strings.TrimSpace(v.Get("bands"))
	bands, err := accuracy.ParseBands(bandsParam)
	if err != nil {
		return nil, badParam("bands", "%v", err)
	}
	minPredictions, err := intParam(v, "min_predictions", 50, 1, 1<<40)
	if err != nil {
		return nil, err
	}
	top, err := intParam(v, "top", 25, 1, 500)
	if err != nil {
		return nil, err
	}
	out := &Accuracy{Buckets: []AccuracyBucket{}, Lines: []AccuracyLine{}}
	err = h.withVisits(ctx, r, func(c *pgx.Conn, p visitsPage) error {
		out.Query = AccuracyQuery{Pipeline: p.pipeline, TZ: p.loc.String(), From: p.from.Format(time.RFC3339), To: p.to.Format(time.RFC3339),
			Bands: bandsParam, MinPredictions: minPredictions, Top: top}
		out.ServiceDays = p.days
		if p.pipeline == "" {
			return nil
		}
		q := accuracy.Query{Pipeline: p.pipeline, Dimension: aggregate.DimNetwork, From: p.from, To: p.to, Bands: bands,
			Quantiles: accuracyQuantiles}
		network, err := accuracy.Run(ctx, c, q)
		if err != nil {
			return err
		}
		for _, o := range network.Overall {
			out.Overall = &o.Accuracy
		}
		for _, row := range network.Rows {
			out.Buckets = append(out.Buckets, AccuracyBucket{HorizonFromS: row.Band.FromS, HorizonToS: row.Band.ToS,
				EarlyS: row.Band.EarlyS, LateS: row.Band.LateS, Predictions: row.Predictions, Accurate: row.Accurate,
				Accuracy: row.Accuracy, MeanErrorS: row.MeanErrorS, P50ErrorS: row.ErrorQuantiles[0], P90ErrorS: row.ErrorQuantiles[1]})
		}
		q.Dimension, q.Quantiles = aggregate.DimLine, nil
		lines, err := accuracy.Run(ctx, c, q)
		if err != nil {
			return err
		}
		out.Lines = rankAccuracy(lines, minPredictions, int(top))
		return nameEach(ctx, c, p.pipeline, aggregate.DimLine, len(out.Lines), func(i int) string { return out.Lines[i].ID },
			func(i int, nm Named) { out.Lines[i].Named = nm })
	})
	return out, err
}

// rankAccuracy keeps the lines with at least minPredictions predictions,
// the least accurate first (ties: more predictions first, then id), at
// most top.
func rankAccuracy(res *accuracy.Result, minPredictions int64, top int) []AccuracyLine {
	predictions := map[string]int64{}
	for _, row := range res.Rows {
		predictions[row.ID] += row.Predictions
	}
	out := make([]AccuracyLine, len(res.Overall))
	for i, o := range res.Overall {
		out[i] = AccuracyLine{ID: o.ID, Accuracy: o.Accuracy, Buckets: o.Buckets, Predictions: predictions[o.ID]}
	}
	return ranked(out, func(l AccuracyLine) bool { return l.Predictions >= minPredictions }, func(a, b AccuracyLine) int {
		return cmp.Or(cmp.Compare(a.Accuracy, b.Accuracy), cmp.Compare(b.Predictions, a.Predictions), strings.Compare(a.ID, b.ID))
	}, top)
}
