package store

import (
	"errors"
	"testing"
)

// TestBinaryCopyStop: stop returns the source's error and, once it
// returned, Read calls the source no more (pgconn's reader goroutine may
// call Read after CopyFrom returned).
func TestBinaryCopyStop(t *testing.T) {
	errCorrupt := errors.New("corrupt partial")
	calls := 0
	c := newBinaryCopy(func(b []byte) ([]byte, bool, error) {
		calls++
		return b, false, errCorrupt
	})
	p := make([]byte, 64)
	if n, err := c.Read(p); n != len(copyHeader) || err != nil {
		t.Fatalf("first Read = %d, %v; want the header (%d bytes)", n, err, len(copyHeader))
	}
	if n, err := c.Read(p); n != 0 || err != errCorrupt {
		t.Fatalf("second Read = %d, %v; want 0, %v", n, err, errCorrupt)
	}
	if err := c.stop(); err != errCorrupt {
		t.Fatalf("stop = %v, want %v", err, errCorrupt)
	}
	if n, err := c.Read(p); n != 0 || err != errCopyStopped || calls != 1 {
		t.Fatalf("Read after stop = %d, %v after %d calls of the source; want 0, %v after 1", n, err, calls, errCopyStopped)
	}
}
