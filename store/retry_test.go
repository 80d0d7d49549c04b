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
		{pg("25006"), true},  // read_only_sql_transaction: a standby now (failover)
		{pg("57014"), true},  // query_canceled: statement_timeout, pg_cancel_backend
		{fmt.Errorf("store: claim: %w", &HeldError{}), false},
		{&CommitError{Ambiguous: true, Err: io.ErrUnexpectedEOF}, true},
		{&CommitError{Err: &pgconn.PgError{Code: "23514"}}, false},
		{errNoPartition, true}, // dropped meanwhile: made again by the next commit
		{fmt.Errorf("x: %w", io.EOF), true},
		{context.DeadlineExceeded, true},
		{errors.New("something else"), false},
	} {
		if got := Retryable(c.err); got != c.want {
			t.Errorf("Retryable(%v) = %t, want %t", c.err, got, c.want)
		}
	}
}

// errNoPartition is PostgreSQL's error for a row no partition of
// delay_aggregates holds (as pgconn reports it: SQLSTATE 23514, no constraint).
var errNoPartition = fmt.Errorf("store: commit: upsert windows: copy: %w", &pgconn.PgError{Code: "23514",
	Message: `no partition of relation "delay_aggregates" found for row`, TableName: "delay_aggregates", Routine: "ExecFindPartition"})

func TestRefused(t *testing.T) {
	pg := func(code string) error {
		return fmt.Errorf("store: commit: upsert windows: %w", &pgconn.PgError{Code: code})
	}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{pg("23514"), true},  // check_violation
		{pg("23503"), true},  // foreign_key_violation
		{pg("23502"), true},  // not_null_violation
		{pg("23505"), true},  // unique_violation (not the window COPY's: it never leaves upsertWindows)
		{pg("22001"), true},  // string_data_right_truncation: value too long
		{pg("22021"), true},  // character_not_in_repertoire
		{pg("22P02"), true},  // invalid_text_representation
		{pg("54000"), true},  // program_limit_exceeded: index row too large
		{pg("54001"), false}, // statement_too_complex
		{pg("21000"), false}, // cardinality_violation: a bug, not a value
		{pg("42P01"), false}, // undefined_table
		{pg("40001"), false}, // serialization_failure: Retryable
		{pg("57P01"), false},
		{&CommitError{Err: &pgconn.PgError{Code: "23503"}}, true}, // a deferred constraint, at COMMIT
		{fmt.Errorf("x: %w", ErrFenced), false},
		{io.EOF, false},
		{errNoPartition, false}, // no partition holds the row: Retryable
	} {
		if got := Refused(c.err); got != c.want {
			t.Errorf("Refused(%v) = %t, want %t", c.err, got, c.want)
		}
		if Refused(c.err) && Retryable(c.err) {
			t.Errorf("%v is both Refused and Retryable", c.err)
		}
	}
}
