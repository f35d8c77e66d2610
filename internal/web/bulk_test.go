package web

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/html"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

func jobState(t *testing.T, c *docket.Client, id uuid.UUID) docket.JobState {
	t.Helper()
	row, err := c.Get(context.Background(), id)
	require.NoError(t, err)
	return row.State
}

// findAll is every element with tag under n, in document order.
func findAll(n *html.Node, tag string) []*html.Node {
	var out []*html.Node
	if n.Type == html.ElementNode && n.Data == tag {
		out = append(out, n)
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		out = append(out, findAll(c, tag)...)
	}
	return out
}

// listed is the job ids of a jobs list page, in order.
func listed(r *response) []string {
	var out []string
	for _, a := range findAll(r.Doc, "a") {
		if strings.HasPrefix(attr(a, "href"), "/jobs/") && attr(a, "class") == "mono" {
			out = append(out, text(a))
		}
	}
	return out
}

// TestJobsSearchArgs: the jobs list searches a payload value with
// args.path:value (string and number alike, a quoted value strings only),
// combined with the other filters and kept by the next page's link; a bad
// search names the args field with 400.
func TestJobsSearchArgs(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		n42 := insert(t, b.client, "email", "mail", `{"user": {"id": 42}}`)
		s42 := insert(t, b.client, "email", "mail", `{"user": {"id": "42"}}`)
		other := insert(t, b.client, "email", "other", `{"user": {"id": 42}}`)
		insert(t, b.client, "email", "mail", `{"user": {"id": 7}}`)
		for range pageSize + 5 {
			insert(t, b.client, "bulk", "mail", `{"user": {"id": 42}, "x": "y z: w"}`)
		}
		admin := b.signIn(t, docket.RoleAdmin)
		r := admin.get(t, "/jobs?type=email&args="+url.QueryEscape("args.user.id:42"))
		require.Equal(t, http.StatusOK, r.Status)
		require.Equal(t, []string{other.ID.String(), s42.ID.String(), n42.ID.String()}, listed(r))
		require.Contains(t, text(find(r.Doc, "p", "args-bound")), "10000")
		require.Equal(t, "args.user.id:42", formValue(r.Doc, "args"))
		require.Equal(t, []string{s42.ID.String()}, listed(admin.get(t, "/jobs?args="+url.QueryEscape(`args.user.id:"42"`))))
		require.Equal(t, []string{other.ID.String()}, listed(admin.get(t, "/jobs?queue=other&args="+url.QueryEscape("args.user.id:42"))))
		// Paging keeps the search.
		r = admin.get(t, "/jobs?args="+url.QueryEscape("args.x:y z: w"))
		require.Len(t, listed(r), pageSize)
		next := attr(find(r.Doc, "a", "next"), "href")
		require.Contains(t, next, "args=args.x")
		require.Len(t, listed(admin.get(t, next)), 5)
		// A number no payload can hold finds nothing (PostgreSQL's numeric
		// cannot hold it: not a 500).
		r = admin.get(t, "/jobs?args="+url.QueryEscape("args.user.id:1e200000"))
		require.Equal(t, http.StatusOK, r.Status)
		require.Empty(t, listed(r))
		// Bad searches name the field.
		for _, bad := range []string{"user.id:42", "args.user.id", "args.:1", `args.a"b:1`, `args.a:"unterminated`, `args.a:"\u0000"`} {
			r = admin.get(t, "/jobs?args="+url.QueryEscape(bad))
			require.Equal(t, http.StatusBadRequest, r.Status, bad)
			require.Contains(t, text(find(r.Doc, "ul", "")), "args:", bad)
		}
		// A value that is not text is refused before any page reads it.
		for _, bad := range []string{"args.a:b\x00", "args.a:\xff"} {
			r = admin.get(t, "/jobs?args="+url.QueryEscape(bad))
			require.Equal(t, http.StatusBadRequest, r.Status, bad)
			require.Contains(t, r.Body, "args: must be UTF-8 text", bad)
		}
	})
}

// TestJobsSearchArgsNeedsPayloads: producers and viewers, whose keys may
// not read payloads, have no Args field, and a search by payload value
// (the list, or a bulk action's filter, whose count would tell as much)
// is refused with 403 naming args, malformed or not; nothing is listed
// or done.
func TestJobsSearchArgsNeedsPayloads(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		job := dead(t, b.client, "mail")
		for _, role := range []docket.Role{docket.RoleViewer, docket.RoleProducer} {
			br := b.signIn(t, role)
			r := br.get(t, "/jobs")
			require.Equal(t, http.StatusOK, r.Status)
			require.Nil(t, find(r.Doc, "input", "args"), "%s: no Args field", role)
			for _, args := range []string{"args.user.id:42", "nope"} {
				r = br.get(t, "/jobs?args="+url.QueryEscape(args))
				require.Equal(t, http.StatusForbidden, r.Status, role)
				require.Contains(t, text(find(r.Doc, "ul", "")), "args: searches job payloads, which only admin keys may read; role "+string(role), role)
				require.Empty(t, listed(r), role)
			}
		}
		producer := b.signIn(t, docket.RoleProducer)
		r := producer.post(t, "/jobs/bulk", url.Values{"scope": {"filter"}, "action": {"retry"}, "state": {"DEAD"}, "args": {"args.x:1"}, "confirm": {"1"}})
		require.Equal(t, http.StatusForbidden, r.Status)
		require.Contains(t, text(find(r.Doc, "ul", "bulk-errors")), "args: searches job payloads")
		require.Nil(t, find(r.Doc, "strong", "bulk-count"), "no count of the matches")
		require.Equal(t, docket.JobStateDead, jobState(t, b.client, job.ID))
		admin := b.signIn(t, docket.RoleAdmin)
		require.NotNil(t, find(admin.get(t, "/jobs").Doc, "input", "args"))
	})
}

// TestJobsBulk: retry or cancel a selection or a filter's matches, only
// after the count is typed; an empty filter, a wrong count, a bad id are
// refused and change nothing; a filter whose matches changed since the
// confirmation asks again (409); viewers and forged forms get 403.
func TestJobsBulk(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		var images []*docket.JobRow
		for range 3 {
			images = append(images, dead(t, b.client, "images"))
		}
		mail := dead(t, b.client, "mail")
		waiting := insert(t, b.client, "email", "mail", `{}`)
		unchanged := func() {
			t.Helper()
			for _, j := range append(images, mail) {
				require.Equal(t, docket.JobStateDead, jobState(t, b.client, j.ID))
			}
		}
		filter := url.Values{"scope": {"filter"}, "action": {"retry"}, "state": {"DEAD"}, "queue": {"images"}}
		with := func(v url.Values, kv ...string) url.Values {
			out := url.Values{}
			for k, vs := range v {
				out[k] = append([]string(nil), vs...)
			}
			for i := 0; i < len(kv); i += 2 {
				out.Set(kv[i], kv[i+1])
			}
			return out
		}

		viewer := b.signIn(t, docket.RoleViewer)
		r := viewer.get(t, "/jobs?state=DEAD")
		require.Nil(t, find(r.Doc, "form", "bulk-selected"), "a viewer has no bulk actions")
		require.Equal(t, http.StatusForbidden, viewer.post(t, "/jobs/bulk", with(filter, "confirm", "3")).Status)
		producer := b.signIn(t, docket.RoleProducer)
		r = producer.get(t, "/jobs?state=DEAD&queue=images")
		require.NotNil(t, find(r.Doc, "form", "bulk-selected"))
		require.NotNil(t, find(r.Doc, "form", "bulk-filter"))
		require.Nil(t, find(producer.get(t, "/jobs").Doc, "form", "bulk-filter"), "no act-on-everything without a filter")
		require.Equal(t, http.StatusForbidden, producer.post(t, "/jobs/bulk", with(filter, "confirm", "3", "csrf", "forged")).Status)
		unchanged()

		// An empty filter, bad fields: 400 naming each, nothing done.
		r = producer.post(t, "/jobs/bulk", url.Values{"scope": {"filter"}, "action": {"retry"}, "confirm": {"5"}})
		require.Equal(t, http.StatusBadRequest, r.Status)
		require.Contains(t, text(find(r.Doc, "ul", "bulk-errors")), "filter: refusing to act on every job")
		r = producer.post(t, "/jobs/bulk", url.Values{"scope": {"everything"}, "action": {"delete"}})
		require.Equal(t, http.StatusBadRequest, r.Status)
		errs := text(find(r.Doc, "ul", "bulk-errors"))
		require.Contains(t, errs, "action:")
		require.Contains(t, errs, "scope:")
		r = b.signIn(t, docket.RoleAdmin).post(t, "/jobs/bulk", url.Values{"scope": {"filter"}, "action": {"retry"}, "state": {"GONE"}, "args": {"nope"}})
		require.Equal(t, http.StatusBadRequest, r.Status)
		errs = text(find(r.Doc, "ul", "bulk-errors"))
		require.Contains(t, errs, "state:")
		require.Contains(t, errs, "args:")
		r = producer.post(t, "/jobs/bulk", url.Values{"scope": {"selected"}, "action": {"retry"}, "id": {"nope"}})
		require.Equal(t, http.StatusBadRequest, r.Status)
		require.Contains(t, text(find(r.Doc, "ul", "bulk-errors")), `id: "nope"`)
		require.Equal(t, http.StatusBadRequest, producer.post(t, "/jobs/bulk", url.Values{"scope": {"selected"}, "action": {"retry"}}).Status)

		// The confirmation: the count to type, nothing done yet.
		r = producer.post(t, "/jobs/bulk", filter)
		require.Equal(t, http.StatusOK, r.Status)
		require.Equal(t, "3", text(find(r.Doc, "strong", "bulk-count")))
		require.Equal(t, "3", formValue(r.Doc, "expect"))
		set := formValue(r.Doc, "set")
		require.Len(t, set, 32, "the confirmation carries the fingerprint of the jobs it listed")
		unchanged()
		r = producer.post(t, "/jobs/bulk", with(filter, "confirm", "2", "expect", "3", "set", set))
		require.Equal(t, http.StatusBadRequest, r.Status)
		require.Contains(t, text(find(r.Doc, "ul", "bulk-errors")), "type 3 to confirm")
		unchanged()
		// The matches changed since: confirm again.
		extra := dead(t, b.client, "images")
		r = producer.post(t, "/jobs/bulk", with(filter, "confirm", "3", "expect", "3", "set", set))
		require.Equal(t, http.StatusConflict, r.Status)
		require.Contains(t, text(find(r.Doc, "ul", "bulk-errors")), "now matches 4 jobs")
		require.Equal(t, "4", text(find(r.Doc, "strong", "bulk-count")))
		unchanged()
		// The same count over other jobs (what happens at the bulkMax cap,
		// where the count is always bulkMax) is refused too: the typed
		// count matches, the set does not.
		r = producer.post(t, "/jobs/bulk", with(filter, "confirm", "4", "expect", "4", "set", set))
		require.Equal(t, http.StatusConflict, r.Status)
		require.Contains(t, text(find(r.Doc, "ul", "bulk-errors")), "other jobs than the 4 confirmed")
		unchanged()
		images = append(images, extra)
		r = producer.post(t, "/jobs/bulk", with(filter, "confirm", "4", "expect", "4", "set", formValue(r.Doc, "set")))
		require.Equal(t, http.StatusOK, r.Status)
		require.Contains(t, text(find(r.Doc, "p", "bulk-result")), "retry: 4 changed, 0 unchanged")
		for _, j := range images {
			require.Equal(t, docket.JobStateQueued, jobState(t, b.client, j.ID))
		}
		require.Equal(t, docket.JobStateDead, jobState(t, b.client, mail.ID), "outside the filter")
		r = producer.post(t, "/jobs/bulk", filter)
		require.NotNil(t, find(r.Doc, "p", "bulk-none"), "nothing left to retry")

		// A selection: cancel the DEAD mail job (refused) and a waiting one.
		sel := url.Values{"scope": {"selected"}, "action": {"cancel"}, "id": {mail.ID.String(), waiting.ID.String()}}
		r = producer.post(t, "/jobs/bulk", sel)
		require.Equal(t, "2", text(find(r.Doc, "strong", "bulk-count")))
		r = producer.post(t, "/jobs/bulk", with(sel, "confirm", "2"))
		require.Equal(t, http.StatusOK, r.Status)
		require.Contains(t, text(find(r.Doc, "p", "bulk-result")), "cancel: 1 changed, 0 unchanged, 1 refused")
		require.Equal(t, docket.JobStateCanceled, jobState(t, b.client, waiting.ID))
		require.Equal(t, docket.JobStateDead, jobState(t, b.client, mail.ID))
	})
}

// TestBrowserBulkRetry drives chromium: search jobs by a payload value,
// retry everything a filter matches after typing the count, and retry a
// DEAD job from its page.
func TestBrowserBulkRetry(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Backends()[0])
	ctx, messages := headless(t)
	shots := screenshotDir(t)
	var doomed []*docket.JobRow
	for range 3 {
		doomed = append(doomed, dead(t, b.client, "images"))
	}
	lone := dead(t, b.client, "mail")
	tagged := insert(t, b.client, "email", "mail", `{"user": {"id": 42}}`)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(b.server.URL+"/jobs"),
		signIn(b.keys[docket.RoleAdmin]),
		chromedp.WaitVisible(chromedp.ID("args")),
		chromedp.SendKeys(chromedp.ID("args"), "args.user.id:42"),
		chromedp.Click(chromedp.ID("filter")),
		chromedp.WaitVisible(chromedp.ID("args-bound")),
	))
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("table.jobs a.mono")].map(a => a.textContent)`))
	require.NoError(t, err)
	require.Equal(t, []string{tagged.ID.String()}, rows, "the payload search found the one job")
	require.NoError(t, chromedp.Do(ctx, screenshot(shots, "jobs-args-search")))

	// Everything DEAD in images, confirmed by typing the count.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(b.server.URL+"/jobs?state=DEAD&queue=images"),
		chromedp.WaitVisible(chromedp.ID("retry-filter")),
		chromedp.Click(chromedp.ID("retry-filter")),
		chromedp.WaitVisible(chromedp.ID("confirm")),
		screenshot(shots, "bulk-confirm"),
	))
	count, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("bulk-count")))
	require.NoError(t, err)
	require.Equal(t, "3", count)
	for _, j := range doomed {
		require.Equal(t, docket.JobStateDead, jobState(t, b.client, j.ID), "nothing before the confirmation")
	}
	require.NoError(t, chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.ID("confirm"), count),
		chromedp.Click(chromedp.ID("bulk-confirm")),
		chromedp.WaitVisible(chromedp.ID("bulk-result")),
		screenshot(shots, "bulk-done"),
	))
	result, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("bulk-result")))
	require.NoError(t, err)
	require.Contains(t, result, "3 changed")
	for _, j := range doomed {
		require.Equal(t, docket.JobStateQueued, jobState(t, b.client, j.ID))
	}

	// A DEAD job retried from its page.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(b.server.URL+"/jobs/"+lone.ID.String()),
		chromedp.WaitVisible(chromedp.ID("retry")),
		chromedp.Click(chromedp.ID("retry")),
		chromedp.WaitVisible(chromedp.CSS(".message")),
	))
	state, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("job-state")))
	require.NoError(t, err)
	require.Equal(t, "QUEUED", state)
	require.Equal(t, docket.JobStateQueued, jobState(t, b.client, lone.ID))
	for _, m := range messages() {
		require.NotContains(t, m, "Content Security Policy", "the pages must run under the CSP")
		require.False(t, strings.HasPrefix(m, "exception") || strings.HasPrefix(m, "error"), m)
	}
}
