package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ovstream/ovstream/consumer"
	"github.com/ovstream/ovstream/dashboard"
)

// defaultMetricsAddr is where run serves /metrics, /healthz and /readyz.
const defaultMetricsAddr = "127.0.0.1:9464"

// readiness decides /readyz: the database answers a ping on a connection of
// its own (not the one the run loop commits on), every partition is assigned,
// the last successful commit is younger than three flush intervals, and no
// partition's high water mark has been unknown (its leader does not answer)
// for three flush intervals or consumer.HighWaterGrace (8 s), the longer. A
// standby (waiting for partitions a live instance holds) answers 503
// "standby" without asking the database.
type readiness struct {
	health      *consumer.Health
	flush       time.Duration
	databaseURL string
	pingTimeout time.Duration
	secrets     []string
	now         func() time.Time

	mu   sync.Mutex // one probe at a time owns conn
	conn *pgx.Conn
}

// check runs the three checks and returns whether all passed and one line per check.
func (r *readiness) check(ctx context.Context) (bool, []string) {
	ok := true
	var lines []string
	standby, holders := r.health.Standby()
	if standby {
		// Not ready anyway; a standby holds only its lease connection
		// (docs/operations.md "Connections"), so the probe opens none.
		r.mu.Lock()
		r.close()
		r.mu.Unlock()
		lines = append(lines, "database: not checked (a standby holds no connection but its lease connection)")
	} else if err := r.ping(ctx); err != nil {
		ok = false
		lines = append(lines, "database: unreachable: "+redactString(err.Error(), r.secrets))
	} else {
		lines = append(lines, "database: ok")
	}
	if standby {
		ok = false
		lines = append(lines, "partitions: standby, waiting for "+holders)
	} else if r.health.Assigned() {
		lines = append(lines, "partitions: assigned")
	} else {
		ok = false
		lines = append(lines, "partitions: not assigned")
	}
	limit := 3 * r.flush
	last := r.health.LastCommit()
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
	switch n, since := r.health.HighWatersUnknown(); {
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

func (r *readiness) ping(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, r.pingTimeout)
	defer cancel()
	if r.conn == nil || r.conn.IsClosed() {
		cfg, err := pgx.ParseConfig(r.databaseURL)
		if err != nil {
			return errors.New("the database URL does not parse")
		}
		cfg.ConnectTimeout = r.pingTimeout
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

func (r *readiness) close() {
	if r.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = r.conn.Close(ctx)
		cancel()
		r.conn = nil
	}
}

// opsServer serves /metrics, /healthz, /readyz and the dashboard.
type opsServer struct {
	srv   *http.Server
	ln    net.Listener
	ready *readiness
	dash  *dashboard.Handler
	done  chan struct{}
}

// startOpsServer listens on addr and serves until stop, the dashboard dash
// (nil: none) under /dashboard/, and with profiling the Go runtime's
// profiles (net/http/pprof) under /debug/pprof/. An empty addr disables it
// (nil, nil).
func startOpsServer(addr string, reg *prometheus.Registry, ready *readiness, dash *dashboard.Handler, profiling bool, log *slog.Logger) (*opsServer, error) {
	if addr == "" {
		if dash != nil {
			dash.Close()
		}
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, req *http.Request) {
		ok, lines := ready.check(req.Context())
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if standby, _ := ready.health.Standby(); standby {
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
	})
	if dash != nil {
		mux.Handle("/dashboard/", http.StripPrefix("/dashboard", dash))
		mux.Handle("GET /{$}", http.RedirectHandler("/dashboard/", http.StatusFound))
	}
	if profiling {
		// A CPU profile or trace runs for ?seconds= (default 30); pprof
		// extends the write deadline by as much.
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	s := &opsServer{
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
			WriteTimeout: 30 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)},
		ln:    ln,
		ready: ready,
		dash:  dash,
		done:  make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics and health endpoint stopped", "err", err)
		}
	}()
	log.Info("serving /metrics, /healthz and /readyz", "addr", ln.Addr().String())
	if dash != nil {
		log.Info("serving the dashboard at /dashboard/", "url", "http://"+ln.Addr().String()+"/dashboard/")
	}
	return s, nil
}

// Addr is the address the server listens on (the real port when :0 was asked).
func (s *opsServer) Addr() string { return s.ln.Addr().String() }

// stop shuts the server down and waits for it; nothing outlives it.
func (s *opsServer) stop() {
	if s == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
	<-s.done
	if s.dash != nil {
		s.dash.Close()
	}
	s.ready.mu.Lock()
	s.ready.close()
	s.ready.mu.Unlock()
}
