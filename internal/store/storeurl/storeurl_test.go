package storeurl

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/store"
)

// TestOpen: each scheme opens its backend (PostgreSQL's pool connects on
// first use, so no server is needed here); a URL without a usable scheme
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
	// Options are refused, not taken as part of the file's name: that
	// opened (or created) another database than the one meant.
	dir := t.TempDir()
	for url, want := range map[string]string{
		"sqlite:" + filepath.Join(dir, "c.db") + "?mode=ro":            "sqlite:PATH takes no options after ?",
		"sqlite://" + filepath.Join(dir, "d.db") + "?_busy_timeout=50": "sqlite:PATH takes no options after ?",
		"sqlite:file:" + filepath.Join(dir, "e.db") + "?cache=shared":  "not a file: URI",
		"sqlite:file:e.db": "not a file: URI",
	} {
		_, err := Open(ctx, url, store.Options{})
		require.ErrorContains(t, err, want, url)
		require.ErrorContains(t, err, url, "the message names the URL")
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "a refused URL left a file behind")
	_, err = Open(ctx, "mysql://user:secret@host/db", store.Options{})
	require.ErrorContains(t, err, "scheme must be")
	require.ErrorContains(t, err, "mysql://user:xxxxx@host/db")
	require.NotContains(t, err.Error(), "secret")
	for _, url := range []string{"postgres://nobody@127.0.0.1:1/none", "postgresql://nobody@127.0.0.1:1/none"} {
		st, err := Open(ctx, url, store.Options{}) // the pool connects on first use
		require.NoError(t, err, url)
		require.Equal(t, "postgres", st.Backend())
		require.NoError(t, st.Close())
	}
}
