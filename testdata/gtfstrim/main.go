// Command gtfstrim writes a static GTFS zip trimmed to the trips of some
// GTFS-realtime files, for testdata/ (see testdata/README.md):
//
//	go run ./testdata/gtfstrim FULL.zip OUT.zip REALTIME.pb...
//
// trips.txt and stop_times.txt keep the rows whose trip_id a TripUpdate of
// the realtime files names; stops.txt keeps the stops of those stop times
// and those the realtime files name; shapes.txt is left out; every other
// file is copied unchanged. Rows are copied byte for byte (the header and
// each kept line as they are).
package main

import (
	"archive/zip"
	"bufio"
	"bytes"
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/MobilityData/gtfs-realtime-bindings/golang/gtfs"
	"google.golang.org/protobuf/proto"
)

func main() {
	if len(os.Args) < 4 {
		fmt.Fprintln(os.Stderr, "usage: gtfstrim FULL.zip OUT.zip REALTIME.pb...")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2], os.Args[3:]); err != nil {
		fmt.Fprintln(os.Stderr, "gtfstrim:", err)
		os.Exit(1)
	}
}

func run(full, out string, rt []string) error {
	trips, stops := map[string]bool{}, map[string]bool{}
	for _, p := range rt {
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var msg gtfs.FeedMessage
		if err := proto.Unmarshal(b, &msg); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		for _, e := range msg.GetEntity() {
			if tu := e.GetTripUpdate(); tu != nil {
				trips[tu.GetTrip().GetTripId()] = true
				for _, u := range tu.GetStopTimeUpdate() {
					stops[u.GetStopId()] = true
				}
			}
		}
	}
	z, err := zip.OpenReader(full)
	if err != nil {
		return err
	}
	defer z.Close()
	files := map[string]*zip.File{}
	for _, f := range z.File {
		files[f.Name] = f
	}
	o, err := os.Create(out)
	if err != nil {
		return err
	}
	w := zip.NewWriter(o)
	// stop_times.txt first: it adds the stops that stops.txt keeps.
	order := []string{"stop_times.txt"}
	for _, f := range z.File {
		if f.Name != "stop_times.txt" && f.Name != "shapes.txt" {
			order = append(order, f.Name)
		}
	}
	for _, name := range order {
		f := files[name]
		var keep func(col map[string]int, rec []string) bool
		switch name {
		case "trips.txt":
			keep = func(col map[string]int, rec []string) bool { return trips[rec[col["trip_id"]]] }
		case "stop_times.txt":
			keep = func(col map[string]int, rec []string) bool {
				if trips[rec[col["trip_id"]]] {
					stops[rec[col["stop_id"]]] = true
					return true
				}
				return false
			}
		case "stops.txt":
			keep = func(col map[string]int, rec []string) bool { return stops[rec[col["stop_id"]]] }
		}
		if err := copyFile(w, f, keep); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	return o.Close()
}

// copyFile copies f into w, only the lines keep accepts when keep is set
// (one CSV record per line: GTFS files of this feed hold no line breaks in fields).
func copyFile(w *zip.Writer, f *zip.File, keep func(map[string]int, []string) bool) error {
	r, err := f.Open()
	if err != nil {
		return err
	}
	defer r.Close()
	dst, err := w.CreateHeader(&zip.FileHeader{Name: f.Name, Method: zip.Deflate, Modified: f.Modified})
	if err != nil {
		return err
	}
	if keep == nil {
		_, err = io.Copy(dst, r)
		return err
	}
	br := bufio.NewReader(r)
	var col map[string]int
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			rec, perr := csv.NewReader(bytes.NewReader(line)).Read()
			if perr != nil {
				return perr
			}
			if col == nil {
				col = map[string]int{}
				for i, h := range rec {
					col[strings.TrimSpace(strings.TrimPrefix(h, "\uFEFF"))] = i
				}
				if _, err := dst.Write(line); err != nil {
					return err
				}
			} else if keep(col, rec) {
				if _, err := dst.Write(line); err != nil {
					return err
				}
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
