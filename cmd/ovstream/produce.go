package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/ovstream/ovstream/consumer/gtfsrt"
	"github.com/ovstream/ovstream/consumer/produce"
)

func init() {
	register("produce", "load GTFS-realtime files or JSONL lines into the topics", cmdProduce)
}

// pathsFlag collects a repeatable path flag.
type pathsFlag []string

func (p *pathsFlag) String() string     { return strings.Join(*p, ",") }
func (p *pathsFlag) Set(s string) error { *p = append(*p, s); return nil }

const produceUsage = `usage: ovstream produce [flags] --gtfs-rt PATH [PATH...]
       ovstream produce [flags] --jsonl FILE --topic TOPIC

GTFS-realtime: each PATH is a FeedMessage file or a folder searched recursively
for *.pb files; --gtfs-rt may be repeated, and paths given without a flag are
GTFS-realtime paths too. Files are read in feed-header-timestamp order. Stop time
updates become predictions (arrival delay, else departure delay), keyed by
trip_id; vehicle positions become positions, keyed by vehicle_id. Each (trip,
stop, stop_sequence, timestamp) and each (vehicle, timestamp) is produced once.
The operator comes from OVapi entity ids (Date:Operator:Line:Journey), else from
--operator; a feed with neither is refused, naming the file.

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
	operator := fs.String("operator", "", "operator `id` for feeds that carry none (e.g. AT for Auckland)")
	predTopic := fs.String("predictions-topic", "arrival_predictions", "`topic` for arrival predictions")
	posTopic := fs.String("positions-topic", "vehicle_positions", "`topic` for vehicle positions")
	jsonlFile := fs.String("jsonl", "", "JSONL `file` to produce line by line (\"-\" = stdin)")
	topic := fs.String("topic", "", "`topic` for --jsonl")

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
	case *jsonlFile != "" && len(gtfsPaths) > 0:
		return usageErr("give --gtfs-rt paths or --jsonl, not both")
	case *jsonlFile == "" && len(gtfsPaths) == 0:
		return usageErr("nothing to produce: give --gtfs-rt PATH or --jsonl FILE --topic TOPIC")
	case *jsonlFile != "" && *topic == "":
		return usageErr("--jsonl needs --topic")
	case *jsonlFile == "" && *topic != "":
		return usageErr("--topic is for --jsonl; GTFS-realtime uses --predictions-topic and --positions-topic")
	}
	cfg := produce.Config{Brokers: brokerList}

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
			fmt.Fprintf(os.Stderr, "ovstream produce: %s: %v\n", *jsonlFile, err)
			return exitError
		}
		return exitOK
	}

	res, err := gtfsrt.Load(gtfsPaths, gtfsrt.Options{Operator: *operator})
	if err != nil {
		fmt.Fprintf(os.Stderr, "ovstream produce: %v\n", err)
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
		fmt.Fprintf(os.Stderr, "ovstream produce: %v\n", err)
		return exitError
	}
	return exitOK
}
