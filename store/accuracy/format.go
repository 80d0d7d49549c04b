package accuracy

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/ovstream/ovstream/store/rollup"
)

// header returns the column names of q's rows: the dimension, bucket
// (e.g. 0m-3m), horizon_from_s, horizon_to_s, early_s, late_s, predictions,
// accurate, accuracy, mean_error_s, and one per quantile (rollup.Name).
func header(q Query) []string {
	h := []string{q.Dimension, "bucket", "horizon_from_s", "horizon_to_s", "early_s", "late_s", "predictions", "accurate",
		"accuracy", "mean_error_s"}
	for _, p := range q.Quantiles {
		h = append(h, rollup.Name(p))
	}
	return h
}

// bucketName names a band's horizon bucket: "0m-3m".
func bucketName(b Band) string { return minutes(b.FromS) + "-" + minutes(b.ToS) }

// WriteCSV writes res as CSV with a header line (header), exact, seconds;
// an id is written as rollup.CSVText writes it. The overall accuracy is
// not in it (WriteJSON and WriteTable have it).
func WriteCSV(w io.Writer, q Query, res *Result) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(header(q)); err != nil {
		return err
	}
	for _, r := range res.Rows {
		rec := []string{rollup.CSVText(r.ID), bucketName(r.Band), rollup.Exact(r.Band.FromS), rollup.Exact(r.Band.ToS),
			rollup.Exact(r.Band.EarlyS), rollup.Exact(r.Band.LateS), strconv.FormatInt(r.Predictions, 10),
			strconv.FormatInt(r.Accurate, 10), rollup.Exact(r.Accuracy), rollup.Exact(r.MeanErrorS)}
		for _, v := range r.ErrorQuantiles {
			rec = append(rec, rollup.Exact(v))
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// jsonRow is one Row in WriteJSON.
type jsonRow struct {
	ID             string             `json:"id"`
	Bucket         string             `json:"bucket"`
	HorizonFromS   float64            `json:"horizon_from_s"`
	HorizonToS     float64            `json:"horizon_to_s"`
	EarlyS         float64            `json:"early_s"`
	LateS          float64            `json:"late_s"`
	Predictions    int64              `json:"predictions"`
	Accurate       int64              `json:"accurate"`
	Accuracy       float64            `json:"accuracy"`
	MeanErrorS     float64            `json:"mean_error_s"`
	ErrorQuantiles map[string]float64 `json:"error_quantiles_s"`
}

// WriteJSON writes res as one JSON object: the query (pipeline,
// dimension, from, to, bands), rows (jsonRow: exact, seconds, quantiles
// named by rollup.Name) and overall ({"id", "accuracy", "buckets"}).
func WriteJSON(w io.Writer, q Query, res *Result) error {
	bands := q.Bands
	if bands == nil {
		bands = Benchmark
	}
	type jsonBand struct {
		FromS  float64 `json:"horizon_from_s"`
		ToS    float64 `json:"horizon_to_s"`
		EarlyS float64 `json:"early_s"`
		LateS  float64 `json:"late_s"`
	}
	type jsonOverall struct {
		ID       string  `json:"id"`
		Accuracy float64 `json:"accuracy"`
		Buckets  int     `json:"buckets"`
	}
	out := struct {
		Pipeline  string        `json:"pipeline"`
		Dimension string        `json:"dimension"`
		From      string        `json:"from"`
		To        string        `json:"to"`
		Bands     []jsonBand    `json:"bands"`
		Rows      []jsonRow     `json:"rows"`
		Overall   []jsonOverall `json:"overall"`
	}{Pipeline: q.Pipeline, Dimension: q.Dimension, From: q.From.Format(time.RFC3339), To: q.To.Format(time.RFC3339),
		Rows: []jsonRow{}, Overall: []jsonOverall{}}
	for _, b := range bands {
		out.Bands = append(out.Bands, jsonBand(b))
	}
	for _, r := range res.Rows {
		j := jsonRow{ID: r.ID, Bucket: bucketName(r.Band), HorizonFromS: r.Band.FromS, HorizonToS: r.Band.ToS, EarlyS: r.Band.EarlyS,
			LateS: r.Band.LateS, Predictions: r.Predictions, Accurate: r.Accurate, Accuracy: r.Accuracy, MeanErrorS: r.MeanErrorS,
			ErrorQuantiles: map[string]float64{}}
		for i, v := range r.ErrorQuantiles {
			j.ErrorQuantiles[rollup.Name(q.Quantiles[i])] = v
		}
		out.Rows = append(out.Rows, j)
	}
	for _, o := range res.Overall {
		out.Overall = append(out.Overall, jsonOverall(o))
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// WriteTable writes res for a person: per id its buckets, the share of
// accurate predictions in percent to 0.1, errors rounded to 0.1 s, then
// the id's overall accuracy (WriteCSV and WriteJSON are exact).
func WriteTable(w io.Writer, q Query, res *Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%s\tbucket\tband s\tpredictions\taccurate\taccuracy %%\tmean error s\t", q.Dimension)
	for _, p := range q.Quantiles {
		fmt.Fprintf(tw, "%s s\t", rollup.Name(p))
	}
	fmt.Fprintln(tw)
	next := 0
	for i, r := range res.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%g..%+g\t%d\t%d\t%.1f\t%.1f\t", rollup.TableCell(r.ID), bucketName(r.Band), r.Band.EarlyS, r.Band.LateS,
			r.Predictions, r.Accurate, 100*r.Accuracy, r.MeanErrorS)
		for _, v := range r.ErrorQuantiles {
			fmt.Fprintf(tw, "%.1f\t", v)
		}
		fmt.Fprintln(tw)
		if i+1 == len(res.Rows) || res.Rows[i+1].ID != r.ID {
			o := res.Overall[next]
			next++
			fmt.Fprintf(tw, "%s\toverall\t(mean of %d)\t\t\t%.1f\t\t", rollup.TableCell(o.ID), o.Buckets, 100*o.Accuracy)
			for range q.Quantiles {
				fmt.Fprint(tw, "\t")
			}
			fmt.Fprintln(tw)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(res.Rows) == 0 {
		fmt.Fprintln(w, "(no rows)")
	}
	return nil
}

// Write writes res as JSON (asJSON), CSV (asCSV) or a table.
func Write(w io.Writer, q Query, res *Result, asJSON, asCSV bool) error {
	switch {
	case asJSON:
		return WriteJSON(w, q, res)
	case asCSV:
		return WriteCSV(w, q, res)
	}
	return WriteTable(w, q, res)
}
