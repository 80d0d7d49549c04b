package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/ovstream/ovstream/consumer/gtfsrt"
	"github.com/ovstream/ovstream/consumer/gtfsstatic"
	"github.com/ovstream/ovstream/consumer/produce"
)

func init() {
	register("produce", "load GTFS-realtime files or JSONL lines into the topics", cmdProduce)
}

// pathsFlag collects a repeatable path flag.
type pathsFlag []string

func (p *pathsFlag) String() string     { return strings.Join(*p, ",") }
func (p *pathsFlag) Set(s string) error { *p = append(*p, s); return nil }

const produceUsage = `usage: ovstream produce [flags] [--gtfs-static ZIP_OR_DIR] --gtfs-rt PATH [PATH...]
       ovstream produce [flags] [--gtfs-static ZIP_OR_DIR] --gtfs-rt-url URL [--gtfs-rt-url URL...] [--interval 30s] [--polls N]
       ovstream produce [flags] --jsonl FILE --topic TOPIC

GTFS-realtime: each PATH is a FeedMessage file or a folder searched recursively
for *.pb files; --gtfs-rt may be repeated, and paths given without a flag are
GTFS-realtime paths too. Files are read in feed-header-timestamp order. Stop time
updates become predictions (arrival delay, else departure delay), keyed by
trip_id; vehicle positions become positions, keyed by vehicle_id. Each (trip,
stop, stop_sequence, timestamp) and each (vehicle, timestamp) is produced once.
The operator comes from OVapi entity ids (Date:Operator:Line:Journey), else from
--operator; a feed with neither is refused, naming the file.

Static GTFS: --gtfs-static names the agency's static feed (its zip, or a folder of
its .txt files) for the realtime files or URLs of that one agency. A stop time
update that gives a predicted time and no delay then gets as delay the predicted
time minus the scheduled time (stop_times.txt, agency time zone, calendar.txt and
calendar_dates.txt; service day = the trip's start_date, else the day it runs
nearest the predicted time); one whose trip, stop or service day the schedule
does not hold is skipped as "time only: WHY". Predictions also get line_name,
line_short_name and stop_name from routes.txt and stops.txt. Without it such
updates are skipped as "no delay". One agency per produce: run one produce per
agency, each with its own static feed.

Live GTFS-realtime: each --gtfs-rt-url (TripUpdates, VehiclePositions or a
combined feed) is fetched every --interval, with a --http-timeout per request,
conditional requests (If-None-Match with the last ETag, If-Modified-Since with
the last Last-Modified: a 304 costs nothing), and up to --http-attempts tries
with doubling backoff on network errors, timeouts, 5xx and 429. The once-only
rule holds across polls (per URL; a key is forgotten once the feed stopped
carrying it and it is older than --retention), so a snapshot repeated poll after
poll produces each event once. One progress line per poll on stdout. Records
the producer gave up on are produced first at the next poll. Runs until
SIGINT/SIGTERM or --polls polls (exit 0; 1 if records are still unproduced).
URLs are printed without their query (API keys); --http-header values never.

JSONL: each non-empty line of FILE ("-" = stdin) is produced as it is, valid or
not, to TOPIC; its key is the line's trip_id (vehicle_id first when TOPIC is the
positions topic), or none.

The producer is idempotent with acks=all; the command returns once every record
is acknowledged. Exit 1 when something is refused or fails.

flags:`

// cmdProduce produces GTFS-realtime files or JSONL lines.
func cmdProduce(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("produce", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), produceUsage)
		fs.PrintDefaults()
	}
	var gtfsPaths pathsFlag
	brokers := fs.String("brokers", envOr("KAFKA_BROKERS", "127.0.0.1:9092"), "Kafka bootstrap brokers, comma-separated `host:port` (env KAFKA_BROKERS)")
	fs.Var(&gtfsPaths, "gtfs-rt", "GTFS-realtime `path` (file or folder of *.pb), repeatable")
	var feedURLs, httpHeaders pathsFlag
	fs.Var(&feedURLs, "gtfs-rt-url", "live GTFS-realtime feed `URL` to poll, repeatable")
	interval := fs.Duration("interval", 30*time.Second, "time between the starts of two polls (--gtfs-rt-url)")
	httpTimeout := fs.Duration("http-timeout", 20*time.Second, "timeout of one HTTP request, body included (--gtfs-rt-url)")
	httpAttempts := fs.Int("http-attempts", 3, "tries per URL and poll on network errors, timeouts, 5xx, 429 (--gtfs-rt-url)")
	polls := fs.Int("polls", 0, "stop after `N` polls (0: until SIGTERM) (--gtfs-rt-url)")
	retention := fs.Duration("retention", gtfsrt.DefaultRetention, "how long a key absent from the feed is remembered for the once-only rule (--gtfs-rt-url)")
	fs.Var(&httpHeaders, "http-header", "`'Name: value'` header for every feed request (API keys), repeatable; never printed")
	var kafka kafkaFlags
	kafka.register(fs)
	operator := fs.String("operator", "", "operator `id` for feeds that carry none (e.g. AT for Auckland)")
	lineID := fs.String("line-id", gtfsrt.LineIDRouteID, "what a line is: `route_id` or route_short_name (from --gtfs-static; README: produce)")
	staticPath := fs.String("gtfs-static", "", "the agency's static GTFS feed (`zip or folder`): delays for updates that give only a predicted time, and names")
	predTopic := fs.String("predictions-topic", "arrival_predictions", "`topic` for arrival predictions")
	posTopic := fs.String("positions-topic", "vehicle_positions", "`topic` for vehicle positions")
	jsonlFile := fs.String("jsonl", "", "JSONL `file` to produce line by line (\"-\" = stdin)")
	topic := fs.String("topic", "", "`topic` for --jsonl")
	progressEvery := fs.Duration("progress-interval", 10*time.Second, "--gtfs-rt: time between two progress lines on stderr, one per file read (0: every file)")

	// Flags may follow paths: parse, take one positional, go on.
	rest := args
	for {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return exitOK
			}
			return exitUsage
		}
		if fs.NArg() == 0 {
			break
		}
		gtfsPaths = append(gtfsPaths, fs.Arg(0))
		rest = fs.Args()[1:]
	}

	var brokerList []string
	for _, b := range strings.Split(*brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			brokerList = append(brokerList, b)
		}
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "produce: "+format+"\n", a...)
		fmt.Fprintln(os.Stderr, "Run 'ovstream produce -h' for usage.")
		return exitUsage
	}
	switch {
	case len(brokerList) == 0:
		return usageErr("no brokers (--brokers or KAFKA_BROKERS)")
	case btoi(*jsonlFile != "")+btoi(len(gtfsPaths) > 0)+btoi(len(feedURLs) > 0) > 1:
		return usageErr("give one of --gtfs-rt paths, --gtfs-rt-url or --jsonl")
	case *jsonlFile == "" && len(gtfsPaths) == 0 && len(feedURLs) == 0:
		return usageErr("nothing to produce: give --gtfs-rt PATH, --gtfs-rt-url URL or --jsonl FILE --topic TOPIC")
	case *progressEvery < 0:
		return usageErr("--progress-interval %v: want 0 (every file) or a positive duration", *progressEvery)
	case *interval <= 0 || *httpTimeout <= 0 || *httpAttempts < 1 || *polls < 0:
		return usageErr("--interval and --http-timeout must be positive, --http-attempts at least 1, --polls 0 or more")
	case *jsonlFile != "" && *topic == "":
		return usageErr("--jsonl needs --topic")
	case *jsonlFile == "" && *topic != "":
		return usageErr("--topic is for --jsonl; GTFS-realtime uses --predictions-topic and --positions-topic")
	case *jsonlFile != "" && *staticPath != "":
		return usageErr("--gtfs-static is for --gtfs-rt and --gtfs-rt-url")
	}
	opt := gtfsrt.Options{Operator: *operator, LineID: *lineID}
	if *staticPath != "" {
		sched, err := gtfsstatic.Load(*staticPath)
		if err != nil {
			fmt.Fprintln(os.Stderr, "ovstream produce:", err)
			return exitError
		}
		st := sched.Stats()
		fmt.Printf("static GTFS %s: %d trips, %d stop times, %d services, time zone %s\n",
			*staticPath, st.Trips, st.StopTimes, st.Services, st.TimeZone)
		opt.Schedule = sched
	}
	if err := opt.Validate(); err != nil {
		return usageErr("%v", err)
	}
	sc := produce.NewSaramaConfig("")
	if err := kafka.apply(sc); err != nil {
		return usageErr("%v", err)
	}
	cfg := produce.Config{Brokers: brokerList, Sarama: sc}
	stderr := newRedactingWriter(os.Stderr, spellings(kafka.secrets()))
	if len(feedURLs) == 0 { // a live poller starts anyway: it keeps records until Kafka is back
		if err := kafkaPreflight(brokerList, sc); err != nil {
			fmt.Fprintln(stderr, "ovstream produce:", err)
			return exitError
		}
	}

	if len(feedURLs) > 0 {
		header := http.Header{}
		for _, h := range httpHeaders {
			name, value, ok := strings.Cut(h, ":")
			if !ok || strings.TrimSpace(name) == "" {
				return usageErr("--http-header: want 'Name: value'")
			}
			header.Add(strings.TrimSpace(name), strings.TrimSpace(value))
		}
		err := produce.Poll(ctx, produce.PollConfig{
			URLs: feedURLs, Interval: *interval, Timeout: *httpTimeout, Attempts: *httpAttempts, Polls: *polls,
			Header: header, Options: opt, Retention: *retention,
			Topics: produce.Topics{Predictions: *predTopic, Positions: *posTopic}, Producer: cfg,
			Progress: func(r produce.PollReport) { fmt.Println(pollLine(r)) },
		})
		if err != nil && !errors.Is(err, context.Canceled) {
			fmt.Fprintf(stderr, "ovstream produce: %v\n", err)
			return exitError
		}
		return exitOK
	}

	if *jsonlFile != "" {
		var r io.Reader = os.Stdin
		if *jsonlFile != "-" {
			f, err := os.Open(*jsonlFile)
			if err != nil {
				fmt.Fprintf(os.Stderr, "produce: %v\n", err)
				return exitError
			}
			defer f.Close()
			r = f
		}
		jc, err := produce.JSONL(ctx, cfg, r, *topic, produce.KeyFields(*topic == *posTopic))
		fmt.Printf("produced %d lines of %s to %s; skipped: %d empty lines; %d produced without a key (no trip_id/vehicle_id string or not JSON)",
			jc.Produced, *jsonlFile, *topic, jc.Empty, jc.NoKey)
		if jc.Failed > 0 {
			fmt.Printf("; %d failed", jc.Failed)
		}
		fmt.Println()
		if err != nil {
			fmt.Fprintf(stderr, "ovstream produce: %s: %v\n", *jsonlFile, err)
			return exitError
		}
		return exitOK
	}

	opt.OnFile = fileProgress(os.Stderr, *progressEvery)
	res, err := gtfsrt.Load(gtfsPaths, opt)
	if err != nil {
		fmt.Fprintf(stderr, "ovstream produce: %v\n", err)
		return exitError
	}
	counts, err := produce.GTFSRT(ctx, cfg, res, produce.Topics{Predictions: *predTopic, Positions: *posTopic})
	fmt.Printf("produced %d predictions to %s, %d positions to %s from %d files; skipped: %s",
		counts.Produced(*predTopic), *predTopic, counts.Produced(*posTopic), *posTopic, res.Files, res.SkipSummary())
	if n := counts.Failed(); n > 0 {
		fmt.Printf("; %d failed", n)
	}
	fmt.Println()
	if err != nil {
		fmt.Fprintf(stderr, "ovstream produce: %v\n", err)
		return exitError
	}
	return exitOK
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// pollLine is the progress line of one poll.
func pollLine(r produce.PollReport) string {
	var b strings.Builder
	fmt.Fprintf(&b, "poll %d at %s:", r.Poll, r.Started.UTC().Format(time.RFC3339))
	preds, pos := 0, 0
	skipped := map[string]int{}
	for i, f := range r.Fetches {
		if i > 0 {
			b.WriteString(";")
		}
		fmt.Fprintf(&b, " %s", f.URL)
		switch {
		case f.Err != nil:
			fmt.Fprintf(&b, " FAILED (%v)", f.Err)
		case f.NotModified:
			b.WriteString(" 304 not modified")
		default:
			fmt.Fprintf(&b, " %d, %d bytes, feed time %s, %d new predictions, %d new positions",
				f.Status, f.Bytes, f.FeedTime.Format(time.RFC3339), f.Predictions, f.Positions)
		}
		if f.Attempts > 1 {
			fmt.Fprintf(&b, " (%d attempts)", f.Attempts)
		}
		preds += f.Predictions
		pos += f.Positions
		for k, v := range f.Skipped {
			skipped[k] += v
		}
	}
	res := gtfsrt.Result{Skipped: skipped}
	produced := 0
	for _, tc := range r.Produced {
		produced += tc.Produced
	}
	fmt.Fprintf(&b, "; produced %d records", produced)
	fmt.Fprintf(&b, "; skipped: %s", res.SkipSummary())
	if r.Pending > 0 {
		fmt.Fprintf(&b, "; %d records NOT produced yet (retried next poll): %v", r.Pending, r.ProduceErr)
	}
	return b.String()
}

// fileProgress returns the progress report of `produce --gtfs-rt`: a line on
// w for a file read when every has passed since the last line (0: for each
// file), and for the last file, with the new events it gave and the totals.
func fileProgress(w io.Writer, every time.Duration) func(gtfsrt.FileDone) {
	var last time.Time
	var preds, pos int
	began := time.Now()
	return func(f gtfsrt.FileDone) {
		preds += f.Predictions
		pos += f.Positions
		now := time.Now()
		if now.Sub(last) < every && f.N != f.Of {
			return
		}
		last = now
		at := "none"
		if !f.FeedTime.IsZero() {
			at = f.FeedTime.Format(time.RFC3339)
		}
		fmt.Fprintf(w, "read file %d/%d %s (feed time %s): %d new predictions, %d new positions; so far %d predictions, %d positions in %s\n",
			f.N, f.Of, f.Path, at, f.Predictions, f.Positions, preds, pos, now.Sub(began).Round(time.Millisecond))
	}
}
