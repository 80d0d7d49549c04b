package gtfsrt

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// LoadArchive is Load for the FeedMessage files of a .tar.gz archive (such
// as the samples in testdata): it unpacks the archive's regular files into a
// temporary folder, which it removes before it returns, and loads them.
func LoadArchive(path string, opt Options) (*Result, error) {
	dir, err := os.MkdirTemp("", "gtfsrt-archive-")
	if err != nil {
		return nil, fmt.Errorf("gtfsrt: %w", err)
	}
	defer os.RemoveAll(dir)
	if err := untarGz(path, dir); err != nil {
		return nil, fmt.Errorf("gtfsrt: unpack %s: %w", path, err)
	}
	return Load([]string{dir}, opt)
}

// untarGz writes the regular files of the .tar.gz at path into dir, each
// under its base name.
func untarGz(path, dir string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return err
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		out, err := os.Create(filepath.Join(dir, filepath.Base(h.Name)))
		if err != nil {
			return err
		}
		_, err = io.Copy(out, tr)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
}
