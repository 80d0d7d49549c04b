package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/ovstream/ovstream/config"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ovstream/ovstream/feed/gtfsrt"
	"github.com/ovstream/ovstream/feed/gtfsstatic"
	"github.com/ovstream/ovstream/feed/produce"
	"github.com/ovstream/ovstream/redact"
)

func init() { register(newProduceCmd) }

const produceExample = `  ovstream produce [flags] [--gtfs-static ZIP_OR_DIR] --gtfs-rt PATH [PATH...]
  ovstream produce [flags] [--gtfs-static ZIP_OR_DIR] --gtfs-rt-url URL [--gtfs-rt-url URL...] [--interval 30s] [--polls N]
  ovstream produce [flags] --jsonl FILE --topic TOPIC`

const produceLong = `Loads GTFS-realtime files, live GTFS-realtime feeds or JSONL lines into the topics.

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
carrying it and it is older than --key-retention), so a snapshot repeated poll after
poll produces each event once. One progress line per poll on stdout. Records
the producer gave up on are produced first at the next poll. Runs until
SIGINT/SIGTERM or --polls polls (exit 0; 1 if records are still unproduced).
A URL that never gave a feed is exit 1 naming it and its status: at the first
poll whose answer cannot change by asking again (404, 401, 403, a body that is
no feed), else after --polls polls; once it gave one, failures are tolerated.
URLs are printed without their query (API keys); --http-header values never.

JSONL: each non-empty line of FILE ("-" = stdin) is produced as it is, valid or
not, to TOPIC; its key is the line's trip_id (vehicle_id first when TOPIC is the
positions topic), or none.

Topics: produce checks that its topics exist before producing and never creates
one by producing to it, whatever the broker's auto.create.topics.enable: a
missing topic is exit 1 naming it; --create-topics creates it with the broker's
default partitions and replication.

The producer is idempotent with acks=all; the command returns once every record
is acknowledged. Exit 1 when something is refused or fails.`

// produceFlags are the flags of produce.
type produceFlags struct {
	brokers                      string
	gtfsPaths, feedURLs, headers []string
	interval, httpTimeout        time.Duration
	httpAttempts, polls          int
	retention, progressEvery     time.Duration
	operator, staticPath, lineID string
	predTopic, posTopic          string
	jsonlFile, topic             string
	createTopics                 bool
	kafka                        kafkaFlags
}

func (f *produceFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.brokers, "brokers", "127.0.0.1:9092", "Kafka bootstrap brokers, comma-separated `host:port` (env KAFKA_BROKERS)")
	fs.StringArrayVar(&f.gtfsPaths, "gtfs-rt", nil, "GTFS-realtime `path` (file or folder of *.pb), repeatable")
	fs.StringArrayVar(&f.feedURLs, "gtfs-rt-url", nil, "live GTFS-realtime feed `URL` to poll, repeatable")
	fs.DurationVar(&f.interval, "interval", 30*time.Second, "time between the starts of two polls (--gtfs-rt-url)")
	fs.DurationVar(&f.httpTimeout, "http-timeout", 20*time.Second, "timeout of one HTTP request, body included (--gtfs-rt-url)")
	fs.IntVar(&f.httpAttempts, "http-attempts", 3, "tries per URL and poll on network errors, timeouts, 5xx, 429 (--gtfs-rt-url)")
	fs.IntVar(&f.polls, "polls", 0, "stop after `N` polls (0: until SIGTERM) (--gtfs-rt-url)")
	fs.DurationVar(&f.retention, "key-retention", gtfsrt.DefaultRetention, "how long a key absent from the feed is remembered for the once-only rule (--gtfs-rt-url)")
	// The old name, from the command line only: OVSTREAM_RETENTION and a
	// config file's retention are run's (it drops partitions).
	fs.DurationVar(&f.retention, "retention", gtfsrt.DefaultRetention, "")
	config.CLIOnly(fs, "retention")
	if err := fs.MarkDeprecated("retention", "use --key-retention"); err != nil {
		panic(err)
	}
	fs.StringArrayVar(&f.headers, "http-header", nil, "`'Name: value'` header for every feed request (API keys), repeatable; never printed")
	f.kafka.register(fs)
	fs.StringVar(&f.operator, "operator", "", "operator `id` for feeds that carry none (e.g. AT for Auckland)")
	fs.StringVar(&f.lineID, "line-id", gtfsrt.LineIDRouteID, "what a line is: `route_id` or route_short_name (from --gtfs-static; docs/commands.md)")
	fs.StringVar(&f.staticPath, "gtfs-static", "", "the agency's static GTFS feed (`zip or folder`): delays for updates that give only a predicted time, and names")
	fs.StringVar(&f.predTopic, "predictions-topic", "arrival_predictions", "`topic` for arrival predictions")
	fs.StringVar(&f.posTopic, "positions-topic", "vehicle_positions", "`topic` for vehicle positions")
	fs.StringVar(&f.jsonlFile, "jsonl", "", "JSONL `file` to produce line by line (\"-\" = stdin)")
	fs.StringVar(&f.topic, "topic", "", "`topic` for --jsonl")
	fs.BoolVar(&f.createTopics, "create-topics", false, "create a missing topic (the broker's default partitions and replication) instead of refusing it")
	fs.DurationVar(&f.progressEvery, "progress-interval", 10*time.Second, "--gtfs-rt: time between two progress lines on stderr, one per file read (0: every file)")
	config.ZeroMeans(fs, "progress-interval", "a line for every file")
}

func newProduceCmd() *cobra.Command {
	var f produceFlags
	c := &cobra.Command{Use: "produce [PATH...]", Short: "load GTFS-realtime files or JSONL lines into the topics",
		Long: produceLong, Example: produceExample, Args: cobra.ArbitraryArgs}
	f.register(c.Flags())
	c.RunE = run(func(ctx context.Context, stdout, stderr io.Writer, args []string) int {
		f.gtfsPaths = append(f.gtfsPaths, args...) // paths given without a flag are --gtfs-rt paths
		return cmdProduce(ctx, &f, stdout, stderr)
	})
	return c
}

// cmdProduce produces GTFS-realtime files or JSONL lines.
func cmdProduce(ctx context.Context, f *produceFlags, stdout, stderr io.Writer) int {
	var brokerList []string
	for _, b := range strings.Split(f.brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			brokerList = append(brokerList, b)
		}
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "produce: "+format+"\n", a...)
		return exitUsage
	}
	switch {
	case len(brokerList) == 0:
		return usageErr("no brokers (--brokers or KAFKA_BROKERS)")
	case btoi(f.jsonlFile != "")+btoi(len(f.gtfsPaths) > 0)+btoi(len(f.feedURLs) > 0) > 1:
		return usageErr("give one of --gtfs-rt paths, --gtfs-rt-url or --jsonl")
	case f.jsonlFile == "" && len(f.gtfsPaths) == 0 && len(f.feedURLs) == 0:
		return usageErr("nothing to produce: give --gtfs-rt PATH, --gtfs-rt-url URL or --jsonl FILE --topic TOPIC")
	case f.httpAttempts < 1:
		return usageErr("--http-attempts %d: want 1 or more", f.httpAttempts)
	case f.polls < 0:
		return usageErr("--polls %d: want 0 (until SIGTERM) or more", f.polls)
	case f.jsonlFile != "" && f.topic == "":
		return usageErr("--jsonl needs --topic")
	case f.jsonlFile == "" && f.topic != "":
		return usageErr("--topic is for --jsonl; GTFS-realtime uses --predictions-topic and --positions-topic")
	case f.jsonlFile != "" && f.staticPath != "":
		return usageErr("--gtfs-static is for --gtfs-rt and --gtfs-rt-url")
	}
	opt := gtfsrt.Options{Operator: f.operator, LineID: f.lineID}
	if f.staticPath != "" {
		sched, err := gtfsstatic.Load(f.staticPath)
		if err != nil {
			fmt.Fprintln(stderr, "ovstream produce:", err)
			return exitError
		}
		st := sched.Stats()
		fmt.Fprintf(stdout, "static GTFS %s: %d trips, %d stop times, %d services, time zone %s\n",
			f.staticPath, st.Trips, st.StopTimes, st.Services, st.TimeZone)
		opt.Schedule = sched
	}
	if err := opt.Validate(); err != nil {
		return usageErr("%v", err)
	}
	sc := produce.NewSaramaConfig("")
	if err := f.kafka.apply(sc); err != nil {
		return usageErr("%v", err)
	}
	cfg := produce.Config{Brokers: brokerList, Sarama: sc}
	stderr = redact.NewWriter(stderr, redact.Spellings(f.kafka.secrets()))
	if len(f.feedURLs) == 0 { // a live poller starts anyway: it keeps records until Kafka is back
		if err := kafkaPreflight(brokerList, sc); err != nil {
			fmt.Fprintln(stderr, "ovstream produce:", err)
			return exitError
		}
	}

	if len(f.feedURLs) > 0 {
		// The poller starts while Kafka is down too (it keeps records until
		// Kafka is back); a missing topic is refused when Kafka answers.
		if code := ensureTopics(cfg, []string{f.predTopic, f.posTopic}, f.createTopics, true, stdout, stderr); code != exitOK {
			return code
		}
		header := http.Header{}
		for _, h := range f.headers {
			name, value, ok := strings.Cut(h, ":")
			if !ok || strings.TrimSpace(name) == "" {
				return usageErr("--http-header: want 'Name: value'")
			}
			header.Add(strings.TrimSpace(name), strings.TrimSpace(value))
		}
		err := produce.Poll(ctx, produce.PollConfig{
			URLs: f.feedURLs, Interval: f.interval, Timeout: f.httpTimeout, Attempts: f.httpAttempts, Polls: f.polls,
			Header: header, Options: opt, Retention: f.retention,
			Topics: produce.Topics{Predictions: f.predTopic, Positions: f.posTopic}, Producer: cfg,
			Progress: func(r produce.PollReport) { fmt.Fprintln(stdout, r) },
		})
		if err != nil && !errors.Is(err, context.Canceled) {
			fmt.Fprintf(stderr, "ovstream produce: %v\n", err)
			return exitError
		}
		return exitOK
	}

	if f.jsonlFile != "" {
		var r io.Reader = os.Stdin
		if f.jsonlFile != "-" {
			file, err := os.Open(f.jsonlFile)
			if err != nil {
				fmt.Fprintf(stderr, "produce: %v\n", err)
				return exitError
			}
			defer file.Close()
			r = file
		}
		if code := ensureTopics(cfg, []string{f.topic}, f.createTopics, false, stdout, stderr); code != exitOK {
			return code
		}
		jc, err := produce.JSONL(ctx, cfg, r, f.topic, produce.KeyFields(f.topic == f.posTopic))
		fmt.Fprintf(stdout, "produced %d lines of %s to %s; skipped: %d empty lines; %d produced without a key (no trip_id/vehicle_id string or not JSON)",
			jc.Produced, f.jsonlFile, f.topic, jc.Empty, jc.NoKey)
		if jc.Failed > 0 {
			fmt.Fprintf(stdout, "; %d failed", jc.Failed)
		}
		fmt.Fprintln(stdout)
		if err != nil {
			fmt.Fprintf(stderr, "ovstream produce: %s: %v\n", f.jsonlFile, err)
			return exitError
		}
		return exitOK
	}

	opt.OnFile = gtfsrt.ProgressLines(stderr, f.progressEvery)
	res, err := gtfsrt.Load(f.gtfsPaths, opt)
	if err != nil {
		fmt.Fprintf(stderr, "ovstream produce: %v\n", err)
		return exitError
	}
	var needed []string // only the topics that get records
	if len(res.Predictions) > 0 {
		needed = append(needed, f.predTopic)
	}
	if len(res.Positions) > 0 {
		needed = append(needed, f.posTopic)
	}
	if code := ensureTopics(cfg, needed, f.createTopics, false, stdout, stderr); code != exitOK {
		return code
	}
	counts, err := produce.GTFSRT(ctx, cfg, res, produce.Topics{Predictions: f.predTopic, Positions: f.posTopic})
	fmt.Fprintf(stdout, "produced %d predictions to %s, %d positions to %s from %d files; skipped: %s",
		counts.Produced(f.predTopic), f.predTopic, counts.Produced(f.posTopic), f.posTopic, res.Files, res.SkipSummary())
	if n := counts.Failed(); n > 0 {
		fmt.Fprintf(stdout, "; %d failed", n)
	}
	fmt.Fprintln(stdout)
	if err != nil {
		fmt.Fprintf(stderr, "ovstream produce: %v\n", err)
		return exitError
	}
	return exitOK
}

// ensureTopics checks that the brokers have topics (produce.CheckTopics),
// creating the missing ones when create is set, and says what it created.
// A missing topic is exit 1 naming it; so is any other failure unless
// tolerant (the live poller, which starts while Kafka is down).
func ensureTopics(cfg produce.Config, topics []string, create, tolerant bool, stdout, stderr io.Writer) int {
	created, err := produce.CheckTopics(cfg, topics, create)
	for _, t := range created {
		fmt.Fprintf(stdout, "created topic %s (the broker's default partitions and replication)\n", t)
	}
	var missing *produce.MissingTopicError
	switch {
	case errors.As(err, &missing):
		fmt.Fprintf(stderr, "ovstream produce: %v: create it first, or give --create-topics to create it with the broker's default partitions\n", err)
		return exitError
	case err != nil && !tolerant:
		fmt.Fprintln(stderr, "ovstream produce:", err)
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
