package web

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// TestQueryNotText: a query or form value, or a path, that is not text
// (NUL, bytes that are not UTF-8) is a 400 page naming it on every page
// and on both backends — never a 500 from PostgreSQL refusing the filter
// where SQLite found nothing.
func TestQueryNotText(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		br := b.signIn(t, docket.RoleAdmin)
		for path, field := range map[string]string{
			"/jobs?queue=a%ffb":              "queue",
			"/jobs?type=a%00b":               "type",
			"/dead?queue=a%ffb":              "queue",
			"/dead?type=a%00b":               "type",
			"/runs?workflow=a%ffb":           "workflow",
			"/runs?workflow=a%00b":           "workflow",
			"/workflows?after=a%ffb":         "after",
			"/workflows/a%ffb":               "path",
			"/workflows/a%00b":               "path",
			"/pools?x=1&cursor=a%00":         "cursor",
			"/jobs?queue=ok&a%ffb=1":         "a\uFFFDb",
			"/queues?done=paused&queue=a%00": "queue",
		} {
			r := br.get(t, path)
			require.Equal(t, http.StatusBadRequest, r.Status, "%s: %s", path, r.Body)
			require.Contains(t, r.Body, field+": must be UTF-8 text without the NUL character", path)
		}
		r := br.post(t, "/queues/pause", url.Values{"queue": {"a\x00b"}})
		require.Equal(t, http.StatusBadRequest, r.Status, r.Body)
		require.Contains(t, r.Body, "queue: must be UTF-8 text without the NUL character")
	})
}
