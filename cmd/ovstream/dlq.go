package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ovstream/ovstream/dlq"
	"github.com/ovstream/ovstream/feed/produce"
	"github.com/ovstream/ovstream/redact"
	"github.com/ovstream/ovstream/store"
)

func init() { register(newDLQCmd) }

const dlqLong = `Both read the dead letters of one pipeline (--pipeline, default ovstream).
list prints the dead_letters rows by topic, partition and offset: reason, error,
when stored and when replayed, the key and a preview of the value (--json: every
column, key and value base64-encoded, byte for byte).

replay re-produces the original key and value of every dead letter not replayed
yet (idempotent producer, acks=all), with headers ovstream-dlq-source
(topic/partition/offset of the record it came from), ovstream-dlq-reason and, for
rejected and future dead letters (and late and decode ones with
--into-final-windows), ovstream-dlq-final: merge. It marks the rows replayed
(dead_letters.replayed_at, replayed_to) once Kafka acknowledged them, so a second
replay does not send them again. A crash between the acknowledgement and the
database commit sends those rows again at the next replay, but a source counts
at most once: run records the source of every copy it counts
(dead_letter_replays) in the commit that counts it, and skips the other copies.
A copy whose window is final is merged into the stored rows of its window
(exact: the stored distribution) when it carries ovstream-dlq-final, and
dead-lettered late again otherwise.`

// dlqFlags are the flags of dlq list and dlq replay.
type dlqFlags struct {
	ops           opsFlags
	reason, topic string
	limit         int
	pending, json bool   // list
	to            string // replay
	intoFinal     bool   // replay: late and decode copies may be merged into final windows
}

// register defines the flags of dlq SUB (list or replay).
func (f *dlqFlags) register(fs *pflag.FlagSet, sub string) {
	f.ops.register(fs, sub == "replay")
	fs.StringVar(&f.reason, "reason", "", "only this `reason`: decode, future, late, rejected or implausible")
	fs.StringVar(&f.topic, "topic", "", "only dead letters of this source `topic`")
	fs.IntVar(&f.limit, "limit", 0, "at most `N` rows (list: default 100; replay: default all)")
	if sub == "list" {
		fs.BoolVar(&f.pending, "pending", false, "only rows not replayed yet")
		fs.BoolVar(&f.json, "json", false, "print one JSON object per line")
	} else {
		fs.StringVar(&f.to, "to", "", "`topic` to re-produce to (required)")
		fs.BoolVar(&f.intoFinal, "into-final-windows", false, "let late and decode dead letters whose windows are final count too, "+
			"merged into the stored rows (rejected and future ones always may): an operator's decision, since the allowed lateness did not count them")
	}
}

func newDLQCmd() *cobra.Command {
	sub := func(name, short string) *cobra.Command {
		var f dlqFlags
		c := &cobra.Command{Use: name, Short: short, Long: dlqLong, Args: noArgs}
		f.register(c.Flags(), name)
		c.RunE = run(func(ctx context.Context, stdout, stderr io.Writer, _ []string) int {
			return cmdDLQ(ctx, name, &f, stdout, stderr)
		})
		return c
	}
	return group("dlq", "dead letters: list them, or replay them to a topic", dlqLong,
		sub("list", "list the dead letters: reason, error, key, a value preview (--json: every column)"),
		sub("replay", "re-produce the dead letters not replayed yet to --to TOPIC, and mark them replayed"))
}

// cmdDLQ lists (sub "list") or replays (sub "replay") dead letters.
func cmdDLQ(ctx context.Context, sub string, f *dlqFlags, stdout, stderr io.Writer) int {
	o := &f.ops
	stdout = redact.NewWriter(stdout, o.secrets())
	stderr = redact.NewWriter(stderr, o.secrets())
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "dlq %s: "+format+"\n", append([]any{sub}, a...)...)
		return exitUsage
	}
	switch {
	case f.reason != "" && f.reason != store.ReasonDecode && f.reason != store.ReasonFuture && f.reason != store.ReasonLate &&
		f.reason != store.ReasonRejected && f.reason != store.ReasonImplausible:
		return usageErr("--reason %q: want decode, future, late, rejected or implausible", f.reason)
	case f.limit < 0:
		return usageErr("--limit %d: want 0 or more", f.limit)
	case sub == "replay" && f.to == "":
		return usageErr("--to TOPIC is required")
	}
	filter := store.DeadLetterFilter{Pipeline: o.pipeline, Reason: f.reason, Topic: f.topic, Limit: f.limit}
	st, err := o.openChecked(ctx, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "ovstream dlq %s: %v\n", sub, err)
		return exitError
	}
	defer st.Close(context.Background())
	if code := pipelineUnknown(stderr, "dlq "+sub, st.CheckPipelineKnown(ctx, o.pipeline)); code != exitOK {
		return code
	}
	if sub == "list" {
		if filter.Limit == 0 {
			filter.Limit = 100
		}
		filter.Pending = f.pending
		dls, err := st.DeadLetters(ctx, filter)
		if err != nil {
			fmt.Fprintln(stderr, "ovstream dlq list:", err)
			return exitError
		}
		if f.json {
			err = dlq.PrintJSON(stdout, dls)
		} else {
			dlq.PrintText(stdout, dls)
		}
		if err != nil {
			fmt.Fprintln(stderr, "ovstream dlq list:", err)
			return exitError
		}
		return exitOK
	}

	pc := produce.NewSaramaConfig("ovstream-dlq")
	if err := o.kafka.apply(pc); err != nil {
		return usageErr("%v", err)
	}
	cfg := produce.Config{Brokers: splitList(o.brokers), Sarama: pc}
	if err := kafkaPreflight(cfg.Brokers, pc); err != nil {
		fmt.Fprintln(stderr, "ovstream dlq replay:", err)
		return exitError
	}
	n, err := dlq.Replay(ctx, st, filter, f.to, f.intoFinal, cfg)
	fmt.Fprintf(stdout, "replayed %d dead letters to %s\n", n, f.to)
	if err != nil {
		fmt.Fprintln(stderr, "ovstream dlq replay:", err)
		return exitError
	}
	return exitOK
}
