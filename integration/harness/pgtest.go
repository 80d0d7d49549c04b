//go:build integration

package harness

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/migrations"
)

// TestDatabaseURL is the PostgreSQL the integration tests run against: env
// DATABASE_URL, else the local test database. Tests FAIL (never skip) when it
// is unreachable.
func TestDatabaseURL() string {
	if u := os.Getenv("DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/ovstream?sslmode=disable"
}

// TestServerAddr returns host:port of the test server (TestDatabaseURL).
func TestServerAddr(t testing.TB) string {
	t.Helper()
	u, err := url.Parse(TestDatabaseURL())
	if err != nil || u.Host == "" {
		t.Fatalf("DATABASE_URL %q: want postgres://USER@HOST:PORT/DB", TestDatabaseURL())
	}
	if u.Port() == "" {
		return u.Host + ":5432"
	}
	return u.Host
}

// EmptyDB creates a new, empty database ovs_<random> on the test server and
// drops it when the test ends, so tests and test packages running in parallel
// never share tables. It returns the new database's URL.
func EmptyDB(t testing.TB) string {
	t.Helper()
	return EmptyDBWith(t, "")
}

// EmptyDBWith is EmptyDB creating the database WITH options, e.g.
// "ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0".
func EmptyDBWith(t testing.TB, options string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, TestDatabaseURL())
	if err != nil {
		t.Fatalf("integration tests need PostgreSQL (DATABASE_URL or the local test database): %v", err)
	}
	defer admin.Close(ctx)
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	name := "ovs_" + hex.EncodeToString(b[:])
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" "+options); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		admin, err := pgx.Connect(ctx, TestDatabaseURL())
		if err != nil {
			t.Errorf("drop database %s: %v", name, err)
			return
		}
		defer admin.Close(ctx)
		if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(TestDatabaseURL())
	if err != nil {
		t.Fatalf("DATABASE_URL: not a URL")
	}
	u.Path = "/" + name
	return u.String()
}

// FreshDB is EmptyDB with every migration applied.
func FreshDB(t testing.TB) (url string) {
	t.Helper()
	url = EmptyDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := migrations.Up(ctx, url); err != nil {
		t.Fatalf("migrations.Up: %v", err)
	}
	return url
}
