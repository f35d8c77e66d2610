package docket_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every direct requirement of go.mod has a row in docs/dependencies.md,
// and the page lists no module go.mod does not require directly.
func TestDependenciesDocumented(t *testing.T) {
	t.Parallel()
	mod, err := os.ReadFile("go.mod")
	require.NoError(t, err)
	doc, err := os.ReadFile("docs/dependencies.md")
	require.NoError(t, err)

	direct := map[string]bool{}
	inRequire := false
	for _, line := range strings.Split(string(mod), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "require (":
			inRequire = true
			continue
		case line == ")":
			inRequire = false
			continue
		case strings.HasPrefix(line, "require "):
			line = strings.TrimPrefix(line, "require ")
		case !inRequire:
			continue
		}
		if f := strings.Fields(line); len(f) >= 2 && !strings.Contains(line, "// indirect") {
			direct[f[0]] = true
		}
	}
	require.NotEmpty(t, direct)

	rows := map[string]bool{}
	for _, line := range strings.Split(string(doc), "\n") {
		if rest, ok := strings.CutPrefix(line, "| `"); ok {
			if mod, _, ok := strings.Cut(rest, "`"); ok {
				rows[mod] = true
			}
		}
	}
	for m := range direct {
		require.True(t, rows[m], "docs/dependencies.md has no row for %s, a direct requirement of go.mod", m)
	}
	for m := range rows {
		require.True(t, direct[m], "docs/dependencies.md has a row for %s, which go.mod does not require directly", m)
	}
}
