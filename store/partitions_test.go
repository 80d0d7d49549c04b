package store

import (
	"fmt"
	"testing"
	"time"
)

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

func TestDayOf(t *testing.T) {
	for in, want := range map[string]string{
		"2016-05-18T00:00:00Z":             "2016-05-18T00:00:00Z",
		"2016-05-18T23:59:59.999999Z":      "2016-05-18T00:00:00Z",
		"2016-05-19T01:30:00+02:00":        "2016-05-18T00:00:00Z", // 23:30 UTC
		"1969-12-31T23:59:59Z":             "1969-12-31T00:00:00Z",
		"1900-03-01T12:00:00Z":             "1900-03-01T00:00:00Z",
		"0001-01-01T00:00:01Z":             "0001-01-01T00:00:00Z",
		"9999-12-31T23:55:00Z":             "9999-12-31T00:00:00Z",
		"2026-03-29T01:30:00.123456+01:00": "2026-03-29T00:00:00Z",
	} {
		if got := dayOf(utc(in)).Format(time.RFC3339); got != want {
			t.Errorf("dayOf(%s) = %s, want %s", in, got, want)
		}
	}
}

// The cache answers which window starts have a partition, which UTC days
// are missing, and whether the day after the newest window is wanted.
func TestPartitionCache(t *testing.T) {
	day := func(s string) PartitionRange {
		d := utc(s + "T00:00:00Z")
		return PartitionRange{Name: "delay_aggregates_" + d.Format("20060102"), Start: d, End: d.Add(PartitionSpan)}
	}
	var c partitionCache
	for _, r := range []PartitionRange{day("2016-05-18"), day("2016-05-16"), day("2016-05-17"), day("2016-05-17")} {
		c.add(r)
	}
	if len(c.known) != 3 {
		t.Fatalf("known %v, want 3 days", c.known)
	}
	for ts, want := range map[string]bool{
		"2016-05-15T23:59:59.999999Z": false, "2016-05-16T00:00:00Z": true, "2016-05-17T12:00:00Z": true,
		"2016-05-18T23:55:00Z": true, "2016-05-19T00:00:00Z": false, "2014-11-30T10:00:00Z": false,
	} {
		if got := c.covers(utc(ts)); got != want {
			t.Errorf("covers(%s) = %v, want %v", ts, got, want)
		}
	}
	starts := []time.Time{utc("2016-05-18T23:55:00Z"), utc("2016-05-18T23:55:00Z"), utc("2016-05-20T00:05:00Z"),
		utc("2014-11-30T10:00:00Z"), utc("2016-05-20T00:00:00Z"), utc("2016-05-17T00:00:00Z")}
	missing, latest := c.missingDays(starts)
	if got := fmt.Sprint(missing); got != "[2014-11-30 00:00:00 +0000 UTC 2016-05-20 00:00:00 +0000 UTC]" {
		t.Errorf("missing %s", got)
	}
	if !latest.Equal(utc("2016-05-20T00:05:00Z")) {
		t.Errorf("latest %v", latest)
	}
	// Ahead: only for a window in the newest partition, when the next day has none.
	for ts, want := range map[string]bool{
		"2016-05-18T23:55:00Z": true,  // newest partition, 19th missing
		"2016-05-17T12:00:00Z": false, // behind the newest (a backfill): none
		"2014-11-30T10:00:00Z": false,
	} {
		if got := c.wantsAhead(utc(ts)); got != want {
			t.Errorf("wantsAhead(%s) = %v, want %v", ts, got, want)
		}
	}
	c.add(day("2016-05-19"))
	if c.wantsAhead(utc("2016-05-18T23:55:00Z")) {
		t.Error("wantsAhead after the 19th was made")
	}
	c.aheadNotYet = time.Now().Add(time.Minute)
	if c.wantsAhead(utc("2016-05-19T10:00:00Z")) {
		t.Error("wantsAhead within a minute of a failed try")
	}
	c.reset()
	if c.loaded || len(c.known) != 0 || c.covers(utc("2016-05-17T12:00:00Z")) {
		t.Errorf("after reset: %+v", c)
	}
}
