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

// TestWorkPagesBanned: a contributor banned while on a work page can no
// longer submit (403, nothing stored) or heartbeat (403 JSON, the lease
// left as it was), nor take another unit; skipping still gives the unit
// back.
func TestWorkPagesBanned(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		ctx := context.Background()
		b := setup(t, backend)
		pool, _ := makeWorkPool(t, b.client, 2, "/static/favicon.svg")
		ada := b.signIn(t, RoleContributor)
		r := ada.post(t, "/work/pools/"+pool.ID.String()+"/take", nil)
		require.Equal(t, http.StatusSeeOther, r.Status, r.Body)
		first := assignmentOf(t, r.Header.Get("Location"))
		a, err := b.client.AssignmentGet(ctx, first)
		require.NoError(t, err)
		banned := docket.ContributorBanned
		_, err = b.client.ContributorUpdate(ctx, a.ContributorID, docket.ContributorUpdateParams{State: &banned})
		require.NoError(t, err)

		r = ada.post(t, "/work/a/"+first.String()+"/submit", url.Values{"f.same": {"yes"}})
		require.Equal(t, http.StatusForbidden, r.Status)
		require.Contains(t, r.Body, "banned")
		r = ada.post(t, "/work/a/"+first.String()+"/heartbeat", nil)
		require.Equal(t, http.StatusForbidden, r.Status)
		require.Contains(t, r.Body, "banned")
		after, err := b.client.AssignmentGet(ctx, first)
		require.NoError(t, err)
		require.Equal(t, docket.AssignmentActive, after.State)
		require.Equal(t, a.HeartbeatAt, after.HeartbeatAt, "no heartbeat recorded")
		got, err := b.client.PoolGet(ctx, pool.ID)
		require.NoError(t, err)
		require.Zero(t, got.Counts.Judgments)

		r = ada.post(t, "/work/pools/"+pool.ID.String()+"/take", nil)
		require.Equal(t, http.StatusSeeOther, r.Status)
		require.Equal(t, "/work?m=refused", r.Header.Get("Location"))
		r = ada.post(t, "/work/a/"+first.String()+"/skip", nil)
		require.Equal(t, http.StatusSeeOther, r.Status, r.Body)
		after, err = b.client.AssignmentGet(ctx, first)
		require.NoError(t, err)
		require.Equal(t, docket.AssignmentReleased, after.State)
	})
}

// TestWorkPoolsBanned: the pools page of a banned contributor says they
// are banned. It said "No work for you right now. Come back later." — the
// search of eligible pools finds nothing for a banned contributor — so
// they would come back for ever.
func TestWorkPoolsBanned(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		ctx := context.Background()
		b := setup(t, backend)
		makeWorkPool(t, b.client, 2, "/static/favicon.svg")
		ada := b.signIn(t, RoleContributor)
		r := ada.get(t, "/work")
		require.Nil(t, find(r.Doc, "td", "no-work"), "a pool to work on")
		require.Nil(t, find(r.Doc, "p", "banned"))

		banned := docket.ContributorBanned
		_, err := b.client.ContributorUpdate(ctx, b.contributor.ID, docket.ContributorUpdateParams{State: &banned})
		require.NoError(t, err)
		r = ada.get(t, "/work")
		require.Equal(t, http.StatusOK, r.Status)
		require.Nil(t, find(r.Doc, "td", "no-work"), "not \"no work right now\"")
		require.Contains(t, text(find(r.Doc, "p", "banned")), "banned")
	})
}
