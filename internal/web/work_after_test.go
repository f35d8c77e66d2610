package web

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// TestWorkSavedPoolClosed: an answer submitted after the pool was paused
// or closed is saved (assignments already taken go on), and so is a skip;
// the next unit cannot be taken. The pools page must say both: that the
// answer was saved (it only said "That pool hands out no work now", and
// the contributor could not tell whether their work counted) and why no
// next unit came.
func TestWorkSavedPoolClosed(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		ctx := context.Background()
		b := setup(t, backend)
		pool, _ := makeWorkPool(t, b.client, 3, "/static/favicon.svg")
		ada := b.signIn(t, RoleContributor)
		take := func() string {
			t.Helper()
			r := ada.post(t, "/work/pools/"+pool.ID.String()+"/take", nil)
			require.Equal(t, http.StatusSeeOther, r.Status, r.Body)
			return assignmentOf(t, r.Header.Get("Location")).String()
		}
		message := func(r *response) string {
			t.Helper()
			require.Equal(t, http.StatusSeeOther, r.Status, r.Body)
			page := ada.get(t, r.Header.Get("Location"))
			require.Equal(t, http.StatusOK, page.Status)
			return text(find(page.Doc, "p", "work-message"))
		}

		// Paused while the unit is open: the answer is saved, and said so.
		first := take()
		_, err := b.client.PoolPause(ctx, pool.ID)
		require.NoError(t, err)
		r := ada.post(t, "/work/a/"+first+"/submit", url.Values{"f.same": {"yes"}})
		require.Equal(t, "/work?m=saved-closed", r.Header.Get("Location"))
		require.Equal(t, "Saved. That pool hands out no work now (paused or closed).", message(r))
		got, err := b.client.PoolGet(ctx, pool.ID)
		require.NoError(t, err)
		require.Equal(t, 1, got.Counts.Judgments, "the answer counted")

		// Closed while the unit is open: a skip gives it back, and says so.
		_, err = b.client.PoolResume(ctx, pool.ID)
		require.NoError(t, err)
		second := take()
		_, err = b.client.PoolClose(ctx, pool.ID)
		require.NoError(t, err)
		r = ada.post(t, "/work/a/"+second+"/skip", nil)
		require.Equal(t, "/work?m=skipped-closed", r.Header.Get("Location"))
		require.Equal(t, "Skipped. That pool hands out no work now (paused or closed).", message(r))
		a, err := b.client.AssignmentGet(ctx, assignmentOf(t, "/work/a/"+second))
		require.NoError(t, err)
		require.Equal(t, docket.AssignmentReleased, a.State)

		// Start on the closed pool: no "Saved", nothing was.
		r = ada.post(t, "/work/pools/"+pool.ID.String()+"/take", nil)
		require.Equal(t, "/work?m=closed", r.Header.Get("Location"))
	})
}

// TestWorkUnitCanceled: a unit canceled while a contributor has it open
// (its run canceled) takes no answer: the work page said so on a submit
// ("Not saved: this unit was canceled") but showed the form again, and
// again after every try, and the page's heartbeat went on answering 200,
// so nothing told the contributor before they had done the work. Now the
// page shows the unit as over with a way on, the heartbeat answers 409
// with why, and a submit shows the page without its form.
func TestWorkUnitCanceled(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		ctx := context.Background()
		b := setup(t, backend)
		putWorkflow(t, b.client, `{"name": "catalog", "steps": [{"name": "label", "human": {"task": "photo"}}]}`)
		tmpl, err := docket.ParseTask([]byte(workTask))
		require.NoError(t, err)
		_, _, err = b.client.TaskPut(ctx, "photo", tmpl)
		require.NoError(t, err)
		started, err := b.client.RunStart(ctx, "catalog", map[string]any{"caption": "a mug"}, nil)
		require.NoError(t, err)
		ada := b.signIn(t, RoleContributor)
		var pool uuid.UUID
		require.Eventually(t, func() bool {
			pools, err := b.client.EligiblePools(ctx, b.contributor.ID, 0)
			require.NoError(t, err)
			if len(pools) == 1 {
				pool = pools[0].Pool.ID
			}
			return len(pools) == 1
		}, 10*time.Second, 20*time.Millisecond, "the run's unit")
		r := ada.post(t, "/work/pools/"+pool.String()+"/take", nil)
		require.Equal(t, http.StatusSeeOther, r.Status, r.Body)
		id := assignmentOf(t, r.Header.Get("Location")).String()
		require.NotNil(t, find(ada.get(t, "/work/a/"+id).Doc, "form", "work-form"))

		_, err = b.client.RunCancel(ctx, started.Run.ID)
		require.NoError(t, err)
		a, err := b.client.AssignmentGet(ctx, assignmentOf(t, "/work/a/"+id))
		require.NoError(t, err)
		u, err := b.client.UnitGet(ctx, a.UnitID)
		require.NoError(t, err)
		require.Equal(t, docket.UnitCanceled, u.State)
		require.Equal(t, docket.AssignmentActive, a.State, "the assignment itself stays held until it lapses")

		over := func(r *response) {
			t.Helper()
			require.Nil(t, find(r.Doc, "form", "work-form"), "no form for a canceled unit")
			require.Contains(t, text(find(r.Doc, "span", "lease-over")), "canceled")
			require.NotNil(t, find(r.Doc, "button", "next"), "a way on")
		}
		r = ada.get(t, "/work/a/"+id)
		require.Equal(t, http.StatusOK, r.Status)
		over(r)
		res := ada.post(t, "/work/a/"+id+"/heartbeat", nil)
		require.Equal(t, http.StatusConflict, res.Status, res.Body)
		require.Contains(t, res.Body, "canceled")
		r = ada.post(t, "/work/a/"+id+"/submit", url.Values{"f.same": {"yes"}})
		require.Equal(t, http.StatusConflict, r.Status)
		require.Contains(t, text(find(r.Doc, "p", "work-message")), "Not saved: this unit was canceled")
		over(r)
	})
}

// TestSignInLinkAfterPost: a form refused for want of a session (401)
// links to the sign-in page with the page the form was sent from as where
// to go next — a page of this site only, by the Referer.
func TestSignInLinkAfterPost(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Backends()[0])
	for referer, want := range map[string]string{
		b.server.URL + "/work/a/1?m=saved": "/signin?next=%2fwork%2fa%2f1%3fm%3dsaved",
		"http://evil.example/work/a/1":     "/signin",
		b.server.URL + "//evil.example/x":  "/signin",
		"":                                 "/signin",
		"javascript:alert(1)//" + b.server.URL[7:]: "/signin",
	} {
		req, err := http.NewRequest("POST", b.server.URL+"/work/a/1/submit", strings.NewReader("f.same=yes"))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if referer != "" {
			req.Header.Set("Referer", referer)
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		body, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		_ = res.Body.Close()
		require.Equal(t, http.StatusUnauthorized, res.StatusCode)
		link := find(wellFormed(t, string(body)), "a", "signin-link")
		require.NotNil(t, link, referer)
		require.Equal(t, want, attr(link, "href"), referer)
	}
}
