package dashboard

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/store"
)

//go:embed assets
var assets embed.FS

// Config configures a Handler.
type Config struct {
	// DatabaseURL is the PostgreSQL URL to read from (required).
	DatabaseURL string
	// Pipeline is the pipeline the pages show when none is chosen; "" =
	// the first one in the pipelines table.
	Pipeline string
	// Location is the time zone the pages start in (a page's tz parameter
	// overrides it); nil = UTC.
	Location *time.Location
	// MaxConns bounds the database connections the handler opens; 0 = 3.
	MaxConns int
	// QueryTimeout bounds each API request's database work; 0 = 60 s.
	QueryTimeout time.Duration
	// Lag reads the partitions' lag for the health page (serve --brokers);
	// nil: unknown, unless Live tells it.
	Lag LagFunc
	// Live is the running instance's own health (run --metrics-addr); nil
	// under serve.
	Live LiveFunc
	// Logger logs failed requests; nil = slog.Default().
	Logger *slog.Logger
}

// Handler serves the pages, their assets and the JSON API, at its root
// (mount it with http.StripPrefix under another path: every URL the pages
// use is relative). It is safe for concurrent use.
type Handler struct {
	cfg   Config
	mux   *http.ServeMux
	pool  *pool
	zones sync.Map // time zone name -> whether PostgreSQL knows it (zoneKnown)
}

// New checks cfg and returns a Handler. It opens no connection: the first
// request does. Errors: a missing or unparsable DatabaseURL.
func New(cfg Config) (*Handler, error) {
	if cfg.DatabaseURL == "" {
		return nil, errors.New("dashboard: no database URL")
	}
	if _, err := pgx.ParseConfig(cfg.DatabaseURL); err != nil {
		return nil, fmt.Errorf("dashboard: database URL: %w", err)
	}
	if cfg.Location == nil {
		cfg.Location = time.UTC
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 3
	}
	if cfg.QueryTimeout <= 0 {
		cfg.QueryTimeout = time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	h := &Handler{cfg: cfg, mux: http.NewServeMux(), pool: newPool(cfg.DatabaseURL, cfg.MaxConns)}
	static, err := fs.Sub(assets, "assets")
	if err != nil {
		return nil, err
	}
	page := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeFileFS(w, r, static, "index.html")
	}
	for _, p := range []string{"/{$}", "/delay", "/top", "/line", "/health"} {
		h.mux.HandleFunc("GET "+p, page)
	}
	files := http.StripPrefix("/assets", http.FileServerFS(static))
	h.mux.HandleFunc("GET /assets/", func(w http.ResponseWriter, r *http.Request) {
		// No asset's name is invalid UTF-8 or holds a NUL; io/fs calls such a
		// name invalid, which the file server answers with a 500.
		if !utf8.ValidString(r.URL.Path) || strings.ContainsRune(r.URL.Path, 0) {
			http.NotFound(w, r)
			return
		}
		files.ServeHTTP(w, r)
	})
	h.mux.HandleFunc("GET /api/pipelines", h.api(h.pipelines))
	h.mux.HandleFunc("GET /api/delay", h.api(h.delay))
	h.mux.HandleFunc("GET /api/top", h.api(h.top))
	h.mux.HandleFunc("GET /api/line", h.api(h.line))
	h.mux.HandleFunc("GET /api/health", h.api(h.health))
	return h, nil
}

// ServeHTTP serves the pages (/, /delay, /top, /line, /health), the assets
// (/assets/...) and the API (/api/...). Every response forbids loading
// anything from another origin (Content-Security-Policy).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Security-Policy",
		"default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; object-src 'none'; base-uri 'none'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	h.mux.ServeHTTP(w, r)
}

// Ping opens (or checks) one database connection: `serve` calls it at start
// so that a wrong URL is said at once.
func (h *Handler) Ping(ctx context.Context) error {
	return h.pool.do(ctx, func(s *store.Store) error { return s.Ping(ctx) })
}

// Close closes the handler's connections, waiting up to 5 s for requests
// still using one. Call it once the server has stopped.
func (h *Handler) Close() { h.pool.close(5 * time.Second) }

// badRequest is an error of the request's parameters: 400.
type badRequest struct{ msg string }

func (e *badRequest) Error() string { return e.msg }

func badParam(name, format string, args ...any) error {
	return &badRequest{name + ": " + fmt.Sprintf(format, args...)}
}

// api wraps one API endpoint: f reads the database and returns the value
// written as JSON; a *badRequest error is a 400, any other a 500.
func (h *Handler) api(f func(ctx context.Context, r *http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), h.cfg.QueryTimeout)
		defer cancel()
		var v any
		err := h.checkParams(r.URL.Query())
		if err == nil {
			v, err = f(ctx, r)
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if err != nil {
			var bad *badRequest
			code, msg := http.StatusInternalServerError, "the request failed: the server's log says why"
			if errors.As(err, &bad) {
				code, msg = http.StatusBadRequest, bad.msg
			} else {
				// The database's own words stay in the log: they are not
				// the client's business.
				h.cfg.Logger.Warn("dashboard request failed", "url", r.URL.String(), "err", err)
			}
			w.WriteHeader(code)
			v = map[string]string{"error": msg}
		}
		if err := json.NewEncoder(w).Encode(v); err != nil {
			h.cfg.Logger.Debug("dashboard response not written", "url", r.URL.String(), "err", err)
		}
	}
}

// pool hands out at most n Stores (one connection each, application_name
// ovstream-dashboard), opened on first use and reused.
type pool struct {
	url   string
	n     int
	slots chan *store.Store // nil: not opened yet
}

func newPool(url string, n int) *pool {
	p := &pool{url: url, n: n, slots: make(chan *store.Store, n)}
	for range n {
		p.slots <- nil
	}
	return p
}

// do runs f on a Store of its own, waiting for a free one.
func (p *pool) do(ctx context.Context, f func(*store.Store) error) error {
	var s *store.Store
	select {
	case s = <-p.slots:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { p.slots <- s }()
	if s == nil {
		opened, err := store.Open(ctx, p.url)
		if err != nil {
			return err
		}
		s = opened.Clone("ovstream-dashboard")
		_ = opened.Close(ctx)
	}
	return f(s)
}

// close closes every Store, waiting up to wait for those in use.
func (p *pool) close(wait time.Duration) {
	timeout := time.After(wait)
	for range p.n {
		select {
		case s := <-p.slots:
			if s != nil {
				_ = s.Close(context.Background())
			}
		case <-timeout:
			return
		}
	}
}
