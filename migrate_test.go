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
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// TestAutoMigrateLogs: a client with AutoMigrate (docket serve) logs each
// migration it applies, so an upgrade says what it changed; a start with
// nothing to apply logs none; one on a database a newer docket migrated
// further fails, naming the migration it does not know
// (TestAutoMigrateRefusesNewerSchema).
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

	// A newer docket's migration: refused, naming it.
	db, err := sql.Open("sqlite", strings.TrimPrefix(url, "sqlite:"))
	require.NoError(t, err)
	_, err = db.Exec(`INSERT INTO docket_migrations (version, name, applied_at) VALUES (9999, 'from_the_future', 0)`)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	_, err = docket.NewClient(ctx, docket.Config{DatabaseURL: url, AutoMigrate: true})
	require.ErrorContains(t, err, "migrated by a newer docket: it has 9999_from_the_future")
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

			// A newer docket's migration: refused, naming it.and this
			// docket's newest (a worker left on the old version in a
			// rolling upgrade runs on a schema it was not written for).
			recordMigration(t, url, 9999, "from_the_future")
			_, warned = open()
			require.Len(t, warned, 1, "a newer docket's migration: one warning")
			require.Contains(t, warned[0], "migrated by a newer docket: it has 9999_from_the_future")
			ms, err := c.MigrationStatus(ctx)
			require.NoError(t, err)
			require.Contains(t, warned[0], fmt.Sprintf("migrations up to %04d_%s", ms[len(ms)-2].Version, ms[len(ms)-2].Name))
		})
	}
}

// recordMigration writes a tracking row for a migration without running
// anything, as a newer docket that applied it would have.
func recordMigration(t *testing.T, url string, version int, name string) {
	t.Helper()
	driver, dsn := "pgx", url
	if path, ok := strings.CutPrefix(url, "sqlite:"); ok {
		driver, dsn = "sqlite", path
	}
	db, err := sql.Open(driver, dsn)
	require.NoError(t, err)
	defer db.Close()
	q := `INSERT INTO docket_migrations (version, name, applied_at) VALUES ($1, $2, $3)`
	at := any(time.Now())
	if driver == "sqlite" {
		at = time.Now().UnixMicro()
	}
	_, err = db.ExecContext(t.Context(), q, version, name, at)
	require.NoError(t, err)
}

// TestAutoMigrateRefusesNewerSchema: docket serve (a client with
// AutoMigrate) on a database a newer docket migrated further refuses to
// start, naming the migrations it does not know and its own newest, and
// applies nothing (even a migration of its own that is missing); once
// the newer migration is gone it starts.
func TestAutoMigrateRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.EmptyBackends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			url := backend.URL(t)
			c, err := docket.NewClient(ctx, docket.Config{DatabaseURL: url, AutoMigrate: true})
			require.NoError(t, err)
			ms, err := c.MigrationStatus(ctx)
			require.NoError(t, err)
			newest := ms[len(ms)-1]
			_, err = c.Migrate(ctx, docket.MigrateDown, 1)
			require.NoError(t, err)
			recordMigration(t, url, 9998, "newer_one")
			recordMigration(t, url, 9999, "newer_two")

			_, err = docket.NewClient(ctx, docket.Config{DatabaseURL: url, AutoMigrate: true})
			require.Error(t, err)
			require.Contains(t, err.Error(), "migrated by a newer docket: it has 9998_newer_one, 9999_newer_two")
			require.Contains(t, err.Error(), fmt.Sprintf("this docket (migrations up to %04d_%s)", newest.Version, newest.Name))
			after, err := c.MigrationStatus(ctx)
			require.NoError(t, err)
			require.False(t, after[len(ms)-1].Applied, "nothing applied")

			done, err := c.Migrate(ctx, docket.MigrateUp, 0)
			require.ErrorContains(t, err, "migrated by a newer docket: it has 9998_newer_one, 9999_newer_two", "up refuses too")
			require.Empty(t, done)
			after, err = c.MigrationStatus(ctx)
			require.NoError(t, err)
			require.False(t, after[len(ms)-1].Applied, "nothing applied")
			_, err = c.Migrate(ctx, docket.MigrateDown, 1)
			require.ErrorContains(t, err, "9998_newer_one", "down refuses too")
			require.NoError(t, c.Close())
		})
	}
}

// TestMigrateFailsHalfWay: each migration commits on its own, so when one
// fails those before it stay applied; Migrate returns them with the
// error (docket serve logs them, docket migrate up lists them), the
// failed one leaves nothing, and up once the cause is gone applies it.
func TestMigrateFailsHalfWay(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.EmptyBackends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			url := backend.URL(t)
			c, err := docket.NewClient(ctx, docket.Config{DatabaseURL: url, AutoMigrate: true})
			require.NoError(t, err)
			defer c.Close()
			secrets := revertPast(t, c, "secrets")
			// The secrets migration will fail: its table is there.
			execSQL(t, url, `CREATE TABLE docket_secrets (x integer)`)

			var buf bytes.Buffer
			_, err = docket.NewClient(ctx, docket.Config{DatabaseURL: url, AutoMigrate: true,
				Logger: slog.New(slog.NewTextHandler(&buf, nil))})
			require.ErrorContains(t, err, fmt.Sprintf("migrate up %04d_secrets", secrets.Version))
			require.Contains(t, buf.String(), fmt.Sprintf(`msg="applied migration" service=migrate version=%d`, secrets.Version-1),
				"the one before it is logged")

			_, err = c.Migrate(ctx, docket.MigrateDown, 1)
			require.NoError(t, err)
			done, err := c.Migrate(ctx, docket.MigrateUp, 0)
			require.ErrorContains(t, err, fmt.Sprintf("%04d_secrets", secrets.Version))
			require.Len(t, done, 1, "the one before it is applied, and returned")
			require.Equal(t, secrets.Version-1, done[0].Version)
			ms, err := c.MigrationStatus(ctx)
			require.NoError(t, err)
			require.True(t, ms[secrets.Version-2].Applied)
			require.False(t, ms[secrets.Version-1].Applied, "the failed one is not recorded")

			execSQL(t, url, `DROP TABLE docket_secrets`)
			done, err = c.Migrate(ctx, docket.MigrateUp, 0)
			require.NoError(t, err)
			require.Equal(t, secrets.Version, done[0].Version, "run again, it applies")
		})
	}
}

// revertPast reverts migrations until the one named name and the one
// before it are reverted, and returns the named one.
func revertPast(t *testing.T, c *docket.Client, name string) docket.Migration {
	t.Helper()
	ms, err := c.MigrationStatus(t.Context())
	require.NoError(t, err)
	for _, m := range ms {
		if m.Name == name {
			_, err := c.Migrate(t.Context(), docket.MigrateDown, len(ms)-m.Version+2)
			require.NoError(t, err)
			return m
		}
	}
	t.Fatalf("no migration %s", name)
	return docket.Migration{}
}

// execSQL runs statement on the database at url.
func execSQL(t *testing.T, url, statement string) {
	t.Helper()
	driver, dsn := "pgx", url
	if path, ok := strings.CutPrefix(url, "sqlite:"); ok {
		driver, dsn = "sqlite", path
	}
	db, err := sql.Open(driver, dsn)
	require.NoError(t, err)
	defer db.Close()
	_, err = db.ExecContext(t.Context(), statement)
	require.NoError(t, err)
}

// TestMigrateDownRevokesScopedKeys: reverting the queue scopes of worker
// keys (api_key_queues) drops the column whose NULL means "any queue", so
// its down migration revokes the scoped keys first: they fail closed
// instead of leasing every queue. Keys of any queue are left as they were.
func TestMigrateDownRevokesScopedKeys(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.EmptyBackends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			c, err := docket.NewClient(ctx, docket.Config{DatabaseURL: backend.URL(t), AutoMigrate: true})
			require.NoError(t, err)
			defer c.Close()
			_, scoped, err := c.CreateWorkerKey(ctx, "scoped", []string{"mail"})
			require.NoError(t, err)
			_, anyQueue, err := c.CreateAPIKey(ctx, "any", docket.RoleWorker)
			require.NoError(t, err)

			ms, err := c.MigrationStatus(ctx)
			require.NoError(t, err)
			steps := 0
			for i := len(ms) - 1; i >= 0; i-- {
				steps++
				if ms[i].Name == "api_key_queues" {
					break
				}
			}
			require.Less(t, steps, len(ms), "api_key_queues not found")
			reverted, err := c.Migrate(ctx, docket.MigrateDown, steps)
			require.NoError(t, err)
			require.Equal(t, "api_key_queues", reverted[len(reverted)-1].Name)
			_, err = c.Migrate(ctx, docket.MigrateUp, 0)
			require.NoError(t, err)

			keys, err := c.APIKeys(ctx)
			require.NoError(t, err)
			byID := map[string]*docket.APIKey{}
			for _, k := range keys {
				byID[k.ID.String()] = k
			}
			require.False(t, byID[scoped.ID.String()].RevokedAt.IsZero(), "the scoped key is revoked")
			require.WithinDuration(t, time.Now(), byID[scoped.ID.String()].RevokedAt, time.Minute)
			require.Nil(t, byID[scoped.ID.String()].Queues)
			require.True(t, byID[anyQueue.ID.String()].RevokedAt.IsZero(), "the key of any queue is untouched")
		})
	}
}
