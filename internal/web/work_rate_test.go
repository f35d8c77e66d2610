package web

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/testdb"
)

// TestWorkPagesTakeRate: past the pool's safe rate the work pages refuse
// a take as the API does — 429 with a Retry-After header, nothing taken —
// and a judgment saved just before a refused take of the next unit is
// saved: the contributor is sent to the pools with a message saying so.
// Neither is a 500.
func TestWorkPagesTakeRate(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		// One take per contributor every 100 s: the first is in the
		// bucket, the next is refused however slow the machine.
		src := strings.Replace(workTask, `"assignmentSeconds": 60}`, `"assignmentSeconds": 60, "takesPerSecondPerContributor": 0.01}`, 1)
		pool, _ := makeWorkPoolOf(t, b.client, src, 3, "/static/favicon.svg")
		ada := b.signIn(t, RoleContributor)
		take := "/work/pools/" + pool.ID.String() + "/take"
		r := ada.post(t, take, nil)
		require.Equal(t, http.StatusSeeOther, r.Status, r.Body)
		first := assignmentOf(t, r.Header.Get("Location"))

		r = ada.post(t, "/work/a/"+first.String()+"/submit", url.Values{"f.same": {"yes"}})
		require.Equal(t, http.StatusSeeOther, r.Status, r.Body)
		require.Equal(t, "/work?m=saved-busy", r.Header.Get("Location"))
		r = ada.get(t, r.Header.Get("Location"))
		require.Contains(t, r.Body, "Saved.")
		got, err := b.client.PoolGet(t.Context(), pool.ID)
		require.NoError(t, err)
		require.Equal(t, 1, got.Counts.Judgments, "the judgment is saved")

		r = ada.post(t, take, nil)
		require.Equal(t, http.StatusTooManyRequests, r.Status, r.Body)
		secs, err := strconv.Atoi(r.Header.Get("Retry-After"))
		require.NoError(t, err, "Retry-After %q", r.Header.Get("Retry-After"))
		require.True(t, secs > 60 && secs <= 100, "Retry-After %d: the next token is due 100 s after the first take", secs)
		require.Contains(t, r.Body, "limited rate")
		got, err = b.client.PoolGet(t.Context(), pool.ID)
		require.NoError(t, err)
		require.Zero(t, got.Counts.ActiveAssignments, "a refused take takes nothing")
	})
}
