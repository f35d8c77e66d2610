package api

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// TestBannedContributor: once banned (PATCH state banned), a contributor
// can no longer take, heartbeat, extend or submit — 403 each, with the
// assignment they hold left as it was — but may still release it (the
// slot goes back at once) and read GET /v1/me; unbanned, they work again.
func TestBannedContributor(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		cb := setupCrowd(t, backend)
		pool := cb.newPool(t, "label", 2, sameProduct)
		pid := pool.ID.String()
		w := cb.newWorker(t, "w", "en")
		held, r := cb.take(t, w, pid)
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
		aid := held.AssignmentID.String()

		setState := func(state string) {
			t.Helper()
			r := cb.do(t, docket.RoleAdmin, "PATCH", "/v1/contributors/"+w.id, map[string]any{"state": state})
			require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		}
		setState("banned")
		for _, call := range []struct {
			name, path string
			body       any
		}{
			{"take", "/v1/assignments", map[string]any{"poolId": pid}},
			{"heartbeat", "/v1/assignments/" + aid + "/heartbeat", nil},
			{"extend", "/v1/assignments/" + aid + "/extend", map[string]any{"seconds": 60}},
			{"submit", "/v1/judgments", map[string]any{"assignmentId": aid, "data": map[string]any{"same": "yes"}}},
		} {
			p := cb.as(t, w.secret, "POST", call.path, call.body).Problem(t, http.StatusForbidden)
			require.Contains(t, p.Detail, "banned", call.name)
		}
		a, err := cb.client.AssignmentGet(t.Context(), held.AssignmentID)
		require.NoError(t, err)
		require.Equal(t, docket.AssignmentActive, a.State, "refused, nothing changed")
		require.Equal(t, held.ExpiresAt, a.ExpiresAt.UTC())
		got, err := cb.client.PoolGet(t.Context(), pool.ID)
		require.NoError(t, err)
		require.Zero(t, got.Counts.Judgments)
		require.Equal(t, 1, got.Counts.ActiveAssignments)
		var me contributorView
		cb.as(t, w.secret, "GET", "/v1/me", nil).JSON(t, &me)
		require.Equal(t, "banned", me.State)

		// Unbanned, they work again; banned again, they can still give the
		// assignment back.
		setState("active")
		r = cb.as(t, w.secret, "POST", "/v1/assignments/"+aid+"/heartbeat", nil)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		setState("banned")
		r = cb.as(t, w.secret, "POST", "/v1/assignments/"+aid+"/release", nil)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		got, err = cb.client.PoolGet(t.Context(), pool.ID)
		require.NoError(t, err)
		require.Zero(t, got.Counts.ActiveAssignments)
	})
}
