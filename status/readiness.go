package status

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/consumer"
)

// Readiness decides /readyz: the database answers a ping on a connection of
// its own (not the one the run loop commits on), every partition is assigned,
// the last successful commit is younger than three flush intervals, and no
// partition's high water mark has been unknown (its leader does not answer)
// for three flush intervals or consumer.HighWaterGrace (8 s), the longer. A
// standby (waiting for partitions a live instance holds) answers 503
// "standby" without asking the database. Set the fields before the first
// Check; it is safe for concurrent use.
type Readiness struct {
	Health      *consumer.Health
	Flush       time.Duration       // the run's flush interval (positive)
	DatabaseURL string              // the probe's own connection goes here
	PingTimeout time.Duration       // bounds each probe's connect and ping
	Redact      func(string) string // removes secrets from an error shown; nil: none
	Now         func() time.Time    // nil: time.Now

	mu   sync.Mutex // one probe at a time owns conn
	conn *pgx.Conn
}

// Check runs the checks and returns whether all passed and one line per check.
func (r *Readiness) Check(ctx context.Context) (bool, []string) {
	ok := true
	var lines []string
	standby, holders := r.Health.Standby()
	if standby {
		// Not ready anyway; a standby holds only its lease connection
		// (docs/operations.md "Connections"), so the probe opens none.
		r.mu.Lock()
		r.close()
		r.mu.Unlock()
		lines = append(lines, "database: not checked (a standby holds no connection but its lease connection)")
	} else if err := r.ping(ctx); err != nil {
		ok = false
		msg := err.Error()
		if r.Redact != nil {
			msg = r.Redact(msg)
		}
		lines = append(lines, "database: unreachable: "+msg)
	} else {
		lines = append(lines, "database: ok")
	}
	if standby {
		ok = false
		lines = append(lines, "partitions: standby, waiting for "+holders)
	} else if r.Health.Assigned() {
		lines = append(lines, "partitions: assigned")
	} else {
		ok = false
		lines = append(lines, "partitions: not assigned")
	}
	limit := 3 * r.Flush
	last := r.Health.LastCommit()
	switch age := r.now().Sub(last); {
	case last.IsZero():
		ok = false
		lines = append(lines, "last commit: none yet")
	case age >= limit:
		ok = false
		lines = append(lines, fmt.Sprintf("last commit: %s ago, older than 3 flush intervals (%s)", age.Round(time.Millisecond), limit))
	default:
		lines = append(lines, fmt.Sprintf("last commit: %s ago", age.Round(time.Millisecond)))
	}
	switch n, since := r.Health.HighWatersUnknown(); {
	case n > 0 && r.now().Sub(since) >= max(limit, consumer.HighWaterGrace):
		ok = false
		lines = append(lines, fmt.Sprintf("kafka: the high water marks of %d partitions unknown for %s (their leaders do not answer; they hold the watermark)",
			n, r.now().Sub(since).Round(time.Millisecond)))
	case n > 0:
		lines = append(lines, fmt.Sprintf("kafka: the high water marks of %d partitions unknown for %s", n, r.now().Sub(since).Round(time.Millisecond)))
	case !standby:
		lines = append(lines, "kafka: ok")
	}
	return ok, lines
}

func (r *Readiness) ping(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, r.PingTimeout)
	defer cancel()
	if r.conn == nil || r.conn.IsClosed() {
		cfg, err := pgx.ParseConfig(r.DatabaseURL)
		if err != nil {
			return errors.New("the database URL does not parse")
		}
		cfg.ConnectTimeout = r.PingTimeout
		cfg.RuntimeParams["application_name"] = "ovstream-readyz"
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return err
		}
		r.conn = conn
	}
	if err := r.conn.Ping(ctx); err != nil {
		r.close()
		return err
	}
	return nil
}

func (r *Readiness) close() {
	if r.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = r.conn.Close(ctx)
		cancel()
		r.conn = nil
	}
}

func (r *Readiness) now() time.Time {
	if r.Now == nil {
		return time.Now()
	}
	return r.Now()
}

// ServeHTTP answers /readyz: 200 "ready", or 503 "not ready" or "standby",
// then one line per check (Check), as plain text.
func (r *Readiness) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	ok, lines := r.Check(req.Context())
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if standby, _ := r.Health.Standby(); standby {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "standby")
	} else if ok {
		w.WriteHeader(http.StatusOK)
		fmt.Fprintln(w, "ready")
	} else {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "not ready")
	}
	fmt.Fprintln(w, strings.Join(lines, "\n"))
}

// Close closes the probe's connection; a later Check opens a new one.
func (r *Readiness) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.close()
}
