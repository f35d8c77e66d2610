package api

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// TestTakeRate: past the pool's safe rate (takesPerSecond) or one
// contributor's (takesPerSecondPerContributor) a take is refused 429 with
// a Retry-After header and takes nothing; a refused take spends no token of
// the other bucket; a second later (the test's clock) the takes go ahead.
func TestTakeRate(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		cb := setupCrowd(t, backend)
		tmpl := strings.Replace(sameProduct, `"priority": 5}`, `"priority": 5, "takesPerSecond": 3, "takesPerSecondPerContributor": 2}`, 1)
		pool := cb.newPool(t, "label", 10, tmpl)
		take := func(w worker) *response {
			t.Helper()
			return cb.as(t, w.secret, "POST", "/v1/assignments", map[string]any{"poolId": pool.ID.String()})
		}
		refused := func(r *response, whom string) {
			t.Helper()
			p := r.Problem(t, http.StatusTooManyRequests)
			require.Equal(t, "1", r.Header.Get("Retry-After"))
			require.Contains(t, p.Detail, fmt.Sprintf("pool %s hands out at most", pool.ID))
			require.Contains(t, p.Detail, whom)
		}
		a, b, c := cb.newWorker(t, "a", "en"), cb.newWorker(t, "b", "en"), cb.newWorker(t, "c", "en")
		require.Equal(t, http.StatusCreated, take(a).Status)
		require.Equal(t, http.StatusCreated, take(a).Status)
		refused(take(a), "2 assignments per second to one contributor")
		require.Equal(t, http.StatusCreated, take(b).Status)
		refused(take(c), "3 assignments per second on this server")
		got, err := cb.client.PoolGet(t.Context(), pool.ID)
		require.NoError(t, err)
		require.Equal(t, 3, got.Counts.ActiveAssignments, "a refused take takes nothing")

		// A second later: the pool has 3 tokens again, and c, whose take
		// the pool refused, still has both of hers.
		cb.now.Add(int64(time.Second))
		require.Equal(t, http.StatusCreated, take(c).Status)
		require.Equal(t, http.StatusCreated, take(c).Status)
		refused(take(c), "to one contributor")
		require.Equal(t, http.StatusCreated, take(b).Status)
		refused(take(a), "on this server")

		// The rates are validated with the template.
		r := cb.do(t, docket.RoleAdmin, "PUT", "/v1/tasks/fast",
			strings.Replace(sameProduct, `"priority": 5}`, `"priority": 5, "takesPerSecond": -1, "takesPerSecondPerContributor": "2"}`, 1))
		p := r.Problem(t, http.StatusBadRequest)
		fields := map[string]bool{}
		for _, e := range p.Errors {
			fields[e.Field] = true
		}
		require.Equal(t, map[string]bool{"takesPerSecond": true, "takesPerSecondPerContributor": true}, fields, string(r.Body))
		// Under one take a day (here 1e-300, once a Retry-After of 292
		// years): refused, naming the field.
		r = cb.do(t, docket.RoleAdmin, "PUT", "/v1/tasks/slow",
			strings.Replace(sameProduct, `"priority": 5}`, `"priority": 5, "takesPerSecond": 1e-300}`, 1))
		p = r.Problem(t, http.StatusBadRequest)
		require.Len(t, p.Errors, 1, string(r.Body))
		require.Equal(t, "takesPerSecond", p.Errors[0].Field)
		require.Contains(t, p.Errors[0].Message, "one a day")
	})
}
