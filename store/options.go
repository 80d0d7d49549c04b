package store

import "github.com/ovstream/ovstream/aggregate"

// Option configures a Store at construction (Open, Lazy); a Store's
// options never change after.
type Option func(*Store)

// Hooks are called inside Commit, for crash-injection tests; nil = no-op.
type Hooks struct {
	// AfterWindows runs once the windows and latest-state rows are upserted
	// and before dead letters and stream_positions are written.
	AfterWindows func()
	// BeforeCommit runs once every statement is sent, before COMMIT.
	BeforeCommit func()
}

// WithHooks sets the hooks Commit calls (Hooks).
func WithHooks(h Hooks) Option { return func(s *Store) { s.hooks = h } }

// WithNameRefused makes a commit call f, on the goroutine that commits, for
// each names row PostgreSQL refuses, with the database's message; the commit
// writes the other names and goes on (writeNames).
func WithNameRefused(f func(n aggregate.Name, reason string)) Option {
	return func(s *Store) { s.onNameRefused = f }
}

// WithServerChange makes the Store call f when it connects to another server
// than its last connection's (host:port as connected, e.g. after a failover
// with a multi-host URL and target_session_attrs=read-write).
func WithServerChange(f func(from, to string)) Option {
	return func(s *Store) { s.onServerChange = f }
}

// WithSpare gives the Store a connection to take over when the server
// refuses it a new one for want of a slot (TooManyConnections, SQLSTATE
// 53300): spare is called with the Store, on the goroutine using it, and
// moves another Store's connection into it with Lend, reporting whether it
// did. The taken connection is given this Store's session settings. A run's
// commit Store takes its lease connection so (consumer/lease.go), so that an
// active instance never lacks a commit path to a newcomer taking the slot it
// lost.
func WithSpare(spare func(to *Store) bool) Option { return func(s *Store) { s.spare = spare } }

// WithMergeChunkRows bounds the rows one step of a split commit's merge
// holds in memory (partials.go); 0, the default, means 100,000.
func WithMergeChunkRows(n int) Option { return func(s *Store) { s.chunkRows = n } }

// Lend moves s's connection, if it has one, into to, and reports whether it
// did; s connects anew on its next use. Neither Store may be in use by
// another goroutine meanwhile (a WithSpare function holds s's owner's lock).
func (s *Store) Lend(to *Store) bool {
	if s.conn == nil {
		return false
	}
	to.conn, s.conn = s.conn, nil
	return true
}
