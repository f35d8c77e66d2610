package web

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// opsPages are the GET pages of ops.go's routes.
var opsPages = []string{"/jobs?args=" + url.QueryEscape("args.a:1")}

// TestOpsSecurity: the pages and actions of ops.go need a session (a
// redirect or 401), an operator's role (a contributor gets 403), and every
// form post the session's CSRF token — none, empty, wrong or another
// session's is refused with 403 and changes nothing.
func TestOpsSecurity(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		ctx := context.Background()
		b := setup(t, backend)
		gone := dead(t, b.client, "images")
		started := insert(t, b.client, "email", "mail", `{}`)
		run := uuid.NewString()
		posts := map[string]url.Values{
			"/jobs/bulk": {"scope": {"selected"}, "action": {"retry"}, "id": {gone.ID.String()}, "confirm": {"1"}},
		}
		unchanged := func() {
			t.Helper()
			require.Equal(t, docket.JobStateDead, jobState(t, b.client, gone.ID))
			qs, err := b.client.Queues(ctx)
			require.NoError(t, err)
			for _, q := range qs {
				require.False(t, q.Paused, q.Name)
			}
		}

		anon := b.browser(t)
		for _, p := range append(opsPages, "/overview/events", "/runs/"+run+"/events", "/runs/"+run+"/live") {
			r := anon.get(t, p)
			require.Equal(t, http.StatusSeeOther, r.Status, p)
			require.Equal(t, "/signin?next="+url.QueryEscape(p), r.Header.Get("Location"))
		}
		for p, form := range posts {
			f := url.Values{"csrf": {"x"}}
			for k, v := range form {
				f[k] = v
			}
			require.Equal(t, http.StatusUnauthorized, anon.post(t, p, f).Status, p)
		}
		unchanged()

		contributor := b.signIn(t, RoleContributor)
		for _, p := range append(opsPages, "/overview/events", "/runs/"+run+"/live") {
			require.Equal(t, http.StatusForbidden, contributor.get(t, p).Status, p)
		}
		for p, form := range posts {
			require.Equal(t, http.StatusForbidden, contributor.post(t, p, clone(form)).Status, p)
		}
		unchanged()

		admin := b.signIn(t, docket.RoleAdmin)
		other := b.signIn(t, docket.RoleAdmin)
		for _, p := range opsPages {
			require.Equal(t, http.StatusOK, admin.get(t, p).Status, p)
		}
		for p, form := range posts {
			for name, token := range map[string][]string{"none": nil, "empty": {""}, "wrong": {"wrong"}, "another session's": {other.csrf}} {
				f := url.Values{}
				for k, v := range form {
					f[k] = v
				}
				if token != nil {
					f["csrf"] = token
				}
				r := admin.do(t, "POST", p, f)
				require.Equal(t, http.StatusForbidden, r.Status, "%s with %s token", p, name)
				require.Contains(t, r.Body, "CSRF")
			}
		}
		unchanged()
		// With the token, the same posts act.
		r := admin.post(t, "/jobs/bulk", clone(posts["/jobs/bulk"]))
		require.Equal(t, http.StatusOK, r.Status)
		require.Equal(t, docket.JobStateQueued, jobState(t, b.client, gone.ID))
		require.Equal(t, docket.JobStateQueued, jobState(t, b.client, started.ID), "a job outside the selection is left alone")
	})
}

// clone copies a form: post adds the CSRF token to the one it is given.
func clone(v url.Values) url.Values {
	out := url.Values{}
	for k, vs := range v {
		out[k] = append([]string(nil), vs...)
	}
	return out
}
