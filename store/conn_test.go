//go:build integration

package store

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
)

// connectTestDB connects to the database of the integration tests
// (DATABASE_URL, else the local one) and returns its URL and the
// connection, closed when the test ends; it fails the test, saying what it
// needs, when there is no such database.
func connectTestDB(ctx context.Context, t *testing.T) (string, *pgx.Conn) {
	t.Helper()
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		url = "postgres://postgres@127.0.0.1:5432/ovstream?sslmode=disable"
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("this test needs PostgreSQL (DATABASE_URL or the local test database): %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return url, conn
}
