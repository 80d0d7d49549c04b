package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/ovstream/ovstream/config"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ovstream/ovstream/migrations"
	"github.com/ovstream/ovstream/redact"
	"github.com/ovstream/ovstream/store"
)

func init() { register(newMigrateCmd) }

const defaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/ovstream?sslmode=disable"

// migrateFlags are the flags of migrate's subcommands.
type migrateFlags struct {
	databaseURL    string
	connectTimeout time.Duration
	yes            bool // down only
}

// register defines the flag every migrate subcommand takes (before or after
// the subcommand's name).
func (f *migrateFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.databaseURL, "database-url", defaultDatabaseURL, "PostgreSQL URL (env DATABASE_URL)")
	fs.DurationVar(&f.connectTimeout, "connect-timeout", 15*time.Second, connectTimeoutUsage)
}

func newMigrateCmd() *cobra.Command {
	var f migrateFlags
	sub := func(use, short string, args cobra.PositionalArgs, a func(ctx context.Context, f *migrateFlags, stdout, stderr io.Writer, args []string) int) *cobra.Command {
		return &cobra.Command{Use: use, Short: short, Args: args,
			RunE: run(func(ctx context.Context, stdout, stderr io.Writer, args []string) int {
				stderr = redact.NewWriter(stderr, redact.DatabaseSecrets(f.databaseURL))
				if use == "down [V]" && !f.yes {
					return a(ctx, &f, stdout, stderr, args) // refused before it connects
				}
				// The one rule for a database not there yet or without a
				// free slot (store.WaitConnect), read-only, before the step.
				err := store.WaitConnect(ctx, f.connectTimeout, commandLog(stderr), "connect to PostgreSQL", func(ctx context.Context) error {
					_, _, err := migrations.Version(ctx, f.databaseURL)
					return err
				})
				if err != nil {
					return migrateFailed(stderr, strings.Fields(use)[0], err)
				}
				return a(ctx, &f, stdout, stderr, args)
			})}
	}
	down := sub("down [V]", "revert every migration: DROPS ALL ovstream TABLES AND THEIR DATA; with V, only those above "+
		"version V (each one's .down.sql says what it drops); needs --yes", optionalVersionArg, migrateDown)
	down.Flags().BoolVar(&f.yes, "yes", false, "confirm `down`, which drops all data (command line only)")
	config.CLIOnly(down.Flags(), "yes")
	c := group("migrate", "apply or inspect the schema: migrate up|down|version|force",
		"The schema, from the migrations embedded in the binary.",
		sub("up", "apply every migration this binary holds (an up-to-date schema is a success)", noArgs, migrateUp),
		down,
		sub("version", "print the schema version and whether it is dirty (0 = no migration applied)", noArgs, migrateVersion),
		sub("force V", "record version V as applied and clean WITHOUT running SQL (0 = none applied): the repair "+
			"after a migration failed half-way; check the tables first", versionArg, migrateForce))
	f.register(c.PersistentFlags())
	return c
}

// optionalVersionArg is the optional argument of migrate down.
func optionalVersionArg(c *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	return versionArg(c, args)
}

// versionArg is the one argument of migrate force.
func versionArg(c *cobra.Command, args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("want one argument, the version V (got %d)", len(args))
	}
	if _, err := strconv.ParseUint(args[0], 10, 0); err != nil {
		return fmt.Errorf("version %q is not a number >= 0", args[0])
	}
	return nil
}

func migrateUp(ctx context.Context, f *migrateFlags, stdout, stderr io.Writer, _ []string) int {
	before, _, err := migrations.Version(ctx, f.databaseURL)
	if err == nil {
		err = migrations.Up(ctx, f.databaseURL)
	}
	var after uint
	if err == nil {
		after, _, err = migrations.Version(ctx, f.databaseURL)
	}
	if err != nil {
		return migrateFailed(stderr, "up", err)
	}
	if after == before {
		fmt.Fprintf(stdout, "schema at version %d (no change)\n", after)
	} else {
		fmt.Fprintf(stdout, "schema at version %d (was %d)\n", after, before)
	}
	return exitOK
}

func migrateDown(ctx context.Context, f *migrateFlags, stdout, stderr io.Writer, args []string) int {
	if len(args) == 1 {
		v, _ := strconv.ParseUint(args[0], 10, 0) // checked by optionalVersionArg
		if !f.yes {
			fmt.Fprintf(stderr, "ovstream migrate down %d: this reverts every migration above version %d, dropping what they added; add --yes to confirm\n", v, v)
			return exitUsage
		}
		if err := migrations.DownTo(ctx, f.databaseURL, uint(v)); err != nil {
			return migrateFailed(stderr, "down", err)
		}
		fmt.Fprintf(stdout, "schema at version %d\n", v)
		return exitOK
	}
	if !f.yes {
		fmt.Fprintln(stderr, "ovstream migrate down: this drops every ovstream table and ALL data; add --yes to confirm")
		return exitUsage
	}
	if err := migrations.Down(ctx, f.databaseURL); err != nil {
		return migrateFailed(stderr, "down", err)
	}
	fmt.Fprintln(stdout, "schema at version 0 (every ovstream table dropped)")
	return exitOK
}

func migrateVersion(ctx context.Context, f *migrateFlags, stdout, stderr io.Writer, _ []string) int {
	v, dirty, err := migrations.Version(ctx, f.databaseURL)
	if err != nil {
		return migrateFailed(stderr, "version", err)
	}
	fmt.Fprintf(stdout, "schema at version %d, dirty=%t (this binary needs %d)\n", v, dirty, migrations.Latest())
	if err := migrations.Check(ctx, f.databaseURL); err != nil {
		var se *migrations.SchemaError
		if !errors.As(err, &se) {
			return migrateFailed(stderr, "version", err)
		}
		fmt.Fprintln(stdout, se.Error())
	}
	return exitOK
}

func migrateForce(ctx context.Context, f *migrateFlags, stdout, stderr io.Writer, args []string) int {
	v, _ := strconv.ParseUint(args[0], 10, 0) // checked by versionArg
	if err := migrations.Force(ctx, f.databaseURL, uint(v)); err != nil {
		return migrateFailed(stderr, "force", err)
	}
	fmt.Fprintf(stdout, "schema marked as version %d, clean; now run `ovstream migrate up`\n", v)
	return exitOK
}

func migrateFailed(stderr io.Writer, sub string, err error) int {
	fmt.Fprintf(stderr, "ovstream migrate %s: %v\n", sub, err)
	return exitError
}
