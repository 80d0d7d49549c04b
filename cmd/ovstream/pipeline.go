package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ovstream/ovstream/config"

	"github.com/spf13/cobra"

	"github.com/ovstream/ovstream/consumer"
	"github.com/ovstream/ovstream/redact"
	"github.com/ovstream/ovstream/store"
)

func init() { register(newPipelineCmd) }

const pipelineSetLong = `Every instance of a pipeline must run with the same --window, --topics and --max-delay:
the first instance that claims the pipeline records them, and an instance
started with others exits 2 naming each setting with both values, having
written nothing. (--allowed-lateness may differ per instance: it decides when
a window is final, not what it holds.)

set changes the recorded settings on purpose. It refuses (exit 1) while any
instance of the pipeline is live (a heartbeat younger than --lease): stop them
all, set, then start them with the new flags. What a change means:
  --window: windows already written keep the size they were written with;
  later windows have the new size. Rollups (report, dashboard) over a range
  written with both sizes add windows of both; a window that straddles the
  change's watermark is written again with the new size only where events
  arrive for it.
  --topics: partitions of a topic no longer named keep their stored offsets
  (status lists them) and are no longer read; a topic newly named starts at
  --start-offset.
  --max-delay: records already dead-lettered implausible stay so, and records
  already counted stay counted; later records are judged by the new bound.
  After raising it, dlq replay --reason implausible counts those set aside.`

// pipelineFlags are the flags of pipeline set.
type pipelineFlags struct {
	ops    opsFlags
	window time.Duration
	topics string
	// maxDelay: 0 unchanged
	maxDelay time.Duration
	lease    time.Duration
}

func newPipelineCmd() *cobra.Command {
	var f pipelineFlags
	set := &cobra.Command{Use: "set", Short: "change the pipeline's recorded --window, --topics and --max-delay (refused while an instance runs)",
		Long: pipelineSetLong, Args: noArgs}
	fs := set.Flags()
	f.ops.register(fs, false)
	fs.DurationVar(&f.window, "window", 0, "the tumbling window size every instance must run with (0: unchanged)")
	fs.StringVar(&f.topics, "topics", "", "PREDICTIONS_TOPIC,POSITIONS_TOPIC every instance must run with (empty: unchanged)")
	fs.DurationVar(&f.maxDelay, "max-delay", 0, "the bound on a plausible |delay_s| every instance must run with, 1s to 24h (0: unchanged)")
	fs.DurationVar(&f.lease, "lease", 15*time.Second, "the --lease of the pipeline's instances: a heartbeat younger is live")
	config.ZeroMeans(fs, "window", "unchanged")
	config.ZeroMeans(fs, "max-delay", "unchanged")
	set.RunE = run(func(ctx context.Context, stdout, stderr io.Writer, _ []string) int {
		return cmdPipelineSet(ctx, &f, stdout, stderr)
	})
	return group("pipeline", "a pipeline's shared settings", pipelineSetLong, set)
}

// cmdPipelineSet runs pipeline set.
func cmdPipelineSet(ctx context.Context, f *pipelineFlags, stdout, stderr io.Writer) int {
	o := &f.ops
	stdout = redact.NewWriter(stdout, redact.DatabaseSecrets(o.databaseURL))
	stderr = redact.NewWriter(stderr, redact.DatabaseSecrets(o.databaseURL))
	var set store.Settings
	switch {
	case f.window != 0 && f.window < time.Second:
		fmt.Fprintf(stderr, "pipeline set: --window %v: want at least 1s\n", f.window)
		return exitUsage
	case f.maxDelay != 0 && (f.maxDelay < time.Second || f.maxDelay > consumer.MaxMaxDelay):
		fmt.Fprintf(stderr, "pipeline set: --max-delay %v: want 1s to %v\n", f.maxDelay, consumer.MaxMaxDelay)
		return exitUsage
	case f.window == 0 && f.topics == "" && f.maxDelay == 0:
		fmt.Fprintln(stderr, "pipeline set: give --window, --topics or --max-delay (or several)")
		return exitUsage
	}
	set.Window, set.MaxDelay = f.window, f.maxDelay
	if f.topics != "" {
		for _, t := range strings.Split(f.topics, ",") {
			if t = strings.TrimSpace(t); t != "" {
				set.Topics = append(set.Topics, t)
			}
		}
		if len(set.Topics) == 0 || len(set.Topics) > 2 || (len(set.Topics) == 2 && set.Topics[0] == set.Topics[1]) {
			fmt.Fprintf(stderr, "pipeline set: --topics %q: want PREDICTIONS_TOPIC,POSITIONS_TOPIC, two different topics or one of them\n", f.topics)
			return exitUsage
		}
	}
	st, err := o.openCommand(ctx, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "ovstream pipeline set:", err)
		return exitError
	}
	defer st.Close(context.Background())
	before, err := st.SetSettings(ctx, o.pipeline, set, f.lease)
	var live *store.LiveError
	switch {
	case errors.As(err, &live):
		fmt.Fprintln(stderr, "ovstream pipeline set:", live)
		return exitError
	case err != nil:
		fmt.Fprintln(stderr, "ovstream pipeline set:", err)
		return exitError
	}
	if set.Window != 0 {
		fmt.Fprintf(stdout, "pipeline %q: --window %s (was %s); windows already written keep their size\n",
			o.pipeline, set.Window, orNone(before.Window.String(), before.Window == 0))
	}
	if set.Topics != nil {
		fmt.Fprintf(stdout, "pipeline %q: --topics %s (was %s)\n", o.pipeline, strings.Join(set.Topics, ","),
			orNone(strings.Join(before.Topics, ","), before.Topics == nil))
	}
	if set.MaxDelay != 0 {
		fmt.Fprintf(stdout, "pipeline %q: --max-delay %s (was %s); dead letters implausible stay until dlq replay --reason implausible\n",
			o.pipeline, set.MaxDelay, orNone(before.MaxDelay.String(), before.MaxDelay == 0))
	}
	return exitOK
}

// orNone returns s, or "none recorded" when none is true.
func orNone(s string, none bool) string {
	if none {
		return "none recorded"
	}
	return s
}
