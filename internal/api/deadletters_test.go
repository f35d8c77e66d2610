package api

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/testdb"
	"github.com/docket-run/docket/internal/teststore"
)

// setupDeadLetters is a server whose dead letters are the client's, and a
// store on the same database that the test writes dead letters with (only
// a consumer records them).
func setupDeadLetters(t *testing.T, backend testdb.Backend) (*bundle, store.Store) {
	t.Helper()
	u := backend.URL(t)
	st := teststore.Open(t, u)
	fixed := testdb.Backend{Name: backend.Name, URL: func(testing.TB) string { return u }}
	b := setup(t, fixed, func(cfg *Config) { cfg.DeadLetters = cfg.Client })
	return b, st
}

func TestDeadLetters(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b, st := setupDeadLetters(t, backend)
		ctx := context.Background()
		now := time.Now().UTC().Truncate(time.Millisecond)
		for _, d := range []struct{ consumer, id string }{{"qc", "10-0"}, {"aggregate", "11-2"}} {
			ok, err := st.DeadLetterRecord(ctx, &store.DeadLetterRecordParams{
				Consumer: d.consumer, EventID: d.id, EventType: "judgment.received",
				Envelope:   json.RawMessage(`{"id":"` + d.id + `","type":"judgment.received","data":{}}`),
				Deliveries: 5, LastError: "score: no test answer", Now: now,
			})
			require.NoError(t, err)
			require.True(t, ok)
			now = now.Add(time.Second)
		}

		var list deadLettersResponse
		r := b.do(t, docket.RoleAdmin, "GET", "/v1/dead-letters", nil)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		r.JSON(t, &list)
		require.Len(t, list.Items, 2)
		require.Equal(t, "qc", list.Items[0].Consumer)

		r = b.do(t, docket.RoleAdmin, "GET", "/v1/dead-letters?consumer=qc", nil)
		require.Equal(t, http.StatusOK, r.Status)
		var raw map[string][]map[string]any
		r.JSON(t, &raw)
		require.Len(t, raw["items"], 1)
		item := raw["items"][0]
		require.Equal(t, "qc", item["consumer"])
		require.Equal(t, "10-0", item["eventId"])
		require.Equal(t, "judgment.received", item["type"])
		require.EqualValues(t, 5, item["deliveries"])
		require.Equal(t, "score: no test answer", item["lastError"])
		require.Equal(t, map[string]any{"id": "10-0", "type": "judgment.received", "data": map[string]any{}}, item["event"])
		require.NotEmpty(t, item["createdAt"])
		require.NotContains(t, item, "retryRequestedAt")

		r = b.do(t, docket.RoleAdmin, "GET", "/v1/dead-letters?limit=1", nil)
		r.JSON(t, &list)
		require.Len(t, list.Items, 1)
		p := b.do(t, docket.RoleAdmin, "GET", "/v1/dead-letters?limit=0", nil).Problem(t, http.StatusBadRequest)
		require.Equal(t, "limit", p.Errors[0].Field)
		// A misspelt or repeated parameter is refused, not ignored (which
		// listed every consumer's), with the bad limit in the same problem.
		p = b.do(t, docket.RoleAdmin, "GET", "/v1/dead-letters?consumr=qc&limit=0", nil).Problem(t, http.StatusBadRequest)
		require.Equal(t, []string{"consumr", "limit"}, problemFields(p))
		p = b.do(t, docket.RoleAdmin, "GET", "/v1/dead-letters?consumer=qc&consumer=aggregate", nil).Problem(t, http.StatusBadRequest)
		require.Equal(t, []string{"consumer"}, problemFields(p))

		// Retry: 202, the request is recorded for the consumer to take up.
		r = b.do(t, docket.RoleAdmin, "POST", "/v1/dead-letters/qc/10-0/retry", nil)
		require.Equal(t, http.StatusAccepted, r.Status, string(r.Body))
		var v deadLetterView
		r.JSON(t, &v)
		require.Equal(t, "10-0", v.EventID)
		require.NotNil(t, v.RetryRequestedAt)
		claimed, err := st.DeadLetterClaimRetries(ctx, &store.DeadLetterClaimRetriesParams{Consumer: "qc", Max: 10})
		require.NoError(t, err)
		require.Len(t, claimed, 1)
		require.Equal(t, "10-0", claimed[0].EventID)

		b.do(t, docket.RoleAdmin, "POST", "/v1/dead-letters/qc/11-2/retry", nil).Problem(t, http.StatusNotFound)
		b.do(t, docket.RoleAdmin, "POST", "/v1/dead-letters/nobody/10-0/retry", nil).Problem(t, http.StatusNotFound)

		// Admin only.
		for _, role := range []docket.Role{docket.RoleProducer, docket.RoleViewer, docket.RoleWorker} {
			b.do(t, role, "GET", "/v1/dead-letters", nil).Problem(t, http.StatusForbidden)
			b.do(t, role, "POST", "/v1/dead-letters/qc/10-0/retry", nil).Problem(t, http.StatusForbidden)
		}
		b.do(t, "", "GET", "/v1/dead-letters", nil).Problem(t, http.StatusUnauthorized)
	})
}

func TestDeadLettersUnavailable(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Backends()[0])
	b.do(t, docket.RoleAdmin, "GET", "/v1/dead-letters", nil).Problem(t, http.StatusServiceUnavailable)
	b.do(t, docket.RoleAdmin, "POST", "/v1/dead-letters/qc/1-0/retry", nil).Problem(t, http.StatusServiceUnavailable)
}

// TestDeadLettersPaging: GET /v1/dead-letters pages with limit and cursor
// like GET /v1/jobs (nextCursor null on the last page); it listed at most
// 1,000, the oldest, and the later ones could never be read.
func TestDeadLettersPaging(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b, st := setupDeadLetters(t, backend)
		ctx := context.Background()
		now := time.Now().UTC().Truncate(time.Second)
		var want []string
		// Five dead letters, three of them recorded at the same instant.
		for i, d := range []struct{ consumer, id string }{{"qc", "1-0"}, {"agg", "2-0"}, {"qc", "2-0"}, {"agg", "1-0"}, {"qc", "3-0"}} {
			at := now.Add(time.Duration(min(i, 2)) * time.Second)
			_, err := st.DeadLetterRecord(ctx, &store.DeadLetterRecordParams{
				Consumer: d.consumer, EventID: d.id, EventType: "job.state_changed",
				Envelope: json.RawMessage(`{}`), Deliveries: 1, LastError: "x", Now: at,
			})
			require.NoError(t, err)
		}
		want = []string{"qc/1-0", "agg/2-0", "agg/1-0", "qc/2-0", "qc/3-0"}

		var got []string
		path := "/v1/dead-letters?limit=2"
		for pages := 0; ; pages++ {
			require.Less(t, pages, 3, "three pages of two hold five")
			var list deadLettersResponse
			r := b.do(t, docket.RoleAdmin, "GET", path, nil)
			require.Equal(t, http.StatusOK, r.Status, string(r.Body))
			r.JSON(t, &list)
			for _, d := range list.Items {
				got = append(got, d.Consumer+"/"+d.EventID)
			}
			if list.NextCursor == nil {
				require.Len(t, list.Items, 1)
				break
			}
			require.Len(t, list.Items, 2)
			path = "/v1/dead-letters?limit=2&cursor=" + *list.NextCursor
		}
		require.Equal(t, want, got)

		// The last page says so with "nextCursor": null, not by leaving it out.
		r := b.do(t, docket.RoleAdmin, "GET", "/v1/dead-letters", nil)
		var raw map[string]any
		r.JSON(t, &raw)
		require.Contains(t, raw, "nextCursor")
		require.Nil(t, raw["nextCursor"])

		// With consumer: the cursor continues within it.
		var list deadLettersResponse
		b.do(t, docket.RoleAdmin, "GET", "/v1/dead-letters?consumer=qc&limit=1", nil).JSON(t, &list)
		require.NotNil(t, list.NextCursor)
		b.do(t, docket.RoleAdmin, "GET", "/v1/dead-letters?consumer=qc&limit=5&cursor="+*list.NextCursor, nil).JSON(t, &list)
		require.Len(t, list.Items, 2)
		require.Equal(t, "2-0", list.Items[0].EventID)
		require.Nil(t, list.NextCursor)

		// A cursor the server did not return is refused, with a bad limit
		// named in the same answer.
		p := b.do(t, docket.RoleAdmin, "GET", "/v1/dead-letters?cursor=bm9wZQ&limit=0", nil).Problem(t, http.StatusBadRequest)
		require.ElementsMatch(t, []string{"cursor", "limit"}, problemFields(p))
		for _, c := range []string{"", "!!", "WzEsInEiXQ", "WyJ4IiwicSIsIjEiXQ"} {
			p = b.do(t, docket.RoleAdmin, "GET", "/v1/dead-letters?cursor="+c, nil).Problem(t, http.StatusBadRequest)
			require.Equal(t, []string{"cursor"}, problemFields(p), c)
		}
	})
}
