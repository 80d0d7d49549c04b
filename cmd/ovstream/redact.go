package main

import (
	"bytes"
	"io"
	"net/url"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"
)

// redactedMark replaces a secret in logs, errors and output.
const redactedMark = "xxxxx"

// minSecretLen is the shortest secret the output filter replaces. A shorter
// one (a one-letter test password) would turn every word holding it into
// noise; messages are built without secrets in the first place (pgx leaves
// passwords out of its errors), so the filter is the second line only.
const minSecretLen = 4

// databaseSecrets returns the password of a PostgreSQL URL or DSN (from the
// URL, its password= parameter, or PGPASSWORD) in the spellings it may take
// in a message: as it is, and URL-escaped.
func databaseSecrets(databaseURL string) []string {
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
	return spellings(pws)
}

// spellings adds the URL-escaped forms of each secret, leaving out those
// shorter than minSecretLen.
func spellings(secrets []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, s := range secrets {
		if s == "" {
			continue
		}
		user := url.UserPassword("u", s).String() // "u:ESCAPED"
		for _, v := range []string{s, url.QueryEscape(s), url.PathEscape(s), strings.TrimPrefix(user, "u:")} {
			if len(v) >= minSecretLen && !seen[v] {
				seen[v] = true
				out = append(out, v)
			}
		}
	}
	return out
}

// redactString replaces every secret in s that stands as a whole value.
func redactString(s string, secrets []string) string {
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
// minSecretLen are left alone. p is returned as it is when nothing changed.
func redact(p, secret []byte) []byte {
	if len(secret) < minSecretLen || !bytes.Contains(p, secret) {
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
		out = append(append(out, p[from:at]...), redactedMark...)
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

// redactingWriter replaces secrets in what is written through it. slog
// handlers and fmt write a line per call, so a secret is never split.
type redactingWriter struct {
	mu      sync.Mutex
	w       io.Writer
	secrets [][]byte
}

func newRedactingWriter(w io.Writer, secrets []string) *redactingWriter {
	r := &redactingWriter{w: w}
	for _, s := range secrets {
		if len(s) >= minSecretLen {
			r.secrets = append(r.secrets, []byte(s))
		}
	}
	return r
}

func (r *redactingWriter) Write(p []byte) (int, error) {
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
