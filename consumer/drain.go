package consumer

import (
	"context"
	"fmt"
	"time"

	"github.com/ovstream/ovstream/consumer/crashpoint"
)

// drained tells whether every partition reached its high water mark at start.
func (l *loop) drained() bool {
	for tp, p := range l.parts {
		if l.led.ConsumedOffset(tp) < p.drainTarget {
			return false
		}
	}
	return true
}

// finishDrain finalizes every open window and commits, retrying until it
// succeeds or ctx ends.
func (l *loop) finishDrain(ctx context.Context) error {
	if err := l.waitCommit(ctx); err != nil {
		return err
	}
	l.wm.Raise(l.win.LastEnd())
	if !l.sp.on {
		l.wm.Raise(l.copiesLastEnd()) // the copies' windows are final too
	}
	l.noteClosable(l.cfg.Now())
	l.sp.draining = true // a split drain marks its partitions drained
	if err := l.commitUntilDone(ctx, ctx); err != nil {
		return err
	}
	if err := l.awaitMerge(ctx); err != nil {
		return err
	}
	return l.drainCopies(ctx)
}

// shutdown makes the final commit of what is durable after SIGTERM. Open
// windows are not written: Kafka redelivers them on the next start.
func (l *loop) shutdown() error {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	crashpoint.Hit(crashpoint.Shutdown)
	err := l.waitCommit(ctx)
	if err == nil {
		err = l.commitUntilDone(ctx, ctx)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("consumer: final commit did not succeed within %v (nothing is lost: Kafka redelivers from the stored offsets)", shutdownGrace)
	}
	return err
}

// commitUntilDone commits until a batch taken during this call has been
// committed: a batch that failed before is retried first; retryable
// failures wait with backoff until stop ends and retry the batch as it is.
// Once the batch taken here is committed, at the first try or a retry, no
// other follows: a split drain's batch marks its partitions drained, and
// one more would mark them again after its merge ended the drain (and wait
// for a merge that never comes).
func (l *loop) commitUntilDone(ctx context.Context, stop context.Context) error {
	taken := false // the pending batch, if any, was taken during this call
	for {
		taken = taken || l.pending == nil
		l.startCommit(ctx)
		if err := l.waitCommit(ctx); err != nil {
			return err
		}
		if taken && l.pending == nil {
			return nil
		}
		if l.pending != nil { // failed: back off before the retry
			select {
			case <-stop.Done():
				return stop.Err()
			case <-time.After(l.backoff):
			}
		}
	}
}
