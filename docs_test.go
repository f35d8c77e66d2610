package docket_test

import (
	"os"
	"regexp"
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

// What a new user hit in the README and the docs, checked so it stays
// fixed.
func TestReadmeNewUser(t *testing.T) {
	t.Parallel()
	read := func(path string) string {
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		return string(b)
	}
	readme, apiDoc := read("README.md"), read("docs/api.md")

	// The docs run a bare `docket`: the README says how to get one.
	require.Contains(t, readme, "go build -o docket ./cmd/docket")
	require.Contains(t, readme, "go install ./cmd/docket")

	// Following the README and then docs/api.md on one server: the
	// README's idempotency keys are not docs/api.md's.
	keyRe := regexp.MustCompile(`(?:Idempotency-Key: |"idempotencyKey": ?"|IdempotencyKey: ")([\w.-]+)`)
	for _, m := range keyRe.FindAllStringSubmatch(readme, -1) {
		require.NotContains(t, apiDoc, m[1], "docs/api.md uses the README's idempotency key %q", m[1])
	}

	// A lease request's required fields are said to be required.
	_, lease, ok := strings.Cut(apiDoc, "### POST /v1/leases\n")
	require.True(t, ok)
	lease, _, _ = strings.Cut(lease, "```")
	require.Regexp(t, "`workerId`[^.]*and `leaseSeconds`[^.]*are required", lease)

	// serve's files in a checkout are ignored by git.
	gitignore := read(".gitignore")
	require.Contains(t, strings.Split(gitignore, "\n"), "*.db-nats/")

	// scripts/test.sh says how to stop the PostgreSQL it leaves running.
	require.Contains(t, read("scripts/test.sh"), "scripts/testdb.sh stop")
}
