package redact

import (
	"bytes"
	"fmt"
	"io"
	"net/url"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"
)

// Mark replaces a secret in logs, errors and output.
const Mark = "xxxxx"

// MinLen is the shortest secret the output filter replaces. A shorter
// one (a one-letter test password) would turn every word holding it into
// noise; messages are built without secrets in the first place (pgx leaves
// passwords out of its errors), so the filter is the second line only.
const MinLen = 4

// DatabaseSecrets returns the password of a PostgreSQL URL or DSN (from the
// URL, its password= parameter, or PGPASSWORD) in the spellings it may take
// in a message: as it is, and URL-escaped.
func DatabaseSecrets(databaseURL string) []string {
	var pws []string
	if cfg, err := pgconn.ParseConfig(databaseURL); err == nil && cfg.Password != "" {
		pws = append(pws, cfg.Password)
	}
	if u, err := url.Parse(databaseURL); err == nil {
		if p, ok := u.User.Password(); ok && p != "" {
			pws = append(pws, p)
		}
		if p := u.Query().Get("password"); p != "" {
			pws = append(pws, p)
		}
	}
	return Spellings(pws)
}

// Spellings adds the URL-escaped forms of each secret, leaving out those
// shorter than MinLen.
func Spellings(secrets []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, s := range secrets {
		if s == "" {
			continue
		}
		user := url.UserPassword("u", s).String() // "u:ESCAPED"
		for _, v := range []string{s, url.QueryEscape(s), url.PathEscape(s), strings.TrimPrefix(user, "u:")} {
			if len(v) >= MinLen && !seen[v] {
				seen[v] = true
				out = append(out, v)
			}
		}
	}
	return out
}

// String replaces every secret in s that stands as a whole value.
func String(s string, secrets []string) string {
	b := []byte(s)
	for _, sec := range secrets {
		b = redact(b, []byte(sec))
	}
	return string(b)
}

// redact replaces each occurrence of secret in p that stands as a whole
// value: one whose neighbours are not letters or digits where the secret's
// own first or last byte is one (so "hunter42" goes in "pw hunter42," and
// in "u:hunter42@host", and stays in "hunter42x"). Secrets shorter than
// MinLen are left alone. p is returned as it is when nothing changed.
func redact(p, secret []byte) []byte {
	if len(secret) < MinLen || !bytes.Contains(p, secret) {
		return p
	}
	var out []byte
	from := 0 // p[from:] is not copied to out yet
	for i := 0; ; {
		j := bytes.Index(p[i:], secret)
		if j < 0 {
			break
		}
		at, end := i+j, i+j+len(secret)
		whole := (at == 0 || !wordByte(p[at-1]) || !wordByte(secret[0])) &&
			(end == len(p) || !wordByte(p[end]) || !wordByte(secret[len(secret)-1]))
		if !whole {
			i = at + 1
			continue
		}
		out = append(append(out, p[from:at]...), Mark...)
		from, i = end, end
	}
	if out == nil {
		return p
	}
	return append(out, p[from:]...)
}

// wordByte tells whether c is an ASCII letter or digit, or a byte of a
// multi-byte UTF-8 character.
func wordByte(c byte) bool {
	return c >= 0x80 || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// Writer replaces secrets in what is written through it. slog
// handlers and fmt write a line per call, so a secret is never split.
type Writer struct {
	mu      sync.Mutex
	w       io.Writer
	secrets [][]byte
}

// NewWriter returns a Writer to w that replaces secrets (those of MinLen
// bytes or more) wherever they stand as a whole value (String).
func NewWriter(w io.Writer, secrets []string) *Writer {
	r := &Writer{w: w}
	for _, s := range secrets {
		if len(s) >= MinLen {
			r.secrets = append(r.secrets, []byte(s))
		}
	}
	return r
}

// Write writes p to the underlying writer with the secrets replaced; it
// returns len(p) on success.
func (r *Writer) Write(p []byte) (int, error) {
	out := p
	for _, s := range r.secrets {
		out = redact(out, s)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Database returns the database a URL or keyword/value DSN names,
// without its password: postgres://user@host:port/db?params for a URL (the
// password parameter dropped), else "user@host:port/db".
func Database(s string) string {
	if u, err := url.Parse(s); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		if u.User != nil {
			u.User = url.User(u.User.Username())
		}
		q := u.Query()
		if q.Has("password") {
			q.Del("password")
			u.RawQuery = q.Encode()
		}
		return u.String()
	}
	cfg, err := pgconn.ParseConfig(s)
	if err != nil {
		return "(not a PostgreSQL URL or DSN)"
	}
	return fmt.Sprintf("%s@%s:%d/%s", cfg.User, cfg.Host, cfg.Port, cfg.Database)
}
