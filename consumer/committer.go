package consumer

import (
	"context"

	"github.com/ovstream/ovstream/store"
)

// committer owns the commit connection: one goroutine runs every call on
// the commit Store, one at a time, in the order they were sent. Callers
// never hold the Store, so none has to wait for another's call first: a
// claim sent while a commit is in flight runs when the commit ends.
type committer struct {
	calls chan func(*store.Store)
	done  chan struct{}
}

// startCommitter starts the owner of st; it runs until close.
func startCommitter(st *store.Store) *committer {
	c := &committer{calls: make(chan func(*store.Store)), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for f := range c.calls {
			f(st)
		}
		_ = st.Close(context.Background())
	}()
	return c
}

// do runs f on the commit Store after the calls sent before it and returns
// f's error. It waits for f to end: f is given its caller's context by
// closure, and every Store call ends with that context.
func (c *committer) do(f func(*store.Store) error) error {
	res := make(chan error, 1)
	c.calls <- func(st *store.Store) { res <- f(st) }
	return <-res
}

// send queues f and returns at once; f answers on a channel of its own (the
// commit in flight: loop.startCommit).
func (c *committer) send(f func(*store.Store)) { c.calls <- f }

// close runs the calls sent, closes the commit connection and ends the
// owner. No call may be sent after.
func (c *committer) close() {
	close(c.calls)
	<-c.done
}
