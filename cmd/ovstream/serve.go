package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ovstream/ovstream/dashboard"
	"github.com/ovstream/ovstream/status"
)

// defaultMetricsAddr is where run serves /metrics, /healthz and /readyz.
const defaultMetricsAddr = "127.0.0.1:9464"

// opsServer serves /metrics, /healthz, /readyz and the dashboard.
type opsServer struct {
	srv   *http.Server
	ln    net.Listener
	ready *status.Readiness
	dash  *dashboard.Handler
	done  chan struct{}
}

// startOpsServer listens on addr and serves until stop, the dashboard dash
// (nil: none) under /dashboard/, and with profiling the Go runtime's
// profiles (net/http/pprof) under /debug/pprof/. An empty addr disables it
// (nil, nil).
func startOpsServer(addr string, reg *prometheus.Registry, ready *status.Readiness, dash *dashboard.Handler, profiling bool, log *slog.Logger) (*opsServer, error) {
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
	mux.Handle("GET /readyz", ready)
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
	s.ready.Close()
}
