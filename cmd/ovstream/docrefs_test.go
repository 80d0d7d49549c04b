package main

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// repoRoot is the repository's top folder, seen from this package's tests.
const repoRoot = "../.."

// repoFiles are the repository's files whose name ends in ext, as paths
// relative to repoRoot with forward slashes; .git, bin/ and screenshots/
// are not the project's text.
func repoFiles(t *testing.T, ext string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(repoRoot, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			switch rel {
			case ".git", "bin", "screenshots", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(rel, ext) {
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

var (
	// sectionRef is a citation of a document's section as code comments
	// and documents write it: docs/design.md "Watermark and lateness" (a
	// comma after the file name is allowed). The path may be relative to
	// the citing Markdown file's folder or to the repository's top.
	// A bare README stands for README.md.
	sectionRef = regexp.MustCompile(`([A-Za-z0-9_./-]*[A-Za-z0-9_-]\.md|\bREADME),? "([^"\n]{1,100})"`)
	// goCommentBreak joins a comment wrapped over several // lines.
	goCommentBreak = regexp.MustCompile(`\n[ \t]*//[ \t]*`)
	// mdBreak joins a Markdown paragraph's lines.
	mdBreak = regexp.MustCompile(`\n[ \t>]*`)
	// boldItem is the title of a list item that stands for a section,
	// as the runbook's entries do: - **Topic recreated (exit 1, ...).**
	boldItem = regexp.MustCompile(`(?m)^[ \t]*[-*] +\*\*([^*\n]+)`)
)

// sections are the names a citation may give for md's parts: its
// headings and the bold titles of its list items, without inline code
// marks and lower-cased.
func sections(md string) []string {
	var out []string
	md = fencedBlock.ReplaceAllString(md, "")
	for _, m := range heading.FindAllStringSubmatch(md, -1) {
		out = append(out, strings.ToLower(strings.ReplaceAll(m[1], "`", "")))
	}
	for _, m := range boldItem.FindAllStringSubmatch(md, -1) {
		out = append(out, strings.ToLower(strings.ReplaceAll(m[1], "`", "")))
	}
	return out
}

var fencedBlock = regexp.MustCompile("(?ms)^[ \t]*```.*?^[ \t]*```[^\n]*$")

// goComment is one comment group of a .go file: where it starts
// (file:line) and its lines as written, // or /* included.
type goComment struct {
	at    string
	lines []string
}

// goComments are the comment groups of every .go file of the repository,
// whatever its build tags.
func goComments(t *testing.T) []goComment {
	t.Helper()
	var out []goComment
	for _, f := range repoFiles(t, ".go") {
		fset := token.NewFileSet()
		parsed, err := parser.ParseFile(fset, filepath.Join(repoRoot, f), nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range parsed.Comments {
			c := goComment{at: f + ":" + strconv.Itoa(fset.Position(g.Pos()).Line)}
			for _, l := range g.List {
				c.lines = append(c.lines, l.Text)
			}
			out = append(out, c)
		}
	}
	return out
}

// hasSection reports whether name is one of have: the whole of a heading,
// or its start up to a colon, a parenthesis, a comma or a full stop
// ("Live" names "Live: freshness and the sustained rate").
func hasSection(have []string, name string) bool {
	name = strings.ToLower(strings.ReplaceAll(name, "`", ""))
	for _, h := range have {
		if h == name {
			return true
		}
		if rest, ok := strings.CutPrefix(h, name); ok {
			rest = strings.TrimLeft(rest, " ")
			if rest != "" && strings.ContainsRune(":(,.", rune(rest[0])) {
				return true
			}
		}
	}
	return false
}

// danglingRefs lists every section citation in the repository's .go and
// .md files that names no existing file or no section of it, one line
// each, and how many citations it checked.
func danglingRefs(t *testing.T) (bad []string, checked int) {
	t.Helper()
	cache := map[string][]string{}
	check := func(from, text string, mdDir string) {
		for _, m := range sectionRef.FindAllStringSubmatch(text, -1) {
			file, name := m[1], m[2]
			if file == "README" {
				file = "README.md"
			}
			if strings.HasPrefix(file, "/") {
				continue // outside the repository: not ours to check
			}
			checked++
			candidates := []string{filepath.ToSlash(filepath.Clean(file))}
			if mdDir != "" {
				candidates = append([]string{filepath.ToSlash(filepath.Join(mdDir, file))}, candidates...)
			}
			found := ""
			for _, c := range candidates {
				if _, err := os.Stat(filepath.Join(repoRoot, c)); err == nil {
					found = c
					break
				}
			}
			if found == "" {
				bad = append(bad, from+": "+file+` "`+name+`": no such file`)
				continue
			}
			have, ok := cache[found]
			if !ok {
				b, err := os.ReadFile(filepath.Join(repoRoot, found))
				if err != nil {
					t.Fatal(err)
				}
				have = sections(string(b))
				cache[found] = have
			}
			if !hasSection(have, name) {
				bad = append(bad, from+": "+file+` "`+name+`": `+found+" has no such section")
			}
		}
	}
	for _, c := range goComments(t) {
		check(c.at, goCommentBreak.ReplaceAllString(strings.Join(c.lines, "\n"), " "), "")
	}
	for _, f := range repoFiles(t, ".md") {
		if f == "CHANGELOG.md" || f == "docs/benchmarks-history.md" {
			continue // history: what was true when it was written
		}
		b, err := os.ReadFile(filepath.Join(repoRoot, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, para := range strings.Split(string(b), "\n\n") {
			check(f, mdBreak.ReplaceAllString(para, " "), filepath.ToSlash(filepath.Dir(f)))
		}
	}
	return bad, checked
}

// Every citation of a document's section in code comments and documents,
// docs/design.md "Watermark and lateness", names a file of the repository
// and a heading of it, as a link does: the why of the code stays findable.
func TestDocsSectionReferences(t *testing.T) {
	bad, checked := danglingRefs(t)
	for _, b := range bad {
		t.Error(b)
	}
	if len(bad) > 0 {
		t.Errorf("%d of %d section references lead nowhere", len(bad), checked)
	}
	if checked < 50 {
		t.Errorf("checked only %d section references", checked)
	}
}

// A code comment says the why in words: never the number of an issue or of
// a round of review, nor a commit hash after "before", "since", "commit" and
// the like, which a reader of the code cannot follow; measurements live in
// BENCHMARKS.md and CHANGELOG.md. Code blocks of doc comments (indented
// lines, sample output) are exempt.
var commentCitations = []*regexp.Regexp{
	regexp.MustCompile(`(?i)\bissues? #?\d+`),
	regexp.MustCompile(`(?i)\breview(\s+round)?\s+\d+`),
	regexp.MustCompile(`(?i)\breview rounds?\b`),
	regexp.MustCompile(`(?i)\b(before|after|since|until|commit|from|at|in)\s+[0-9a-f]*[0-9][0-9a-f]*[a-f][0-9a-f]*\b|\b(before|after|since|until|commit|from|at|in)\s+[0-9a-f]*[a-f][0-9a-f]*[0-9][0-9a-f]*\b`),
}

// citations lists the comment lines of the repository's .go files that
// cite an issue, a review or a commit.
func citations(t *testing.T) []string {
	t.Helper()
	var bad []string
	for _, c := range goComments(t) {
		// Joined, so that a citation wrapped over two lines is one
		// phrase; indented code lines of a doc comment are left out.
		var text []string
		for _, line := range c.lines {
			line = strings.TrimPrefix(line, "//")
			if strings.HasPrefix(line, "\t") || strings.HasPrefix(line, "   ") {
				continue
			}
			text = append(text, strings.TrimSpace(line))
		}
		joined := strings.Join(text, " ")
		for _, re := range commentCitations {
			for _, m := range re.FindAllString(joined, -1) {
				if hexToken(m) {
					bad = append(bad, c.at+": "+m)
				}
			}
		}
	}
	return bad
}

// hexToken keeps a commit-like match only when its hex word is 7 to 40
// digits long; the other patterns always count.
func hexToken(m string) bool {
	fields := strings.Fields(m)
	if len(fields) != 2 || !hexWord.MatchString(fields[1]) {
		return true
	}
	switch strings.ToLower(fields[0]) {
	case "before", "after", "since", "until", "commit", "from", "at", "in":
		return len(fields[1]) >= 7 && len(fields[1]) <= 40
	}
	return true
}

var hexWord = regexp.MustCompile(`^[0-9a-fA-F]+$`)

func TestNoCitationsInComments(t *testing.T) {
	bad := citations(t)
	for _, b := range bad {
		t.Error(b)
	}
	if len(bad) > 0 {
		t.Errorf("%d comments cite an issue, a review or a commit: say the why in words", len(bad))
	}
}
