package api

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// withWebhooks gives the server a webhook service with short timings,
// running until the test ends.
func withWebhooks(t *testing.T) option {
	return func(c *Config) {
		// One node, so the term only matters when a renewal is slow: a
		// short one (an attempt has a third of it) would let a renewal
		// slowed by a loaded machine end the term in the middle of a
		// delivery, which is then made again (at least once), and the
		// tests count deliveries.
		svc, err := c.Client.NewWebhooks(docket.WebhooksConfig{
			NodeID: "api-test", LeaderTTL: 5 * time.Second, PollInterval: 10 * time.Millisecond,
			BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond, MaxAttempts: 2,
			Logger: slog.New(slog.DiscardHandler),
		})
		require.NoError(t, err)
		require.NoError(t, svc.Start(context.Background()))
		t.Cleanup(svc.Stop)
		c.Webhooks = svc
	}
}

const hookSecret = "0123456789abcdef-secret"

func TestWebhooksCRUD(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend, withWebhooks(t))
		body := map[string]any{"url": "http://127.0.0.1:9/hook", "eventTypes": []string{"job.state_changed"}, "secret": hookSecret}

		b.do(t, docket.RoleProducer, "POST", "/v1/webhooks", body).Problem(t, http.StatusForbidden)
		b.do(t, docket.RoleViewer, "GET", "/v1/webhooks", nil).Problem(t, http.StatusForbidden)

		r := b.do(t, docket.RoleAdmin, "POST", "/v1/webhooks", body)
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
		require.NotContains(t, string(r.Body), hookSecret, "the secret is never shown")
		var created webhookView
		r.JSON(t, &created)
		require.Equal(t, "http://127.0.0.1:9/hook", created.URL)
		require.Equal(t, []string{"job.state_changed"}, created.EventTypes)
		require.WithinDuration(t, time.Now(), created.CreatedAt, time.Minute)

		r = b.do(t, docket.RoleAdmin, "GET", "/v1/webhooks/"+created.ID.String(), nil)
		require.Equal(t, http.StatusOK, r.Status)
		require.NotContains(t, string(r.Body), hookSecret)
		var got webhookView
		r.JSON(t, &got)
		require.Equal(t, created, got)

		r = b.do(t, docket.RoleAdmin, "GET", "/v1/webhooks", nil)
		require.Equal(t, http.StatusOK, r.Status)
		var list webhooksResponse
		r.JSON(t, &list)
		require.Len(t, list.Items, 1)
		require.Equal(t, created.ID, list.Items[0].ID)

		r = b.do(t, docket.RoleAdmin, "GET", "/v1/webhooks/"+created.ID.String()+"/deliveries", nil)
		require.Equal(t, http.StatusOK, r.Status)
		require.JSONEq(t, `{"items":[]}`, string(r.Body))

		r = b.do(t, docket.RoleAdmin, "DELETE", "/v1/webhooks/"+created.ID.String(), nil)
		require.Equal(t, http.StatusNoContent, r.Status)
		require.Empty(t, r.Body)
		b.do(t, docket.RoleAdmin, "GET", "/v1/webhooks/"+created.ID.String(), nil).Problem(t, http.StatusNotFound)
		b.do(t, docket.RoleAdmin, "DELETE", "/v1/webhooks/"+created.ID.String(), nil).Problem(t, http.StatusNotFound)
		b.do(t, docket.RoleAdmin, "GET", "/v1/webhooks/"+created.ID.String()+"/deliveries", nil).Problem(t, http.StatusNotFound)
		p := b.do(t, docket.RoleAdmin, "GET", "/v1/webhooks/nope", nil).Problem(t, http.StatusBadRequest)
		require.Equal(t, "webhookId", p.Errors[0].Field)
	})
}

func TestWebhookValidation(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Backends()[0], withWebhooks(t))
	for _, tc := range []struct {
		body  string
		field string
	}{
		{`{"eventTypes":["*"],"secret":"` + hookSecret + `"}`, "url"},
		{`{"url":"ftp://127.0.0.1/x","eventTypes":["*"],"secret":"` + hookSecret + `"}`, "url"},
		{`{"url":"not a url","eventTypes":["*"],"secret":"` + hookSecret + `"}`, "url"},
		{`{"url":"http://127.0.0.1/x","eventTypes":[],"secret":"` + hookSecret + `"}`, "eventTypes"},
		{`{"url":"http://127.0.0.1/x","secret":"` + hookSecret + `"}`, "eventTypes"},
		{`{"url":"http://127.0.0.1/x","eventTypes":["job.progress","job.deleted"],"secret":"` + hookSecret + `"}`, "eventTypes[1]"},
		{`{"url":"http://127.0.0.1/x","eventTypes":["*"],"secret":"short"}`, "secret"},
		{`{"url":"http://127.0.0.1/x","eventTypes":["*"]}`, "secret"},
		{`{"url":"http://127.0.0.1/x","eventTypes":"*","secret":"` + hookSecret + `"}`, "eventTypes"},
		{`{"url":"http://127.0.0.1/x","eventTypes":["*"],"secret":"` + hookSecret + `","allowAnyHost":true}`, "allowAnyHost"},
		// Not loopback, not allowed: refused when subscribing (SSRF).
		{`{"url":"http://10.0.0.1/x","eventTypes":["*"],"secret":"` + hookSecret + `"}`, "url"},
		{`{"url":"http://169.254.169.254/latest/meta-data","eventTypes":["*"],"secret":"` + hookSecret + `"}`, "url"},
	} {
		p := b.do(t, docket.RoleAdmin, "POST", "/v1/webhooks", tc.body).Problem(t, http.StatusBadRequest)
		require.Len(t, p.Errors, 1, tc.body)
		require.Equal(t, tc.field, p.Errors[0].Field, tc.body)
	}
	p := b.do(t, docket.RoleAdmin, "POST", "/v1/webhooks",
		`{"url":"http://10.0.0.1/x","eventTypes":["*"],"secret":"`+hookSecret+`"}`).Problem(t, http.StatusBadRequest)
	require.Contains(t, p.Detail, "url: host 10.0.0.1 is not allowed")
	r := b.do(t, docket.RoleAdmin, "GET", "/v1/webhooks", nil)
	require.JSONEq(t, `{"items":[]}`, string(r.Body), "nothing was written")
}

func TestWebhookDeliveriesAndRedeliver(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend, withWebhooks(t))
		var (
			mu   sync.Mutex
			fail = true
			got  []string
		)
		rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			mu.Lock()
			defer mu.Unlock()
			if err := docket.VerifyWebhook(hookSecret, r.Header.Get("X-Docket-Signature"), r.Header.Get("X-Docket-Timestamp"), body); err != nil {
				t.Errorf("delivery %s: %v", r.Header.Get("X-Docket-Event-Id"), err)
			}
			got = append(got, r.Header.Get("X-Docket-Event-Id"))
			if fail {
				http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
			}
		}))
		t.Cleanup(rc.Close)

		r := b.do(t, docket.RoleAdmin, "POST", "/v1/webhooks",
			map[string]any{"url": rc.URL, "eventTypes": []string{"*"}, "secret": hookSecret})
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
		var hook webhookView
		r.JSON(t, &hook)
		sub := b.do(t, docket.RoleProducer, "POST", "/v1/jobs", map[string]any{"jobType": "email"})
		require.Equal(t, http.StatusAccepted, sub.Status)

		path := "/v1/webhooks/" + hook.ID.String() + "/deliveries"
		var dead deliveryView
		waitUntil(t, "the delivery to be DEAD", func() bool {
			var list deliveriesResponse
			b.do(t, docket.RoleAdmin, "GET", path+"?status=DEAD", nil).JSON(t, &list)
			if len(list.Items) == 1 {
				dead = *list.Items[0]
			}
			return len(list.Items) == 1
		})
		require.Equal(t, 2, dead.Attempts)
		require.NotNil(t, dead.LastStatusCode)
		require.Equal(t, http.StatusServiceUnavailable, *dead.LastStatusCode)
		require.Contains(t, dead.LastError, "down for maintenance")
		require.Nil(t, dead.NextAttemptAt)
		require.NotNil(t, dead.FinishedAt)
		require.NotNil(t, dead.LastAttemptAt)
		require.Equal(t, "job.state_changed", dead.EventType)
		require.Contains(t, string(dead.Event), `"id":"`+dead.EventID+`"`)

		var pending deliveriesResponse
		b.do(t, docket.RoleAdmin, "GET", path+"?status=PENDING", nil).JSON(t, &pending)
		require.Empty(t, pending.Items)
		b.do(t, docket.RoleAdmin, "GET", path+"?status=LOST", nil).Problem(t, http.StatusBadRequest)
		b.do(t, docket.RoleAdmin, "GET", path+"?limit=0", nil).Problem(t, http.StatusBadRequest)

		mu.Lock()
		fail = false
		mu.Unlock()
		r = b.do(t, docket.RoleAdmin, "POST", fmt.Sprintf("%s/%s/redeliver", path, dead.ID), nil)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		var again deliveryView
		r.JSON(t, &again)
		require.Equal(t, "PENDING", string(again.Status))
		require.Zero(t, again.Attempts)
		waitUntil(t, "the redelivery", func() bool {
			var list deliveriesResponse
			b.do(t, docket.RoleAdmin, "GET", path+"?status=DELIVERED", nil).JSON(t, &list)
			return len(list.Items) == 1 && list.Items[0].Attempts == 1
		})
		mu.Lock()
		require.Equal(t, []string{dead.EventID, dead.EventID, dead.EventID}, got)
		mu.Unlock()

		b.do(t, docket.RoleAdmin, "POST", path+"/"+hook.ID.String()+"/redeliver", nil).Problem(t, http.StatusNotFound)
		b.do(t, docket.RoleProducer, "POST", fmt.Sprintf("%s/%s/redeliver", path, dead.ID), nil).Problem(t, http.StatusForbidden)
	})
}

func TestWebhooksUnavailable(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Backends()[0])
	p := b.do(t, docket.RoleAdmin, "GET", "/v1/webhooks", nil).Problem(t, http.StatusServiceUnavailable)
	require.True(t, strings.Contains(p.Detail, "webhooks"))
}

// waitUntil polls cond until it holds or the deadline passes.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestUnknownQueryParameters: a query parameter an endpoint does not take
// is a 400 naming it (docs/api.md, Errors), with every other unknown or
// repeated one; it was ignored by these endpoints.
func TestUnknownQueryParameters(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend, withWebhooks(t))
		res, err := b.client.Insert(context.Background(), docket.RawArgs{Type: "a"}, nil)
		require.NoError(t, err)
		r := b.do(t, docket.RoleAdmin, "POST", "/v1/webhooks", map[string]any{"url": "http://127.0.0.1:9/hook", "eventTypes": []string{"*"}, "secret": hookSecret})
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
		var hook webhookView
		r.JSON(t, &hook)
		for _, c := range []struct {
			path   string
			fields []string
		}{
			{"/v1/jobs/summary?queue=a", []string{"queue"}},
			{"/v1/jobs/" + res.Job.ID.String() + "?includ=payload", []string{"includ"}},
			{"/v1/jobs/" + res.Job.ID.String() + "?z=1&include=payload&includ=payload", []string{"includ", "z"}},
			{"/v1/jobs/" + res.Job.ID.String() + "/attempts?limit=1", []string{"limit"}},
			{"/v1/queues?name=a", []string{"name"}},
			{"/v1/webhooks?limit=1", []string{"limit"}},
			{"/v1/webhooks/" + hook.ID.String() + "?x=1", []string{"x"}},
			// The names and the values in one problem, the names first.
			{"/v1/webhooks/" + hook.ID.String() + "/deliveries?state=DEAD&limit=0&status=X", []string{"state", "limit", "status"}},
			{"/v1/webhooks/" + hook.ID.String() + "/deliveries?limit=0&status=X", []string{"limit", "status"}},
			{"/v1/webhooks/" + hook.ID.String() + "/deliveries?limit=1&limit=2", []string{"limit"}},
		} {
			p := b.do(t, docket.RoleAdmin, "GET", c.path, nil).Problem(t, http.StatusBadRequest)
			require.Equal(t, c.fields, problemFields(p), c.path)
		}
	})
}

// TestUnknownQueryParametersOnOperations: the job, dead letter and
// delivery operations refuse a query parameter they do not take (a 400
// naming it, docs/api.md, Errors), as the run operations do, and change
// nothing; they ignored it and acted.
func TestUnknownQueryParametersOnOperations(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend, withWebhooks(t), func(cfg *Config) { cfg.DeadLetters = cfg.Client })
		res, err := b.client.Insert(context.Background(), docket.RawArgs{Type: "a"}, nil)
		require.NoError(t, err)
		job := "/v1/jobs/" + res.Job.ID.String()
		r := b.do(t, docket.RoleAdmin, "POST", "/v1/webhooks", map[string]any{"url": "http://127.0.0.1:9/hook", "eventTypes": []string{"*"}, "secret": hookSecret})
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
		var hook webhookView
		r.JSON(t, &hook)
		for _, c := range []struct {
			path   string
			fields []string
		}{
			{job + "/cancel?force=true", []string{"force"}},
			{job + "/retry?x=1&y=2", []string{"x", "y"}},
			{"/v1/dead-letters/qc/42-0/retry?all=1", []string{"all"}},
			{"/v1/webhooks/" + hook.ID.String() + "/deliveries/" + hook.ID.String() + "/redeliver?now=1", []string{"now"}},
		} {
			p := b.do(t, docket.RoleAdmin, "POST", c.path, nil).Problem(t, http.StatusBadRequest)
			require.Equal(t, c.fields, problemFields(p), c.path)
		}
		row, err := b.client.Get(context.Background(), res.Job.ID)
		require.NoError(t, err)
		require.Equal(t, docket.JobStateQueued, row.State, "the refused cancel changed nothing")
	})
}

// TestWebhookValidationEveryField: one 400 names every bad field of a
// subscription (it named the first), on every backend; a secret holding
// NUL is one (PostgreSQL refused it: a 500).
func TestWebhookValidationEveryField(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend, withWebhooks(t))
		for _, tc := range []struct {
			body   string
			fields []string
		}{
			{`{}`, []string{"url", "eventTypes", "secret"}},
			{`{"url":"ftp://x","eventTypes":["job.x","*","job.y"],"secret":"short"}`, []string{"url", "eventTypes[0]", "eventTypes[2]", "secret"}},
			{`{"url":"http://127.0.0.1/x","eventTypes":["*"],"secret":"` + hookSecret + `\u0000"}`, []string{"secret"}},
		} {
			p := b.do(t, docket.RoleAdmin, "POST", "/v1/webhooks", tc.body).Problem(t, http.StatusBadRequest)
			require.Equal(t, tc.fields, problemFields(p), tc.body)
		}
		r := b.do(t, docket.RoleAdmin, "GET", "/v1/webhooks", nil)
		require.JSONEq(t, `{"items":[]}`, string(r.Body), "nothing was written")
	})
}

// TestWebhookCrowdEvents: the crowd's event types can be named in a
// subscription (they were refused: only "*" received them), and a
// subscription receives exactly the types it names, delivered for real.
func TestWebhookCrowdEvents(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		cb := setupCrowd(t, backend, withWebhooks(t))
		var (
			mu  sync.Mutex
			got = map[string][]string{} // path → event types, in order
		)
		rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			if err := docket.VerifyWebhook(hookSecret, r.Header.Get("X-Docket-Signature"), r.Header.Get("X-Docket-Timestamp"), body); err != nil {
				t.Errorf("delivery %s: %v", r.Header.Get("X-Docket-Event-Id"), err)
			}
			mu.Lock()
			defer mu.Unlock()
			got[r.URL.Path] = append(got[r.URL.Path], r.Header.Get("X-Docket-Event-Type"))
		}))
		t.Cleanup(rc.Close)
		subscribe := func(path string, types ...string) {
			r := cb.do(t, docket.RoleAdmin, "POST", "/v1/webhooks", map[string]any{"url": rc.URL + path, "eventTypes": types, "secret": hookSecret})
			require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
		}
		subscribe("/judged", "judgment.received", "unit.finalized")
		subscribe("/pools", "pool.updated")
		subscribe("/jobs", "job.state_changed")
		subscribe("/all", "*")
		// Every crowd and quality type is accepted.
		subscribe("/quality", "assignment.expired", "test_judgment.evaluated", "contributor.flagged",
			"contributor.unflagged", "judgment.check_failed", "unit.result_changed")

		pool := cb.newPool(t, "label", 1, strings.Replace(sameProduct, `{"min": 3}`, `{"min": 1}`, 1))
		w := cb.newWorker(t, "a", "en")
		ta, r := cb.take(t, w, pool.ID.String())
		require.NotNil(t, ta, string(r.Body))
		r = cb.as(t, w.secret, "POST", "/v1/judgments", map[string]any{"assignmentId": ta.AssignmentID.String(), "data": map[string]any{"same": "yes"}})
		require.Equal(t, http.StatusAccepted, r.Status, string(r.Body))
		require.Equal(t, http.StatusAccepted, cb.do(t, docket.RoleProducer, "POST", "/v1/jobs", map[string]any{"jobType": "email"}).Status)

		waitUntil(t, "every event delivered to *", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(got["/all"]) == 4
		})
		waitUntil(t, "the named types delivered", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(got["/judged"]) == 2 && len(got["/pools"]) == 1 && len(got["/jobs"]) == 1
		})
		mu.Lock()
		defer mu.Unlock()
		require.ElementsMatch(t, []string{"pool.updated", "judgment.received", "unit.finalized", "job.state_changed"}, got["/all"])
		require.ElementsMatch(t, []string{"judgment.received", "unit.finalized"}, got["/judged"])
		require.Equal(t, []string{"pool.updated"}, got["/pools"])
		require.Equal(t, []string{"job.state_changed"}, got["/jobs"])
		require.Empty(t, got["/quality"], "none of its types happened")
	})
}
