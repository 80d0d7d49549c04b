package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"

	"github.com/ovstream/ovstream/migrations"
)

func init() {
	register("migrate", "apply or inspect the schema: migrate up|down|version|force", cmdMigrate)
}

const defaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/ovstream?sslmode=disable"

const migrateUsage = `usage: ovstream migrate [flags] up|down|version|force V

  up        apply every migration this binary holds (an up-to-date schema is a success)
  version   print the schema version and whether it is dirty (0 = no migration applied)
  down      revert every migration: DROPS ALL ovstream TABLES AND THEIR DATA; needs --yes
  force V   record version V as applied and clean WITHOUT running SQL (0 = none applied):
            the repair after a migration failed half-way; check the tables first

flags:
`

func cmdMigrate(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), migrateUsage)
		fs.PrintDefaults()
	}
	dbURL := fs.String("database-url", envOr("DATABASE_URL", defaultDatabaseURL),
		"PostgreSQL URL (env DATABASE_URL)")
	yes := fs.Bool("yes", false, "confirm `down`, which drops all data")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return exitUsage
	}
	sub := fs.Arg(0)
	if err := fs.Parse(fs.Args()[1:]); err != nil { // flags may follow the subcommand
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	rest := fs.Args()
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "ovstream migrate %s: %v\n", sub, err)
		return exitError
	}
	wantArgs := 0
	if sub == "force" {
		wantArgs = 1
	}
	if len(rest) != wantArgs {
		fmt.Fprintf(os.Stderr, "ovstream migrate %s: unexpected arguments %q\n", sub, rest)
		fs.Usage()
		return exitUsage
	}

	switch sub {
	case "up":
		before, _, err := migrations.Version(ctx, *dbURL)
		if err != nil {
			return fail(err)
		}
		if err := migrations.Up(ctx, *dbURL); err != nil {
			return fail(err)
		}
		after, _, err := migrations.Version(ctx, *dbURL)
		if err != nil {
			return fail(err)
		}
		if after == before {
			fmt.Printf("schema at version %d (no change)\n", after)
		} else {
			fmt.Printf("schema at version %d (was %d)\n", after, before)
		}
	case "down":
		if !*yes {
			fmt.Fprintln(os.Stderr, "ovstream migrate down: this drops every ovstream table and ALL data; add --yes to confirm")
			return exitUsage
		}
		if err := migrations.Down(ctx, *dbURL); err != nil {
			return fail(err)
		}
		fmt.Println("schema at version 0 (every ovstream table dropped)")
	case "version":
		v, dirty, err := migrations.Version(ctx, *dbURL)
		if err != nil {
			return fail(err)
		}
		fmt.Printf("schema at version %d, dirty=%t (this binary needs %d)\n", v, dirty, migrations.Latest())
		if err := migrations.Check(ctx, *dbURL); err != nil {
			var se *migrations.SchemaError
			if errors.As(err, &se) {
				fmt.Println(se.Error())
			} else {
				return fail(err)
			}
		}
	case "force":
		v, err := strconv.ParseUint(rest[0], 10, 0)
		if err != nil {
			fmt.Fprintf(os.Stderr, "ovstream migrate force: version %q is not a number >= 0\n", rest[0])
			return exitUsage
		}
		if err := migrations.Force(ctx, *dbURL, uint(v)); err != nil {
			return fail(err)
		}
		fmt.Printf("schema marked as version %d, clean; now run `ovstream migrate up`\n", v)
	default:
		fmt.Fprintf(os.Stderr, "ovstream migrate: unknown subcommand %q\n", sub)
		fs.Usage()
		return exitUsage
	}
	return exitOK
}
