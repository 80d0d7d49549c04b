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

// instance is this process as one instance of the pipeline (docs/design.md
// "Pipelines, instances and partitions"): its pipeline_instances row,
// renewed every lease/3 by a goroutine on a connection of its own (the
// lease connection), outside the commit transaction, so a long commit never
// makes a live owner look dead; and, once it claimed, its partitions and
// epoch for the release at the end.
//
// Connections (docs/operations.md "Connections"): a standby holds only the
// lease connection, on which it also polls the lease (held); an active
// instance holds the lease and the commit connection. When an active
// instance's commit connection is lost and the server refuses a new one for
// want of a slot (SQLSTATE 53300: a newcomer took the slot), the commit
// Store takes the lease connection (store.WithSpare, spare): commits go
// on, and the run loop renews the heartbeat on the commit connection between
// commits (beatInline) until the heartbeat goroutine gets a connection of
// its own again.
type instance struct {
	cfg   Config
	db    *committer // the commit connection's owner, for the release (after the loop ended)
	clock *dbClock   // measured with every heartbeat (clock.go)

	hbMu sync.Mutex   // held while hb is used: by the heartbeat, a standby's poll, spare (which lends its connection)
	hb   *store.Store // the lease connection
	lent atomic.Bool  // hb's connection was taken by st: the run loop renews the heartbeat
	// closable is when the oldest closable window not yet written became
	// closable, Unix ns (0: none), written with each heartbeat (freshness.go).
	closable atomic.Int64

	mu       sync.Mutex
	role     string
	parts    []aggregate.PartitionID
	epoch    int64     // 0 until claimed
	first    bool      // no heartbeat succeeded yet
	lastBeat time.Time // the last heartbeat that succeeded

	active     chan struct{} // closed when the instance first claims (retention starts then)
	activeOnce sync.Once
	kick       chan struct{}
	cancel     context.CancelFunc
	done       chan struct{}
}

// startInstance starts the heartbeat of this instance (role standby until
// it claims). The goroutine runs until stop, also after ctx is cancelled:
// the final commit after SIGTERM still holds the lease.
//
// The commit connection (store.Lazy of databaseURL with the options commit
// and spare) gets its owner (committer); the lease connection is its clone.
// Errors: a databaseURL that does not parse.
func startInstance(ctx context.Context, cfg Config, databaseURL string, commit ...store.Option) (*instance, error) {
	in := &instance{cfg: cfg, clock: &dbClock{cfg: cfg}, role: store.RoleStandby, first: true,
		parts: cfg.Partitions, active: make(chan struct{}), kick: make(chan struct{}, 1), done: make(chan struct{})}
	st, err := store.Lazy(databaseURL, append(commit, store.WithSpare(in.spare))...)
	if err != nil {
		return nil, err
	}
	st.LimitIdleTransactions(idleTransactionLimit)
	in.hb = st.Clone("ovstream-lease")
	in.db = startCommitter(st)
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	in.cancel = cancel
	go in.heartbeat(hctx)
	return in, nil
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
	if role == store.RoleActive {
		in.activeOnce.Do(func() { close(in.active) })
	}
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
	failing := false
	for {
		// While lent, this is the attempt at a connection of its own again;
		// the run loop renews the heartbeat meanwhile (beatInline).
		in.hbMu.Lock()
		lent := in.lent.Load()
		bctx, cancel := context.WithTimeout(ctx, every)
		err := in.beat(bctx, in.hb)
		cancel()
		if err == nil {
			in.lent.Store(false)
		}
		in.hbMu.Unlock()
		switch {
		case err != nil && lent:
		case err != nil && ctx.Err() == nil && !failing:
			failing = true
			in.cfg.Logger.Warn("lease heartbeat failed: other instances see this one as dead once its lease expires",
				"err", err, "lease", in.cfg.Lease, "next_attempt_in", every)
		case err == nil:
			if failing || lent {
				in.cfg.Logger.Info("lease heartbeat renewed again on a connection of its own")
			}
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-in.kick:
		}
	}
}

// beat renews the heartbeat on st (the lease connection, or the commit
// connection while it holds the lease connection's session).
func (in *instance) beat(ctx context.Context, st *store.Store) error {
	in.mu.Lock()
	role, parts, first := in.role, in.parts, in.first
	in.mu.Unlock()
	var closable time.Time
	if ns := in.closable.Load(); ns != 0 {
		closable = time.Unix(0, ns)
	}
	err := in.clock.measure(ctx, func(ctx context.Context) (time.Time, error) {
		return st.Heartbeat(ctx, in.cfg.Pipeline, in.cfg.Owner, role, parts, first, closable)
	})
	if err == nil {
		in.mu.Lock()
		in.first, in.lastBeat = false, time.Now()
		in.mu.Unlock()
	}
	return err
}

// spare is the commit Store's spare (store.WithSpare), called on the
// commit connection's owner: an active instance whose commit connection
// cannot be replaced (53300) lends it the lease connection.
func (in *instance) spare(to *store.Store) bool {
	in.mu.Lock()
	active := in.role == store.RoleActive
	in.mu.Unlock()
	if !active {
		return false // a standby or a starting instance waits for a slot like anyone
	}
	in.hbMu.Lock()
	defer in.hbMu.Unlock()
	if !in.hb.Lend(to) {
		return false
	}
	if !in.lent.Swap(true) {
		in.cfg.Logger.Warn("the commit connection was lost and PostgreSQL has no connection slot free (SQLSTATE 53300, max_connections): "+
			"commits go on on the lease connection, which renews the heartbeat between commits until a second connection is granted",
			"limit", "max_connections")
	}
	return true
}

// beatInline renews the heartbeat on the commit connection, between
// commits (a renewal queued behind a commit would stall the loop), when the
// commit path took the lease connection and a renewal is due (every
// lease/3).
func (l *loop) beatInline(ctx context.Context) {
	in := l.in
	if !in.lent.Load() || l.inflight != nil {
		return
	}
	in.mu.Lock()
	due := time.Since(in.lastBeat) >= in.cfg.Lease/3
	in.mu.Unlock()
	if !due {
		return
	}
	bctx, cancel := context.WithTimeout(ctx, in.cfg.Lease/3)
	defer cancel()
	err := l.db.do(func(st *store.Store) error { return in.beat(bctx, st) })
	if err != nil && ctx.Err() == nil {
		in.cfg.Logger.Warn("lease heartbeat on the commit connection failed", "err", err)
	}
}

// held polls, on the lease connection, whether live instances hold some of
// parts (store.Store.Held): a standby's wait.
func (in *instance) held(ctx context.Context, parts []aggregate.PartitionID, opts store.ClaimOptions) (*store.HeldError, error) {
	in.hbMu.Lock()
	defer in.hbMu.Unlock()
	return in.hb.Held(ctx, in.cfg.Pipeline, in.cfg.Owner, parts, opts)
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
		var n int
		rerr := in.db.do(func(st *store.Store) (err error) {
			n, err = st.Release(ctx, cfg.Pipeline, cfg.Owner, epoch, parts)
			return err
		})
		if rerr != nil {
			cfg.Logger.Warn("could not release the partitions: a standby takes them when the lease expires",
				"err", rerr, "lease", cfg.Lease)
		} else {
			cfg.Logger.Info("released partitions", "pipeline", cfg.Pipeline, "partitions", n, "epoch", epoch)
		}
	}
	in.cancel()
	<-in.done
	deleteInstance := func(st *store.Store) error { return st.DeleteInstance(ctx, cfg.Pipeline, cfg.Owner) }
	var derr error
	if in.lent.Load() { // the lease session is the commit Store's now
		derr = in.db.do(deleteInstance)
	} else {
		derr = deleteInstance(in.hb)
	}
	in.db.close()
	if derr != nil {
		cfg.Logger.Warn("could not delete this instance's pipeline_instances row", "err", derr)
	}
	_ = in.hb.Close(ctx)
	cfg.Metrics.Standby.Set(0)
	cfg.Health.standby.Store(nil)
}

// claim claims the assigned partitions; while live instances hold some of
// them it waits as a standby, polling the lease every standbyPoll on the
// lease connection alone (its commit connection closed: a standby holds no
// connection it does not need, docs/operations.md "Connections") and saying
// whom it waits for every standbyLogEvery, until they are released or their
// lease expires (docs/design.md "Standby, not ping-pong"); then it connects for
// commits again and claims.
func (l *loop) claim(ctx context.Context, assigned []aggregate.PartitionID) error {
	cfg := l.cfg
	opts := store.ClaimOptions{Lease: cfg.Lease, Takeover: cfg.Takeover, Topics: cfg.topics(), Window: cfg.Window, InstanceID: cfg.InstanceID,
		MaxDelay: cfg.MaxDelay}
	var waiting, logged time.Time
	for {
		var held *store.HeldError
		var err error
		if !waiting.IsZero() {
			if held, err = l.in.held(ctx, assigned, opts); err != nil {
				held = l.lastHeld
				store.LogRetry(cfg.Logger, "standby: poll the lease", err, standbyPoll)
			}
		}
		if held == nil {
			var c store.Claimed
			err = retry(ctx, cfg, "claim partitions", func() (err error) {
				return l.db.do(func(st *store.Store) (err error) {
					c, err = st.Claim(ctx, cfg.Pipeline, cfg.Owner, assigned, opts)
					return err
				})
			})
			if !errors.As(err, &held) {
				if err != nil {
					return fmt.Errorf("consumer: claim %d partitions of pipeline %q: %w", len(assigned), cfg.Pipeline, err)
				}
				l.claimed(c, assigned, waiting)
				return nil
			}
			// Held: wait without the commit connection.
			_ = l.db.do(func(st *store.Store) error { return st.Close(context.WithoutCancel(ctx)) })
		}
		l.lastHeld = held
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
