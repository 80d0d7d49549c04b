package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// TooManyConnections reports whether err is PostgreSQL refusing a new
// session for want of a free connection slot: SQLSTATE 53300
// (too_many_connections: "sorry, too many clients already", or "remaining
// connection slots are reserved for roles with ..." when only the slots of
// superuser_reserved_connections and reserved_connections are left), or a
// role's or database's CONNECTION LIMIT. PostgreSQL docs, "Connections and
// Authentication" (max_connections) and Appendix A.
func TooManyConnections(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "53300"
}

// slotsMsg is the log line of a connection refused for want of a slot; it
// names the limit, so that an operator knows what to raise or whom to stop.
const slotsMsg = "PostgreSQL has no connection slot free (SQLSTATE 53300: max_connections, less superuser_reserved_connections and reserved_connections, or a role's or database's CONNECTION LIMIT, is in use); waiting for one"

// Connect backoff: the first wait, and the most it grows to (doubling).
const (
	connectBackoff    = 200 * time.Millisecond
	maxConnectBackoff = 5 * time.Second
)

// LogRetry logs, at warning, that what failed with err and is tried again
// in retryIn; a refused connection (TooManyConnections) says so with the
// limit's name (slotsMsg). It is the log line of the run loop's retries
// (consumer), and of WaitConnect's for 53300.
func LogRetry(log *slog.Logger, what string, err error, retryIn time.Duration) {
	if TooManyConnections(err) {
		log.Warn(slotsMsg, "what", what, "limit", "max_connections", "err", err, "retry_in", retryIn)
		return
	}
	log.Warn(what+" failed; retrying", "err", err, "retry_in", retryIn)
}

// WaitConnect runs connect, which opens a connection (or does a first
// short piece of work on a new one), until it succeeds, fails with an error
// that is not Retryable, or timeout passes: ovstream's one rule for a
// database that is not there yet or has no connection slot free (53300),
// for every command at start-up. Each failure is logged ("cannot reach
// PostgreSQL yet; retrying", or for 53300 the line of LogRetry) and
// retried with capped exponential backoff (200 ms doubling to 5 s). A
// timeout of 0 or less tries once. The error after the timeout says how
// long it waited and, for 53300, names the limit.
func WaitConnect(ctx context.Context, timeout time.Duration, log *slog.Logger, what string, connect func(context.Context) error) error {
	began := time.Now()
	err := Wait(ctx, timeout, Retryable, func(err error, retryIn time.Duration) {
		if TooManyConnections(err) {
			LogRetry(log, what, err, retryIn)
		} else {
			log.Warn("cannot reach PostgreSQL yet; retrying", "what", what, "err", err, "retry_in", retryIn)
		}
	}, connect)
	if err != nil && TooManyConnections(err) && ctx.Err() == nil {
		return fmt.Errorf("%s: no PostgreSQL connection slot free for %s (max_connections: see docs/operations.md \"Connections\"): %w",
			what, time.Since(began).Round(time.Millisecond), err)
	}
	return err
}

// Wait runs fn until it succeeds, fails with an error retryable does not
// accept, ctx ends, or the next attempt would start after timeout (0 or
// less: one attempt); before each retry it calls logRetry and waits, with
// capped exponential backoff (200 ms doubling to 5 s). It returns fn's last
// error. The waits of every command at start-up: WaitConnect (PostgreSQL),
// consumer.WaitKafka (Kafka's brokers).
func Wait(ctx context.Context, timeout time.Duration, retryable func(error) bool, logRetry func(err error, retryIn time.Duration),
	fn func(context.Context) error) error {
	deadline := time.Now().Add(timeout)
	backoff := connectBackoff
	for {
		err := fn(ctx)
		if err == nil {
			return nil
		}
		if !retryable(err) || ctx.Err() != nil || time.Now().Add(backoff).After(deadline) {
			return err
		}
		logRetry(err, backoff)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxConnectBackoff)
	}
}
