package rollup

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// header returns the column names of q's rows: bucket_start, the dimension,
// name (the id's name, empty when none), events, mean, min, max, one per
// quantile (Name) and, with q.IncludeOpen, final (Row.Final).
func header(q Query) []string {
	h := []string{"bucket_start", q.Dimension, "name", "events", "mean", "min", "max"}
	for _, p := range q.Quantiles {
		h = append(h, Name(p))
	}
	if q.IncludeOpen {
		h = append(h, "final")
	}
	return h
}

// Exact formats a statistic so that it reads back as the same float64.
func Exact(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// CSVText returns the text s (a dimension id or name, from the feeds) for one
// cell of WriteCSV: with a leading ' when it starts with =, +, -, @, a tab or
// a carriage return, which a spreadsheet would run as a formula (OWASP "CSV
// Injection"); else s as it is. Numbers never pass through it.
func CSVText(s string) string {
	if s != "" && strings.IndexByte("=+-@\t\r", s[0]) >= 0 {
		return "'" + s
	}
	return s
}

// WriteCSV writes res as CSV with a header line (header): bucket starts in
// RFC 3339 with the time zone's offset, statistics in seconds, exact. An id
// or name starting with =, +, -, @, a tab or a carriage return is written
// with a leading ' (CSVText), so that a spreadsheet shows it as text.
func WriteCSV(w io.Writer, q Query, res *Result) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(header(q)); err != nil {
		return err
	}
	for _, r := range res.Rows {
		rec := []string{r.Bucket.Format(time.RFC3339), CSVText(r.ID), CSVText(r.Name), strconv.FormatInt(r.Count, 10),
			Exact(r.Mean), Exact(r.Min), Exact(r.Max)}
		for _, v := range r.Quantiles {
			rec = append(rec, Exact(v))
		}
		if q.IncludeOpen {
			rec = append(rec, strconv.FormatBool(r.Final))
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// WriteJSON writes res as one JSON object: the query (pipeline, dimension,
// from, to, bucket, tz, quantiles), without_distribution, and rows, each
// {"bucket_start", "id", "name" (null when the id has none), "events",
// "mean", "min", "max", one member per quantile named by Name, and with
// q.IncludeOpen "final" (Row.Final)}, statistics in seconds, exact.
func WriteJSON(w io.Writer, q Query, res *Result) error {
	loc := q.Location
	if loc == nil {
		loc = time.UTC
	}
	head := struct {
		Pipeline            string    `json:"pipeline"`
		Dimension           string    `json:"dimension"`
		From                time.Time `json:"from"`
		To                  time.Time `json:"to"`
		Bucket              string    `json:"bucket"`
		TZ                  string    `json:"tz"`
		Quantiles           []float64 `json:"quantiles"`
		WithoutDistribution int64     `json:"without_distribution"`
	}{q.Pipeline, q.Dimension, q.From.In(loc), q.To.In(loc), q.Bucket.String(), loc.String(), q.Quantiles, res.WithoutDistribution}
	b, err := json.Marshal(head)
	if err != nil {
		return err
	}
	out := append(b[:len(b)-1], `,"rows":[`...)
	for i, r := range res.Rows {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, "\n{"...)
		out = appendMember(out, "bucket_start", r.Bucket.Format(time.RFC3339), true)
		out = appendMember(out, "id", r.ID, false)
		var name any // null
		if r.Name != "" {
			name = r.Name
		}
		out = appendMember(out, "name", name, false)
		out = appendMember(out, "events", r.Count, false)
		out = appendMember(out, "mean", r.Mean, false)
		out = appendMember(out, "min", r.Min, false)
		out = appendMember(out, "max", r.Max, false)
		for j, p := range q.Quantiles {
			out = appendMember(out, Name(p), r.Quantiles[j], false)
		}
		if q.IncludeOpen {
			out = appendMember(out, "final", r.Final, false)
		}
		out = append(out, '}')
	}
	out = append(out, "]}\n"...)
	_, err = w.Write(out)
	return err
}

// TableCell returns s for one cell of WriteTable: tabs and line breaks
// (which would break the columns) as spaces, and "-" for "".
func TableCell(s string) string {
	if s == "" {
		return "-"
	}
	return strings.NewReplacer("\t", " ", "\n", " ", "\r", " ").Replace(s)
}

func appendMember(b []byte, name string, v any, first bool) []byte {
	if !first {
		b = append(b, ',')
	}
	k, _ := json.Marshal(name)
	x, err := json.Marshal(v)
	if err != nil { // NaN: no events; never in Rows
		x = []byte("null")
	}
	b = append(append(b, k...), ':')
	return append(b, x...)
}

// WriteTable writes res for a person: aligned columns, bucket starts in the
// time zone, statistics rounded to 0.1 s (WriteCSV and WriteJSON are exact).
func WriteTable(w io.Writer, q Query, res *Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	for _, h := range header(q) {
		fmt.Fprintf(tw, "%s\t", h)
	}
	fmt.Fprintln(tw)
	for _, r := range res.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%.1f\t%.1f\t%.1f\t", r.Bucket.Format("2006-01-02 15:04 -07:00"), r.ID, TableCell(r.Name),
			r.Count, r.Mean, r.Min, r.Max)
		for _, v := range r.Quantiles {
			fmt.Fprintf(tw, "%.1f\t", v)
		}
		if q.IncludeOpen {
			fmt.Fprintf(tw, "%s\t", map[bool]string{true: "yes", false: "no (provisional)"}[r.Final])
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(res.Rows) == 0 {
		fmt.Fprintln(w, "(no rows)")
	}
	if res.WithoutDistribution > 0 {
		fmt.Fprintf(w, "note: %d rows in the range have no stored distribution (written before schema version 5) and are left out\n",
			res.WithoutDistribution)
	}
	return nil
}

// Pick returns jsonW with json, else csvW with csv, else table: the writer
// of the output format asked for, of any report.
func Pick[W any](json, csv bool, table, jsonW, csvW W) W {
	switch {
	case json:
		return jsonW
	case csv:
		return csvW
	}
	return table
}
