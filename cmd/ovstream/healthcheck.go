package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

func init() {
	register("healthcheck", "GET /healthz of a running `run` (exit 0 when it answers 200): for container HEALTHCHECKs", cmdHealthcheck)
}

// cmdHealthcheck asks a running `ovstream run` for /healthz, for images
// without curl or wget (the Dockerfile's HEALTHCHECK). Exit 0 on 200, 1
// otherwise, 2 on bad flags.
func cmdHealthcheck(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("healthcheck", flag.ContinueOnError)
	url := fs.String("url", "http://127.0.0.1:9464/healthz", "the `URL` of /healthz (run --metrics-addr)")
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for the answer")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 || *timeout <= 0 {
		fmt.Fprintln(os.Stderr, "usage: ovstream healthcheck [--url URL] [--timeout D]")
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *url, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ovstream healthcheck:", err)
		return exitUsage
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ovstream healthcheck:", err)
		return exitError
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(os.Stderr, "ovstream healthcheck: %s: %s %s\n", *url, resp.Status, body)
		return exitError
	}
	return exitOK
}
