package store

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// binaryCopy streams rows in PostgreSQL's binary COPY format (PostgreSQL docs,
// "COPY", "Binary Format"): a header, one tuple per row (field count, then
// each field as a length and its bytes, -1 for NULL), a trailer. Rows are
// encoded on demand as the server reads, so a large batch is never held twice
// in memory, and nothing is boxed or planned per value as in pgx.CopyFrom.
//
// Field encodings (the types' send functions): text = its bytes (valid UTF-8,
// the decoder guarantees it); float8 = IEEE 754 big-endian; int8, int4 =
// big-endian two's complement; timestamptz = int64 microseconds since
// 2000-01-01 00:00:00 UTC.
//
// pgconn's CopyFrom calls Read on a goroutine of its own and, when the
// connection breaks mid-COPY (a FATAL error, a failed read), returns without
// waiting for it (pgx v5.12.0, pgconn.go, CopyFrom), so Read may still run,
// and call next, after CopyFrom returned: copyBinary waits for it (stop).
type binaryCopy struct {
	mu      sync.Mutex // held by Read and stop
	next    tupleFunc
	buf     []byte // encoded, not yet read
	off     int    // read position in buf
	ended   bool   // trailer written
	stopped bool   // stop was called: Read calls next no more
	err     error  // next's error, which ended the COPY (CopyFail)
}

// errCopyStopped is what a Read after stop returns.
var errCopyStopped = errors.New("store: COPY data read after the COPY returned")

// copyBinary runs sql, a COPY ... FROM STDIN (FORMAT binary), on conn with
// the tuples of next. srcErr is next's error when one ended the COPY, as
// next returned it; err is CopyFrom's (then the server's answer to the
// CopyFail). It returns only once nothing reads next any more, even when the
// connection broke mid-COPY (binaryCopy), so the caller may then read what
// next wrote (a merge cursor's Err, Rows and Windows).
func copyBinary(ctx context.Context, conn *pgconn.PgConn, sql string, next tupleFunc) (srcErr, err error) {
	c := newBinaryCopy(next)
	_, err = conn.CopyFrom(ctx, c, sql)
	return c.stop(), err
}

// tupleFunc appends the next tuple to b and reports whether there was one;
// an error ends the COPY with it.
type tupleFunc func(b []byte) ([]byte, bool, error)

// indexed is the tupleFunc of rows 0..n-1, appended by row.
func indexed(n int, row func(b []byte, i int) []byte) tupleFunc {
	i := 0
	return func(b []byte) ([]byte, bool, error) {
		if i == n {
			return b, false, nil
		}
		b = row(b, i)
		i++
		return b, true, nil
	}
}

var copyHeader = []byte("PGCOPY\n\xff\r\n\x00\x00\x00\x00\x00\x00\x00\x00\x00")

func newBinaryCopy(next tupleFunc) *binaryCopy {
	c := &binaryCopy{next: next, buf: make([]byte, 0, 64<<10)}
	c.buf = append(c.buf, copyHeader...)
	return c
}

// Read implements io.Reader. An error of next is returned (pgconn then
// sends CopyFail and the server's answer is what CopyFrom returns: stop
// returns next's). After stop it returns errCopyStopped.
func (c *binaryCopy) Read(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return 0, errCopyStopped
	}
	if c.off == len(c.buf) {
		if c.ended {
			return 0, io.EOF
		}
		c.buf, c.off = c.buf[:0], 0
		for len(c.buf) < 48<<10 {
			b, ok, err := c.next(c.buf)
			if err != nil {
				c.err = err
				return 0, err
			}
			c.buf = b
			if !ok {
				c.buf = binary.BigEndian.AppendUint16(c.buf, 0xffff) // trailer: -1
				c.ended = true
				break
			}
		}
	}
	n := copy(p, c.buf[c.off:])
	c.off += n
	return n, nil
}

// stop ends the stream and returns next's error, if one ended it. It waits
// for a Read in progress; a later Read calls next no more.
func (c *binaryCopy) stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopped = true
	return c.err
}

func appendFieldCount(b []byte, n int16) []byte { return binary.BigEndian.AppendUint16(b, uint16(n)) }

func appendNull(b []byte) []byte { return binary.BigEndian.AppendUint32(b, 0xffffffff) }

func appendText(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// appendBytea writes b as a bytea (binary: the bytes themselves).
func appendBytea(b, v []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
	return append(b, v...)
}

// appendNullText writes "" as NULL.
func appendNullText(b []byte, s string) []byte {
	if s == "" {
		return appendNull(b)
	}
	return appendText(b, s)
}

func appendFloat8(b []byte, f float64) []byte {
	b = binary.BigEndian.AppendUint32(b, 8)
	return binary.BigEndian.AppendUint64(b, math.Float64bits(f))
}

func appendInt8(b []byte, v int64) []byte {
	b = binary.BigEndian.AppendUint32(b, 8)
	return binary.BigEndian.AppendUint64(b, uint64(v))
}

func appendInt4(b []byte, v int32) []byte {
	b = binary.BigEndian.AppendUint32(b, 4)
	return binary.BigEndian.AppendUint32(b, uint32(v))
}

// postgresEpoch is 2000-01-01 00:00:00 UTC in Unix microseconds.
const postgresEpoch = 946684800 * 1_000_000

func appendTimestamptz(b []byte, t time.Time) []byte {
	us := t.Unix()*1_000_000 + int64(t.Nanosecond())/1000
	return appendInt8(b, us-postgresEpoch)
}

// Element type OIDs of the arrays a commit writes (pg_type).
const (
	oidInt8   = 20
	oidFloat8 = 701
)

// appendArrayHeader starts a one-dimensional array of n non-NULL elements
// of 8 bytes each (array_send): its field length, dimensions, flags (no
// NULLs), element type, length and lower bound 1.
func appendArrayHeader(b []byte, oid uint32, n int) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(20+12*n))
	b = binary.BigEndian.AppendUint32(b, 1) // dimensions
	b = binary.BigEndian.AppendUint32(b, 0) // flags: no NULLs
	b = binary.BigEndian.AppendUint32(b, oid)
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	return binary.BigEndian.AppendUint32(b, 1) // lower bound
}

// appendFloat8Array writes vs as a float8[].
func appendFloat8Array(b []byte, vs []float64) []byte {
	b = appendArrayHeader(b, oidFloat8, len(vs))
	for _, v := range vs {
		b = appendFloat8(b, v)
	}
	return b
}

// appendInt8Array writes vs as a bigint[].
func appendInt8Array(b []byte, vs []int64) []byte {
	b = appendArrayHeader(b, oidInt8, len(vs))
	for _, v := range vs {
		b = appendInt8(b, v)
	}
	return b
}
