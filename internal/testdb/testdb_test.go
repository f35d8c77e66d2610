package testdb_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/store/sqlite"
	"github.com/docket-run/docket/internal/testdb"
)

// TestSQLiteMigratedFile: a copy of the template is what migrating a new
// file gives: the same schema (every table, index and trigger, as SQLite
// stores their statements), every migration applied (so migrating again
// changes nothing), no jobs, and a store that works; and each copy is its
// own.
func TestSQLiteMigratedFile(t *testing.T) {
	ctx := context.Background()
	open := func(path string) *sqlite.Store {
		s, err := sqlite.Open(ctx, path, store.Options{})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, s.Close()) })
		return s
	}
	fresh := open(filepath.Join(t.TempDir(), "fresh.db"))
	_, err := fresh.Migrate(ctx, &store.MigrateParams{Direction: store.Up})
	require.NoError(t, err)
	want, err := fresh.MigrationStatus(ctx)
	require.NoError(t, err)

	schema := func(s *sqlite.Store) []string {
		t.Helper()
		rows, err := s.DB().QueryContext(ctx, `SELECT type || ' ' || name || ' ' || coalesce(sql, '') FROM sqlite_schema ORDER BY type, name`)
		require.NoError(t, err)
		defer rows.Close()
		var out []string
		for rows.Next() {
			var line string
			require.NoError(t, rows.Scan(&line))
			out = append(out, line)
		}
		require.NoError(t, rows.Err())
		return out
	}
	wantSchema := schema(fresh)
	require.NotEmpty(t, wantSchema)

	var copies []*sqlite.Store
	for range 2 {
		u := testdb.SQLiteMigratedURL(t)
		path, ok := strings.CutPrefix(u, "sqlite:")
		require.True(t, ok, u)
		s := open(path)
		require.Equal(t, wantSchema, schema(s), "a copy's schema differs from a fresh migration's")
		got, err := s.MigrationStatus(ctx)
		require.NoError(t, err)
		require.Len(t, got, len(want))
		for i := range want {
			require.Equal(t, want[i].Version, got[i].Version)
			require.True(t, got[i].Applied, "migration %d", got[i].Version)
		}
		done, err := s.Migrate(ctx, &store.MigrateParams{Direction: store.Up})
		require.NoError(t, err)
		require.Empty(t, done, "migrating a copy applied migrations")
		jobs, err := s.JobList(ctx, &store.JobListParams{Limit: 10})
		require.NoError(t, err)
		require.Empty(t, jobs)
		copies = append(copies, s)
	}
	_, err = copies[0].JobInsertMany(ctx, &store.JobInsertManyParams{Jobs: []*store.JobInsertParams{{
		Type: "t", Queue: "q", Payload: []byte(`{}`), State: "QUEUED", MaxAttempts: 1,
	}}})
	require.NoError(t, err)
	jobs, err := copies[1].JobList(ctx, &store.JobListParams{Limit: 10})
	require.NoError(t, err)
	require.Empty(t, jobs, "a job inserted into one copy is in the other")

	// The file must not exist: a copy never overwrites a database.
	path := filepath.Join(t.TempDir(), "there.db")
	require.NoError(t, os.WriteFile(path, nil, 0o644))
	ft := &fatalT{TB: t}
	func() {
		defer func() {
			if r := recover(); r != nil && r != errFatal {
				panic(r)
			}
		}()
		testdb.SQLiteMigratedFile(ft, path)
	}()
	require.True(t, ft.failed, "SQLiteMigratedFile wrote over an existing file")
}

// errFatal is what fatalT's Fatalf panics with, to end the call under test.
var errFatal = errors.New("fatal")

// fatalT records a Fatalf instead of ending the test.
type fatalT struct {
	testing.TB
	failed bool
}

func (f *fatalT) Fatalf(format string, args ...any) {
	f.failed = true
	panic(errFatal)
}

func (f *fatalT) Helper() {}
