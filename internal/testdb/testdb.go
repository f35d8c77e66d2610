// Package testdb gives tests an isolated database on each backend: a fresh
// schema on the PostgreSQL named by DOCKET_TEST_DATABASE_URL (started by
// scripts/testdb.sh), or a fresh SQLite file. Without that variable the
// PostgreSQL tests skip — except under CI (CI set), where they fail: in CI a
// missing PostgreSQL is an error, never a skip.
package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvURL names the variable holding the test server's URL.
const EnvURL = "DOCKET_TEST_DATABASE_URL"

// Backend is one database kind tests run against.
type Backend struct {
	Name string
	// URL makes a fresh, empty (unmigrated) database and returns its URL;
	// it is dropped when the test ends.
	URL func(t testing.TB) string
}

// Backends lists both backends, SQLite first.
func Backends() []Backend {
	return []Backend{{Name: "sqlite", URL: SQLiteURL}, {Name: "postgres", URL: PostgresURL}}
}

// SQLiteURL returns sqlite:<a new file in the test's temp dir>.
func SQLiteURL(t testing.TB) string {
	return "sqlite:" + filepath.Join(t.TempDir(), "docket.db")
}

// ServerURL returns the test server's URL, skipping (or, under CI,
// failing) the test when there is none.
func ServerURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(EnvURL)
	if u == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not set: in CI the PostgreSQL tests must run (start it with scripts/testdb.sh start)", EnvURL)
		}
		t.Skipf("%s is not set; run scripts/testdb.sh start to run PostgreSQL tests", EnvURL)
	}
	return u
}

// PostgresURL creates a new schema on the test server and returns a URL
// whose search_path is that schema. The schema is dropped at cleanup.
func PostgresURL(t testing.TB) string {
	t.Helper()
	base := ServerURL(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "docket_t_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connect to test postgres: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("connect to drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("parse %s: %v", EnvURL, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}
