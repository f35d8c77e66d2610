package docket_test

import (
	"bytes"
	"database/sql"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
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
