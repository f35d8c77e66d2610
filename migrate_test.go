package docket_test

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// TestAutoMigrateLogs: a client with AutoMigrate (docket serve) logs each
// migration it applies, so an upgrade says what it changed; a start with
// nothing to apply logs none; one on a database a newer docket migrated
// further warns, naming the migration it does not know.
func TestAutoMigrateLogs(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := "sqlite:" + filepath.Join(t.TempDir(), "docket.db")
	open := func() (*docket.Client, string) {
		var buf bytes.Buffer
		c, err := docket.NewClient(ctx, docket.Config{DatabaseURL: url, AutoMigrate: true,
			Logger: slog.New(slog.NewTextHandler(&buf, nil))})
		require.NoError(t, err)
		return c, buf.String()
	}
	c, logs := open()
	ms, err := c.MigrationStatus(ctx)
	require.NoError(t, err)
	require.Equal(t, len(ms), strings.Count(logs, `msg="applied migration"`), logs)
	reverted, err := c.Migrate(ctx, docket.MigrateDown, 2)
	require.NoError(t, err)
	require.NoError(t, c.Close())

	c, logs = open()
	require.Equal(t, 2, strings.Count(logs, `msg="applied migration"`), logs)
	for _, m := range reverted {
		require.Contains(t, logs, fmt.Sprintf("version=%d name=%s", m.Version, m.Name))
	}
	require.NoError(t, c.Close())

	c, logs = open()
	require.NotContains(t, logs, "applied migration")
	require.NotContains(t, logs, "WARN")
	require.NoError(t, c.Close())

	// A newer docket's migration: a warning naming it.
	db, err := sql.Open("sqlite", strings.TrimPrefix(url, "sqlite:"))
	require.NoError(t, err)
	_, err = db.Exec(`INSERT INTO docket_migrations (version, name, applied_at) VALUES (9999, 'from_the_future', 0)`)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	c, logs = open()
	require.Contains(t, logs, `level=WARN msg="the database has a migration this docket does not know`)
	require.Contains(t, logs, "version=9999 name=from_the_future")
	require.NoError(t, c.Close())
}

// TestUnmigratedDatabaseWarns: a client opened without AutoMigrate on a
// database that lacks some of this docket's migrations says so at once,
// naming the way out, since its calls then fail on missing tables ("no
// such table: docket_jobs"); it stays quiet once the schema is current,
// and an insert's error says once what it inserted.
func TestUnmigratedDatabaseWarns(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.EmptyBackends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			url := backend.URL(t)
			open := func() (*docket.Client, []string) {
				logs := &docket.WarnLog{}
				c, err := docket.NewClient(ctx, docket.Config{DatabaseURL: url, Logger: slog.New(logs)})
				require.NoError(t, err)
				t.Cleanup(func() { _ = c.Close() })
				return c, logs.Messages()
			}
			c, warned := open()
			require.Len(t, warned, 1, "a new database: one warning")
			require.Contains(t, warned[0], "the database lacks migrations this docket needs")
			require.Contains(t, warned[0], "docket migrate up")
			require.Contains(t, warned[0], "first=0001_")
			_, err := c.Insert(ctx, docket.RawArgs{Type: "t", Payload: json.RawMessage(`{}`)}, nil)
			require.Error(t, err)
			require.Equal(t, 1, strings.Count(err.Error(), "insert 1 jobs"), err.Error())

			_, err = c.Migrate(ctx, docket.MigrateUp, 0)
			require.NoError(t, err)
			_, err = c.Migrate(ctx, docket.MigrateDown, 1)
			require.NoError(t, err)
			_, warned = open()
			require.Len(t, warned, 1, "one migration short: one warning")
			require.Contains(t, warned[0], "pending=1")

			_, err = c.Migrate(ctx, docket.MigrateUp, 0)
			require.NoError(t, err)
			_, warned = open()
			require.Empty(t, warned, "a current schema: no warning")
		})
	}
}
