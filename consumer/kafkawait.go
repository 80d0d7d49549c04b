package consumer

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"syscall"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ovstream/ovstream/store"
)

// KafkaRetryable reports whether err is a failure to reach or talk to a
// broker that a new connection may not meet: the connection refused, reset
// or closed (ECONNREFUSED, ECONNRESET, EPIPE, ECONNABORTED, EOF), a network
// timeout, or sarama finding no broker to ask (ErrOutOfBrokers,
// ErrNotConnected, ErrClosedClient) or a leader moving (LeaderNotAvailable,
// NotLeaderForPartition). False for what a retry meets again: an
// authentication or TLS failure the broker answered, an unknown topic, a bad
// configuration. A Kafka error code franz-go returns is retryable when the
// protocol says so (kerr.Error.Retriable); a reading of the end offsets that
// timed out is too.
func KafkaRetryable(err error) bool {
	if err == nil {
		return false
	}
	for _, target := range []error{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.EPIPE, syscall.ECONNABORTED,
		io.EOF, io.ErrUnexpectedEOF, sarama.ErrOutOfBrokers, sarama.ErrNotConnected, sarama.ErrClosedClient,
		sarama.ErrLeaderNotAvailable, sarama.ErrNotLeaderForPartition, sarama.ErrRequestTimedOut} {
		if errors.Is(err, target) {
			return true
		}
	}
	var kerrErr *kerr.Error
	if errors.As(err, &kerrErr) {
		return kerrErr.Retriable
	}
	var netErr net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &netErr) && netErr.Timeout()
}

// WaitKafka runs fn, a first request to the brokers at start-up, until it
// succeeds, fails for another reason than KafkaRetryable, or timeout
// (--connect-timeout) passes, as store.WaitConnect waits for PostgreSQL:
// with capped exponential backoff (200 ms doubling to 5 s), each retry
// logged. So a bootstrap connection reset by a flaky network does not end the
// run with `kafka: cannot connect: ... connection reset by peer`.
func WaitKafka(ctx context.Context, timeout time.Duration, log *slog.Logger, what string, fn func() error) error {
	return store.Wait(ctx, timeout, KafkaRetryable, func(err error, retryIn time.Duration) {
		log.Warn("cannot reach Kafka yet; retrying", "what", what, "err", err, "retry_in", retryIn)
	}, func(context.Context) error { return fn() })
}
