package store

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Retryable reports whether err is transient: running the whole operation
// again (for Commit, the whole batch, on a new connection) may succeed.
//
// True: connection lost or refused, timeouts, an ambiguous COMMIT (re-read the
// positions first), no partition of delay_aggregates for a row (23514 from
// ExecFindPartition: dropped meanwhile; the next commit creates it again),
// SQLSTATE class 08 (connection exception), 40001 (serialization failure),
// 40P01 (deadlock), 55P03 (lock not available), 25P03 (the server ended a
// session idle in its transaction), 57P01/57P02/57P03 (server shutting down
// or starting up), 53300 (too many connections), 25006 (read-only SQL
// transaction: the server is a standby now, e.g. the old primary after a
// failover or a host that target_session_attrs did not rule out; the next
// connection finds the primary), 57014 (query_canceled: statement_timeout,
// or a DBA's pg_cancel_backend; the statement was cancelled, not refused, so
// the batch is run again whole). SQLSTATEs: PostgreSQL Appendix A,
// "PostgreSQL Error Codes".
// False: ErrFenced, context.Canceled, every other server error (a value
// PostgreSQL refuses, see Refused; missing tables, authentication).
//
// A dead transaction can report pgconn.SafeToRetry on its next statement
// (STACK.md): that means "retry the transaction", never "retry the statement".
func Retryable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrFenced) || errors.Is(err, context.Canceled) {
		return false
	}
	if noPartition(err) {
		return true // dropped meanwhile: the next commit creates it again (partitions.go)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch code := pgErr.Code; {
		case strings.HasPrefix(code, "08"):
			return true
		case code == "40001", code == "40P01", code == "55P03", code == "25P03",
			code == "57P01", code == "57P02", code == "57P03", code == "53300", code == "25006", code == "57014":
			return true
		default:
			return false
		}
	}
	var commitErr *CommitError
	if errors.As(err, &commitErr) {
		return true // the server did not answer (or would have been a PgError above)
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), pgconn.Timeout(err), pgconn.SafeToRetry(err):
		return true
	case errors.As(err, &connectErr), errors.As(err, &netErr):
		return true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return true
	case errors.Is(err, pgx.ErrTxClosed), errors.Is(err, pgx.ErrTxCommitRollback):
		return true // the transaction is gone: retry it whole
	}
	return false
}

// Refused reports whether err is PostgreSQL refusing a value the statement
// wrote, so that running the same rows again fails the same way: SQLSTATE
// class 22 (data exception, e.g. 22001 value too long), class 23 (integrity
// constraint violation, e.g. 23514 check_violation) and 54000
// (program_limit_exceeded, e.g. an index row larger than a btree page); but
// not a row without a partition of delay_aggregates (see Retryable).
// Commit meets such an error by finding the refused rows (*RejectedError);
// the unique_violation its window COPY expects never reaches it.
// (PostgreSQL Appendix A, "PostgreSQL Error Codes".)
func Refused(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || noPartition(err) {
		return false
	}
	code := pgErr.Code
	return strings.HasPrefix(code, "22") || strings.HasPrefix(code, "23") || code == "54000"
}
