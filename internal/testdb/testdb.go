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
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/store/sqlite"
)

// EnvURL names the variable holding the test server's URL.
const EnvURL = "DOCKET_TEST_DATABASE_URL"

// Backend is one database kind tests run against.
type Backend struct {
	Name string
	// URL makes a fresh database of the test's own and returns its URL; it
	// is dropped when the test ends. It may already hold the current schema
	// (Backends' SQLite does), so migrating it may do nothing: a test about
	// migrations starts from SQLiteURL or PostgresURL, which are empty.
	URL func(t testing.TB) string
}

// Backends lists both backends, SQLite first. Its SQLite databases are
// copies of a migrated one (SQLiteMigratedURL), its PostgreSQL ones empty
// schemas: under the race detector, SQLite's migrations cost 0.6–0.8 s of
// CPU a database (the driver's C, translated to Go, is instrumented), and
// the suite makes hundreds; PostgreSQL's run in the server, about 0.2 s.
func Backends() []Backend {
	return []Backend{{Name: "sqlite", URL: SQLiteMigratedURL}, {Name: "postgres", URL: PostgresURL}}
}

// EmptyBackends lists both backends, SQLite first, each making empty
// databases: for tests about creating and migrating one.
func EmptyBackends() []Backend {
	return []Backend{{Name: "sqlite", URL: SQLiteURL}, {Name: "postgres", URL: PostgresURL}}
}

// SQLiteURL returns sqlite:<a new file in the test's temp dir>, which does
// not exist yet: an empty database.
func SQLiteURL(t testing.TB) string {
	return "sqlite:" + filepath.Join(t.TempDir(), "docket.db")
}

// SQLiteMigratedURL returns sqlite:<a new file in the test's temp dir>
// holding the current schema, every migration applied, and nothing else.
func SQLiteMigratedURL(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "docket.db")
	SQLiteMigratedFile(t, path)
	return "sqlite:" + path
}

// SQLiteMigratedFile writes a SQLite database holding the current schema,
// every migration applied, to path, which must not exist. The first call in
// a test binary migrates a database and keeps its bytes; every call copies
// them, which is what opening and migrating a new file leaves, without the
// cost.
func SQLiteMigratedFile(t testing.TB, path string) {
	t.Helper()
	data, err := sqliteTemplate()
	if err != nil {
		t.Fatalf("migrated SQLite template: %v", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err == nil {
		_, err = f.Write(data)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		t.Fatalf("write migrated SQLite database: %v", err)
	}
}

// sqliteTemplate migrates a database in a directory of its own, closes it
// and returns its file's bytes, once per test binary. Closing the last
// connection checkpoints the write-ahead log into the file and removes it;
// a log left behind (which would hold part of the schema) is an error.
var sqliteTemplate = sync.OnceValues(func() ([]byte, error) {
	dir, err := os.MkdirTemp("", "docket-testdb-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "template.db")
	ctx := context.Background()
	s, err := sqlite.Open(ctx, path, store.Options{})
	if err != nil {
		return nil, err
	}
	_, err = s.Migrate(ctx, &store.MigrateParams{Direction: store.Up})
	if err = errors.Join(err, s.Close()); err != nil {
		return nil, err
	}
	if fi, err := os.Stat(path + "-wal"); err == nil && fi.Size() > 0 {
		return nil, fmt.Errorf("%s-wal holds %d bytes after the store closed", path, fi.Size())
	}
	return os.ReadFile(path)
})

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
