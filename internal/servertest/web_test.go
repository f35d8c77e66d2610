package servertest_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/servertest"
	"github.com/docket-run/docket/internal/testdb"
)

// TestServeMountsDashboard: the real binary serves the dashboard at / and
// the API under /v1 (and /healthz, /metrics) on one port; signing in with
// the bootstrap key opens the overview (drawn from the metrics' cached
// counts) and the jobs list.
func TestServeMountsDashboard(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t, servertest.Options{DatabaseURL: testdb.SQLiteMigratedURL(t)})
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	client := &http.Client{Jar: jar}
	get := func(path string) (*http.Response, string) {
		t.Helper()
		res, err := client.Get(srv.URL + path)
		require.NoError(t, err)
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res, string(b)
	}

	res, body := get("/")
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "/signin", res.Request.URL.Path, "no session: the sign-in page")
	require.Contains(t, res.Header.Get("Content-Security-Policy"), "default-src 'self'")
	res, _ = get("/static/htmx.min.js")
	require.Equal(t, http.StatusOK, res.StatusCode)
	// The API is where it was.
	r := srv.Do(t, "", "GET", "/v1/jobs", nil)
	require.Equal(t, http.StatusUnauthorized, r.Status)
	require.Equal(t, "application/problem+json", r.Header.Get("Content-Type"))
	require.Equal(t, http.StatusOK, srv.Do(t, "", "GET", "/healthz", nil).Status)
	submit(t, srv, srv.AdminKey, map[string]any{"jobType": "email", "queue": "mail", "payload": map[string]any{}})

	csrf := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(body)
	require.Len(t, csrf, 2, body)
	res, err = client.PostForm(srv.URL+"/signin", url.Values{"csrf": {csrf[1]}, "key": {srv.AdminKey}})
	require.NoError(t, err)
	page, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode, string(page))
	require.Equal(t, "/", res.Request.URL.Path)
	require.Contains(t, string(page), `id="dead-count"`)
	require.Regexp(t, `<a href="/jobs\?queue=mail">mail</a>`, string(page))
	res, body = get("/jobs?queue=mail")
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, 1, strings.Count(body, `<a class="mono" href="/jobs/`))

	// Live: serve gives the dashboard its bus's health and the overview's
	// stream says "refresh" when a job's events are published.
	require.Regexp(t, `id="bus-health" class="ok">up<`, string(page))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", srv.URL+"/overview/events", nil)
	require.NoError(t, err)
	res, err = client.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "text/event-stream", res.Header.Get("Content-Type"))
	submit(t, srv, srv.AdminKey, map[string]any{"jobType": "email", "queue": "mail", "payload": map[string]any{}})
	sc := bufio.NewScanner(res.Body)
	refreshed := false
	for !refreshed && sc.Scan() {
		refreshed = sc.Text() == "event: refresh"
	}
	require.True(t, refreshed, "no refresh within 30 s: %v", sc.Err())
}
