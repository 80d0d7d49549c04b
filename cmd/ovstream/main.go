// Command ovstream turns Kafka streams of transit arrival predictions and
// vehicle positions into exact 5-minute delay statistics in PostgreSQL.
//
// Flag parsing and wiring only; see README.md for the commands.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// Exit codes.
const (
	exitOK     = 0
	exitError  = 1 // any failure not listed below
	exitUsage  = 2 // bad flags or arguments
	exitFenced = 3 // another instance claimed the pipeline (DESIGN.md, fencing epoch)
)

// command runs one subcommand with its arguments (without the subcommand name)
// and returns the process exit code.
type command struct {
	summary string
	run     func(ctx context.Context, args []string) int
}

var commands = map[string]command{}

func register(name, summary string, run func(ctx context.Context, args []string) int) {
	commands[name] = command{summary, run}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: ovstream COMMAND [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-9s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(os.Stderr, "\nRun 'ovstream COMMAND -h' for the flags of a command.")
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(exitUsage)
	}
	cmd, ok := commands[os.Args[1]]
	if !ok {
		if os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
			usage()
			os.Exit(exitOK)
		}
		fmt.Fprintf(os.Stderr, "ovstream: unknown command %q\n", os.Args[1])
		usage()
		os.Exit(exitUsage)
	}
	// SIGINT and SIGTERM cancel the context; its cause names the signal.
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		if s, ok := <-sigs; ok {
			cancel(stopSignal{s})
		}
	}()
	code := cmd.run(ctx, os.Args[2:])
	signal.Stop(sigs)
	os.Exit(code)
}

// envOr returns the environment variable name when set, else def.
func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}
