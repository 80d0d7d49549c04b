package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"github.com/ovstream/ovstream/consumer"
)

// gen-docs writes the reference pages that are generated, not written:
// DIR/cli/*.md from the command tree (cobra's doc package) and DIR/metrics.md
// from the collectors of consumer.NewMetrics. TestGeneratedDocs fails when
// the committed pages differ from what this binary generates.
func init() {
	register(func() *cobra.Command {
		return &cobra.Command{Use: "gen-docs DIR", Hidden: true,
			Short: "write the generated reference pages: DIR/cli/*.md (the commands) and DIR/metrics.md",
			Args:  cobra.ExactArgs(1),
			RunE: run(func(_ context.Context, stdout, stderr io.Writer, args []string) int {
				files, err := generatedDocs()
				if err == nil {
					err = writeDocs(args[0], files)
				}
				if err != nil {
					fmt.Fprintln(stderr, "gen-docs:", err)
					return exitError
				}
				fmt.Fprintf(stdout, "wrote %d files under %s\n", len(files), args[0])
				return exitOK
			})}
	})
}

// genDocsCommand is how to regenerate the pages, from the repository's root.
const genDocsCommand = "go run ./cmd/ovstream gen-docs docs"

// generatedDocs returns the generated pages by their path below the docs
// folder ("cli/ovstream_run.md", "metrics.md"). The output depends on the
// code only: no generation tag, no date, no environment.
func generatedDocs() (map[string][]byte, error) {
	root := newRoot(io.Discard, io.Discard)
	root.InitDefaultVersionFlag() // as Execute adds it
	root.DisableAutoGenTag = true
	files := map[string][]byte{}
	var walk func(c *cobra.Command) error
	walk = func(c *cobra.Command) error {
		c.DisableAutoGenTag = true
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() && !sub.IsAdditionalHelpTopicCommand() {
				if err := walk(sub); err != nil {
					return err
				}
			}
		}
		var b bytes.Buffer
		if err := doc.GenMarkdown(c, &b); err != nil {
			return fmt.Errorf("%s: %w", c.CommandPath(), err)
		}
		files["cli/"+strings.ReplaceAll(c.CommandPath(), " ", "_")+".md"] = b.Bytes()
		return nil
	}
	if err := walk(root); err != nil {
		return nil, err
	}
	m, err := metricsDoc()
	if err != nil {
		return nil, err
	}
	files["metrics.md"] = m
	return files, nil
}

// writeDocs replaces dir/cli/*.md and writes the other files, so a page of a
// command that is gone does not stay behind.
func writeDocs(dir string, files map[string][]byte) error {
	old, err := filepath.Glob(filepath.Join(dir, "cli", "*.md"))
	if err != nil {
		return err
	}
	for _, f := range old {
		if err := os.Remove(f); err != nil {
			return err
		}
	}
	for name, body := range files {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, body, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// metricsDoc is docs/metrics.md: consumer.MetricsTable under its header.
func metricsDoc() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("# Metrics\n\n" +
		"Generated from `consumer/metrics.go` by `" + genDocsCommand + "`; do not edit. What each series\n" +
		"means for operators, and the alerts on them: [operations.md](operations.md#metrics-get-metrics-on---metrics-addr).\n" +
		"`ovstream run` serves them at `/metrics` of `--metrics-addr`, with the Go runtime's and the\n" +
		"process's (`go_*`, `process_*`).\n\n" +
		"| series | type | labels | help |\n|---|---|---|---|\n")
	if err := consumer.MetricsTable(&b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
