package servertest_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/servertest"
	"github.com/docket-run/docket/internal/testdb"
)

// TestExitStatus (docs/operations.md, Exit status) runs the binary: a wrong command line (unknown
// command or flag, a flag value of the wrong type or out of range, a
// missing or extra argument) exits 2 and does nothing; a command that ran
// and failed (no server, no database, the server's 404 or 409) exits 1;
// help exits 0.
func TestExitStatus(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, servertest.Options{DatabaseURL: testdb.SQLiteMigratedURL(t), Env: servertest.FastEnv()})
	api := []string{"--server", s.URL, "--api-key", s.AdminKey}
	dir := t.TempDir()
	for _, c := range []struct {
		args   []string
		status int
		stderr string
	}{
		{[]string{"--help"}, 0, ""},
		{[]string{"run"}, 0, ""},
		{[]string{"nosuch"}, 2, `unknown command "nosuch" for "docket"`},
		{[]string{"migrate", "upp"}, 2, `unknown command "upp" for "docket migrate"`},
		{[]string{"run", "--nosuch"}, 2, "unknown flag: --nosuch"},
		{append([]string{"run", "get"}, api...), 2, "accepts 1 arg(s), received 0"},
		{append([]string{"run", "get", "a", "b"}, api...), 2, "accepts 1 arg(s), received 2"},
		{append([]string{"run", "list", "--limit", "many"}, api...), 2, `invalid argument "many" for "--limit"`},
		{append([]string{"run", "batch", "w", "-f", "x.csv", "--chunk", "0"}, api...), 2, "--chunk 0: want 1 to"},
		{append([]string{"run", "start", "w", "--input", "{nope"}, api...), 2, "the input is not valid JSON"},
		{append([]string{"job", "list", "-o", "yaml"}, "--server", s.URL), 2, `--output "yaml": want table or json`},
		{[]string{"job", "get", "x", "--server", s.URL}, 2, "no API key"},
		{[]string{"migrate", "down", "--database-url", "sqlite:" + filepath.Join(dir, "d.db")}, 2, "say how many migrations to revert"},
		{[]string{"serve", "--lease-seconds", "0", "--database-url", "sqlite:" + filepath.Join(dir, "s.db")}, 2, "invalid --lease-seconds"},
		{[]string{"worker", "--queue", "q", "--exec", "true", "--concurrency", "0", "--api-key", "k"}, 2, "--concurrency 0"},
		// Failures of a command that ran.
		{[]string{"run", "get", "x", "--server", "http://127.0.0.1:1", "--api-key", "k"}, 1, "connection refused"},
		{[]string{"keys", "list", "--database-url", "sqlite:" + filepath.Join(dir, "none.db")}, 1, "there is no database at"},
		{append([]string{"run", "get", "0190a0e6-7c3b-7d2a-9a51-3f2b8c1d4e5f"}, api...), 1, "404"},
		{append([]string{"workflow", "get", "nosuch"}, api...), 1, "404"},
	} {
		res := servertest.Run(t, dir, nil, c.args...)
		require.Equal(t, c.status, res.Code, "docket %v\nstderr: %s", c.args, res.Stderr)
		require.Contains(t, res.Stderr, c.stderr, "docket %v", c.args)
	}
	// The usage errors did nothing: neither database was made.
	for _, f := range []string{"d.db", "s.db", "none.db"} {
		_, err := os.Stat(filepath.Join(dir, f))
		require.ErrorIs(t, err, os.ErrNotExist, f)
	}
}
