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

// spellings adds the URL-escaped forms of each secret.
func spellings(secrets []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, s := range secrets {
		if s == "" {
			continue
		}
		user := url.UserPassword("u", s).String() // "u:ESCAPED"
		for _, v := range []string{s, url.QueryEscape(s), url.PathEscape(s), strings.TrimPrefix(user, "u:")} {
			if v != "" && !seen[v] {
				seen[v] = true
				out = append(out, v)
			}
		}
	}
	return out
}

// redactString replaces every secret in s.
func redactString(s string, secrets []string) string {
	for _, sec := range secrets {
		if sec != "" {
			s = strings.ReplaceAll(s, sec, redactedMark)
		}
	}
	return s
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
		if s != "" {
			r.secrets = append(r.secrets, []byte(s))
		}
	}
	return r
}

func (r *redactingWriter) Write(p []byte) (int, error) {
	out := p
	for _, s := range r.secrets {
		if bytes.Contains(out, s) {
			out = bytes.ReplaceAll(out, s, []byte(redactedMark))
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}
