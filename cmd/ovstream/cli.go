package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/ovstream/ovstream/config"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// The command line is github.com/spf13/cobra with pflag flags. Each command
// file builds its command in a newXCmd function and registers it in init;
// its flags are registered in one function (xFlags.register(fs)). Every flag
// also takes its value from the environment and the --config file
// (package config), and the values are checked the same way for every command
// (config.CheckValues) before the command runs.

// builders build the top-level commands, in the order the files register them.
var builders []func() *cobra.Command

// register adds a top-level command; called from each command file's init.
func register(build func() *cobra.Command) { builders = append(builders, build) }

// action is the body of a command: it runs with its flags parsed, settled
// (flag > environment > config file > default) and checked, and returns the
// process exit code. It writes results to stdout, logs and errors to stderr.
type action func(ctx context.Context, stdout, stderr io.Writer, args []string) int

// exitCode is what a command's RunE returns when the command has already said
// why: the process exits with it.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// run turns an action into a cobra RunE. A body that returns exitUsage has
// printed its message; run adds the pointer to the command's help.
func run(a action) func(*cobra.Command, []string) error {
	return func(c *cobra.Command, args []string) error {
		code := a(c.Context(), c.OutOrStdout(), c.ErrOrStderr(), args)
		if code == exitUsage {
			fmt.Fprintln(c.ErrOrStderr(), helpHint(c))
		}
		if code != exitOK {
			return exitCode(code)
		}
		return nil
	}
}

func helpHint(c *cobra.Command) string {
	return fmt.Sprintf("Run '%s --help' for usage.", c.CommandPath())
}

// noArgs is cobra.Args for commands that take no positional arguments.
func noArgs(c *cobra.Command, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("unexpected argument %q (%s takes no arguments; flags start with --)", args[0], c.CommandPath())
	}
	return nil
}

// newRoot builds the ovstream command with every registered command, writing
// to stdout and stderr.
func newRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "ovstream",
		Short: "Kafka streams of transit predictions into exact delay statistics in PostgreSQL",
		Long: "ovstream turns Kafka streams of transit arrival predictions and vehicle positions into\n" +
			"exact 5-minute delay statistics in PostgreSQL (README.md, docs/).",
		Version:           versionString(),
		SilenceErrors:     true, // execute prints them, short
		SilenceUsage:      true,
		PersistentPreRunE: config.SettleAndCheck,
		RunE: func(c *cobra.Command, args []string) error {
			// `ovstream` alone: the list of commands, as a usage error.
			c.SetOut(c.ErrOrStderr())
			_ = c.Usage()
			return exitCode(exitUsage)
		},
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.PersistentFlags().String(config.Flag, "", "TOML `file` of settings: keys are flag names, at the top or under [COMMAND] (env OVSTREAM_CONFIG)")
	root.SetOut(stdout)
	root.SetErr(stderr)
	for _, build := range builders {
		root.AddCommand(build())
	}
	root.InitDefaultCompletionCmd() // ovstream completion bash|zsh|fish|powershell; after SetOut, which it keeps
	root.SetFlagErrorFunc(flagError)
	root.SetUsageTemplate(strings.TrimSuffix(root.UsageTemplate(), "\n") + "\n\n" +
		"Every flag can also be set as OVSTREAM_<FLAG> in the environment or in the --config file\n" +
		"(flag > environment > file > default; docs/configuration.md).\n")
	return root
}

// group returns a command that only holds subcommands (migrate, dlq): alone
// or with an unknown subcommand it is a usage error, with suggestions.
func group(use, short, long string, subs ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{Use: use, Short: short, Long: long,
		RunE: func(c *cobra.Command, args []string) error {
			var names []string
			for _, s := range c.Commands() {
				if s.IsAvailableCommand() {
					names = append(names, s.Name())
				}
			}
			if len(args) == 0 {
				return fmt.Errorf("a subcommand is required: %s", strings.Join(names, ", "))
			}
			msg := fmt.Sprintf("unknown subcommand %q", args[0])
			if s := c.SuggestionsFor(args[0]); len(s) > 0 {
				msg += "\n\nDid you mean this?\n\t" + strings.Join(s, "\n\t")
			}
			return errors.New(msg)
		}}
	c.SuggestionsMinimumDistance = 2
	c.AddCommand(subs...)
	return c
}

// flagError is cobra's FlagErrorFunc: a flag that does not parse, with the
// nearest flag name when the name was mistyped.
func flagError(c *cobra.Command, err error) error {
	var ne *pflag.NotExistError
	if errors.As(err, &ne) && strings.HasPrefix(err.Error(), "unknown flag: --") {
		typed := strings.TrimPrefix(err.Error(), "unknown flag: --")
		best, dist := "", 3 // suggest only within 2 edits
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if d := editDistance(typed, f.Name); d < dist && !f.Hidden {
				best, dist = f.Name, d
			}
		})
		if best != "" {
			return fmt.Errorf("%w (did you mean --%s?)", err, best)
		}
	}
	return err
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// execute runs the command line args and returns the process exit code:
// 0 ok (and --help, --version), 1 failure, 2 usage (unknown command or flag,
// bad value, stray argument: one short message and where to find the help),
// 3 fenced. A command reports its own failures; execute only prints usage
// errors.
func execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRoot(stdout, stderr)
	root.SetArgs(args)
	c, err := root.ExecuteContextC(ctx)
	var code exitCode
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &code):
		return int(code)
	}
	if c == nil {
		c = root
	}
	fmt.Fprintf(stderr, "%s: %v\n%s\n", c.CommandPath(), err, helpHint(c))
	return exitUsage
}
