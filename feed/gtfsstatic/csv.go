package gtfsstatic

import (
	"archive/zip"
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
)

// openFeed returns the files of a GTFS feed: a zip file or a folder.
// close releases the zip file.
func openFeed(path string) (fsys fs.FS, closeFn func() error, err error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, nil, err
	}
	if st.IsDir() {
		return os.DirFS(path), func() error { return nil }, nil
	}
	z, err := zip.OpenReader(path)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: not a zip file or a folder: %w", path, err)
	}
	return z, z.Close, nil
}

// table reads one GTFS file row by row with its columns found by name.
type table struct {
	name string
	r    *csv.Reader
	f    io.Closer
	cols map[string]int
	row  []string
	line int // line of row in the file, 1 = header
}

// errMissing is returned by openTable for an optional file that is absent.
var errMissing = errors.New("file missing")

// openTable opens file name of fsys and reads its header; required lists
// the columns that must be there. An absent file is errMissing.
func openTable(fsys fs.FS, name string, required ...string) (*table, error) {
	f, err := fsys.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errMissing
	}
	if err != nil {
		return nil, err
	}
	r := csv.NewReader(f)
	r.FieldsPerRecord = -1 // GTFS producers leave trailing columns off
	r.LazyQuotes = true
	r.ReuseRecord = true
	t := &table{name: name, r: r, f: f, cols: make(map[string]int)}
	header, err := r.Read()
	if err != nil {
		f.Close()
		if err == io.EOF {
			return nil, fmt.Errorf("%s: empty file", name)
		}
		return nil, fmt.Errorf("%s: header: %w", name, err)
	}
	t.line = 1
	for i, h := range header {
		if i == 0 {
			h = string(bytes.TrimPrefix([]byte(h), []byte("\uFEFF"))) // byte order mark
		}
		t.cols[strings.TrimSpace(h)] = i
	}
	for _, c := range required {
		if _, ok := t.cols[c]; !ok {
			f.Close()
			return nil, fmt.Errorf("%s: no column %s", name, c)
		}
	}
	return t, nil
}

// next reads the next row; false at the end of the file or on error (see err).
func (t *table) next() (bool, error) {
	row, err := t.r.Read()
	if err == io.EOF {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("%s: %w", t.name, err)
	}
	t.row = row
	t.line, _ = t.r.FieldPos(0)
	return true, nil
}

// get returns the column's value of the current row, trimmed; "" when the
// column or the value is absent.
func (t *table) get(col string) string {
	i, ok := t.cols[col]
	if !ok || i >= len(t.row) {
		return ""
	}
	return strings.TrimSpace(t.row[i])
}

// errorf names the file and line of the current row.
func (t *table) errorf(format string, a ...any) error {
	return fmt.Errorf("%s line %d: %s", t.name, t.line, fmt.Sprintf(format, a...))
}

func (t *table) close() { t.f.Close() }

// each calls fn for every row of the file; an absent optional file calls
// nothing, an absent required one is an error.
func each(fsys fs.FS, name string, optional bool, required []string, fn func(t *table) error) error {
	t, err := openTable(fsys, name, required...)
	if errors.Is(err, errMissing) {
		if optional {
			return nil
		}
		return fmt.Errorf("%s: missing", name)
	}
	if err != nil {
		return err
	}
	defer t.close()
	for {
		ok, err := t.next()
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
		if err := fn(t); err != nil {
			return err
		}
	}
}
