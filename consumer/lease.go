package consumer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/store"
)

// DefaultLease is Config.Lease when it is zero.
const DefaultLease = 15 * time.Second

const (
	standbyPoll     = 500 * time.Millisecond // a standby tries to claim again this often
	standbyLogEvery = 5 * time.Second        // and says whom it waits for this often
	// idleTransactionLimit is the second line against a frozen owner: the
	// server ends a commit session idle inside its transaction this long
	// (a claimer terminates it first, once the owner's lease expired).
	idleTransactionLimit = time.Minute
	releaseTimeout       = 5 * time.Second
)

// errStandbyStopped ends a run stopped while it waited as a standby: it
// claimed nothing and wrote nothing, and Run returns nil.
var errStandbyStopped = errors.New("consumer: stopped while waiting as a standby")

// instance is this process as one instance of the pipeline (DESIGN.md
// "Pipelines, instances and partitions"): its pipeline_instances row,
// renewed every lease/3 by a goroutine on a connection of its own, outside
// the commit transaction, so a long commit never makes a live owner look
// dead; and, once it claimed, its partitions and epoch for the release at
// the end.
type instance struct {
	cfg Config
	st  *store.Store // the run's Store, for the release (after the loop ended)
	hb  *store.Store // the heartbeat's own connection

	mu    sync.Mutex
	role  string
	parts []aggregate.PartitionID
	epoch int64 // 0 until claimed
	// closable is when the oldest closable window not yet written became
	// closable, Unix ns (0: none), written with each heartbeat (freshness.go).
	closable atomic.Int64

	kick   chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
}

// startInstance starts the heartbeat of this instance (role standby until
// it claims). The goroutine runs until stop, also after ctx is cancelled:
// the final commit after SIGTERM still holds the lease.
func startInstance(ctx context.Context, cfg Config, st *store.Store) *instance {
	st.LimitIdleTransactions(idleTransactionLimit)
	in := &instance{cfg: cfg, st: st, hb: st.Clone("ovstream-lease"), role: store.RoleStandby,
		parts: cfg.Partitions, kick: make(chan struct{}, 1), done: make(chan struct{})}
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	in.cancel = cancel
	go in.heartbeat(hctx)
	return in
}

// setClosable records when the oldest closable window not yet written
// became closable (zero: none); a change renews the heartbeat at once, so
// that status sees it without waiting for the next one.
func (in *instance) setClosable(t time.Time) {
	var ns int64
	if !t.IsZero() {
		ns = t.UnixNano()
	}
	if in.closable.Swap(ns) == ns {
		return
	}
	select {
	case in.kick <- struct{}{}:
	default:
	}
}

// set records the role and partitions and renews the heartbeat at once.
func (in *instance) set(role string, parts []aggregate.PartitionID, epoch int64) {
	in.mu.Lock()
	in.role, in.parts, in.epoch = role, parts, epoch
	in.mu.Unlock()
	select {
	case in.kick <- struct{}{}:
	default:
	}
}

func (in *instance) heartbeat(ctx context.Context) {
	defer close(in.done)
	every := in.cfg.Lease / 3
	tick := time.NewTicker(every)
	defer tick.Stop()
	first, failing := true, false
	for {
		in.mu.Lock()
		role, parts := in.role, in.parts
		in.mu.Unlock()
		bctx, cancel := context.WithTimeout(ctx, every)
		var closable time.Time
		if ns := in.closable.Load(); ns != 0 {
			closable = time.Unix(0, ns)
		}
		err := in.hb.Heartbeat(bctx, in.cfg.Pipeline, in.cfg.Owner, role, parts, first, closable)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			failing = true
			in.cfg.Logger.Warn("lease heartbeat failed: other instances see this one as dead once its lease expires",
				"err", err, "lease", in.cfg.Lease, "next_attempt_in", every)
		case err == nil:
			if failing {
				in.cfg.Logger.Info("lease heartbeat renewed again")
			}
			first, failing = false, false
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-in.kick:
		}
	}
}

// stop ends the instance after the run loop ended with err: unless it was
// fenced it releases its partitions (a standby claims them at once), then
// it stops the heartbeat and deletes its pipeline_instances row.
func (in *instance) stop(err error) {
	cfg := in.cfg
	in.mu.Lock()
	parts, epoch := in.parts, in.epoch
	in.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if epoch != 0 && !errors.Is(err, ErrFenced) {
		if n, rerr := in.st.Release(ctx, cfg.Pipeline, cfg.Owner, epoch, parts); rerr != nil {
			cfg.Logger.Warn("could not release the partitions: a standby takes them when the lease expires",
				"err", rerr, "lease", cfg.Lease)
		} else {
			cfg.Logger.Info("released partitions", "pipeline", cfg.Pipeline, "partitions", n, "epoch", epoch)
		}
	}
	in.cancel()
	<-in.done
	if derr := in.hb.DeleteInstance(ctx, cfg.Pipeline, cfg.Owner); derr != nil {
		cfg.Logger.Warn("could not delete this instance's pipeline_instances row", "err", derr)
	}
	_ = in.hb.Close(ctx)
	cfg.Metrics.Standby.Set(0)
	cfg.Health.standby.Store(nil)
}

// claim claims the assigned partitions; while live instances hold some of
// them it waits as a standby, trying again every standbyPoll and saying
// whom it waits for every standbyLogEvery, until they are released or their
// lease expires (DESIGN.md "Standby, not ping-pong").
func (l *loop) claim(ctx context.Context, assigned []aggregate.PartitionID) error {
	cfg := l.cfg
	opts := store.ClaimOptions{Lease: cfg.Lease, Takeover: cfg.Takeover, Topics: cfg.topics(), Window: cfg.Window, InstanceID: cfg.InstanceID}
	var waiting, logged time.Time
	for {
		var c store.Claimed
		err := retry(ctx, cfg, "claim partitions", func() (err error) {
			c, err = l.st.Claim(ctx, cfg.Pipeline, cfg.Owner, assigned, opts)
			return err
		})
		var held *store.HeldError
		if !errors.As(err, &held) {
			if err != nil {
				return fmt.Errorf("consumer: claim %d partitions of pipeline %q: %w", len(assigned), cfg.Pipeline, err)
			}
			l.claimed(c, assigned, waiting)
			return nil
		}
		now := time.Now()
		if waiting.IsZero() {
			waiting = now
			l.in.set(store.RoleStandby, assigned, 0)
			cfg.Metrics.Standby.Set(1)
		}
		holders := describeHolders(held)
		cfg.Health.standby.Store(&holders)
		if now.Sub(logged) >= standbyLogEvery {
			logged = now
			for _, o := range held.SharedID {
				cfg.Logger.Warn("another process with this --instance-id holds the partitions and its database session is alive: "+
					"two processes share an instance id (give each its own), or the earlier one's connection has not closed yet; waiting as a standby",
					"instance_id", cfg.InstanceID, "holder", o)
			}
			for _, h := range held.Owners() {
				cfg.Logger.Info("standby: waiting for partitions held by a live instance",
					"holder", h.Owner, "holder_since", formatTime(h.OwnerSince), "heartbeat_age", h.HeartbeatAge.Round(time.Millisecond),
					"held", len(held.Held), "partitions", len(assigned), "waiting", now.Sub(waiting).Round(time.Second), "lease", cfg.Lease)
			}
		}
		select {
		case <-ctx.Done():
			cfg.Logger.Info("stopped while waiting as a standby; nothing was claimed")
			return errStandbyStopped
		case <-time.After(standbyPoll):
		}
	}
}

// claimed records a successful claim: the heartbeat turns active, and the
// log says from whom the partitions came and what was terminated.
func (l *loop) claimed(c store.Claimed, assigned []aggregate.PartitionID, waiting time.Time) {
	cfg := l.cfg
	l.epoch = c.Epoch
	l.in.set(store.RoleActive, assigned, c.Epoch)
	cfg.Metrics.Standby.Set(0)
	cfg.Health.standby.Store(nil)
	for _, t := range c.Terminated {
		why := "its owner's lease expired"
		if t.State == store.LeaseAlive {
			why = "--takeover"
		}
		cfg.Logger.Warn("terminated the database session holding a claimed partition's row lock (a frozen or stuck owner inside its commit)",
			"pid", t.PID, "partition", t.Partition.String(), "owner", t.Owner, "lease", t.State, "reason", why)
	}
	args := []any{"pipeline", cfg.Pipeline, "partitions", len(assigned), "epoch", c.Epoch, "owner", cfg.Owner,
		"from", describePrevious(c.Previous)}
	if !waiting.IsZero() {
		args = append(args, "waited", time.Since(waiting).Round(time.Millisecond))
	}
	if cfg.Takeover {
		args = append(args, "takeover", true)
	}
	if len(c.Restarted) > 0 {
		args = append(args, "restarted_from", strings.Join(c.Restarted, ","))
	}
	cfg.Logger.Info("claimed partitions", args...)
}

// describePrevious sums up the partitions' owners before a claim, e.g.
// "host:12 expired (heartbeat 4.2s ago) x9" or "released x6, new x3".
func describePrevious(ps []store.PartitionLease) string {
	type key struct{ owner, state string }
	count, ages := map[key]int{}, map[key]time.Duration{}
	var order []key
	for _, p := range ps {
		k := key{p.Owner, p.State}
		if p.Owner == "" && p.Epoch == 0 {
			k.state = "new"
		}
		if count[k] == 0 {
			order = append(order, k)
		}
		count[k]++
		ages[k] = max(ages[k], p.HeartbeatAge)
	}
	var parts []string
	for _, k := range order {
		s := k.state
		if k.owner != "" {
			s = fmt.Sprintf("%s %s (heartbeat %s ago)", k.owner, k.state, ages[k].Round(time.Millisecond))
		}
		parts = append(parts, fmt.Sprintf("%s x%d", s, count[k]))
	}
	return strings.Join(parts, ", ")
}

// describeHolders says who holds what a standby waits for, for /readyz.
func describeHolders(h *store.HeldError) string {
	var out []string
	for _, o := range h.Owners() {
		out = append(out, fmt.Sprintf("%s (since %s, heartbeat %s ago)", o.Owner, formatTime(o.OwnerSince), o.HeartbeatAge.Round(time.Millisecond)))
	}
	return fmt.Sprintf("%d partitions held by %s", len(h.Held), strings.Join(out, ", "))
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return "unknown"
	}
	return t.UTC().Format(time.RFC3339)
}
