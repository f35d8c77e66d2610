package storeurl

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/store"
)

// TestOpen: each scheme opens its backend; a URL without a usable scheme
// or path is refused with a message that names the URL, its password
// hidden.
func TestOpen(t *testing.T) {
	ctx := t.Context()
	for _, url := range []string{"sqlite:" + filepath.Join(t.TempDir(), "a.db"), "sqlite://" + filepath.Join(t.TempDir(), "b.db")} {
		st, err := Open(ctx, url, store.Options{})
		require.NoError(t, err, url)
		require.Equal(t, "sqlite", st.Backend())
		require.NoError(t, st.Close())
	}
	_, err := Open(ctx, "sqlite:", store.Options{})
	require.ErrorContains(t, err, "needs a file path")
	_, err = Open(ctx, "mysql://user:secret@host/db", store.Options{})
	require.ErrorContains(t, err, "scheme must be")
	require.ErrorContains(t, err, "mysql://user:xxxxx@host/db")
	require.NotContains(t, err.Error(), "secret")
	_, err = Open(ctx, "postgres://nobody:pw@127.0.0.1:1/none?connect_timeout=1", store.Options{})
	require.ErrorContains(t, err, "open postgres")
}
