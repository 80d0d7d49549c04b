package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func init() { register(newHealthcheckCmd) }

// healthcheckFlags are the flags of healthcheck.
type healthcheckFlags struct {
	url     string
	timeout time.Duration
}

func (f *healthcheckFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.url, "url", "http://127.0.0.1:9464/healthz", "the `URL` of /healthz (run --metrics-addr)")
	fs.DurationVar(&f.timeout, "timeout", 3*time.Second, "how long to wait for the answer")
}

func newHealthcheckCmd() *cobra.Command {
	var f healthcheckFlags
	c := &cobra.Command{Use: "healthcheck", Short: "GET /healthz of a running `run` (exit 0 when it answers 200): for container HEALTHCHECKs",
		Args: noArgs}
	f.register(c.Flags())
	c.RunE = run(func(ctx context.Context, _, stderr io.Writer, _ []string) int { return cmdHealthcheck(ctx, &f, stderr) })
	return c
}

// cmdHealthcheck asks a running `ovstream run` for /healthz, for images
// without curl or wget (the Dockerfile's HEALTHCHECK). Exit 0 on 200, 1
// otherwise, 2 on bad flags.
func cmdHealthcheck(ctx context.Context, f *healthcheckFlags, stderr io.Writer) int {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.url, nil)
	if err != nil {
		fmt.Fprintln(stderr, "ovstream healthcheck: --url:", err)
		return exitUsage
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintln(stderr, "ovstream healthcheck:", err)
		return exitError
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "ovstream healthcheck: %s: %s %s\n", f.url, resp.Status, body)
		return exitError
	}
	return exitOK
}
