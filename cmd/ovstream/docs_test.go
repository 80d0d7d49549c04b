package main

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/ovstream/ovstream/config"
)

// docFiles are the pages a reader follows links in: README.md, the other
// root documents and every page under docs/, generated ones included.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"../../README.md", "../../BENCHMARKS.md", "../../CHANGELOG.md"}
	for _, pattern := range []string{"../../docs/*.md", "../../docs/cli/*.md"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 20 {
		t.Fatalf("found only %d documents: %v", len(files), files)
	}
	return files
}

// withoutCode blanks fenced code blocks and inline code spans, where
// brackets and parentheses are not links.
func withoutCode(md string) string {
	var b strings.Builder
	fenced := false
	for _, line := range strings.SplitAfter(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			b.WriteString("\n")
			continue
		}
		if fenced {
			b.WriteString("\n")
			continue
		}
		b.WriteString(inlineCode.ReplaceAllString(line, "``"))
	}
	return b.String()
}

var (
	inlineCode = regexp.MustCompile("`[^`]*`")
	mdLink     = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading    = regexp.MustCompile(`(?m)^#{1,6} +(.+?) *$`)
	notInSlug  = regexp.MustCompile(`[^\p{L}\p{N} _-]`)
)

// anchors are the #fragments GitHub gives md's headings: lower case,
// punctuation but - and _ dropped, spaces as -, a -N suffix for repeats.
func anchors(md string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	var lines []string
	fenced := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			lines = append(lines, line)
		}
	}
	for _, h := range heading.FindAllStringSubmatch(strings.Join(lines, "\n"), -1) {
		slug := strings.ReplaceAll(notInSlug.ReplaceAllString(strings.ToLower(h[1]), ""), " ", "-")
		if n := seen[slug]; n > 0 {
			out[slug+"-"+strconv.Itoa(n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

// Every relative link of README.md and docs/ names a file that exists, and
// its #anchor a heading of that file.
func TestDocsLinks(t *testing.T) {
	checked := 0
	for _, file := range docFiles(t) {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(withoutCode(string(b)), -1) {
			link := m[1]
			if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
				continue
			}
			checked++
			path, anchor, _ := strings.Cut(link, "#")
			target := file
			if path != "" {
				target = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
			}
			name := strings.TrimPrefix(file, "../../")
			info, err := os.Stat(target)
			if err != nil {
				t.Errorf("%s: link %s: no such file", name, link)
				continue
			}
			if anchor == "" {
				continue
			}
			if info.IsDir() || !strings.HasSuffix(target, ".md") {
				t.Errorf("%s: link %s: an anchor into something not a Markdown file", name, link)
				continue
			}
			tb, err := os.ReadFile(target)
			if err != nil {
				t.Fatal(err)
			}
			if !anchors(string(tb))[anchor] {
				var have []string
				for a := range anchors(string(tb)) {
					have = append(have, a)
				}
				sort.Strings(have)
				t.Errorf("%s: link %s: %s has no heading #%s (it has %s)", name, link, strings.TrimPrefix(target, "../../"), anchor, strings.Join(have, ", "))
			}
		}
	}
	if checked < 100 {
		t.Errorf("checked only %d links", checked)
	}
}

// The anchors are GitHub's.
func TestDocsAnchors(t *testing.T) {
	got := anchors("# ovstream\n## Metrics (`GET /metrics` on `--metrics-addr`)\n### `run` flags\n## Exit codes\n### Exit codes\n```sh\n# a comment\n```\n## Zürich, 5M runs at e66afbf\n")
	want := []string{"exit-codes", "exit-codes-1", "metrics-get-metrics-on---metrics-addr", "ovstream", "run-flags", "zürich-5m-runs-at-e66afbf"}
	var have []string
	for a := range got {
		have = append(have, a)
	}
	sort.Strings(have)
	if strings.Join(have, " ") != strings.Join(want, " ") {
		t.Errorf("anchors %v, want %v", have, want)
	}
}

// docCommands are the ovstream command lines of the shell blocks of the
// documents (```sh), as a reader pastes them: continuations joined,
// comments and redirections cut, the binary's path dropped.
func docCommands(t *testing.T, md string) [][]string {
	t.Helper()
	var cmds [][]string
	for _, block := range strings.Split(md, "```sh\n")[1:] {
		block, _, _ = strings.Cut(block, "```")
		for _, line := range strings.Split(strings.ReplaceAll(block, "\\\n", " "), "\n") {
			words, err := shellWords(line)
			if err != nil {
				t.Errorf("%q: %v", line, err)
				continue
			}
			if len(words) == 0 {
				continue
			}
			switch words[0] {
			case "ovstream", "bin/ovstream", "./bin/ovstream":
				cmds = append(cmds, words[1:])
			}
		}
	}
	return cmds
}

// shellWords splits a line as sh does for the quoting the documents use
// (single and double quotes, no expansions), up to a # comment or a
// redirection.
func shellWords(line string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	for i := 0; i < len(line); i++ {
		switch c := line[i]; {
		case c == '\'' || c == '"':
			j := strings.IndexByte(line[i+1:], c)
			if j < 0 {
				return nil, errUnclosedQuote
			}
			w.WriteString(line[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		case (c == '#' && !inWord) || c == '>' || c == '|' || c == '&' || c == ';':
			if inWord {
				words = append(words, w.String())
			}
			return words, nil
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, nil
}

type quoteError string

func (e quoteError) Error() string { return string(e) }

const errUnclosedQuote = quoteError("an unclosed quote")

// Every ovstream command line in the shell blocks of README.md and docs/
// names a command of the binary, with flags it has, values they take and
// as many arguments as it wants: it runs as written (this test does not run
// it: that needs Kafka and PostgreSQL).
func TestDocsCommandsParse(t *testing.T) {
	total := 0
	for _, file := range docFiles(t) {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(file, "../../")
		for _, args := range docCommands(t, string(b)) {
			total++
			c, rest, err := newRoot(io.Discard, io.Discard).Find(args)
			if err == nil && c.Name() == "ovstream" && len(args) > 0 {
				t.Errorf("%s: ovstream %s: no such command", name, strings.Join(args, " "))
				continue
			}
			if err == nil {
				err = c.ParseFlags(rest)
			}
			if err == nil {
				err = c.ValidateArgs(c.Flags().Args())
			}
			if err == nil {
				var from map[string]string
				if from, err = config.Settle(c, func(string) (string, bool) { return "", false }); err == nil {
					err = config.CheckValues(c.Flags(), from)
				}
			}
			if err != nil {
				t.Errorf("%s: ovstream %s: %v", name, strings.Join(args, " "), err)
			}
		}
	}
	if total < 15 {
		t.Errorf("found %d ovstream command lines in the documents' shell blocks, want at least 15", total)
	}
}
