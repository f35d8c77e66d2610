package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// runDocket runs the docket command in-process with args and returns its
// stdout.
func runDocket(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := rootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.ExecuteContext(t.Context())
	return out.String(), err
}

// TestKeysNeverMigrate: docket keys works on a migrated database only; it
// neither creates nor migrates one.
func TestKeysNeverMigrate(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.EmptyBackends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			u := backend.URL(t)
			if path, ok := strings.CutPrefix(u, "sqlite:"); ok {
				// A mistyped path makes no database.
				_, err := runDocket(t, "keys", "list", "--database-url", u)
				require.ErrorContains(t, err, "there is no database at "+u)
				_, statErr := os.Stat(path)
				require.ErrorIs(t, statErr, os.ErrNotExist, "keys list created the database")
				// An existing but empty one is not migrated.
				c, err := docket.NewClient(context.Background(), docket.Config{DatabaseURL: u})
				require.NoError(t, err)
				require.NoError(t, c.Close())
			}
			for _, args := range [][]string{
				{"keys", "list"},
				{"keys", "create", "--role", "admin", "--name", "ops"},
				{"keys", "revoke", "0190a6e4-7c5b-7000-8000-000000000000"},
			} {
				_, err := runDocket(t, append(args, "--database-url", u)...)
				require.ErrorContains(t, err, "is not migrated", args)
				require.ErrorContains(t, err, "run docket migrate up", args)
			}
			c, err := docket.NewClient(context.Background(), docket.Config{DatabaseURL: u})
			require.NoError(t, err)
			ms, err := c.MigrationStatus(context.Background())
			require.NoError(t, err)
			for _, m := range ms {
				require.False(t, m.Applied, "keys applied migration %d", m.Version)
			}
			require.NoError(t, c.Close())

			_, err = runDocket(t, "migrate", "up", "--database-url", u)
			require.NoError(t, err)
			out, err := runDocket(t, "keys", "create", "--role", "admin", "--name", "ops", "--database-url", u)
			require.NoError(t, err)
			require.Contains(t, out, "created key")
			out, err = runDocket(t, "keys", "list", "--database-url", u)
			require.NoError(t, err)
			require.Contains(t, out, "ops")
		})
	}
}

// TestKeysCreateQueues: docket keys create --queues makes a worker key
// scoped to those queues, which keys list shows ("*" for a key of any
// queue); --queues with another role, or a bad queue name, is refused
// naming it, nothing made.
func TestKeysCreateQueues(t *testing.T) {
	t.Parallel()
	u := testdb.SQLiteURL(t)
	_, err := runDocket(t, "migrate", "up", "--database-url", u)
	require.NoError(t, err)
	out, err := runDocket(t, "keys", "create", "--role", "worker", "--name", "thumbs", "--queues", "images,video", "--queues", "audio", "--database-url", u)
	require.NoError(t, err)
	require.Contains(t, out, "role worker, queues images,video,audio)")
	_, err = runDocket(t, "keys", "create", "--role", "producer", "--name", "p", "--queues", "images", "--database-url", u)
	require.ErrorContains(t, err, "--queues: only worker keys are scoped to queues")
	var ue *usageError
	require.ErrorAs(t, err, &ue, "a wrong command line: exit 2")
	_, err = runDocket(t, "keys", "create", "--role", "worker", "--name", "w", "--queues", "bad name", "--database-url", u)
	require.ErrorContains(t, err, "queues[0]")
	_, err = runDocket(t, "keys", "create", "--role", "worker", "--name", "all", "--database-url", u)
	require.NoError(t, err)
	out, err = runDocket(t, "keys", "list", "--database-url", u)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3, out)
	require.Equal(t, []string{"ID", "NAME", "ROLE", "QUEUES"}, strings.Fields(lines[0])[:4])
	require.Equal(t, []string{"thumbs", "worker", "images,video,audio"}, strings.Fields(lines[1])[1:4])
	require.Equal(t, []string{"all", "worker", "*"}, strings.Fields(lines[2])[1:4])
}

func TestDisplayURLHidesPassword(t *testing.T) {
	t.Parallel()
	require.Equal(t, "postgres://u:xxxxx@db:5432/docket", displayURL("postgres://u:secret@db:5432/docket"))
	require.Equal(t, "sqlite:docket.db", displayURL("sqlite:docket.db"))
}

// docket migrate status and down, like keys, refuse a SQLite path where
// there is no database instead of creating an empty one; up creates it.
func TestMigrateReadersNeedADatabase(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "no", "such.db")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	u := "sqlite:" + path
	for _, args := range [][]string{{"migrate", "status"}, {"migrate", "down", "1"}} {
		_, err := runDocket(t, append(args, "--database-url", u)...)
		require.ErrorContains(t, err, "there is no database at "+u, args)
		_, statErr := os.Stat(path)
		require.ErrorIs(t, statErr, os.ErrNotExist, "%v created the database", args)
	}
	_, err := runDocket(t, "migrate", "up", "--database-url", u)
	require.NoError(t, err)
	out, err := runDocket(t, "migrate", "status", "--database-url", u)
	require.NoError(t, err)
	require.Contains(t, out, "VERSION")
	// Options after the path of an existing database are refused as such,
	// not reported as a missing database.
	for _, args := range [][]string{{"migrate", "status"}, {"keys", "list"}} {
		_, err := runDocket(t, append(args, "--database-url", u+"?mode=ro")...)
		require.ErrorContains(t, err, "takes no options", args)
	}
	_, err = runDocket(t, "keys", "list", "--database-url", "sqlite:file:"+path)
	require.ErrorContains(t, err, "not a file: URI")
	entries, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	require.Len(t, entries, 1, "only the database: the refused URLs made no file")
}

// docket migrate down reverts every migration — docket's tables and all
// they hold — only when asked with --all: with no count it refuses and
// reverts nothing (it reverted everything).
func TestMigrateDownNeedsACountOrAll(t *testing.T) {
	t.Parallel()
	u := "sqlite:" + filepath.Join(t.TempDir(), "d.db")
	_, err := runDocket(t, "migrate", "up", "--database-url", u)
	require.NoError(t, err)
	_, err = runDocket(t, "migrate", "down", "--database-url", u)
	require.ErrorContains(t, err, "--all")
	_, err = runDocket(t, "migrate", "down", "2", "--all", "--database-url", u)
	require.ErrorContains(t, err, "not both")
	out, err := runDocket(t, "migrate", "status", "--database-url", u)
	require.NoError(t, err)
	require.NotContains(t, out, "\tno\n", "a refused down reverted something")
	require.NotRegexp(t, `\sno\s`, out, "a refused down reverted something")
	out, err = runDocket(t, "migrate", "down", "1", "--database-url", u)
	require.NoError(t, err)
	require.Equal(t, 1, strings.Count(out, "migrated down"), out)
	out, err = runDocket(t, "migrate", "down", "--all", "--database-url", u)
	require.NoError(t, err)
	require.Greater(t, strings.Count(out, "migrated down"), 1, out)
	out, err = runDocket(t, "migrate", "status", "--database-url", u)
	require.NoError(t, err)
	require.NotContains(t, out, "20", "every migration reverted:\n%s", out)
}

// docket migrate on a database a newer docket migrated further: status
// lists the migration it does not know, and down refuses, naming it,
// rather than revert this binary's last one underneath it.
func TestMigrateUnknownVersion(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "d.db")
	u := "sqlite:" + path
	_, err := runDocket(t, "migrate", "up", "--database-url", u)
	require.NoError(t, err)
	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	_, err = db.Exec(`INSERT INTO docket_migrations (version, name, applied_at) VALUES (9999, 'from_the_future', 0)`)
	require.NoError(t, err)
	require.NoError(t, db.Close())

	out, err := runDocket(t, "migrate", "status", "--database-url", u)
	require.NoError(t, err)
	require.Regexp(t, `9999\s+from_the_future\s+\S+ \(unknown to this docket: a newer one applied it\)`, out)
	_, err = runDocket(t, "migrate", "down", "1", "--database-url", u)
	require.ErrorContains(t, err, "9999_from_the_future")
	after, err := runDocket(t, "migrate", "status", "--database-url", u)
	require.NoError(t, err)
	require.Equal(t, out, after, "a refused down reverted something")
	// Up has nothing to do, and says why this docket cannot go on.
	_, err = runDocket(t, "migrate", "up", "--database-url", u)
	require.ErrorContains(t, err, "migrated by a newer docket: it has 9999_from_the_future")
}

// TestKeysDatabasePath: docket keys looks for the file the client would
// open (docket.SQLitePath), and refuses a URL the client refuses with the
// client's message, making no file: "sqlite:" was "there is no database
// at sqlite:". A file name with %23 is taken as written, by both.
func TestKeysDatabasePath(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for url, want := range map[string]string{
		"sqlite:":   "needs a file path",
		"sqlite://": "needs a file path",
		"sqlite:" + filepath.Join(dir, "a.db") + "?mode=ro": "takes no options after ?",
		"sqlite:file:" + filepath.Join(dir, "a.db"):         "not a file: URI",
	} {
		_, err := runDocket(t, "keys", "list", "--database-url", url)
		require.ErrorContains(t, err, want, url)
		require.NotContains(t, err.Error(), "there is no database", url)
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "a refused URL left a file behind")

	url := "sqlite:" + filepath.Join(dir, "a%23b.db")
	_, err = runDocket(t, "migrate", "up", "--database-url", url)
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(dir, "a%23b.db"))
	require.NoError(t, err, "the file is named as written")
	_, err = runDocket(t, "keys", "create", "--role", "admin", "--name", "hash", "--database-url", url)
	require.NoError(t, err)
	out, err := runDocket(t, "keys", "list", "--database-url", url)
	require.NoError(t, err)
	require.Contains(t, out, "hash")
}

// TestMigrateUpFailsHalfWay: docket migrate up lists the migrations it
// applied before one failed (they stay applied), then fails with its
// error; run again once the cause is gone, it applies the rest.
func TestMigrateUpFailsHalfWay(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "d.db")
	u := "sqlite:" + path
	_, err := runDocket(t, "migrate", "up", "--database-url", u)
	require.NoError(t, err)
	status, err := runDocket(t, "migrate", "status", "--database-url", u)
	require.NoError(t, err)
	last := regexp.MustCompile(`(?m)^(\d{4})\s+secrets\s`).FindStringSubmatch(status)
	require.NotNil(t, last, status)
	v, _ := strconv.Atoi(last[1])
	n := strings.Count(status, "\n") - 1
	_, err = runDocket(t, "migrate", "down", strconv.Itoa(n-v+2), "--database-url", u)
	require.NoError(t, err)
	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	defer db.Close()
	_, err = db.Exec(`CREATE TABLE docket_secrets (x INTEGER)`)
	require.NoError(t, err)

	out, err := runDocket(t, "migrate", "up", "--database-url", u)
	require.ErrorContains(t, err, fmt.Sprintf("migrate up %04d_secrets", v))
	require.Contains(t, out, fmt.Sprintf("migrated up %04d_", v-1), "the one applied before the failure is listed")
	require.NotContains(t, out, "nothing to migrate")

	_, err = db.Exec(`DROP TABLE docket_secrets`)
	require.NoError(t, err)
	out, err = runDocket(t, "migrate", "up", "--database-url", u)
	require.NoError(t, err)
	require.Contains(t, out, fmt.Sprintf("migrated up %04d_secrets", v))
}
