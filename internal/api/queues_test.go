package api

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

func TestQueues(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		ctx := context.Background()
		r := b.do(t, docket.RoleViewer, "GET", "/v1/queues", nil)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		require.JSONEq(t, `{"items":[],"countCap":10000,"nextCursor":null}`, string(r.Body))

		b.jobInState(t, "mail", docket.JobStateDead) // leases from the queue: first
		b.jobInState(t, "mail", docket.JobStateQueued)
		b.jobInState(t, "sms", docket.JobStateQueued)

		pause := func(action, queue string) *pauseResponse {
			t.Helper()
			r := b.do(t, docket.RoleAdmin, "POST", "/v1/queues/"+url.PathEscape(queue)+"/"+action, nil)
			require.Equal(t, http.StatusOK, r.Status, string(r.Body))
			var resp pauseResponse
			r.JSON(t, &resp)
			return &resp
		}
		require.Equal(t, &pauseResponse{Name: "mail", Paused: true}, pause("pause", "mail"))
		require.Equal(t, &pauseResponse{Name: "mail", Paused: true}, pause("pause", "mail"), "pausing twice is pausing")
		// A queue without jobs may be paused ahead of time; names may hold a slash.
		require.Equal(t, &pauseResponse{Name: "team/reports", Paused: true}, pause("pause", "team/reports"))

		// Paused: nothing is leased from it.
		b.insertJob(t, "mail", nil)
		leases, err := b.client.Lease(ctx, docket.LeaseParams{Queues: []string{"mail"}, Max: 10, Duration: docket.LeaseDurationMin, WorkerID: "w"})
		require.NoError(t, err)
		require.Empty(t, leases)

		r = b.do(t, docket.RoleProducer, "GET", "/v1/queues", nil)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		require.JSONEq(t, `{"countCap":10000,"nextCursor":null,"items":[
			{"name":"mail","paused":true,"counts":{"CREATED":0,"QUEUED":2,"RUNNING":0,"RETRY":0,"SUCCESS":0,"DEAD":1,"CANCELED":0},"countsAtLeast":[]},
			{"name":"sms","paused":false,"counts":{"CREATED":0,"QUEUED":1,"RUNNING":0,"RETRY":0,"SUCCESS":0,"DEAD":0,"CANCELED":0},"countsAtLeast":[]},
			{"name":"team/reports","paused":true,"counts":{"CREATED":0,"QUEUED":0,"RUNNING":0,"RETRY":0,"SUCCESS":0,"DEAD":0,"CANCELED":0},"countsAtLeast":[]}]}`,
			string(r.Body))

		// Paged by name: limit and cursor as GET /v1/jobs and
		// /v1/dead-letters; a page's queues keep their whole-list counts.
		var first, second queuesResponse
		b.do(t, docket.RoleViewer, "GET", "/v1/queues?limit=2", nil).JSON(t, &first)
		require.Equal(t, []string{"mail", "sms"}, queueNames(first.Items))
		require.Equal(t, 2, first.Items[0].Counts[docket.JobStateQueued])
		require.Equal(t, 10000, first.CountCap)
		require.NotNil(t, first.NextCursor)
		b.do(t, docket.RoleViewer, "GET", "/v1/queues?limit=2&cursor="+url.QueryEscape(*first.NextCursor), nil).JSON(t, &second)
		require.Equal(t, []string{"team/reports"}, queueNames(second.Items))
		require.Nil(t, second.NextCursor, "the last page")
		var exact queuesResponse
		b.do(t, docket.RoleViewer, "GET", "/v1/queues?limit=3", nil).JSON(t, &exact)
		require.Len(t, exact.Items, 3)
		require.Nil(t, exact.NextCursor, "a full last page has no next one")
		p := b.do(t, docket.RoleViewer, "GET", "/v1/queues?limit=501&cursor=bm90IGEgcXVldWU", nil).Problem(t, http.StatusBadRequest)
		require.Equal(t, []string{"limit", "cursor"}, problemFields(p), p.Detail) // "not a queue": a space

		require.Equal(t, &pauseResponse{Name: "mail", Paused: false}, pause("resume", "mail"))
		require.Equal(t, &pauseResponse{Name: "mail", Paused: false}, pause("resume", "mail"))
		b.leaseOneJob(t, "mail")

		// A queue paused then resumed with no jobs drops out of the listing
		// (it stayed listed forever); one with jobs stays, unpaused.
		pause("pause", "typo-queue")
		pause("resume", "typo-queue")
		pause("resume", "team/reports")
		var list queuesResponse
		b.do(t, docket.RoleViewer, "GET", "/v1/queues", nil).JSON(t, &list)
		var names []string
		for _, q := range list.Items {
			names = append(names, q.Name)
			require.False(t, q.Paused, q.Name)
		}
		require.Equal(t, []string{"mail", "sms"}, names)

		requireProblemField(t, b.do(t, docket.RoleAdmin, "POST", "/v1/queues/"+url.PathEscape("bad name")+"/pause", nil).
			Problem(t, http.StatusBadRequest), "queue")
		// Only ASCII letters are letters here, and the message says so.
		p = b.do(t, docket.RoleAdmin, "POST", "/v1/queues/"+url.PathEscape("typo-qué")+"/pause", nil).Problem(t, http.StatusBadRequest)
		require.Equal(t, []FieldError{{Field: "queue", Message: "has invalid character 'é' (allowed: ASCII letters, digits, . _ - : /)"}}, p.Errors)
		b.do(t, docket.RoleAdmin, "GET", "/v1/queues/mail/pause", nil).Problem(t, http.StatusMethodNotAllowed)
	})
}

// TestQueuesCapped: GET /v1/queues and the jobs gauge count a queue's
// QUEUED jobs up to CountCap+1 and say so: 10,005 waiting jobs read as
// 10,001, marked in countsAtLeast and docket_jobs_capped; a queue under
// the cap is exact and unmarked.
func TestQueuesCapped(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		m := NewMetrics()
		b := setup(t, backend, func(c *Config) { c.Metrics = m })
		ctx := context.Background()
		jobs := make([]docket.InsertParams, CountCap+5)
		for i := range jobs {
			jobs[i] = docket.InsertParams{Args: docket.RawArgs{Type: "bulk"}, Opts: &docket.InsertOpts{Queue: "big"}}
		}
		_, err := b.client.InsertMany(ctx, jobs)
		require.NoError(t, err)
		b.jobInState(t, "small", docket.JobStateQueued)

		r := b.do(t, docket.RoleViewer, "GET", "/v1/queues", nil)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		require.JSONEq(t, `{"countCap":10000,"nextCursor":null,"items":[
			{"name":"big","paused":false,"counts":{"CREATED":0,"QUEUED":10001,"RUNNING":0,"RETRY":0,"SUCCESS":0,"DEAD":0,"CANCELED":0},"countsAtLeast":["QUEUED"]},
			{"name":"small","paused":false,"counts":{"CREATED":0,"QUEUED":1,"RUNNING":0,"RETRY":0,"SUCCESS":0,"DEAD":0,"CANCELED":0},"countsAtLeast":[]}]}`,
			string(r.Body))

		r = b.do(t, "", "GET", "/metrics", nil)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		for _, line := range []string{
			`docket_jobs{queue="big",state="QUEUED"} 10001`,
			`docket_jobs_capped{queue="big",state="QUEUED"} 1`,
			`docket_jobs_capped{queue="big",state="DEAD"} 0`,
			`docket_jobs{queue="small",state="QUEUED"} 1`,
			`docket_jobs_capped{queue="small",state="QUEUED"} 0`,
		} {
			require.Contains(t, string(r.Body), line)
		}
	})
}

func queueNames(items []*queueView) []string {
	names := make([]string, len(items))
	for i, q := range items {
		names[i] = q.Name
	}
	return names
}
