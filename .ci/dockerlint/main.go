// Command dockerlint checks the repository's Dockerfile where no container
// engine can build it: it parses it with BuildKit's own Dockerfile parser and
// runs BuildKit's lint rules (those of `docker build --check`), then checks
// what the README promises of the image: a multi-stage build, a static
// binary (CGO_ENABLED=0), a non-root user, a HEALTHCHECK on /healthz.
// Exit 0 when clean; every finding is printed.
//
//	go run . ../../Dockerfile
package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
)

func main() {
	path := "Dockerfile"
	if len(os.Args) > 1 {
		path = os.Args[1]
	}
	findings, err := check(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dockerlint:", err)
		os.Exit(1)
	}
	for _, f := range findings {
		fmt.Fprintf(os.Stderr, "dockerlint: %s: %s\n", path, f)
	}
	if len(findings) > 0 {
		os.Exit(1)
	}
	fmt.Printf("dockerlint: %s: parsed, BuildKit lint rules and image checks pass\n", path)
}

func check(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	res, err := parser.Parse(f)
	if err != nil {
		return nil, err
	}
	var findings []string
	for _, w := range res.Warnings {
		findings = append(findings, fmt.Sprintf("line %d: %s", w.Location.Start.Line, w.Short))
	}
	lint := linter.New(&linter.Config{ExperimentalAll: true, Warn: func(rule, _, _, msg string, loc []parser.Range) {
		line := 0
		if len(loc) > 0 {
			line = loc[0].Start.Line
		}
		findings = append(findings, fmt.Sprintf("line %d: %s: %s", line, rule, msg))
	}})
	stages, _, err := instructions.Parse(res.AST, lint)
	if err != nil {
		return nil, err
	}
	if len(stages) < 2 {
		findings = append(findings, fmt.Sprintf("%d stage(s): want a multi-stage build (build, then a small runtime image)", len(stages)))
		return findings, nil
	}
	static := false
	for _, cmd := range stages[0].Commands {
		if r, ok := cmd.(*instructions.RunCommand); ok && strings.Contains(strings.Join(r.CmdLine, " "), "CGO_ENABLED=0") {
			static = true
		}
	}
	if !static {
		findings = append(findings, "the build stage does not build with CGO_ENABLED=0 (a static binary)")
	}
	final := stages[len(stages)-1]
	var user string
	health := false
	for _, cmd := range final.Commands {
		switch c := cmd.(type) {
		case *instructions.UserCommand:
			user = c.User
		case *instructions.HealthCheckCommand:
			health = c.Health != nil && strings.Contains(strings.Join(c.Health.Test, " "), "/healthz")
		}
	}
	if name, _, _ := strings.Cut(user, ":"); name == "" || name == "root" || name == "0" {
		findings = append(findings, fmt.Sprintf("the final stage runs as %q: want a non-root USER", user))
	}
	if !health {
		findings = append(findings, "the final stage has no HEALTHCHECK on /healthz")
	}
	return findings, nil
}
