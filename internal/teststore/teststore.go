// Package teststore opens a migrated store on a test database URL (from
// internal/testdb), closed when the test ends. It lives apart from testdb
// because the backends' own tests import testdb.
package teststore

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/store/postgres"
	"github.com/docket-run/docket/internal/store/sqlite"
)

// Open opens url ("sqlite:PATH" or a postgres:// URL) with the default
// options, migrates it up, and closes it at cleanup.
func Open(t testing.TB, url string) store.Store {
	t.Helper()
	ctx := context.Background()
	var (
		st  store.Store
		err error
	)
	if path, ok := strings.CutPrefix(url, "sqlite:"); ok {
		st, err = sqlite.Open(ctx, path, store.Options{}.WithDefaults())
	} else {
		st, err = postgres.Open(ctx, url, store.Options{}.WithDefaults())
	}
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	_, err = st.Migrate(ctx, &store.MigrateParams{Direction: store.Up})
	require.NoError(t, err)
	return st
}
