package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ovstream/ovstream/broker/embedded"
)

func init() { register(newBrokerCmd) }

// brokerFlags are the flags of broker.
type brokerFlags struct {
	addr, topics, dataDir string
}

func (f *brokerFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.addr, "addr", "127.0.0.1:9092", "`host:port` to listen on (port 0: a free port)")
	fs.StringVar(&f.topics, "topics", "arrival_predictions:6,vehicle_positions:3", "topics to create, `name:partitions,...`")
	fs.StringVar(&f.dataDir, "data-dir", "", "`directory` that keeps the log across restarts (default: memory only)")
}

func newBrokerCmd() *cobra.Command {
	var f brokerFlags
	c := &cobra.Command{Use: "broker", Short: "run the embedded Kafka-protocol broker (tests, demo)", Args: noArgs,
		Long: "Runs franz-go's kfake, a Kafka-protocol broker, as one node. With --data-dir every\n" +
			"acknowledged batch is fsynced, so the log survives a restart (kill -9 included);\n" +
			"topics that already exist there are kept as they are. Stops on SIGINT/SIGTERM."}
	f.register(c.Flags())
	c.RunE = run(func(ctx context.Context, stdout, stderr io.Writer, _ []string) int {
		return cmdBroker(ctx, &f, stdout, stderr)
	})
	return c
}

// cmdBroker runs the embedded broker until the context is cancelled (SIGINT/SIGTERM).
func cmdBroker(ctx context.Context, f *brokerFlags, stdout, stderr io.Writer) int {
	topics, err := embedded.ParseTopics(f.topics)
	if err != nil {
		fmt.Fprintf(stderr, "broker: --%v\n", err) // "topics: ..."
		return exitUsage
	}
	b, err := embedded.Start(embedded.Config{Addr: f.addr, Topics: topics, DataDir: f.dataDir})
	if err != nil {
		fmt.Fprintf(stderr, "broker: %v\n", err)
		return exitError
	}
	fmt.Fprintf(stdout, "broker listening on %s\n", b.Addr())
	<-ctx.Done()
	b.Close()
	return exitOK
}
