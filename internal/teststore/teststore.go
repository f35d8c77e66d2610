// Package teststore opens a migrated store on a test database URL (from
// internal/testdb), closed when the test ends. It lives apart from testdb
// because the backends' own tests import testdb.
package teststore

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/store/storeurl"
)

// Open opens url ("sqlite:PATH" or a postgres:// URL) with the default
// options, migrates it up, and closes it at cleanup.
func Open(t testing.TB, url string) store.Store {
	t.Helper()
	ctx := context.Background()
	st, err := storeurl.Open(ctx, url, store.Options{})
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
