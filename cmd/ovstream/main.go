// Command ovstream turns Kafka streams of transit arrival predictions and
// vehicle positions into exact 5-minute delay statistics in PostgreSQL.
//
// Flag parsing and wiring only; see README.md for the commands and cli.go for
// how the command line is built.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// Exit codes.
const (
	exitOK     = 0
	exitError  = 1 // any failure not listed below
	exitUsage  = 2 // bad flags or arguments
	exitFenced = 3 // another instance claimed the pipeline (docs/design.md "Pipelines, instances and partitions")
)

func main() {
	// SIGINT and SIGTERM cancel the context; its cause names the signal.
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		if s, ok := <-sigs; ok {
			cancel(stopSignal{s})
		}
	}()
	code := execute(ctx, os.Args[1:], os.Stdout, os.Stderr)
	signal.Stop(sigs)
	os.Exit(code)
}
