package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ovstream/ovstream/aggregate"
)

// WindowKey names one delay_aggregates row of a pipeline.
type WindowKey struct {
	WindowStart time.Time // UTC
	Dimension   string    // aggregate.DimLine, DimStation, DimOperator or DimNetwork
	DimensionID string
}

// RefusedWindow is a delay_aggregates row PostgreSQL refused.
type RefusedWindow struct {
	WindowKey
	Reason string // the database's message, e.g. `delay_aggregates row (...): new row ... (SQLSTATE 23514)`
}

// RefusedPartial is a delay_partial_windows row PostgreSQL refused: a split
// instance's partial aggregate of one window of one source partition of the
// predictions topic. Every record it counts is rejected, so the merge meets
// that (window, partition) without events.
type RefusedPartial struct {
	WindowStart time.Time // UTC
	Partition   int32
	Reason      string // the database's message
}

// RefusedRecord is a latest-state row PostgreSQL refused, named by the Kafka
// record it came from (the predictions topic for a trip, the positions topic
// for a vehicle).
type RefusedRecord struct {
	Key       string // trip_id or vehicle_id
	Partition int32
	Offset    int64
	Reason    string // the database's message
}

// RejectedError is returned by Commit when PostgreSQL refused the batch for a
// value it holds (Refused): nothing of the batch was written, and the fields
// name every row PostgreSQL refuses (docs/design.md "The commit"). Committing the
// same batch again fails again: rebuild it without the records of these rows.
//
// The rows are found again in a transaction that is rolled back: each part is
// written in halves inside savepoints (each rolled back: refusedRows), a half
// that is refused is split, and a single row that is refused is named. Latest-state rows are met as a commit
// meets them: the newest version of each key first; when it is refused, the
// next newest of the batch (the refused record is rejected, so that one is
// the newest next time), and so on.
type RejectedError struct {
	Windows  []RefusedWindow  // every record such a row counts is rejected
	Partials []RefusedPartial // the same; a split instance's only
	Trips    []RefusedRecord  // trip_delay_latest rows
	Vehicles []RefusedRecord  // vehicle_latest rows
	Err      error            // the commit's error
}

func (e *RejectedError) Error() string {
	first := ""
	switch {
	case len(e.Windows) > 0:
		first = e.Windows[0].Reason
	case len(e.Partials) > 0:
		first = e.Partials[0].Reason
	case len(e.Trips) > 0:
		first = e.Trips[0].Reason
	case len(e.Vehicles) > 0:
		first = e.Vehicles[0].Reason
	}
	return fmt.Sprintf("PostgreSQL refused %d delay_aggregates, %d delay_partial_windows, %d trip_delay_latest and %d vehicle_latest rows (first: %s): %v",
		len(e.Windows), len(e.Partials), len(e.Trips), len(e.Vehicles), first, e.Err)
}

func (e *RejectedError) Unwrap() error { return e.Err }

// rejected returns, after b's commit failed with cause (Refused), a
// *RejectedError naming the rows PostgreSQL refuses; cause itself when it
// refuses none of them (a dead letter or a position refused, or a deferred
// constraint, which refuses only at COMMIT and so cannot be traced to a row:
// terminal); or the failure of the search, wrapped, which Retryable judges.
//
// Deferred constraints stay deferred in the search: made immediate, a
// constraint across ovstream's tables (a vehicle's trip must exist) would
// refuse rows that the commit, which writes every part before it checks,
// accepts.
//
// The search is bounded by ctx, the commit's own bound: when ctx ends first,
// the rows found so far are returned, and the next round, on a batch
// without their records, finds the rest (a search over a large rejection that outlasts a commit's
// time limit fails the commit as a whole, and it would start again for
// ever).
func (s *Store) rejected(ctx context.Context, b *Batch, cause error) error {
	rej := &RejectedError{Err: cause}
	err := s.do(ctx, func(conn *pgx.Conn) error { return findRefused(ctx, conn, b, rej) })
	found := len(rej.Windows) + len(rej.Partials) + len(rej.Trips) + len(rej.Vehicles)
	switch {
	case err != nil && ctx.Err() != nil && found > 0:
		return rej // out of time: what was found is named, the next round goes on
	case err != nil:
		return fmt.Errorf("finding the rows PostgreSQL refused (%v): %w", cause, err)
	case found == 0:
		return cause
	}
	return rej
}

// findRefused writes b's windows, partial windows, vehicles and trips again in a transaction
// it rolls back, and records in rej the rows PostgreSQL refuses.
func findRefused(ctx context.Context, conn *pgx.Conn, b *Batch, rej *RejectedError) (err error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	srch := &search{conn: conn, tx: tx}
	defer func() { // writes nothing, ever; a connection left in the transaction is thrown away
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if rerr := srch.tx.Rollback(rctx); rerr != nil && err == nil {
			err = fmt.Errorf("rollback: %w", rerr)
		}
	}()
	pipeline := b.Pipeline
	windows := func(tx pgx.Tx, rows []aggregate.Row) error {
		return writeThenClear(ctx, tx, "ovs_windows", upsertWindows(ctx, tx, pipeline, rows))
	}
	err = refusedRows(ctx, srch.current, b.Windows, searchMode(ctx, srch, windows), windows, func(r aggregate.Row, e *pgconn.PgError) {
		k := WindowKey{WindowStart: r.WindowStart.UTC(), Dimension: r.Dimension, DimensionID: r.DimensionID}
		rej.Windows = append(rej.Windows, RefusedWindow{WindowKey: k, Reason: refusal("delay_aggregates",
			fmt.Sprintf("(%s, %s, %s)", k.WindowStart.Format(time.RFC3339), k.Dimension, k.DimensionID), e)})
	})
	if err != nil {
		return fmt.Errorf("delay_aggregates: %w", err)
	}
	if b.Split != nil {
		topic := b.Split.Topic
		partials := func(tx pgx.Tx, ws []aggregate.PartialWindow) error {
			return writePartials(ctx, tx, pipeline, topic, ws)
		}
		err = refusedRows(ctx, srch.current, b.Partials, searchMode(ctx, srch, partials), partials, func(w aggregate.PartialWindow, e *pgconn.PgError) {
			rej.Partials = append(rej.Partials, RefusedPartial{WindowStart: w.WindowStart.UTC(), Partition: w.Partition,
				Reason: refusal("delay_partial_windows", fmt.Sprintf("(%s, %s/%d)", w.WindowStart.UTC().Format(time.RFC3339), topic, w.Partition), e)})
		})
		if err != nil {
			return fmt.Errorf("delay_partial_windows: %w", err)
		}
	}
	vehicles := func(tx pgx.Tx, rows []Vehicle) error {
		return writeThenClear(ctx, tx, "ovs_vehicles", upsertVehicles(ctx, tx, pipeline, rows))
	}
	err = refusedVersions(ctx, srch, b.Vehicles, func(v Vehicle) version {
		return version{v.VehicleID, v.EventTime, v.Offset}
	}, vehicles, func(v Vehicle, e *pgconn.PgError) {
		rej.Vehicles = append(rej.Vehicles, RefusedRecord{Key: v.VehicleID, Partition: v.Partition, Offset: v.Offset,
			Reason: refusal("vehicle_latest", fmt.Sprintf("(%s)", v.VehicleID), e)})
	})
	if err != nil {
		return fmt.Errorf("vehicle_latest: %w", err)
	}
	trips := func(tx pgx.Tx, rows []Trip) error {
		return writeThenClear(ctx, tx, "ovs_trips", upsertTrips(ctx, tx, pipeline, rows))
	}
	err = refusedVersions(ctx, srch, b.Trips, func(t Trip) version {
		return version{t.TripID, t.EventTime, t.Offset}
	}, trips, func(t Trip, e *pgconn.PgError) {
		rej.Trips = append(rej.Trips, RefusedRecord{Key: t.TripID, Partition: t.Partition, Offset: t.Offset,
			Reason: refusal("trip_delay_latest", fmt.Sprintf("(%s)", t.TripID), e)})
	})
	if err != nil {
		return fmt.Errorf("trip_delay_latest: %w", err)
	}
	return nil
}

// writeThenClear empties the temporary table an upsert went through (it
// keeps its rows until the transaction ends), so the next half starts empty.
func writeThenClear(ctx context.Context, tx pgx.Tx, temp string, err error) error {
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, "DELETE FROM "+temp)
	return err
}

// refusal is the dead letter text of a refused row: the table, the row's key
// and PostgreSQL's message, constraint and SQLSTATE.
func refusal(table, key string, e *pgconn.PgError) string {
	msg := e.Message
	if e.ConstraintName != "" && !strings.Contains(msg, e.ConstraintName) {
		msg += fmt.Sprintf(" (constraint %q)", e.ConstraintName)
	}
	return fmt.Sprintf("PostgreSQL refused the %s row %s: %s (SQLSTATE %s)", table, key, msg, e.Code)
}

// probeMode says what refusedRows does with a probe PostgreSQL accepts: keep
// its rows (release the savepoint; kept, when set, is told which rows and may
// start the transaction afresh, see search) or roll it back.
type probeMode[T any] struct {
	keep bool
	kept func(rows []T) error
}

// refusedRows writes rows inside a savepoint of tx(), keeping them when they
// are accepted and mode.keep is true, else rolling it back; when PostgreSQL
// refuses them (Refused) it tries each half, and calls refused for every
// single row it refuses. Any other failure is returned. tx() is the
// transaction to write in: search may replace it between two probes.
//
// A probe rolled back is also released: a savepoint only rolled back to
// stays, and so does the lock of every subtransaction that wrote under it.
// A kept probe holds its subtransaction's lock until the transaction ends;
// search bounds how many (a large rejection holding every probe's locks runs
// the server out of shared memory: SQLSTATE 53200, max_locks_per_transaction).
func refusedRows[T any](ctx context.Context, tx func() pgx.Tx, rows []T, mode probeMode[T],
	write func(pgx.Tx, []T) error, refused func(T, *pgconn.PgError)) error {
	if len(rows) == 0 {
		return nil
	}
	if _, err := tx().Exec(ctx, "SAVEPOINT ovs_probe"); err != nil {
		return err
	}
	err := write(tx(), rows)
	if err == nil && mode.keep {
		if _, err := tx().Exec(ctx, "RELEASE SAVEPOINT ovs_probe"); err != nil {
			return err
		}
		if mode.kept != nil {
			return mode.kept(rows)
		}
		return nil
	}
	if _, rerr := tx().Exec(ctx, "ROLLBACK TO SAVEPOINT ovs_probe; RELEASE SAVEPOINT ovs_probe"); rerr != nil {
		return errors.Join(err, rerr)
	}
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	if !Refused(err) || !errors.As(err, &pgErr) {
		return err
	}
	if len(rows) == 1 {
		refused(rows[0], pgErr)
		return nil
	}
	half := len(rows) / 2
	if err := refusedRows(ctx, tx, rows[:half], mode, write, refused); err != nil {
		return err
	}
	return refusedRows(ctx, tx, rows[half:], mode, write, refused)
}

// maxKeptProbes bounds the accepted probes one search transaction keeps
// (each holds a transactionid lock until the transaction ends).
const maxKeptProbes = 256

// search is the transaction findRefused probes in. Accepted rows stay
// written, as the commit writes them (a row may depend on another of the
// batch: a foreign key, a unique index across rows); after maxKeptProbes
// kept probes it rolls back and starts afresh, writing everything accepted
// so far again in one statement per part, so it holds a bounded number of
// locks whatever the number of refused rows.
type search struct {
	conn    *pgx.Conn
	tx      pgx.Tx
	kept    int
	rewrite []func(pgx.Tx) error // per part: writes its accepted rows again
}

func (s *search) current() pgx.Tx { return s.tx }

// keptOne counts a kept probe and starts afresh at the bound.
func (s *search) keptOne(ctx context.Context) error {
	if s.kept++; s.kept < maxKeptProbes {
		return nil
	}
	if err := s.tx.Rollback(ctx); err != nil {
		return fmt.Errorf("rollback: %w", err)
	}
	tx, err := s.conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	s.tx, s.kept = tx, 0
	for _, f := range s.rewrite {
		if err := f(tx); err != nil {
			return fmt.Errorf("write the accepted rows again: %w", err)
		}
	}
	return nil
}

// searchMode returns the probeMode of a part of s written by write: accepted
// rows are kept, remembered, and written again when s starts afresh.
func searchMode[T any](ctx context.Context, s *search, write func(pgx.Tx, []T) error) probeMode[T] {
	var accepted []T
	s.rewrite = append(s.rewrite, func(tx pgx.Tx) error {
		if len(accepted) == 0 {
			return nil
		}
		return write(tx, accepted)
	})
	return probeMode[T]{keep: true, kept: func(rows []T) error {
		accepted = append(accepted, rows...)
		return s.keptOne(ctx)
	}}
}

// version orders the rows of one latest-state key as the commit's upsert
// does: the newest event time wins, a tie going to the later offset.
type version struct {
	key    string
	at     time.Time
	offset int64
}

// refusedVersions finds the refused rows of a latest-state part whose keys
// may come in several versions: the newest version of each key first; a key
// whose version is refused tries its next newest, until one is accepted or
// none is left.
func refusedVersions[T any](ctx context.Context, srch *search, rows []T, ver func(T) version,
	write func(pgx.Tx, []T) error, refused func(T, *pgconn.PgError)) error {
	mode := searchMode(ctx, srch, write)
	byKey := map[string][]T{}
	for _, r := range rows {
		k := ver(r).key
		byKey[k] = append(byKey[k], r)
	}
	var layer []T
	for _, vs := range byKey {
		slices.SortFunc(vs, func(a, b T) int { // newest first
			va, vb := ver(a), ver(b)
			if c := vb.at.Compare(va.at); c != 0 {
				return c
			}
			return cmp.Compare(vb.offset, va.offset)
		})
		layer = append(layer, vs[0])
	}
	tried := map[string]int{} // per key: versions refused so far
	for len(layer) > 0 {
		slices.SortFunc(layer, func(a, b T) int { return strings.Compare(ver(a).key, ver(b).key) })
		var next []T
		err := refusedRows(ctx, srch.current, layer, mode, write, func(r T, e *pgconn.PgError) {
			refused(r, e)
			k := ver(r).key
			tried[k]++
			if vs := byKey[k]; tried[k] < len(vs) {
				next = append(next, vs[tried[k]])
			}
		})
		if err != nil {
			return err
		}
		layer = next
	}
	return nil
}
