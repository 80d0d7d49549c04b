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
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

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
	// StatementTimeout bounds each statement on the database
	// (statement_timeout), whoever waits for it; 0 =
	// DefaultStatementTimeout. A request whose statement ran out answers 503.
	StatementTimeout time.Duration
	// Lag reads the partitions' lag for the health page (serve --brokers);
	// nil: unknown, unless Live tells it.
	Lag LagFunc
	// Live is the running instance's own health (run --metrics-addr); nil
	// under serve.
	Live LiveFunc
	// Logger logs failed requests; nil = slog.Default().
	Logger *slog.Logger
}

// DefaultStatementTimeout is the dashboard's statement_timeout when Config
// sets none: a few seconds, so that no request holds one of its few
// connections, or the database, for long.
const DefaultStatementTimeout = 5 * time.Second

// Handler serves the pages, their assets and the JSON API, at its root
// (mount it with http.StripPrefix under another path: every URL the pages
// use is relative). It is safe for concurrent use.
type Handler struct {
	cfg   Config
	mux   *http.ServeMux
	pool  *pgxpool.Pool
	zones sync.Map // time zone name -> whether PostgreSQL knows it (zoneKnown)
}

// New checks cfg and returns a Handler. It opens no connection: the first
// request does. Errors: a missing or unparsable DatabaseURL.
func New(cfg Config) (*Handler, error) {
	if cfg.DatabaseURL == "" {
		return nil, errors.New("dashboard: no database URL")
	}
	if cfg.StatementTimeout <= 0 {
		cfg.StatementTimeout = DefaultStatementTimeout
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
	// Parses the URL; connects on first use.
	pool, err := store.ReadPool(cfg.DatabaseURL, "ovstream-dashboard", cfg.StatementTimeout, int32(cfg.MaxConns))
	if err != nil {
		return nil, fmt.Errorf("dashboard: database URL: %w", err)
	}
	h := &Handler{cfg: cfg, mux: http.NewServeMux(), pool: pool}
	static, err := fs.Sub(assets, "assets")
	if err != nil {
		return nil, err
	}
	index, err := fs.ReadFile(static, "index.html")
	if err != nil {
		return nil, err
	}
	page := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		if h.pageUnknown(r) {
			// The page still loads: its script asks the API, whose 404
			// names the pipeline and the known ones, and shows that.
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write(index)
			return
		}
		http.ServeFileFS(w, r, static, "index.html")
	}
	for _, p := range []string{"/{$}", "/delay", "/top", "/line", "/ontime", "/headway", "/accuracy", "/health"} {
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
	h.mux.HandleFunc("GET /api/ontime", h.api(h.onTime))
	h.mux.HandleFunc("GET /api/headway", h.api(h.headway))
	h.mux.HandleFunc("GET /api/accuracy", h.api(h.accuracy))
	h.mux.HandleFunc("GET /api/health", h.api(h.health))
	return h, nil
}

// pageUnknown tells whether a page's request names a pipeline (its pipeline
// parameter, else Config.Pipeline) the database does not know, so that the
// page is answered with 404. A parameter no pipeline can have is left to the
// API's 400; a failed query to the API's own answer; so is the check when
// every connection of the pool is busy: a page never waits for one.
func (h *Handler) pageUnknown(r *http.Request) bool {
	v := r.URL.Query()
	if h.checkParams(v) != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.QueryTimeout)
	defer cancel()
	err := h.tryDo(ctx, func(c *pgx.Conn) error {
		pipeline := strings.TrimSpace(v.Get("pipeline"))
		if pipeline == "" {
			pipeline = h.cfg.Pipeline
		}
		return checkPipeline(ctx, c, pipeline)
	})
	return store.IsUnknownPipeline(err)
}

// ServeHTTP serves the pages (/, /delay, /top, /line, /ontime, /headway, /accuracy, /health), the assets
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
	return h.do(ctx, func(c *pgx.Conn) error { return c.Ping(ctx) })
}

// Close closes the handler's connections, waiting up to 5 s for requests
// still using one. Call it once the server has stopped.
func (h *Handler) Close() {
	done := make(chan struct{})
	go func() {
		h.pool.Close() // waits for the connections in use to come back
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
}

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
			var unknown *store.UnknownPipelineError
			var pgErr *pgconn.PgError
			code, msg := http.StatusInternalServerError, "the request failed: the server's log says why"
			switch {
			case errors.As(err, &bad):
				code, msg = http.StatusBadRequest, bad.msg
			case errors.As(err, &unknown):
				w.WriteHeader(http.StatusNotFound)
				h.encode(w, r, unknownPipeline{Error: unknown.Error(), Pipelines: append([]string{}, unknown.Known...)})
				return
			case r.Context().Err() != nil:
				return // the client went away: its statement was cancelled, nobody reads an answer
			case errors.As(err, &pgErr) && pgErr.Code == "57014", errors.Is(err, context.DeadlineExceeded):
				code = http.StatusServiceUnavailable
				msg = fmt.Sprintf("the database took longer than the statement timeout (%s) or the request timeout (%s): "+
					"choose a shorter range, or try again", h.cfg.StatementTimeout, h.cfg.QueryTimeout)
				h.cfg.Logger.Warn("dashboard request timed out", "url", r.URL.String(), "err", err)
			default:
				// The database's own words stay in the log: they are not
				// the client's business.
				h.cfg.Logger.Warn("dashboard request failed", "url", r.URL.String(), "err", err)
			}
			w.WriteHeader(code)
			v = map[string]string{"error": msg}
		}
		h.encode(w, r, v)
	}
}

// unknownPipeline is the 404 of an API request for a pipeline the database
// does not know: the error names it and the known ones, listed again in
// Pipelines.
type unknownPipeline struct {
	Error     string   `json:"error"`
	Pipelines []string `json:"pipelines"`
}

// encode writes v as the JSON answer of r.
func (h *Handler) encode(w http.ResponseWriter, r *http.Request, v any) {
	if err := json.NewEncoder(w).Encode(v); err != nil {
		h.cfg.Logger.Debug("dashboard response not written", "url", r.URL.String(), "err", err)
	}
}

// do runs f on a connection of the pool of its own (at most
// Config.MaxConns sessions: store.ReadPool), waiting for a free one until
// ctx ends. A connection goes back only once f returned, so the database
// never sees more sessions than the pool's, whatever clients do.
func (h *Handler) do(ctx context.Context, f func(*pgx.Conn) error) error {
	conn, err := h.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	return f(conn.Conn())
}

// tryDo is do when a connection is free at once: when every connection of
// the pool is in use it returns errPoolBusy without waiting.
func (h *Handler) tryDo(ctx context.Context, f func(*pgx.Conn) error) error {
	if st := h.pool.Stat(); st.AcquiredConns() >= st.MaxConns() {
		return errPoolBusy
	}
	return h.do(ctx, f)
}

// errPoolBusy is tryDo's error when every connection of the pool is in use.
var errPoolBusy = errors.New("dashboard: every database connection is busy")
