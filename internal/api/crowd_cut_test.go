package api

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/testdb"
)

// A take or a submit whose request is cut (the contributor went away)
// while the store works on it: the store's transaction is not cut short
// (storeContext); the judgment is kept, as if its answer had been lost on
// the way back (sending it again answers 200), and the take's assignment
// is given back at once rather than held until it expires.
func TestCrowdRequestCut(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		cb := setupCrowd(t, backend)
		pool := cb.newPool(t, "label", 2, sameProduct)
		pid := pool.ID.String()
		// cut sends a request whose context is already canceled; the
		// key and the contributor were just seen, so the server's caches
		// (authCacheTTL, workerStateTTL) let it reach the store.
		cut := func(w worker, path string, body any) *httptest.ResponseRecorder {
			data, err := json.Marshal(body)
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			r := httptest.NewRequestWithContext(ctx, "POST", path, bytes.NewReader(data))
			r.Header.Set("Authorization", "Bearer "+w.secret)
			r.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			cb.server.Config.Handler.ServeHTTP(rec, r)
			return rec
		}

		a := cb.newWorker(t, "a", "en")
		ta, r := cb.take(t, a, pid)
		require.NotNil(t, ta, string(r.Body))
		judgment := map[string]any{"assignmentId": ta.AssignmentID, "data": map[string]any{"same": "yes"}}
		rec := cut(a, "/v1/judgments", judgment)
		require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
		r = cb.as(t, a.secret, "POST", "/v1/judgments", judgment)
		require.Equal(t, http.StatusOK, r.Status, "the cut judgment was kept: the same data again is 200\n%s", r.Body)

		b := cb.newWorker(t, "b", "en")
		tb, r := cb.take(t, b, pid)
		require.NotNil(t, tb, string(r.Body))
		rec = cut(b, "/v1/assignments", map[string]any{"poolId": pid})
		require.NotEqual(t, http.StatusCreated, rec.Code, rec.Body.String())
		got, err := cb.client.PoolGet(t.Context(), pool.ID)
		require.NoError(t, err)
		require.Equal(t, 1, got.Counts.Judgments)
		require.Equal(t, 1, got.Counts.ActiveAssignments, "b's first take only: the cut one was given back")
	})
}
