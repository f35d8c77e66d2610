package api

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// A password and a query value in a subscription's URL are kept to
// deliver (the receiver gets the password as Basic authentication) but no
// answer shows them: create, list, get,
// the deliveries (whose lastError names the URL when the connection
// fails) and a refused create all show "xxxxx" or nothing in its place.
func TestWebhookURLPasswordRedacted(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		const (
			password = "hunter2-pa55w0rd-in-url"
			token    = "t0ken-in-the-query"
		)
		b := setup(t, backend, withWebhooks(t))
		var (
			mu    sync.Mutex
			creds []string
		)
		rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			user, pass, _ := r.BasicAuth()
			mu.Lock()
			creds = append(creds, user+":"+pass+"?"+r.URL.RawQuery)
			mu.Unlock()
			w.WriteHeader(http.StatusNoContent)
		}))
		t.Cleanup(rc.Close)
		down := httptest.NewServer(http.NotFoundHandler())
		downURL := down.URL
		down.Close() // connections are refused: the error names the URL

		withPassword := func(raw string) string {
			u, err := url.Parse(raw)
			require.NoError(t, err)
			u.User = url.UserPassword("hooks", password)
			u.Path, u.RawQuery = "/in", "token="+token
			return u.String()
		}
		var bodies []string
		check := func(r *response) *response {
			t.Helper()
			bodies = append(bodies, string(r.Body))
			require.NotContains(t, string(r.Body), password, "the URL's password is shown")
			require.NotContains(t, string(r.Body), token, "the URL's query value is shown")
			return r
		}
		var hooks []webhookView
		for _, target := range []string{rc.URL, downURL} {
			r := check(b.do(t, docket.RoleAdmin, "POST", "/v1/webhooks",
				map[string]any{"url": withPassword(target), "eventTypes": []string{"*"}, "secret": hookSecret}))
			require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
			var hook webhookView
			r.JSON(t, &hook)
			require.Equal(t, strings.Replace(target, "http://", "http://hooks:xxxxx@", 1)+"/in?token=xxxxx", hook.URL)
			hooks = append(hooks, hook)
		}
		sub := b.do(t, docket.RoleProducer, "POST", "/v1/jobs", map[string]any{"jobType": "email"})
		require.Equal(t, http.StatusAccepted, sub.Status)

		for i, state := range []string{"DELIVERED", "DEAD"} {
			path := "/v1/webhooks/" + hooks[i].ID.String() + "/deliveries?status=" + state
			waitUntil(t, "a delivery "+state, func() bool {
				var list deliveriesResponse
				check(b.do(t, docket.RoleAdmin, "GET", path, nil)).JSON(t, &list)
				return len(list.Items) == 1
			})
		}
		var list webhooksResponse
		check(b.do(t, docket.RoleAdmin, "GET", "/v1/webhooks", nil)).JSON(t, &list)
		require.Len(t, list.Items, 2)
		require.Equal(t, hooks[0].URL, list.Items[0].URL)
		for _, h := range hooks {
			check(b.do(t, docket.RoleAdmin, "GET", "/v1/webhooks/"+h.ID.String(), nil))
		}
		// Refused: the answer names the field, not the URL's password.
		r := check(b.do(t, docket.RoleAdmin, "POST", "/v1/webhooks",
			map[string]any{"url": "http://hooks:" + password + "@10.0.0.1:99999/x", "eventTypes": []string{"*"}, "secret": hookSecret}))
		require.Equal(t, http.StatusBadRequest, r.Status)
		require.Contains(t, strings.Join(bodies, "\n"), "hooks:xxxxx@127.0.0.1", "a dial error names the URL, redacted")
		require.Contains(t, strings.Join(bodies, "\n"), "/in?token=xxxxx\\\"", "a dial error names the URL, redacted")

		mu.Lock()
		require.Equal(t, []string{"hooks:" + password + "?token=" + token}, creds, "delivered with the password")
		mu.Unlock()
	})
}
