package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/ovstream/ovstream/consumer/embedded"
)

func init() {
	register("broker", "run the embedded Kafka-protocol broker (tests, demo)", cmdBroker)
}

// cmdBroker runs the embedded broker until the context is cancelled (SIGINT/SIGTERM).
func cmdBroker(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("broker", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: ovstream broker [--addr HOST:PORT] [--topics NAME:N,...] [--data-dir DIR]\n\n"+
			"Runs franz-go's kfake, a Kafka-protocol broker, as one node. With --data-dir every\n"+
			"acknowledged batch is fsynced, so the log survives a restart (kill -9 included);\n"+
			"topics that already exist there are kept as they are. Stops on SIGINT/SIGTERM.")
		fs.PrintDefaults()
	}
	addr := fs.String("addr", "127.0.0.1:9092", "`host:port` to listen on (port 0: a free port)")
	topicsFlag := fs.String("topics", "arrival_predictions:6,vehicle_positions:3", "topics to create, `name:partitions,...`")
	dataDir := fs.String("data-dir", "", "`directory` that keeps the log across restarts (default: memory only)")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "broker: unexpected arguments %q\n", fs.Args())
		return exitUsage
	}
	topics, err := embedded.ParseTopics(*topicsFlag)
	if err != nil {
		fmt.Fprintf(os.Stderr, "broker: %v\n", err)
		return exitUsage
	}
	b, err := embedded.Start(embedded.Config{Addr: *addr, Topics: topics, DataDir: *dataDir})
	if err != nil {
		fmt.Fprintf(os.Stderr, "broker: %v\n", err)
		return exitError
	}
	fmt.Printf("broker listening on %s\n", b.Addr())
	<-ctx.Done()
	b.Close()
	return exitOK
}
