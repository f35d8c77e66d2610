package web

import (
	"context"
	"net/http"
	"net/url"
	"testing"

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
