// Package config settles the value of every flag of every ovstream command:
// from the command line, the environment, the TOML file of --config, or the
// default, first wins (docs/configuration.md), and checks the values the same
// way for every command.
package config

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/knadh/koanf/parsers/toml/v2"
	"github.com/knadh/koanf/providers/rawbytes"
	"github.com/knadh/koanf/v2"
	gotoml "github.com/pelletier/go-toml/v2"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ovstream/ovstream/kafkaconn"
	"github.com/ovstream/ovstream/store"
)

// Where a flag's value comes from, first wins (docs/design.md "Interface"):
//
//  1. the command line;
//  2. the environment: OVSTREAM_<FLAG> (upper case, '-' as '_'), then the
//     conventional name where there is one (DATABASE_URL, KAFKA_BROKERS,
//     KAFKA_SASL_PASSWORD); an empty variable counts as unset;
//  3. the TOML file of --config (or OVSTREAM_CONFIG): the key named like the
//     flag in the command's section ([run], [dlq.replay]), then in its
//     parent's ([dlq]), then at the top;
//  4. the flag's default.
//
// A variable or a top-level key applies to every command that has the flag.
// A key that is no flag (a typo) is an error, as is a flag marked secret given
// on the command line, where `ps` and shell histories would show it.

// Flag is the flag that names the settings file.
const Flag = "config"

// Flag annotations (pflag.Flag.Annotations) read by Settle and CheckValues.
const (
	annZero    = "ovstream/zero"     // a duration for which 0 is valid: [what 0 means]
	annName    = "ovstream/name"     // a pipeline name: store.CheckPipelineName
	annCLIOnly = "ovstream/cli-only" // from the command line only: confirmations (--yes)
	annSecret  = "ovstream/secret"   // from the environment or the file only; hidden from help
)

// ConventionalEnv is the variable read after OVSTREAM_<FLAG> for a flag.
var ConventionalEnv = map[string]string{
	"database-url":        "DATABASE_URL",
	"brokers":             "KAFKA_BROKERS",
	"kafka-sasl-password": kafkaconn.PasswordEnv,
}

// EnvNames returns the environment variables a flag is read from, first wins.
func EnvNames(flag string) []string {
	names := []string{"OVSTREAM_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))}
	if c, ok := ConventionalEnv[flag]; ok {
		names = append(names, c)
	}
	return names
}

// ZeroMeans declares that 0 is a valid value of the duration flag name, and
// what it means; any other duration flag must be positive.
func ZeroMeans(fs *pflag.FlagSet, name, meaning string) { annotate(fs, name, annZero, meaning) }

// NameFlag declares string flags that hold a pipeline name
// (store.CheckPipelineName).
func NameFlag(fs *pflag.FlagSet, names ...string) {
	for _, n := range names {
		annotate(fs, n, annName, "")
	}
}

// CLIOnly declares a flag that only the command line sets (a confirmation).
func CLIOnly(fs *pflag.FlagSet, name string) { annotate(fs, name, annCLIOnly, "") }

// SecretFlag declares a hidden flag that holds a secret: it is set from the
// environment or the config file only, never from the command line.
func SecretFlag(fs *pflag.FlagSet, name string) {
	annotate(fs, name, annSecret, "")
	if err := fs.MarkHidden(name); err != nil {
		panic(err)
	}
}

func annotate(fs *pflag.FlagSet, name, key, value string) {
	if err := fs.SetAnnotation(name, key, []string{value}); err != nil {
		panic(err) // a flag registered under another name: a bug
	}
}

// SettleAndCheck is the root's PersistentPreRunE: it settles every flag of
// the command about to run and checks the values.
func SettleAndCheck(c *cobra.Command, _ []string) error {
	if skipsSettings(c) {
		return nil
	}
	from, err := Settle(c, os.LookupEnv)
	if err != nil {
		return err
	}
	return CheckValues(c.Flags(), from)
}

// skipsSettings tells whether c is one of the top-level commands that read
// no settings: help, completion (and its subcommands), version and cobra's
// hidden __complete. Only at the top: `migrate version` is another command,
// which reads its --database-url as every command does.
func skipsSettings(c *cobra.Command) bool {
	for p := c; p.HasParent(); p = p.Parent() {
		if p.Parent().HasParent() {
			continue
		}
		n := p.Name()
		return n == "help" || n == "completion" || n == "version" || strings.HasPrefix(n, "__complete")
	}
	return false
}

// Settle sets every flag of c not given on the command line from the
// environment (lookupEnv) or the config file. It returns where each flag's
// value came from, for messages.
func Settle(c *cobra.Command, lookupEnv func(string) (string, bool)) (map[string]string, error) {
	fs := c.Flags()
	from := map[string]string{}
	var errs []error
	fs.VisitAll(func(fl *pflag.Flag) {
		if fl.Changed {
			from[fl.Name] = "command line"
			if fl.Annotations[annSecret] != nil {
				errs = append(errs, fmt.Errorf("--%s is not taken on the command line, where ps and shell histories show it: set %s or %s in the --config file",
					fl.Name, strings.Join(EnvNames(fl.Name), " or "), fl.Name))
			}
		}
	})
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	file, path, err := loadConfig(fs, lookupEnv)
	if err != nil {
		return nil, err
	}
	if err := checkKeys(c.Root(), file, path); err != nil {
		return nil, err
	}
	sections := sectionsOf(c)
	fs.VisitAll(func(fl *pflag.Flag) {
		if fl.Changed || fl.Name == Flag || fl.Name == "help" || fl.Name == "version" || fl.Annotations[annCLIOnly] != nil {
			return
		}
		set := func(where string, values []string) {
			from[fl.Name] = where
			for _, v := range values {
				if err := fs.Set(fl.Name, v); err != nil {
					if fl.Annotations[annSecret] != nil {
						err = fmt.Errorf("--%s: invalid value", fl.Name)
					}
					errs = append(errs, fmt.Errorf("%s: %w", where, err))
					return
				}
			}
		}
		for _, name := range EnvNames(fl.Name) {
			if v, ok := lookupEnv(name); ok && v != "" {
				set("env "+name, []string{v})
				return
			}
		}
		if file == nil {
			return
		}
		for _, s := range sections {
			key := fl.Name
			if s != "" {
				key = s + "." + fl.Name
			}
			if !file.Exists(key) {
				continue
			}
			where := path + ": " + key
			values, err := fileValues(file.Get(key), fl)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", where, err))
				return
			}
			set(where, values)
			return
		}
	})
	return from, errors.Join(errs...)
}

// loadConfig reads the file of --config, else of OVSTREAM_CONFIG; nil when
// neither names one.
func loadConfig(fs *pflag.FlagSet, lookupEnv func(string) (string, bool)) (*koanf.Koanf, string, error) {
	path, where := "", "--config"
	if fl := fs.Lookup(Flag); fl != nil && fl.Changed {
		path = fl.Value.String()
	} else if v, ok := lookupEnv("OVSTREAM_CONFIG"); ok && v != "" {
		path, where = v, "env OVSTREAM_CONFIG"
	}
	if path == "" {
		return nil, "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", where, err)
	}
	k := koanf.New(".")
	if err := k.Load(rawbytes.Provider(b), toml.Parser()); err != nil {
		var de *gotoml.DecodeError
		if errors.As(err, &de) {
			row, col := de.Position()
			path = fmt.Sprintf("%s:%d:%d", path, row, col)
		}
		return nil, "", fmt.Errorf("%s %s: not TOML: %w", where, path, err)
	}
	return k, path, nil
}

// sectionsOf returns the config file sections that apply to c, most specific
// first: "dlq.replay", "dlq", "" (the top).
func sectionsOf(c *cobra.Command) []string {
	var out []string
	for p := c; p.HasParent(); p = p.Parent() {
		out = append(out, strings.Join(strings.Fields(strings.TrimPrefix(p.CommandPath(), p.Root().Name())), "."))
	}
	return append(out, "")
}

// checkKeys reports the keys of the file that name no flag: at the top, a
// flag of any command; in a section, a flag of that command.
func checkKeys(root *cobra.Command, file *koanf.Koanf, path string) error {
	if file == nil {
		return nil
	}
	commands := map[string]*cobra.Command{}
	anyFlag := map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if s := sectionsOf(c); c.HasParent() {
			commands[s[0]] = c
		}
		c.Flags().VisitAll(func(fl *pflag.Flag) { anyFlag[fl.Name] = true })
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	var errs []error
	for _, key := range file.Keys() {
		section, name := "", key
		if i := strings.LastIndex(key, "."); i >= 0 {
			section, name = key[:i], key[i+1:]
		}
		var fl *pflag.Flag
		if section == "" {
			if anyFlag[name] {
				fl = lookupFlag(root, name)
			}
		} else if c := commands[section]; c != nil {
			fl = lookupFlag(c, name)
		}
		switch {
		case fl == nil && section != "" && commands[section] == nil:
			errs = append(errs, fmt.Errorf("%s: %s: no command %q to hold it", path, key, strings.ReplaceAll(section, ".", " ")))
		case fl == nil:
			errs = append(errs, fmt.Errorf("%s: %s: no such flag", path, key))
		case name == Flag || fl.Annotations[annCLIOnly] != nil:
			errs = append(errs, fmt.Errorf("%s: %s: --%s is taken from the command line only", path, key, name))
		}
	}
	return errors.Join(errs...)
}

// lookupFlag finds the flag name of c or its parents, else of any command
// under c.
func lookupFlag(c *cobra.Command, name string) *pflag.Flag {
	if fl := c.Flags().Lookup(name); fl != nil {
		return fl
	}
	if fl := c.InheritedFlags().Lookup(name); fl != nil {
		return fl
	}
	for _, sub := range c.Commands() {
		if fl := lookupFlag(sub, name); fl != nil {
			return fl
		}
	}
	return nil
}

// fileValues turns a TOML value into the flag values to set: one for a
// scalar, one per element of an array for a repeatable flag.
func fileValues(v any, fl *pflag.Flag) ([]string, error) {
	list, isList := v.([]any)
	if !isList {
		s, err := scalar(v)
		return []string{s}, err
	}
	if _, repeatable := fl.Value.(pflag.SliceValue); !repeatable {
		return nil, fmt.Errorf("--%s takes one value, not a list", fl.Name)
	}
	out := make([]string, 0, len(list))
	for _, e := range list {
		s, err := scalar(e)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func scalar(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case bool:
		return strconv.FormatBool(x), nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64), nil
	}
	return "", fmt.Errorf("a %T: want a string, number or boolean (durations as strings: \"5m\")", v)
}

// CheckValues applies the rules every command shares: a duration is positive
// unless ZeroMeans says what 0 means, and never negative; a NameFlag string
// passes store.CheckPipelineName. from says where a value came from, for the message.
func CheckValues(fs *pflag.FlagSet, from map[string]string) error {
	var errs []error
	fs.VisitAll(func(fl *pflag.Flag) {
		where := ""
		if s := from[fl.Name]; s != "" && s != "command line" {
			where = " (from " + s + ")"
		}
		if _, ok := fl.Annotations[annName]; ok {
			if fl.Value.String() == "" {
				errs = append(errs, fmt.Errorf("--%s is empty%s: give a name", fl.Name, where))
			} else if err := store.CheckPipelineName(fl.Value.String()); err != nil {
				errs = append(errs, fmt.Errorf("--%s %q%s: %w", fl.Name, fl.Value.String(), where, err))
			}
		}
		if fl.Value.Type() != "duration" {
			return
		}
		d, err := time.ParseDuration(fl.Value.String())
		if err != nil {
			errs = append(errs, fmt.Errorf("--%s %q%s: %w", fl.Name, fl.Value.String(), where, err))
			return
		}
		zero := fl.Annotations[annZero]
		switch {
		case d < 0 && zero != nil:
			errs = append(errs, fmt.Errorf("--%s %v%s is negative: want 0 (%s) or a positive duration", fl.Name, d, where, zero[0]))
		case d < 0, d == 0 && zero == nil:
			errs = append(errs, fmt.Errorf("--%s %v%s: want a positive duration", fl.Name, d, where))
		}
	})
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errors.Join(errs...)
}
