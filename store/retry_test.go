package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestRetryable(t *testing.T) {
	pg := func(code string) error {
		return fmt.Errorf("store: commit: upsert windows: %w", &pgconn.PgError{Code: code})
	}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{fmt.Errorf("store: commit: %w", ErrFenced), false},
		{context.Canceled, false},
		{pg("23514"), false}, // check_violation
		{pg("23505"), false}, // unique_violation
		{pg("21000"), false}, // cardinality_violation
		{pg("42P01"), false}, // undefined_table
		{pg("28P01"), false}, // invalid_password
		{pg("57P01"), true},  // admin_shutdown (pg_terminate_backend)
		{pg("57P03"), true},  // cannot_connect_now
		{pg("40001"), true},  // serialization_failure
		{pg("40P01"), true},  // deadlock_detected
		{pg("08006"), true},  // connection_failure
		{pg("55P03"), true},  // lock_not_available
		{pg("25P03"), true},  // idle_in_transaction_session_timeout
		{fmt.Errorf("store: claim: %w", &HeldError{}), false},
		{&CommitError{Ambiguous: true, Err: io.ErrUnexpectedEOF}, true},
		{&CommitError{Err: &pgconn.PgError{Code: "23514"}}, false},
		{fmt.Errorf("x: %w", io.EOF), true},
		{context.DeadlineExceeded, true},
		{errors.New("something else"), false},
	} {
		if got := Retryable(c.err); got != c.want {
			t.Errorf("Retryable(%v) = %t, want %t", c.err, got, c.want)
		}
	}
}
