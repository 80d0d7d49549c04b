package otp

import (
	"archive/zip"
	"bytes"
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// WriteCalendar writes CalendarFile: a header, then the rows.
func WriteCalendar(w io.Writer, rows []CalendarRow) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"empirical_delay_service_id", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday",
		"start_date", "end_date"})
	for _, r := range rows {
		rec := []string{r.ServiceID}
		for _, on := range r.Days {
			rec = append(rec, map[bool]string{false: "0", true: "1"}[on])
		}
		_ = cw.Write(append(rec, r.Start.Format(DateLayout), r.End.Format(DateLayout)))
	}
	cw.Flush()
	return cw.Error()
}

// WriteTripTimes writes TripTimesFile: a header, then the rows.
func WriteTripTimes(w io.Writer, rows []Row) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"empirical_delay_service_id", "trip_id", "stop_id", "stop_sequence", "p50", "p90"})
	for _, r := range rows {
		_ = cw.Write([]string{r.ServiceID, r.TripID, r.StopID, strconv.FormatInt(r.StopSequence, 10),
			strconv.FormatInt(r.P50, 10), strconv.FormatInt(r.P90, 10)})
	}
	cw.Flush()
	return cw.Error()
}

// Write writes the two files of e to path: into a zip file when path ends
// in .zip, else into the directory path (made if missing; the two files
// replaced). Each file appears whole or not at all: it is written beside
// its final name and renamed.
func (e *Export) Write(path string) error {
	files := []struct {
		name string
		data bytes.Buffer
	}{{name: CalendarFile}, {name: TripTimesFile}}
	if err := WriteCalendar(&files[0].data, e.Calendar); err != nil {
		return fmt.Errorf("otp: %s: %w", CalendarFile, err)
	}
	if err := WriteTripTimes(&files[1].data, e.Rows); err != nil {
		return fmt.Errorf("otp: %s: %w", TripTimesFile, err)
	}
	if strings.EqualFold(filepath.Ext(path), ".zip") {
		var buf bytes.Buffer
		zw := zip.NewWriter(&buf)
		for i := range files {
			f, err := zw.Create(files[i].name)
			if err == nil {
				_, err = f.Write(files[i].data.Bytes())
			}
			if err != nil {
				return fmt.Errorf("otp: zip %s: %w", files[i].name, err)
			}
		}
		if err := zw.Close(); err != nil {
			return fmt.Errorf("otp: zip: %w", err)
		}
		return writeFile(path, buf.Bytes())
	}
	if err := os.MkdirAll(path, 0o755); err != nil {
		return fmt.Errorf("otp: %w", err)
	}
	for i := range files {
		if err := writeFile(filepath.Join(path, files[i].name), files[i].data.Bytes()); err != nil {
			return err
		}
	}
	return nil
}

// writeFile writes data to path through a temporary file beside it.
func writeFile(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("otp: %w", err)
	}
	defer os.Remove(tmp.Name()) // after the rename: nothing
	if _, err = tmp.Write(data); err == nil {
		err = tmp.Chmod(0o644)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("otp: write %s: %w", path, err)
	}
	return nil
}
