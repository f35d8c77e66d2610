package web

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// TestDatabaseUnavailablePages: while PostgreSQL cannot be reached, a
// page whose read fails is a 503 with Retry-After saying so (it was a 500),
// a run's page too, and signing in is a 503 saying the database is at
// fault (it said the key was unknown or revoked); once the database is
// back, the same pages and the sign-in work.
func TestDatabaseUnavailablePages(t *testing.T) {
	t.Parallel()
	proxy := testdb.NewProxy(t)
	b := setup(t, testdb.Backend{Name: "postgres", URL: func(t testing.TB) string { return proxy.URL(testdb.PostgresURL(t)) }})
	br := b.signIn(t, docket.RoleAdmin)
	out := b.browser(t)
	require.Equal(t, http.StatusOK, out.get(t, "/signin").Status) // the form's CSRF token
	run := "/runs/" + uuid.NewString()

	proxy.Down()
	for _, path := range []string{"/jobs", run} {
		p := br.get(t, path)
		require.Equal(t, http.StatusServiceUnavailable, p.Status, "%s: %s", path, p.Body)
		require.Equal(t, "5", p.Header.Get("Retry-After"), path)
		require.Contains(t, p.Body, "the database cannot be reached", path)
	}
	p := out.post(t, "/signin", url.Values{"key": {b.keys[docket.RoleAdmin]}})
	require.Equal(t, http.StatusServiceUnavailable, p.Status, p.Body)
	require.Equal(t, "5", p.Header.Get("Retry-After"))
	require.Contains(t, p.Body, "The database cannot be reached")
	require.NotContains(t, p.Body, "unknown or revoked")

	proxy.Up()
	// The pool may hold a connection the outage ended that no read has
	// tried since: a page may meet it (a 503 still) before the pool
	// connects again, as a reload would.
	back := func(want int, send func() *response) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			p := send()
			if p.Status == want {
				return
			}
			require.Equal(t, http.StatusServiceUnavailable, p.Status, p.Body)
			require.True(t, time.Now().Before(deadline), "the database is back, the page is not")
		}
	}
	back(http.StatusOK, func() *response { return br.get(t, "/jobs") })
	back(http.StatusNotFound, func() *response { return br.get(t, run) })
	back(http.StatusSeeOther, func() *response { return out.post(t, "/signin", url.Values{"key": {b.keys[docket.RoleAdmin]}}) })
}
