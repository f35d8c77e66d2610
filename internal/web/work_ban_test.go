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
