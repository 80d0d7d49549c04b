//go:build integration

package ops

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ovstream/ovstream/store"
	"github.com/ovstream/ovstream/store/rollup"

	"github.com/ovstream/ovstream/integration/harness"
)

// The read pool of the dashboard (store.ReadPool) works through PgBouncer in
// transaction mode, where consecutive statements of one client connection
// land on different server sessions: its statements are unnamed
// (pgx.QueryExecModeExec), so none refers to a prepared statement another
// session holds. Eight goroutines read the status and a rollup at once, many
// times, through the bouncer; every answer equals the one read on a direct
// connection.
func TestPgBouncerTransactionModeReadPool(t *testing.T) {
	db := harness.ThreeEventsDrained(t)
	bouncer := startPgBouncer(t, "transaction", "ignore_startup_parameters = "+ignoredTimeouts)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	q := rollup.Query{Pipeline: "ovstream", Dimension: "line", From: time.Date(2026, 5, 4, 0, 0, 0, 0, time.UTC),
		To: time.Date(2026, 5, 5, 0, 0, 0, 0, time.UTC), Location: time.UTC, Quantiles: []float64{0.5, 0.9}}
	read := func(db store.Querier) (string, error) {
		st, err := store.ReadStatus(ctx, db, "ovstream")
		if err != nil {
			return "", err
		}
		res, err := rollup.Run(ctx, db, q)
		if err != nil {
			return "", err
		}
		// The three events: 9 stored positions, one line, 3 events.
		if len(st.Positions) != 9 || len(res.Rows) != 1 || res.Rows[0].Count != 3 {
			return "", fmt.Errorf("%d positions, rows %+v; want 9 and one row of 3 events", len(st.Positions), res.Rows)
		}
		for i := range st.Positions {
			st.Positions[i].UpdatedAt = time.Time{} // the same rows; compare the offsets
		}
		return fmt.Sprintf("%+v %+v %+v", st.Positions, st.DeadLetters, res.Rows), nil
	}
	direct, err := store.ReadPool(db, "ovstream-test", 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	want, err := read(direct)
	if err != nil {
		t.Fatal(err)
	}

	pool, err := store.ReadPool(bouncer.url(db), "ovstream-dashboard", 5*time.Second, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	for g := range 8 {
		wg.Go(func() {
			for i := range 25 {
				got, err := read(pool)
				if err == nil && got != want {
					err = fmt.Errorf("read %s, want %s", got, want)
				}
				if err != nil {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("goroutine %d, read %d: %v", g, i, err))
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d of 8 goroutines failed through PgBouncer in transaction mode; first: %s", len(failures), failures[0])
	}
}
