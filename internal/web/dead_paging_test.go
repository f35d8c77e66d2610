package web

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/testdb"
	"github.com/docket-run/docket/internal/teststore"
)

// TestDeadLettersPaging: the dead letters page listed the consumers'
// first dead letters only; now they come a page (pageSize) at a time,
// with a next link carrying the cursor and a link back to the first page,
// as the DEAD jobs do (which gained the first-page link); each section's
// links keep the other's cursor and the filter, and a bad cursor is a 400
// naming it.
func TestDeadLettersPaging(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		ctx := context.Background()
		u := backend.URL(t)
		st := teststore.Open(t, u)
		b := setup(t, testdb.Backend{Name: backend.Name, URL: func(testing.TB) string { return u }})
		total := pageSize + 3
		now := time.Now().UTC().Truncate(time.Millisecond)
		for i := range total {
			ok, err := st.DeadLetterRecord(ctx, &store.DeadLetterRecordParams{
				Consumer: "qc", EventID: fmt.Sprintf("%d-0", 100+i), EventType: "job.dead",
				Envelope:   json.RawMessage(`{"id":"x","type":"job.dead","data":{}}`),
				Deliveries: 5, LastError: "down", Now: now.Add(time.Duration(i) * time.Second),
			})
			require.NoError(t, err)
			require.True(t, ok)
		}
		admin := b.signIn(t, docket.RoleAdmin)
		events := func(r *response) []string {
			t.Helper()
			var ids []string
			for _, in := range inputs(r.Doc, "event") {
				ids = append(ids, attr(in, "value"))
			}
			return ids
		}

		r := admin.get(t, "/dead?queue=images")
		require.Equal(t, http.StatusOK, r.Status, r.Body)
		first := events(r)
		require.Len(t, first, pageSize)
		require.Equal(t, "qc/100-0", first[0], "oldest first")
		require.Nil(t, find(r.Doc, "a", "events-first"), "on the first page")
		next := find(r.Doc, "a", "events-next")
		require.NotNil(t, next, "more than a page: a next link")
		link, err := url.Parse(attr(next, "href"))
		require.NoError(t, err)
		require.Equal(t, "/dead", link.Path)
		require.Equal(t, "images", link.Query().Get("queue"), "the filter is kept")

		r = admin.get(t, link.String())
		require.Equal(t, http.StatusOK, r.Status, r.Body)
		rest := events(r)
		require.Len(t, rest, total-pageSize)
		require.Equal(t, fmt.Sprintf("qc/%d-0", 100+pageSize), rest[0], "none shown twice, none skipped")
		require.Nil(t, find(r.Doc, "a", "events-next"), "the last page")
		back := find(r.Doc, "a", "events-first")
		require.NotNil(t, back)
		require.Equal(t, "/dead?queue=images", attr(back, "href"))

		// The jobs' cursor and the events' are kept by each other's links.
		jobCursor := encodeCursor(dead(t, b.client, "images").ID)
		r = admin.get(t, "/dead?"+url.Values{"cursor": {jobCursor}, "events": {link.Query().Get("events")}}.Encode())
		require.Equal(t, http.StatusOK, r.Status, r.Body)
		jobsFirst := find(r.Doc, "a", "first")
		require.NotNil(t, jobsFirst, "a later page of DEAD jobs links to the first")
		require.Equal(t, "/dead?"+url.Values{"events": {link.Query().Get("events")}}.Encode(), attr(jobsFirst, "href"))
		require.Equal(t, "/dead?"+url.Values{"cursor": {jobCursor}}.Encode(), attr(find(r.Doc, "a", "events-first"), "href"))

		for _, bad := range []string{"zz", "WzEsImEiXQ"} { // not base64 JSON; [1,"a"]
			r = admin.get(t, "/dead?events="+bad)
			require.Equal(t, http.StatusBadRequest, r.Status, bad)
			require.Contains(t, r.Body, "events: not a cursor this page made")
		}
	})
}
