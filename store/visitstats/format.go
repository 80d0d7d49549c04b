package visitstats

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

// header returns the column names of q's rows: bucket_start, the
// dimension, name, then the metric's Columns.
func header(q Query) []string {
	h := []string{"bucket_start", q.Dimension, "name"}
	for _, c := range Columns(q.Metric) {
		h = append(h, c.Name)
	}
	return h
}

// text returns v (int64, float64 or nil) exactly; "" for nil.
func text(v any) string {
	switch x := v.(type) {
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		return rollup.Exact(x)
	}
	return ""
}

// WriteCSV writes rows as CSV with a header line: bucket starts in RFC 3339
// with the time zone's offset, numbers exact, an empty cell for a value
// that is NULL; ids and names as rollup.CSVText writes them.
func WriteCSV(w io.Writer, q Query, rows []Row) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(header(q)); err != nil {
		return err
	}
	for _, r := range rows {
		rec := []string{r.Bucket.Format(time.RFC3339), rollup.CSVText(r.ID), rollup.CSVText(r.Name)}
		for _, v := range r.Values {
			rec = append(rec, text(v))
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// jsonRow is one row of WriteJSON, its members in header order.
type jsonRow struct {
	q Query
	r Row
}

func (j jsonRow) MarshalJSON() ([]byte, error) {
	b := []byte(`{"bucket_start":`)
	b = strconv.AppendQuote(b, j.r.Bucket.Format(time.RFC3339))
	id, _ := json.Marshal(j.r.ID)
	b = append(append(b, `,"id":`...), id...)
	var name any // null when none
	if j.r.Name != "" {
		name = j.r.Name
	}
	n, _ := json.Marshal(name)
	b = append(append(b, `,"name":`...), n...)
	for i, c := range Columns(j.q.Metric) {
		v, err := json.Marshal(j.r.Values[i])
		if err != nil {
			return nil, err
		}
		b = append(append(append(b, ',', '"'), c.Name...), '"', ':')
		b = append(b, v...)
	}
	return append(b, '}'), nil
}

// WriteJSON writes one JSON object: the query (metric, pipeline, dimension,
// ids, from, to, bucket, tz; on_time {definition, early_s, late_s} or
// wait_tolerance) and rows, each {"bucket_start", "id", "name" (null when
// none), then the metric's Columns}: counts as integers, seconds and
// shares exact, null when NULL.
func WriteJSON(w io.Writer, q Query, rows []Row) error {
	loc := q.location()
	bucket := q.Bucket.String()
	if q.ServiceDay {
		bucket = "service-day"
	}
	type onTime struct {
		Definition string  `json:"definition"`
		Early      float64 `json:"early_s"`
		Late       float64 `json:"late_s"`
	}
	head := struct {
		Metric        Metric    `json:"metric"`
		Pipeline      string    `json:"pipeline"`
		Dimension     string    `json:"dimension"`
		IDs           []string  `json:"ids"`
		From          time.Time `json:"from"`
		To            time.Time `json:"to"`
		Bucket        string    `json:"bucket"`
		TZ            string    `json:"tz"`
		OnTime        *onTime   `json:"on_time,omitempty"`
		WaitTolerance *float64  `json:"wait_tolerance,omitempty"`
		Rows          []jsonRow `json:"rows"`
	}{Metric: q.Metric, Pipeline: q.Pipeline, Dimension: q.Dimension, IDs: q.IDs, From: q.From.In(loc), To: q.To.In(loc),
		Bucket: bucket, TZ: loc.String(), Rows: make([]jsonRow, len(rows))}
	if q.Metric == OnTime {
		head.OnTime = &onTime{q.OnTime.String(), q.OnTime.Early, q.OnTime.Late}
	} else {
		head.WaitTolerance = &q.WaitTolerance
	}
	for i, r := range rows {
		head.Rows[i] = jsonRow{q, r}
	}
	b, err := json.Marshal(head)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// WriteTable writes rows for a person: aligned columns, bucket starts in
// the time zone, seconds rounded to 0.1 s, shares as percentages to 0.1,
// "-" for NULL (WriteCSV and WriteJSON are exact).
func WriteTable(w io.Writer, q Query, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	for _, h := range header(q) {
		fmt.Fprintf(tw, "%s\t", h)
	}
	fmt.Fprintln(tw)
	cols := Columns(q.Metric)
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t", r.Bucket.Format("2006-01-02 15:04 -07:00"), rollup.TableCell(r.ID), rollup.TableCell(r.Name))
		for i, v := range r.Values {
			f, isFloat := v.(float64)
			switch {
			case v == nil:
				fmt.Fprint(tw, "-\t")
			case !isFloat:
				fmt.Fprintf(tw, "%s\t", text(v))
			case cols[i].Kind == Share:
				fmt.Fprintf(tw, "%.1f%%\t", 100*f)
			default:
				fmt.Fprintf(tw, "%.1f\t", f)
			}
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(rows) == 0 {
		fmt.Fprintln(w, "(no rows)")
	}
	return nil
}
