package crowdcheck_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/crowdcheck"
	"github.com/docket-run/docket/internal/testdb"
)

// TestOpenSQLitePath: Open reads a sqlite: URL as the server does — a
// file name with '#' or '%' is that file (unescaped, SQLite read it as a
// URI and opened another, empty database), options are refused.
func TestOpenSQLitePath(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "run #1 100%")
	require.NoError(t, os.Mkdir(dir, 0o755))
	path := filepath.Join(dir, "docket.db")
	testdb.SQLiteMigratedFile(t, path)
	db, err := crowdcheck.Open("sqlite:" + path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	var n int
	require.NoError(t, db.QueryRowContext(t.Context(), `SELECT count(*) FROM docket_units`).Scan(&n))
	require.Zero(t, n)

	_, err = crowdcheck.Open("sqlite:" + path + "?mode=ro")
	require.ErrorContains(t, err, "takes no options")
	_, err = crowdcheck.Open("mysql://x")
	require.Error(t, err)
}
