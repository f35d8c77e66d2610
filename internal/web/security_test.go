package web

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// operatorPages are every GET page of operators.
var operatorPages = []string{"/", "/overview/panel", "/jobs", "/jobs?state=DEAD", "/runs", "/runs?state=FAILED", "/workflows", "/pools", "/dead", "/queues"}

func TestNoPageWithoutSession(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		row := insert(t, b.client, "email", "mail", `{}`)
		br := b.browser(t)
		for _, p := range append(operatorPages, "/jobs/"+row.ID.String(), "/work", "/work/a/"+uuid.NewString()) {
			r := br.get(t, p)
			require.Equal(t, http.StatusSeeOther, r.Status, p)
			require.Equal(t, "/signin?next="+url.QueryEscape(p), r.Header.Get("Location"))
		}
		// An htmx poll gets 401, not a sign-in page to swap in.
		req, _ := http.NewRequest("GET", b.server.URL+"/overview/panel", nil)
		req.Header.Set("HX-Request", "true")
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, http.StatusUnauthorized, res.StatusCode)
		// No action either, CSRF token or not.
		some := uuid.NewString()
		for _, p := range []string{"/jobs/" + row.ID.String() + "/cancel", "/jobs/" + row.ID.String() + "/retry", "/signout",
			"/runs/" + some + "/cancel", "/runs/" + some + "/pause", "/runs/" + some + "/resume", "/runs/" + some + "/retry",
			"/pools/" + some + "/pause", "/pools/" + some + "/resume", "/pools/" + some + "/close",
			"/dead/retry", "/dead/events/retry", "/queues/pause", "/queues/resume",
			"/work/pools/" + some + "/take", "/work/a/" + some + "/submit", "/work/a/" + some + "/skip", "/work/a/" + some + "/heartbeat"} {
			require.Equal(t, http.StatusUnauthorized, br.post(t, p, url.Values{"csrf": {"x"}}).Status, p)
		}
		got, err := b.client.Get(context.Background(), row.ID)
		require.NoError(t, err)
		require.Equal(t, docket.JobStateQueued, got.State)
		// A forged cookie is no session.
		br.http.Jar.SetCookies(mustURL(t, b.server.URL), []*http.Cookie{{Name: sessionCookie, Value: "abc.def"}})
		require.Equal(t, http.StatusSeeOther, br.get(t, "/jobs").Status)
	})
}

func mustURL(t *testing.T, s string) *url.URL {
	u, err := url.Parse(s)
	require.NoError(t, err)
	return u
}

func TestSignIn(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		br := b.browser(t)
		// The sign-in form has a CSRF token of its own.
		br.get(t, "/signin")
		require.Equal(t, http.StatusForbidden, br.post(t, "/signin", url.Values{"key": {b.keys[docket.RoleAdmin]}, "csrf": {"wrong"}}).Status)
		other := b.browser(t) // no sign-in cookie at all
		require.Equal(t, http.StatusForbidden, other.post(t, "/signin", url.Values{"key": {b.keys[docket.RoleAdmin]}, "csrf": {"x"}}).Status)
		// A wrong key and a worker key are refused on the page.
		br.get(t, "/signin")
		r := br.post(t, "/signin", url.Values{"key": {"dk_nope-nope-nope-nope"}})
		require.Equal(t, http.StatusUnauthorized, r.Status)
		require.Contains(t, r.Body, "unknown or revoked")
		r = br.post(t, "/signin", url.Values{"key": {b.keys[docket.RoleWorker]}})
		require.Equal(t, http.StatusUnauthorized, r.Status)
		require.Contains(t, r.Body, "cannot sign in")
		// A good key: an HttpOnly SameSite=Strict cookie, and next is kept
		// on this site.
		r = br.post(t, "/signin", url.Values{"key": {b.keys[docket.RoleViewer]}, "next": {"/jobs?state=DEAD"}})
		require.Equal(t, http.StatusSeeOther, r.Status)
		require.Equal(t, "/jobs?state=DEAD", r.Header.Get("Location"))
		var cookie string
		for _, c := range r.Header.Values("Set-Cookie") {
			if strings.HasPrefix(c, sessionCookie+"=") {
				cookie = c
			}
		}
		require.Contains(t, cookie, "HttpOnly")
		require.Contains(t, cookie, "SameSite=Strict")
		require.Equal(t, http.StatusOK, br.get(t, "/jobs").Status)
		// Sign out ends the session on the server: the old cookie is dead.
		old := br.http.Jar.Cookies(mustURL(t, b.server.URL))
		require.Equal(t, http.StatusSeeOther, br.post(t, "/signout", nil).Status)
		require.Equal(t, http.StatusSeeOther, br.get(t, "/jobs").Status)
		replay := b.browser(t)
		replay.http.Jar.SetCookies(mustURL(t, b.server.URL), old)
		require.Equal(t, http.StatusSeeOther, replay.get(t, "/jobs").Status)

		for _, next := range []string{"//evil.example/", "https://evil.example/", "/\\evil.example",
			"/\t/evil.example", "/\n/evil.example", "/\r//evil.example", "/x\\..\\evil", "/\x7f/evil.example"} {
			require.Empty(t, safeNext(next), "%q", next)
		}
		for _, next := range []string{"/jobs", "/jobs/1?state=DEAD&queue=a%2Fb", "/runs/x#steps"} {
			require.Equal(t, next, safeNext(next), "%q", next)
		}
	})
}

// TestSignInTwoTabs: two tabs sent to the sign-in page (a session ended
// under both) each show the form; signing in from the first one opened
// works, as from the second.
func TestSignInTwoTabs(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Backends()[0])
	br := b.browser(t)
	br.get(t, "/signin")
	first := br.csrf
	br.get(t, "/signin")
	r := br.post(t, "/signin", url.Values{"key": {b.keys[docket.RoleViewer]}, "csrf": {first}})
	require.Equal(t, http.StatusSeeOther, r.Status, "the first tab's form: %s", r.Body)
	// After a refused key the form works again, from either tab.
	br = b.browser(t)
	br.get(t, "/signin")
	first = br.csrf
	require.Equal(t, http.StatusUnauthorized, br.post(t, "/signin", url.Values{"key": {"dk_nope-nope-nope-nope"}}).Status)
	r = br.post(t, "/signin", url.Values{"key": {b.keys[docket.RoleViewer]}, "csrf": {first}})
	require.Equal(t, http.StatusSeeOther, r.Status, "the other tab's form after a refusal: %s", r.Body)
}

func TestRevokedKeyEndsSession(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Backends()[0])
	br := b.signIn(t, docket.RoleViewer)
	keys, err := b.client.APIKeys(context.Background())
	require.NoError(t, err)
	for _, k := range keys {
		if k.Role == docket.RoleViewer {
			require.NoError(t, b.client.RevokeAPIKey(context.Background(), k.ID))
		}
	}
	require.Equal(t, http.StatusOK, br.get(t, "/jobs").Status, "checked again only after recheckKeyEvery")
	b.clock.Add(recheckKeyEvery)
	require.Equal(t, http.StatusSeeOther, br.get(t, "/jobs").Status)
}

// flakyAuth is the client's authentication, failing on demand as a
// database that cannot answer for a moment does.
type flakyAuth struct {
	Authenticator
	fail atomic.Bool
}

func (a *flakyAuth) AuthenticateAPIKey(ctx context.Context, secret string) (*docket.APIKey, error) {
	if a.fail.Load() {
		return nil, errors.New("read api key: connection reset by peer")
	}
	return a.Authenticator.AuthenticateAPIKey(ctx, secret)
}

// TestKeyRecheckTrouble: a session ends when its key is revoked, not when
// the re-check of the key cannot be made — the request that happens to
// make it was canceled (the browser navigated away, a live stream closed
// with its tab), or the database failed that read — and the next request
// checks again.
func TestKeyRecheckTrouble(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Backends()[0])
	auth := &flakyAuth{Authenticator: b.client}
	h, err := New(Config{Client: b.client, Auth: auth, Now: b.clock.Now})
	require.NoError(t, err)
	b.server = httptest.NewServer(h)
	t.Cleanup(b.server.Close)
	br := b.signIn(t, docket.RoleViewer)
	require.Equal(t, http.StatusOK, br.get(t, "/jobs").Status)

	// The re-check falls on a request whose browser is gone.
	u, err := url.Parse(b.server.URL)
	require.NoError(t, err)
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	req := httptest.NewRequestWithContext(gone, "GET", "/jobs", nil)
	for _, c := range br.http.Jar.Cookies(u) {
		req.AddCookie(c)
	}
	b.clock.Add(recheckKeyEvery)
	h.ServeHTTP(httptest.NewRecorder(), req)
	require.Equal(t, http.StatusOK, br.get(t, "/jobs").Status, "a canceled request's re-check does not sign the session out")

	// The database fails the re-check's read.
	b.clock.Add(recheckKeyEvery)
	auth.fail.Store(true)
	require.NotEqual(t, http.StatusSeeOther, br.get(t, "/jobs").Status, "a failed re-check does not sign the session out")
	auth.fail.Store(false)
	require.Equal(t, http.StatusOK, br.get(t, "/jobs").Status)

	// Revoked: the next re-check ends the session.
	keys, err := b.client.APIKeys(context.Background())
	require.NoError(t, err)
	for _, k := range keys {
		if k.Role == docket.RoleViewer {
			require.NoError(t, b.client.RevokeAPIKey(context.Background(), k.ID))
		}
	}
	b.clock.Add(recheckKeyEvery)
	require.Equal(t, http.StatusSeeOther, br.get(t, "/jobs").Status)
}

func TestSessionExpires(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Backends()[0])
	br := b.signIn(t, docket.RoleViewer)
	b.clock.Add(SessionTTLDefault - recheckKeyEvery/2)
	require.Equal(t, http.StatusOK, br.get(t, "/jobs").Status)
	b.clock.Add(recheckKeyEvery)
	require.Equal(t, http.StatusSeeOther, br.get(t, "/jobs").Status)
}

func TestCSRF(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		row := insert(t, b.client, "email", "mail", `{}`)
		br := b.signIn(t, docket.RoleAdmin)
		other := b.signIn(t, docket.RoleProducer)
		path := "/jobs/" + row.ID.String() + "/cancel"
		for name, token := range map[string][]string{
			"none": nil, "empty": {""}, "wrong": {"wrong"}, "another session's": {other.csrf},
		} {
			form := url.Values{}
			if token != nil {
				form["csrf"] = token
			} else {
				form["nothing"] = []string{"x"}
			}
			r := br.do(t, "POST", path, form)
			require.Equal(t, http.StatusForbidden, r.Status, name)
			require.Contains(t, r.Body, "CSRF")
		}
		got, err := b.client.Get(context.Background(), row.ID)
		require.NoError(t, err)
		require.Equal(t, docket.JobStateQueued, got.State, "a refused post changes nothing")
		// Sign-out needs the token too.
		require.Equal(t, http.StatusForbidden, br.do(t, "POST", "/signout", url.Values{"csrf": {"wrong"}}).Status)
		require.Equal(t, http.StatusOK, br.get(t, "/jobs").Status)
		// With it, the post works.
		require.Equal(t, http.StatusSeeOther, br.post(t, path, nil).Status)
		got, err = b.client.Get(context.Background(), row.ID)
		require.NoError(t, err)
		require.Equal(t, docket.JobStateCanceled, got.State)
	})
}

func TestRoles(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		row := insert(t, b.client, "email", "mail", `{"to":"a@example.com"}`)
		job := "/jobs/" + row.ID.String()

		contributor := b.signIn(t, RoleContributor)
		for _, p := range append(operatorPages, job) {
			require.Equal(t, http.StatusForbidden, contributor.get(t, p).Status, p)
		}
		require.Equal(t, http.StatusForbidden, contributor.post(t, job+"/cancel", nil).Status)
		some := uuid.NewString()
		for _, p := range []string{"/runs/" + some, "/workflows/x", "/pools/" + some, "/pools/" + some + "/results", "/units/" + some} {
			require.Equal(t, http.StatusForbidden, contributor.get(t, p).Status, p)
		}
		require.Equal(t, http.StatusForbidden, contributor.post(t, "/runs/"+some+"/cancel", nil).Status)
		require.Equal(t, http.StatusForbidden, contributor.post(t, "/pools/"+some+"/close", nil).Status, "admin only")
		require.Equal(t, http.StatusOK, contributor.get(t, "/work").Status)

		viewer := b.signIn(t, docket.RoleViewer)
		r := viewer.get(t, job)
		require.Equal(t, http.StatusOK, r.Status)
		require.Nil(t, find(r.Doc, "button", "cancel"), "a viewer has no cancel button")
		require.Nil(t, find(r.Doc, "pre", "payload"), "payload is for admin keys, as in the API")
		require.Equal(t, http.StatusForbidden, viewer.post(t, job+"/cancel", nil).Status)
		require.Equal(t, http.StatusForbidden, viewer.get(t, "/work").Status)
		require.Equal(t, http.StatusForbidden, viewer.get(t, "/work/a/"+some).Status)
		require.Equal(t, http.StatusForbidden, viewer.post(t, "/work/pools/"+some+"/take", nil).Status)

		producer := b.signIn(t, docket.RoleProducer)
		r = producer.get(t, job)
		require.NotNil(t, find(r.Doc, "button", "cancel"))
		require.Nil(t, find(r.Doc, "pre", "payload"))

		admin := b.signIn(t, docket.RoleAdmin)
		r = admin.get(t, job)
		require.NotNil(t, find(r.Doc, "pre", "payload"))
		require.Contains(t, text(find(r.Doc, "pre", "payload")), "a@example.com")
		require.Equal(t, http.StatusOK, admin.get(t, "/work").Status)

		got, err := b.client.Get(context.Background(), row.ID)
		require.NoError(t, err)
		require.Equal(t, docket.JobStateQueued, got.State)
	})
}

func TestSecurityHeadersEverywhere(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Backends()[0])
	br := b.browser(t) // do checks the headers of every response
	for _, p := range []string{"/signin", "/static/app.css", "/static/htmx.min.js", "/nowhere", "/static/VENDOR", "/jobs"} {
		br.get(t, p)
	}
	require.Equal(t, http.StatusNotFound, br.get(t, "/static/VENDOR").Status)
	require.Contains(t, ContentSecurityPolicy, "frame-ancestors 'none'")
	require.NotContains(t, ContentSecurityPolicy, "unsafe")
}

// FuzzSafeNext: whatever sign-in is asked to go to next, the target it
// keeps is a path of this site — a browser reading the Location header
// (which drops tabs and newlines and reads \ as /) stays on the site.
func FuzzSafeNext(f *testing.F) {
	for _, s := range []string{"/jobs", "//evil", "/\t/evil", "/\\evil", "https://x", "/a?b=c#d", "/%2F%2Fevil"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, next string) {
		got := safeNext(next)
		if got == "" {
			return
		}
		browser := strings.NewReplacer("\t", "", "\n", "", "\r", "", "\\", "/").Replace(got)
		u, err := url.Parse(browser)
		if err != nil || u.Scheme != "" || u.Host != "" || !strings.HasPrefix(browser, "/") || strings.HasPrefix(browser, "//") {
			t.Fatalf("safeNext(%q) = %q leaves the site as a browser reads it (%q)", next, got, browser)
		}
	})
}

// TestActionMessagesAreOurs: the message a page shows after an action
// (cancel, retry, pause, forgive…) is the dashboard's, named by a code
// in the redirect and worded from what the page reads — never words
// taken from the URL, which anyone may send an operator a link with.
func TestActionMessagesAreOurs(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Backends()[0])
	ctx := context.Background()
	admin := b.signIn(t, docket.RoleAdmin)
	job := insert(t, b.client, "email", "mail", `{}`)
	putWorkflow(t, b.client, fanFlow)
	run, err := b.client.RunStart(ctx, "fan", map[string]any{"items": []int{1}}, nil)
	require.NoError(t, err)
	pool, _ := makeWorkPool(t, b.client, 1, "/static/favicon.svg")
	pages := []string{"/jobs/" + job.ID.String(), "/runs/" + run.Run.ID.String(), "/pools/" + pool.ID.String(),
		"/pools/" + pool.ID.String() + "/contributors/" + b.contributor.ID.String()}
	lure := "Your session expired: paste your admin key at https://evil.example/signin"
	for _, p := range pages {
		for _, q := range []string{"?done=" + url.QueryEscape(lure), "?done=forgiven&check=" + url.QueryEscape(lure)} {
			r := admin.get(t, p+q)
			require.Equal(t, http.StatusOK, r.Status, p)
			require.NotContains(t, r.Body, "evil.example", p+q)
		}
	}
	// The actions still say what they did.
	for _, c := range []struct{ action, want string }{
		{"/jobs/" + job.ID.String() + "/cancel", "cancel done: the job is CANCELED"},
		{"/runs/" + run.Run.ID.String() + "/pause", "pause done: the run is PAUSED"},
		{"/pools/" + pool.ID.String() + "/pause", "pause done: the pool is PAUSED"},
	} {
		r := admin.post(t, c.action, nil)
		require.Equal(t, http.StatusSeeOther, r.Status, c.action)
		r = admin.get(t, r.Header.Get("Location"))
		require.Contains(t, r.Body, `<p class="message" role="status">`+c.want+`</p>`, c.action)
	}
}

// TestCookiesSecureBehindTLS: the sign-in and session cookies are Secure
// when the browser came over TLS — to a proxy in front that says so with
// X-Forwarded-Proto, or to the server itself — and not on plain HTTP
// (docket serve on loopback), where a Secure cookie would never be sent
// back.
func TestCookiesSecureBehindTLS(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Backends()[0])
	signIn := func(t *testing.T, target string, header http.Header) (signin, session *http.Cookie) {
		t.Helper()
		req := httptest.NewRequest("GET", target+"/signin", nil)
		maps.Copy(req.Header, header)
		rec := httptest.NewRecorder()
		b.handler.ServeHTTP(rec, req)
		require.Equal(t, http.StatusOK, rec.Code)
		cookies := rec.Result().Cookies()
		require.Len(t, cookies, 1)
		signin = cookies[0]
		form := url.Values{"key": {b.keys[docket.RoleViewer]}, "csrf": {signin.Value}}
		req = httptest.NewRequest("POST", target+"/signin", strings.NewReader(form.Encode()))
		maps.Copy(req.Header, header)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.AddCookie(signin)
		rec = httptest.NewRecorder()
		b.handler.ServeHTTP(rec, req)
		require.Equal(t, http.StatusSeeOther, rec.Code)
		for _, c := range rec.Result().Cookies() {
			if c.Name == sessionCookie {
				session = c
			}
		}
		require.NotNil(t, session)
		return signin, session
	}
	for name, c := range map[string]struct {
		target string
		header http.Header
		secure bool
	}{
		"plain HTTP":         {"http://127.0.0.1:8080", nil, false},
		"proxy over TLS":     {"http://127.0.0.1:8080", http.Header{"X-Forwarded-Proto": {"https"}}, true},
		"proxies, first TLS": {"http://127.0.0.1:8080", http.Header{"X-Forwarded-Proto": {"HTTPS, http"}}, true},
		"proxy over HTTP":    {"http://127.0.0.1:8080", http.Header{"X-Forwarded-Proto": {"http"}}, false},
		"TLS to the server":  {"https://docket.example", nil, true},
	} {
		t.Run(name, func(t *testing.T) {
			signin, session := signIn(t, c.target, c.header)
			require.Equal(t, c.secure, signin.Secure, "sign-in cookie")
			require.Equal(t, c.secure, session.Secure, "session cookie")
			require.True(t, session.HttpOnly)
			require.Equal(t, http.SameSiteStrictMode, session.SameSite)
		})
	}
}

// TestSessionsPerKey: a key has at most sessionsPerKeyMax live sessions;
// a sign-in beyond them ends the key's oldest (its cookie no longer
// works), not another key's, so signing in again and again cannot grow
// the server's sessions without bound.
func TestSessionsPerKey(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	s, err := newSessions(nil, time.Hour, func() time.Time { return now })
	require.NoError(t, err)
	viewer := &docket.APIKey{ID: uuid.New(), Role: docket.RoleViewer}
	other := s.create(&docket.APIKey{ID: uuid.New(), Role: docket.RoleViewer}, "other")
	var made []*session
	for range sessionsPerKeyMax + 2 {
		made = append(made, s.create(viewer, "viewer"))
	}
	require.Nil(t, s.lookup(s.cookieValue(made[0].id)), "the oldest session ended")
	require.Nil(t, s.lookup(s.cookieValue(made[1].id)), "the second oldest too")
	for _, ss := range made[2:] {
		require.Same(t, ss, s.lookup(s.cookieValue(ss.id)))
	}
	require.Same(t, other, s.lookup(s.cookieValue(other.id)), "another key's session stays")
	require.Len(t, s.byID, sessionsPerKeyMax+1)
}
