package main

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/ovstream/ovstream/consumer"
	"github.com/ovstream/ovstream/redact"
)

// stopSignal is the cause of the command context when a signal stopped it.
type stopSignal struct{ sig os.Signal }

func (s stopSignal) Error() string {
	switch s.sig {
	case syscall.SIGTERM:
		return "SIGTERM"
	case os.Interrupt:
		return "SIGINT"
	}
	return s.sig.String()
}

// logStart logs the one start-up line of `run`: the effective settings,
// defaults filled in; the database without its password, the SASL user
// without the password.
func logStart(log *slog.Logger, f *runFlags, cfg consumer.Config) {
	parts := "all"
	if cfg.Partitions != nil {
		ps := make([]string, len(cfg.Partitions))
		for i, p := range cfg.Partitions {
			ps[i] = p.String()
		}
		parts = strings.Join(ps, ",")
	}
	sasl := "off"
	if m := f.kafka.SASLMechanism; m != "" {
		sasl = strings.ToUpper(m) + " as " + f.kafka.SASLUser
	}
	memory := f.memoryLimit
	if memory == "" {
		memory = "default"
	}
	log.Info("starting", "pipeline", cfg.Pipeline, "owner", cfg.Owner, "brokers", strings.Join(cfg.Brokers, ","),
		"topics", strings.Join([]string{cfg.PredictionsTopic, cfg.PositionsTopic}, ","), "partitions", parts,
		"database", redact.Database(f.databaseURL), "window", cfg.Window.String(), "allowed_lateness", cfg.Lateness().String(),
		"idle_timeout", cfg.IdleTimeout.String(), "idle_finalize", cfg.IdleFinalize, "max_future_skew", cfg.MaxFutureSkew.String(),
		"flush_interval", cfg.FlushInterval.String(), "start_offset", cfg.StartOffset, "on_offset_out_of_range", cfg.OnOffsetOutOfRange,
		"drain", cfg.Drain, "lease", cfg.Lease.String(), "takeover", cfg.Takeover, "max_uncommitted_messages", cfg.MaxUncommitted,
		"fetch_bytes", cfg.FetchBytes, "memory_limit", memory, "metrics_addr", f.metricsAddr,
		"kafka_commit_offsets", f.kafkaCommitOffsets, "kafka_tls", cfg.Sarama.Net.TLS.Enable, "kafka_sasl", sasl,
		"progress_interval", f.progress.String(), "log_level", f.logLevel,
		"retention", cmp.Or(f.retention, "off"), "dead_letter_retention", cmp.Or(f.deadLetterRetention, "off"))
}

// logStop logs the one shutdown line of `run`: why it stopped (SIGTERM or
// SIGINT, drain complete, fenced, error), the exit code, and what it did.
func logStop(ctx context.Context, log *slog.Logger, cfg consumer.Config, sum *consumer.Summary, err error, code int) {
	var why string
	var sig stopSignal
	switch {
	case errors.Is(err, consumer.ErrFenced):
		why = "fenced"
	case err != nil:
		why = "error"
	case errors.As(context.Cause(ctx), &sig):
		why = sig.Error()
	case cfg.Drain:
		why = "drain complete"
	default:
		why = "stopped"
	}
	attrs := []any{"reason", why, "exit_code", code}
	if err != nil {
		attrs = append(attrs, "err", err)
	}
	if sum != nil {
		var consumed int64
		for _, n := range sum.Consumed {
			consumed += n
		}
		attrs = append(attrs, "consumed", consumed, "commits", sum.Commits, "window_rows", sum.WindowRows,
			"elapsed", sum.Elapsed.Round(time.Millisecond).String())
	}
	log.Info("stopped", attrs...)
}
