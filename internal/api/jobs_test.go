package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// insert records a job through the Go API.
func (b *bundle) insertJob(t *testing.T, typ string, opts *docket.InsertOpts) *docket.JobRow {
	t.Helper()
	res, err := b.client.Insert(context.Background(), docket.RawArgs{Type: typ, Payload: json.RawMessage(`{"secret":"s3cr3t"}`)}, opts)
	require.NoError(t, err)
	return res.Job
}

// lease takes the one due job of queue as worker "node-7".
func (b *bundle) leaseOneJob(t *testing.T, queue string) *docket.Lease {
	t.Helper()
	leases, err := b.client.Lease(context.Background(), docket.LeaseParams{
		Queues: []string{queue}, Max: 1, Duration: time.Minute, WorkerID: "node-7",
	})
	require.NoError(t, err)
	require.Len(t, leases, 1)
	return leases[0]
}

// jobInState makes a job of type typ in state st: QUEUED, RUNNING,
// SUCCESS, DEAD or CANCELED. For the states past RUNNING it leases from the
// queue typ, which must hold no other due job.
func (b *bundle) jobInState(t *testing.T, typ string, st docket.JobState) *docket.JobRow {
	t.Helper()
	ctx := context.Background()
	row := b.insertJob(t, typ, nil)
	switch st {
	case docket.JobStateQueued:
	case docket.JobStateCanceled:
		_, err := b.client.Cancel(ctx, row.ID)
		require.NoError(t, err)
	case docket.JobStateRunning, docket.JobStateSuccess, docket.JobStateDead:
		l := b.leaseOneJob(t, typ)
		switch st {
		case docket.JobStateSuccess:
			require.NoError(t, b.client.LeaseComplete(ctx, l.ID, json.RawMessage(`{"ok":true}`)))
		case docket.JobStateDead:
			got, err := b.client.LeaseFail(ctx, l.ID, "boom\ngoroutine 1 [running]: stack", false)
			require.NoError(t, err)
			require.Equal(t, docket.JobStateDead, got)
		}
	default:
		t.Fatalf("jobInState: %s not supported", st)
	}
	got, err := b.client.Get(ctx, row.ID)
	require.NoError(t, err)
	require.Equal(t, st, got.State)
	return got
}

// requireProblemField checks the problem names field first.
func requireProblemField(t *testing.T, p *Problem, field string) {
	t.Helper()
	require.NotEmpty(t, p.Errors, "problem without field errors: %+v", p)
	require.Equal(t, field, p.Errors[0].Field, "%+v", p)
	require.NotEmpty(t, p.Errors[0].Message)
}

func TestSubmitJob(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		r := b.do(t, docket.RoleProducer, "POST", "/v1/jobs", map[string]any{
			"jobType": "email", "payload": map[string]any{"to": "a@example.com"},
			"queue": "mail", "priority": 3, "maxAttempts": 5, "timeoutSeconds": 60,
			"runAt": "2030-01-02T03:04:05.123456Z",
		})
		require.Equal(t, http.StatusAccepted, r.Status, string(r.Body))
		var keys map[string]any
		r.JSON(t, &keys)
		require.ElementsMatch(t, []string{"jobId", "jobType", "status", "createdAt", "updatedAt"}, jsonKeys(keys))
		var sub submitResponse
		r.JSON(t, &sub)
		require.Equal(t, "email", sub.JobType)
		require.Equal(t, docket.JobStateQueued, sub.Status)
		require.False(t, sub.CreatedAt.IsZero())

		row, err := b.client.Get(context.Background(), sub.JobID)
		require.NoError(t, err)
		require.Equal(t, "mail", row.Queue)
		require.Equal(t, 3, row.Priority)
		require.Equal(t, 5, row.MaxAttempts)
		require.Equal(t, time.Minute, row.Timeout)
		require.True(t, row.RunAt.Equal(time.Date(2030, 1, 2, 3, 4, 5, 123456000, time.UTC)), row.RunAt)
		require.JSONEq(t, `{"to":"a@example.com"}`, string(row.Payload))

		// Defaults: queue = job type, priority 1, payload {} when absent or null.
		for _, body := range []string{`{"jobType":"resize"}`, `{"jobType":"resize","payload":null}`} {
			r = b.do(t, docket.RoleAdmin, "POST", "/v1/jobs", body)
			require.Equal(t, http.StatusAccepted, r.Status, string(r.Body))
			r.JSON(t, &sub)
			row, err = b.client.Get(context.Background(), sub.JobID)
			require.NoError(t, err)
			require.Equal(t, "resize", row.Queue)
			require.Equal(t, docket.PriorityDefault, row.Priority)
			require.JSONEq(t, `{}`, string(row.Payload))
		}
		// Any JSON value is a payload.
		r = b.do(t, docket.RoleAdmin, "POST", "/v1/jobs", `{"jobType":"resize","payload":[1,"two",3.5]}`)
		require.Equal(t, http.StatusAccepted, r.Status, string(r.Body))
	})
}

func jsonKeys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestSubmitIdempotency(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		first := b.do(t, docket.RoleProducer, "POST", "/v1/jobs",
			`{"jobType":"email","payload":{"to":"a@example.com","n":[1,2.50]},"idempotencyKey":"k1","priority":2,"runAt":"2030-01-02T03:04:05Z"}`)
		require.Equal(t, http.StatusAccepted, first.Status, string(first.Body))

		// The same request, spelled differently: same answer, byte for byte.
		again := b.do(t, docket.RoleProducer, "POST", "/v1/jobs",
			`{ "priority": 2, "payload": {"n": [1e0, 2.5], "to": "a@example.com"}, "jobType": "email", "runAt": "2030-01-02T04:04:05+01:00" }`,
			"Idempotency-Key", "k1")
		require.Equal(t, http.StatusAccepted, again.Status, string(again.Body))
		require.Equal(t, string(first.Body), string(again.Body))
		// timeoutSeconds 0 is the default, as absent.
		again = b.do(t, docket.RoleProducer, "POST", "/v1/jobs",
			`{"jobType":"email","payload":{"to":"a@example.com","n":[1,2.5]},"priority":2,"timeoutSeconds":0}`, "Idempotency-Key", "k1")
		require.Equal(t, string(first.Body), string(again.Body))
		// Both forms at once, agreeing.
		again = b.do(t, docket.RoleProducer, "POST", "/v1/jobs",
			`{"jobType":"email","payload":{"to":"a@example.com","n":[1,2.5]},"idempotencyKey":"k1","priority":2}`, "Idempotency-Key", "k1")
		require.Equal(t, string(first.Body), string(again.Body))

		// The answer carries the current status.
		var sub submitResponse
		first.JSON(t, &sub)
		_, err := b.client.Cancel(context.Background(), sub.JobID)
		require.NoError(t, err)
		again = b.do(t, docket.RoleProducer, "POST", "/v1/jobs",
			`{"jobType":"email","payload":{"to":"a@example.com","n":[1,2.5]},"priority":2}`, "Idempotency-Key", "k1")
		require.Equal(t, http.StatusAccepted, again.Status)
		var cur submitResponse
		again.JSON(t, &cur)
		require.Equal(t, sub.JobID, cur.JobID)
		require.Equal(t, docket.JobStateCanceled, cur.Status)

		// Reused with a different request: 422 naming what differs.
		for _, tc := range []struct{ body, field string }{
			{`{"jobType":"email","payload":{"to":"b@example.com","n":[1,2.5]},"priority":2}`, "payload"},
			{`{"jobType":"sms","payload":{"to":"a@example.com","n":[1,2.5]},"priority":2}`, "jobType"},
			{`{"jobType":"email","payload":{"to":"a@example.com","n":[1,2.5]}}`, "priority"},
			{`{"jobType":"email","payload":{"to":"a@example.com","n":[1,2.5]},"priority":2,"queue":"other"}`, "queue"},
			{`{"jobType":"email","payload":{"to":"a@example.com","n":[1,2.5]},"priority":2,"maxAttempts":3}`, "maxAttempts"},
			{`{"jobType":"email","payload":{"to":"a@example.com","n":[1,2.5]},"priority":2,"timeoutSeconds":9}`, "timeoutSeconds"},
			{`{"jobType":"email","payload":{"to":"a@example.com","n":[1,2.5]},"priority":2,"runAt":"2031-01-01T00:00:00Z"}`, "runAt"},
		} {
			p := b.do(t, docket.RoleProducer, "POST", "/v1/jobs", tc.body, "Idempotency-Key", "k1").Problem(t, http.StatusUnprocessableEntity)
			requireProblemField(t, p, tc.field)
		}

		// Header and body disagreeing is a 400.
		p := b.do(t, docket.RoleProducer, "POST", "/v1/jobs", `{"jobType":"email","idempotencyKey":"a"}`, "Idempotency-Key", "b").
			Problem(t, http.StatusBadRequest)
		requireProblemField(t, p, "idempotencyKey")
		p = b.do(t, docket.RoleProducer, "POST", "/v1/jobs", `{"jobType":"email"}`, "Idempotency-Key", strings.Repeat("k", 256)).
			Problem(t, http.StatusBadRequest)
		requireProblemField(t, p, "idempotencyKey")
		// A bad header and a bad body: one problem names them all.
		p = b.do(t, docket.RoleProducer, "POST", "/v1/jobs", `{"jobType":"bad type","priority":99}`, "Idempotency-Key", strings.Repeat("k", 256)).
			Problem(t, http.StatusBadRequest)
		require.ElementsMatch(t, []string{"jobType", "priority", "idempotencyKey"}, problemFields(p), p.Detail)
		p = b.do(t, docket.RoleProducer, "POST", "/v1/jobs", `{"jobType":"bad type","idempotencyKey":"a","extra":1}`, "Idempotency-Key", "b").
			Problem(t, http.StatusBadRequest)
		require.ElementsMatch(t, []string{"jobType", "idempotencyKey", "extra"}, problemFields(p), p.Detail)

		rows, err := b.client.List(context.Background(), docket.ListParams{})
		require.NoError(t, err)
		require.Len(t, rows, 1)
	})
}

// rawPost sends a POST from any goroutine (no test assertions inside).
func (b *bundle) rawPost(role docket.Role, path, body string, headers ...string) (int, []byte, error) {
	req, err := http.NewRequest("POST", b.server.URL+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+b.keys[role])
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	return res.StatusCode, data, err
}

func TestSubmitIdempotencyConcurrent(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		const n = 50
		type answer struct {
			status int
			body   []byte
			err    error
		}
		answers := make([]answer, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				var a answer
				if i%2 == 0 {
					a.status, a.body, a.err = b.rawPost(docket.RoleProducer, "/v1/jobs", `{"jobType":"email","payload":{"to":"x"}}`, "Idempotency-Key", "same")
				} else {
					a.status, a.body, a.err = b.rawPost(docket.RoleProducer, "/v1/jobs", `{"jobType":"email","payload":{"to":"x"},"idempotencyKey":"same"}`)
				}
				answers[i] = a
			})
		}
		wg.Wait()
		for _, a := range answers {
			require.NoError(t, a.err)
			require.Equal(t, http.StatusAccepted, a.status, string(a.body))
			require.Equal(t, string(answers[0].body), string(a.body))
		}
		rows, err := b.client.List(context.Background(), docket.ListParams{})
		require.NoError(t, err)
		require.Len(t, rows, 1)
	})
}

func TestSubmitValidation(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		for _, tc := range []struct {
			name, body, field string // field "" : a 400 without a field
		}{
			{"missing jobType", `{"payload":{}}`, "jobType"},
			{"empty jobType", `{"jobType":""}`, "jobType"},
			{"bad jobType", `{"jobType":"no spaces"}`, "jobType"},
			{"bad queue", `{"jobType":"a","queue":"a b"}`, "queue"},
			{"priority too big", `{"jobType":"a","priority":10}`, "priority"},
			{"priority negative", `{"jobType":"a","priority":-1}`, "priority"},
			{"priority not a number", `{"jobType":"a","priority":"high"}`, "priority"},
			{"priority fractional", `{"jobType":"a","priority":1.5}`, "priority"},
			{"jobType not a string", `{"jobType":7}`, "jobType"},
			{"bad runAt", `{"jobType":"a","runAt":"tomorrow"}`, "runAt"},
			{"runAt not a string", `{"jobType":"a","runAt":1700000000}`, "runAt"},
			{"maxAttempts zero", `{"jobType":"a","maxAttempts":0}`, "maxAttempts"},
			{"maxAttempts too big", `{"jobType":"a","maxAttempts":1001}`, "maxAttempts"},
			{"timeoutSeconds negative", `{"jobType":"a","timeoutSeconds":-1}`, "timeoutSeconds"},
			{"timeoutSeconds too big", `{"jobType":"a","timeoutSeconds":604801}`, "timeoutSeconds"},
			{"idempotencyKey too long", `{"jobType":"a","idempotencyKey":"` + strings.Repeat("k", 256) + `"}`, "idempotencyKey"},
			{"payload with NUL", `{"jobType":"a","payload":{"s":"a\u0000b"}}`, "payload"},
			{"idempotencyKey with NUL", `{"jobType":"a","idempotencyKey":"a\u0000b"}`, "idempotencyKey"},
			{"payload not UTF-8", "{\"jobType\":\"a\",\"payload\":{\"s\":\"a\xffb\"}}", "payload"},
			{"payload with a lone surrogate", `{"jobType":"a","payload":{"s":"a\ud800b"}}`, "payload"},
			{"payload with a lone low surrogate", `{"jobType":"a","payload":["\udc00"]}`, "payload"},
			{"payload with a reversed pair", `{"jobType":"a","payload":"\udc00\ud800"}`, "payload"},
			{"payload nested too deep", `{"jobType":"a","payload":` + strings.Repeat(`{"a":`, 1000) + `[]` + strings.Repeat(`}`, 1000) + `}`, "payload"},
			{"unknown field", `{"jobType":"a","color":"red"}`, "color"},
			{"malformed JSON", `{"jobType":"a",`, "(body)"},
			{"not JSON", `jobType=a`, "(body)"},
			{"trailing data", `{"jobType":"a"} {}`, "(body)"},
			{"trailing brace", `{"jobType":"a"}}`, "(body)"},
			{"trailing bracket", `{"jobType":"a"} ]`, "(body)"},
			{"empty body", ``, "(body)"},
			{"array body", `[{"jobType":"a"}]`, "(body)"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				p := b.do(t, docket.RoleProducer, "POST", "/v1/jobs", tc.body).Problem(t, http.StatusBadRequest)
				if tc.field != "" {
					requireProblemField(t, p, tc.field)
				}
			})
		}
		// A NUL written as an escaped backslash is just text.
		r := b.do(t, docket.RoleProducer, "POST", "/v1/jobs", `{"jobType":"a","payload":{"s":"a\\u0000b"}}`)
		require.Equal(t, http.StatusAccepted, r.Status, string(r.Body))
		// So is an escaped surrogate pair, one character.
		r = b.do(t, docket.RoleProducer, "POST", "/v1/jobs", `{"jobType":"a","payload":{"s":"\ud83d\ude00 \\ud800"}}`)
		require.Equal(t, http.StatusAccepted, r.Status, string(r.Body))
		// 1000 levels are stored, and searched on every backend (SQLite's
		// JSON functions refuse one more: a deeper payload, once stored,
		// made every search that read it a 500).
		r = b.do(t, docket.RoleProducer, "POST", "/v1/jobs", `{"jobType":"a","payload":`+strings.Repeat(`{"a":`, 999)+`"[{\"}"`+strings.Repeat(`}`, 999)+`}`)
		require.Equal(t, http.StatusAccepted, r.Status, string(r.Body))
		r = b.do(t, docket.RoleAdmin, "GET", "/v1/jobs?search=args.a:1", nil)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))

		rows, err := b.client.List(context.Background(), docket.ListParams{})
		require.NoError(t, err)
		require.Len(t, rows, 3, "nothing invalid was written")
	})
}

func TestSubmitTooLarge(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend, func(c *Config) { c.MaxBodyBytes = 256 })
		big := fmt.Sprintf(`{"jobType":"a","payload":{"s":%q}}`, strings.Repeat("x", 300))
		b.do(t, docket.RoleProducer, "POST", "/v1/jobs", big).Problem(t, http.StatusRequestEntityTooLarge)
		b.do(t, docket.RoleProducer, "POST", "/v1/jobs:batch", `{"jobs":[`+big+`]}`).Problem(t, http.StatusRequestEntityTooLarge)
		r := b.do(t, docket.RoleProducer, "POST", "/v1/jobs", `{"jobType":"a"}`)
		require.Equal(t, http.StatusAccepted, r.Status)
	})
}

func TestSubmitBatch(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		body := `{"jobs":[
			{"jobType":"email","payload":{"to":"a"}},
			{"jobType":"email","priority":12},
			{"payload":{}},
			{"jobType":"email","bogus":1},
			7,
			{"jobType":"email","idempotencyKey":"k","payload":{"to":"b"}},
			{"jobType":"email","idempotencyKey":"k","payload":{"to":"b"}},
			{"jobType":"email","idempotencyKey":"k","payload":{"to":"c"}},
			{"jobType":"sms","runAt":"soon"},
			null
		]}`
		r := b.do(t, docket.RoleProducer, "POST", "/v1/jobs:batch", body)
		require.Equal(t, http.StatusAccepted, r.Status, string(r.Body))
		// As a client decodes it.
		var resp struct {
			Items []struct {
				Index     int
				JobID     *uuid.UUID
				JobType   string
				Status    docket.JobState
				CreatedAt time.Time
				Error     *Problem
			}
		}
		r.JSON(t, &resp)
		require.Len(t, resp.Items, 10)
		for i, it := range resp.Items {
			require.Equal(t, i, it.Index)
		}
		ok := func(i int) uuid.UUID {
			t.Helper()
			it := resp.Items[i]
			require.Nil(t, it.Error, "item %d: %+v", i, it.Error)
			require.NotNil(t, it.JobID, "item %d", i)
			require.Equal(t, docket.JobStateQueued, it.Status)
			require.Equal(t, "email", it.JobType)
			require.False(t, it.CreatedAt.IsZero())
			return *it.JobID
		}
		bad := func(i, status int, field string) {
			t.Helper()
			it := resp.Items[i]
			require.Nil(t, it.JobID, "item %d", i)
			require.NotNil(t, it.Error, "item %d", i)
			require.Equal(t, status, it.Error.Status)
			require.NotEmpty(t, it.Error.Type)
			if field != "" {
				requireProblemField(t, it.Error, field)
			}
		}
		ok(0)
		bad(1, http.StatusBadRequest, "priority")
		bad(2, http.StatusBadRequest, "jobType")
		bad(3, http.StatusBadRequest, "bogus")
		// An item that is not an object is named as a body that is not
		// one (it had no errors at all).
		bad(4, http.StatusBadRequest, "(body)")
		require.Contains(t, resp.Items[4].Error.Errors[0].Message, "not the number 7")
		bad(9, http.StatusBadRequest, "(body)")
		require.Contains(t, resp.Items[9].Error.Errors[0].Message, "not null")
		keyed := ok(5)
		require.Equal(t, keyed, ok(6), "a key repeated with the same job is the same job")
		bad(7, http.StatusUnprocessableEntity, "payload")
		bad(8, http.StatusBadRequest, "runAt")

		rows, err := b.client.List(context.Background(), docket.ListParams{})
		require.NoError(t, err)
		require.Len(t, rows, 2, "only the valid jobs were written")

		// Again: the keyed job is found, not written twice.
		r = b.do(t, docket.RoleProducer, "POST", "/v1/jobs:batch", `{"jobs":[{"jobType":"email","idempotencyKey":"k","payload":{"to":"b"}}]}`)
		require.Equal(t, http.StatusAccepted, r.Status)
		r.JSON(t, &resp)
		require.Equal(t, keyed, *resp.Items[0].JobID)

		// The envelope itself.
		requireProblemField(t, b.do(t, docket.RoleProducer, "POST", "/v1/jobs:batch", `{"jobs":[]}`).Problem(t, http.StatusBadRequest), "jobs")
		requireProblemField(t, b.do(t, docket.RoleProducer, "POST", "/v1/jobs:batch", `{}`).Problem(t, http.StatusBadRequest), "jobs")
		requireProblemField(t, b.do(t, docket.RoleProducer, "POST", "/v1/jobs:batch", `{"jobs":{}}`).Problem(t, http.StatusBadRequest), "jobs")
		requireProblemField(t, b.do(t, docket.RoleProducer, "POST", "/v1/jobs:batch", `{"jobs":[{"jobType":"a"}]}`, "Idempotency-Key", "x").
			Problem(t, http.StatusBadRequest), "Idempotency-Key")
		p := b.do(t, docket.RoleProducer, "POST", "/v1/jobs:batch", `{"jobs":[],"extra":1}`, "Idempotency-Key", "x").Problem(t, http.StatusBadRequest)
		require.ElementsMatch(t, []string{"jobs", "extra", "Idempotency-Key"}, problemFields(p), p.Detail)
		b.do(t, docket.RoleProducer, "POST", "/v1/jobs:batch", `{"jobs":[`).Problem(t, http.StatusBadRequest)
		tooMany := make([]map[string]any, batchMax+1)
		for i := range tooMany {
			tooMany[i] = map[string]any{"jobType": "bulk"}
		}
		requireProblemField(t, b.do(t, docket.RoleProducer, "POST", "/v1/jobs:batch", map[string]any{"jobs": tooMany}).Problem(t, http.StatusBadRequest), "jobs")

		// The maximum goes in at once.
		r = b.do(t, docket.RoleProducer, "POST", "/v1/jobs:batch", map[string]any{"jobs": tooMany[:batchMax]})
		require.Equal(t, http.StatusAccepted, r.Status, string(r.Body))
		r.JSON(t, &resp)
		require.Len(t, resp.Items, batchMax)
		n, err := b.client.CountByState(context.Background())
		require.NoError(t, err)
		require.Equal(t, 2+batchMax, n[docket.JobStateQueued])
	})
}

// publicJobKeys are the only keys a non-admin may ever see on a job.
var publicJobKeys = []string{
	"jobId", "jobType", "queue", "status", "priority", "progress", "progressMessage",
	"cancelRequested", "createdAt", "updatedAt", "scheduledAt", "finishedAt", "result",
}

func TestGetJob(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		ctx := context.Background()
		queued := b.jobInState(t, "q", docket.JobStateQueued)
		b.insertJob(t, "run", nil)
		l := b.leaseOneJob(t, "run")
		progress := 42.5
		_, err := b.client.LeaseHeartbeat(ctx, l.ID, time.Minute, &progress, "halfway")
		require.NoError(t, err)
		running, err := b.client.Get(ctx, l.Job.ID)
		require.NoError(t, err)
		dead := b.jobInState(t, "dead", docket.JobStateDead)
		done := b.jobInState(t, "done", docket.JobStateSuccess)

		for _, role := range []docket.Role{docket.RoleViewer, docket.RoleProducer, docket.RoleAdmin} {
			for _, row := range []*docket.JobRow{queued, running, dead, done} {
				r := b.do(t, role, "GET", "/v1/jobs/"+row.ID.String(), nil)
				require.Equal(t, http.StatusOK, r.Status, string(r.Body))
				var raw map[string]any
				r.JSON(t, &raw)
				for k := range raw {
					require.Contains(t, publicJobKeys, k, "role %s sees %q", role, k)
				}
				for _, secret := range []string{"s3cr3t", "node-7", "boom", "goroutine"} {
					require.NotContains(t, string(r.Body), secret, "role %s", role)
				}
				var v jobView
				r.JSON(t, &v)
				require.Equal(t, row.ID, v.JobID)
				require.Equal(t, row.State, v.Status)
			}
		}

		var v jobView
		b.do(t, docket.RoleViewer, "GET", "/v1/jobs/"+running.ID.String(), nil).JSON(t, &v)
		require.Equal(t, "run", v.Queue)
		require.Equal(t, 42.5, v.Progress)
		require.Equal(t, "halfway", v.ProgressMessage)
		require.Nil(t, v.FinishedAt)
		require.Equal(t, "null", string(v.Result))
		b.do(t, docket.RoleViewer, "GET", "/v1/jobs/"+done.ID.String(), nil).JSON(t, &v)
		require.NotNil(t, v.FinishedAt)
		require.JSONEq(t, `{"ok":true}`, string(v.Result))
		require.True(t, v.ScheduledAt.Equal(done.RunAt))

		// Admin may include payload and execution details.
		r := b.do(t, docket.RoleAdmin, "GET", "/v1/jobs/"+dead.ID.String()+"?include=payload,attempts", nil)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		v = jobView{}
		r.JSON(t, &v)
		require.JSONEq(t, `{"secret":"s3cr3t"}`, string(v.Payload))
		require.NotNil(t, v.JobExecution)
		require.Equal(t, 1, v.Attempt)
		require.Equal(t, 25, v.MaxAttempts)
		require.Contains(t, v.LastError, "boom")
		require.Len(t, v.Attempts, 1)
		require.Equal(t, "node-7", v.Attempts[0].Node)
		r = b.do(t, docket.RoleAdmin, "GET", "/v1/jobs/"+running.ID.String()+"?include=attempts", nil)
		v = jobView{}
		r.JSON(t, &v)
		require.Nil(t, v.Payload)
		require.Equal(t, "node-7", v.LeaseOwner)
		require.NotNil(t, v.LeaseExpiresAt)
		r = b.do(t, docket.RoleAdmin, "GET", "/v1/jobs/"+running.ID.String()+"?include=payload", nil)
		var raw map[string]any
		r.JSON(t, &raw)
		require.Contains(t, raw, "payload")
		require.NotContains(t, raw, "attempt")
		require.NotContains(t, raw, "leaseOwner")

		for _, role := range []docket.Role{docket.RoleViewer, docket.RoleProducer} {
			b.do(t, role, "GET", "/v1/jobs/"+queued.ID.String()+"?include=payload", nil).Problem(t, http.StatusForbidden)
			b.do(t, role, "GET", "/v1/jobs/"+queued.ID.String()+"?include=attempts", nil).Problem(t, http.StatusForbidden)
		}
		requireProblemField(t, b.do(t, docket.RoleAdmin, "GET", "/v1/jobs/"+queued.ID.String()+"?include=secrets", nil).
			Problem(t, http.StatusBadRequest), "include")

		b.do(t, docket.RoleViewer, "GET", "/v1/jobs/"+uuid.Must(uuid.NewV7()).String(), nil).Problem(t, http.StatusNotFound)
		requireProblemField(t, b.do(t, docket.RoleViewer, "GET", "/v1/jobs/not-a-uuid", nil).Problem(t, http.StatusBadRequest), "jobId")
	})
}

func TestCancelAndRetry(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		ctx := context.Background()
		call := func(action string, id uuid.UUID, want int) *jobView {
			t.Helper()
			r := b.do(t, docket.RoleProducer, "POST", "/v1/jobs/"+id.String()+"/"+action, nil)
			if want != http.StatusOK {
				p := r.Problem(t, want)
				require.Contains(t, p.Type, "invalid-transition")
				return nil
			}
			require.Equal(t, http.StatusOK, r.Status, string(r.Body))
			var v jobView
			r.JSON(t, &v)
			require.Equal(t, id, v.JobID)
			return &v
		}

		// QUEUED → CANCELED; again: unchanged; retry → QUEUED; again: unchanged.
		q := b.jobInState(t, "a", docket.JobStateQueued)
		require.Equal(t, docket.JobStateCanceled, call("cancel", q.ID, 200).Status)
		v := call("cancel", q.ID, 200)
		require.Equal(t, docket.JobStateCanceled, v.Status)
		require.NotNil(t, v.FinishedAt)
		require.Equal(t, docket.JobStateQueued, call("retry", q.ID, 200).Status)
		v = call("retry", q.ID, 200)
		require.Equal(t, docket.JobStateQueued, v.Status)
		require.Nil(t, v.FinishedAt)

		// RUNNING: cancel is a request until the holder stops; retry changes nothing.
		run := b.jobInState(t, "b", docket.JobStateRunning)
		require.Equal(t, docket.JobStateRunning, call("retry", run.ID, 200).Status)
		v = call("cancel", run.ID, 200)
		require.Equal(t, docket.JobStateRunning, v.Status)
		require.True(t, v.CancelRequested)
		v = call("cancel", run.ID, 200)
		require.True(t, v.CancelRequested)
		// Its cancel requested, it will end CANCELED: a retry is refused
		// saying so, not answered as if it held, and the request is kept.
		p := b.do(t, docket.RoleProducer, "POST", "/v1/jobs/"+run.ID.String()+"/retry", nil).Problem(t, http.StatusConflict)
		require.Equal(t, problemBase+"cancel-requested", p.Type)
		require.Equal(t, "the job is RUNNING and a cancel is requested: it will not run again (it ends CANCELED, unless its attempt succeeds or fails for good first); retry it once it has ended", p.Detail)
		row, err := b.client.Get(ctx, run.ID)
		require.NoError(t, err)
		require.Equal(t, docket.JobStateRunning, row.State)
		require.True(t, row.CancelRequested)

		// SUCCESS: both refused.
		done := b.jobInState(t, "c", docket.JobStateSuccess)
		call("cancel", done.ID, http.StatusConflict)
		call("retry", done.ID, http.StatusConflict)

		// DEAD: cancel refused; retry requeues with a fresh budget of attempts.
		dead := b.jobInState(t, "d", docket.JobStateDead)
		call("cancel", dead.ID, http.StatusConflict)
		require.Equal(t, docket.JobStateQueued, call("retry", dead.ID, 200).Status)
		row, err = b.client.Get(ctx, dead.ID)
		require.NoError(t, err)
		require.Equal(t, 0, row.AttemptsUsed())
		require.Equal(t, docket.JobStateQueued, row.State)

		for _, action := range []string{"cancel", "retry"} {
			b.do(t, docket.RoleProducer, "POST", "/v1/jobs/"+uuid.Must(uuid.NewV7()).String()+"/"+action, nil).Problem(t, http.StatusNotFound)
			requireProblemField(t, b.do(t, docket.RoleProducer, "POST", "/v1/jobs/123/"+action, nil).Problem(t, http.StatusBadRequest), "jobId")
		}
	})
}

func TestAttempts(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		ctx := context.Background()
		row := b.insertJob(t, "a", &docket.InsertOpts{MaxAttempts: 3})
		l := b.leaseOneJob(t, "a")
		st, err := b.client.LeaseFail(ctx, l.ID, "first failure", true)
		require.NoError(t, err)
		require.Equal(t, docket.JobStateRetry, st)

		r := b.do(t, docket.RoleAdmin, "GET", "/v1/jobs/"+row.ID.String()+"/attempts", nil)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		var resp attemptsResponse
		r.JSON(t, &resp)
		require.Len(t, resp.Items, 1)
		a := resp.Items[0]
		require.Equal(t, 1, a.Attempt)
		require.Equal(t, "node-7", a.Node)
		require.Equal(t, "error", a.Outcome)
		require.Equal(t, "first failure", a.Error)
		require.NotNil(t, a.FinishedAt)
		require.NotNil(t, a.DurationMs)
		require.GreaterOrEqual(t, *a.DurationMs, int64(0))
		require.False(t, a.StartedAt.IsZero())

		// A running attempt has no end yet.
		other := b.insertJob(t, "b", nil)
		b.leaseOneJob(t, "b")
		r = b.do(t, docket.RoleAdmin, "GET", "/v1/jobs/"+other.ID.String()+"/attempts", nil)
		var raw struct{ Items []map[string]any }
		r.JSON(t, &raw)
		require.Len(t, raw.Items, 1)
		require.Equal(t, "running", raw.Items[0]["outcome"])
		require.Nil(t, raw.Items[0]["finishedAt"])
		require.Nil(t, raw.Items[0]["durationMs"])

		// Never attempted: an empty list, not null.
		fresh := b.insertJob(t, "c", nil)
		r = b.do(t, docket.RoleAdmin, "GET", "/v1/jobs/"+fresh.ID.String()+"/attempts", nil)
		require.JSONEq(t, `{"items":[]}`, string(r.Body))

		b.do(t, docket.RoleAdmin, "GET", "/v1/jobs/"+uuid.Must(uuid.NewV7()).String()+"/attempts", nil).Problem(t, http.StatusNotFound)
		requireProblemField(t, b.do(t, docket.RoleAdmin, "GET", "/v1/jobs/x/attempts", nil).Problem(t, http.StatusBadRequest), "jobId")
	})
}

func TestListJobs(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		prio := func(p int) *int { return &p }
		var ids []uuid.UUID // oldest first
		for i := range 6 {
			typ := []string{"email", "sms", "push"}[i%3]
			ids = append(ids, b.insertJob(t, typ, &docket.InsertOpts{Priority: prio(i % 2), Queue: "q" + typ}).ID)
		}
		_, err := b.client.Cancel(context.Background(), ids[0])
		require.NoError(t, err)

		list := func(query string) *listResponse {
			t.Helper()
			r := b.do(t, docket.RoleViewer, "GET", "/v1/jobs"+query, nil)
			require.Equal(t, http.StatusOK, r.Status, string(r.Body))
			var raw map[string]json.RawMessage
			r.JSON(t, &raw)
			require.Contains(t, raw, "nextCursor")
			var resp listResponse
			r.JSON(t, &resp)
			return &resp
		}
		idsOf := func(resp *listResponse) []uuid.UUID {
			out := make([]uuid.UUID, len(resp.Items))
			for i, it := range resp.Items {
				out[i] = it.JobID
			}
			return out
		}
		all := list("")
		require.Equal(t, []uuid.UUID{ids[5], ids[4], ids[3], ids[2], ids[1], ids[0]}, idsOf(all))
		require.Nil(t, all.NextCursor)
		require.Equal(t, []uuid.UUID{ids[3], ids[0]}, idsOf(list("?jobType=email")))
		require.Equal(t, []uuid.UUID{ids[4], ids[3], ids[1], ids[0]}, idsOf(list("?jobType=email,sms")))
		require.Equal(t, []uuid.UUID{ids[4], ids[3], ids[1], ids[0]}, idsOf(list("?jobType=email&jobType=sms")))
		require.Equal(t, []uuid.UUID{ids[5], ids[2]}, idsOf(list("?queue=qpush")))
		require.Equal(t, []uuid.UUID{ids[0]}, idsOf(list("?status=CANCELED")))
		require.Equal(t, []uuid.UUID{ids[5], ids[4], ids[3], ids[2], ids[1]}, idsOf(list("?status=QUEUED,RUNNING")))
		require.Equal(t, []uuid.UUID{ids[5], ids[3], ids[1]}, idsOf(list("?priority=1")))
		require.Equal(t, []uuid.UUID{ids[3]}, idsOf(list("?priority=1&jobType=email&status=queued")))
		require.Empty(t, list("?jobType=nothing").Items)

		// Pages.
		page := list("?limit=4")
		require.Equal(t, []uuid.UUID{ids[5], ids[4], ids[3], ids[2]}, idsOf(page))
		require.NotNil(t, page.NextCursor)
		page = list("?limit=4&cursor=" + *page.NextCursor)
		require.Equal(t, []uuid.UUID{ids[1], ids[0]}, idsOf(page))
		require.Nil(t, page.NextCursor)
		page = list("?limit=3")
		page = list("?limit=3&cursor=" + *page.NextCursor)
		require.Equal(t, []uuid.UUID{ids[2], ids[1], ids[0]}, idsOf(page))
		require.Nil(t, page.NextCursor, "an exactly full last page has no next cursor")

		// List items are public views.
		r := b.do(t, docket.RoleViewer, "GET", "/v1/jobs", nil)
		var raw struct{ Items []map[string]any }
		r.JSON(t, &raw)
		for _, it := range raw.Items {
			for k := range it {
				require.Contains(t, publicJobKeys, k)
			}
		}

		for _, tc := range []struct{ query, field string }{
			{"?cursor=!!!", "cursor"},
			{"?cursor=AAAA", "cursor"},
			{"?cursor=AAAAAAAAAAAAAAAAAAAAAA", "cursor"},
			{"?limit=0", "limit"},
			{"?limit=501", "limit"},
			{"?limit=ten", "limit"},
			{"?status=DONE", "status"},
			{"?status=QUEUED,NOPE", "status"},
			{"?priority=10", "priority"},
			{"?priority=high", "priority"},
			{"?sort=asc", "sort"},
		} {
			requireProblemField(t, b.do(t, docket.RoleViewer, "GET", "/v1/jobs"+tc.query, nil).Problem(t, http.StatusBadRequest), tc.field)
		}
		require.Len(t, list("?limit=500").Items, 6)
	})
}

// TestListJobsSearch: ?search=args.path:value finds jobs by one payload
// value among the newest 10,000 (the dashboard's search), with the other
// filters and the cursor; a malformed search is a 400 naming "search",
// and every bad parameter is named in the same problem.
func TestListJobsSearch(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		ctx := context.Background()
		var ids []uuid.UUID // oldest first
		for i, payload := range []string{
			`{"user":{"id":42},"note":"a, b: c"}`,
			`{"user":{"id":"42"}}`,
			`{"user":{"id":7}}`,
			`{"user":{"id":42.0},"flag":true}`,
			`{"user":[{"id":42}]}`,
		} {
			res, err := b.client.Insert(ctx, docket.RawArgs{Type: []string{"email", "sms"}[i%2], Payload: json.RawMessage(payload)}, nil)
			require.NoError(t, err)
			ids = append(ids, res.Job.ID)
		}
		list := func(query string) []uuid.UUID {
			t.Helper()
			r := b.do(t, docket.RoleAdmin, "GET", "/v1/jobs"+query, nil)
			require.Equal(t, http.StatusOK, r.Status, string(r.Body))
			var resp listResponse
			r.JSON(t, &resp)
			out := []uuid.UUID{}
			for _, it := range resp.Items {
				out = append(out, it.JobID)
			}
			return out
		}
		search := func(s string) string { return "?search=" + url.QueryEscape(s) }
		require.Equal(t, []uuid.UUID{ids[3], ids[1], ids[0]}, list(search("args.user.id:42")), "the number and the string, never through an array")
		require.Equal(t, []uuid.UUID{ids[1]}, list(search(`args.user.id:"42"`)), "a quoted value: strings only")
		require.Equal(t, []uuid.UUID{ids[3], ids[1]}, list(search("args.user.id:42")+"&jobType=sms"))
		require.Equal(t, []uuid.UUID{ids[0]}, list(search("args.note:a, b: c")), "commas and colons belong to the value")
		require.Equal(t, []uuid.UUID{ids[3]}, list(search("args.flag:true")))
		require.Equal(t, []uuid.UUID{}, list(search("args.user.id:8")))
		require.Len(t, list("?search="), 5, "an empty search is no search")
		r := b.do(t, docket.RoleAdmin, "GET", "/v1/jobs"+search("args.user.id:42")+"&limit=2", nil)
		var page listResponse
		r.JSON(t, &page)
		require.NotNil(t, page.NextCursor)
		require.Equal(t, []uuid.UUID{ids[0]}, list(search("args.user.id:42")+"&limit=2&cursor="+*page.NextCursor))

		for _, tc := range []struct{ query, field, says string }{
			{search("user.id:42"), "search", "start with args."},
			{search("args.user.id"), "search", "colon"},
			{search("args.:1"), "search", "path"},
			{search("args.a b:1"), "search", "path"},
			{search(`args.a:"x`), "search", "JSON string"},
			{search("args.a:1") + "&search=args.b:2", "search", "one value"},
		} {
			p := b.do(t, docket.RoleAdmin, "GET", "/v1/jobs"+tc.query, nil).Problem(t, http.StatusBadRequest)
			requireProblemField(t, p, tc.field)
			require.Contains(t, p.Errors[0].Message, tc.says, tc.query)
		}
		p := b.do(t, docket.RoleAdmin, "GET", "/v1/jobs"+search("nope")+"&limit=0&status=DONE", nil).Problem(t, http.StatusBadRequest)
		var fields []string
		for _, e := range p.Errors {
			fields = append(fields, e.Field)
		}
		require.ElementsMatch(t, []string{"search", "limit", "status"}, fields, "every bad parameter named: %+v", p)
	})
}

// TestListJobsSearchNeedsPayloads: a search by payload value is refused
// (403 naming search) to the keys that may not read payloads, producer
// and viewer: its matches would confirm a guessed value. A malformed
// search is refused the same (checked first), and an empty one is no
// search, allowed.
func TestListJobsSearchNeedsPayloads(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		_, err := b.client.Insert(context.Background(), docket.RawArgs{Type: "email", Payload: json.RawMessage(`{"email":"ada@example.com"}`)}, nil)
		require.NoError(t, err)
		for _, role := range []docket.Role{docket.RoleProducer, docket.RoleViewer} {
			for _, q := range []string{"search=args.email:ada@example.com", "search=nope", "search=&search=args.email:x", "search=args.email:x&limit=0"} {
				p := b.do(t, role, "GET", "/v1/jobs?"+q, nil).Problem(t, http.StatusForbidden)
				require.Equal(t, []string{"search"}, problemFields(p), "%s %s", role, q)
				require.Contains(t, p.Errors[0].Message, "only admin keys may read", "%s %s", role, q)
				require.Contains(t, p.Detail, "role "+string(role))
			}
			r := b.do(t, role, "GET", "/v1/jobs?search=", nil)
			require.Equal(t, http.StatusOK, r.Status, "an empty search is no search")
		}
		var resp listResponse
		r := b.do(t, docket.RoleAdmin, "GET", "/v1/jobs?search=args.email:ada@example.com", nil)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		r.JSON(t, &resp)
		require.Len(t, resp.Items, 1)
		b.do(t, docket.RoleWorker, "GET", "/v1/jobs?search=args.email:x", nil).Problem(t, http.StatusForbidden)
	})
}

// Paging through 1,000 jobs while another goroutine inserts: every job that
// existed at the first page comes exactly once, newest first.
func TestListPaginationConcurrentInserts(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		ctx := context.Background()
		params := make([]docket.InsertParams, 1000)
		for i := range params {
			params[i] = docket.InsertParams{Args: docket.RawArgs{Type: "page", Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}}
		}
		res, err := b.client.InsertMany(ctx, params)
		require.NoError(t, err)
		existing := map[uuid.UUID]bool{}
		for _, r := range res {
			existing[r.Job.ID] = true
		}

		stop := make(chan struct{})
		var wg sync.WaitGroup
		var inserted int
		var insertErr error
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := b.client.Insert(ctx, docket.RawArgs{Type: "page"}, nil); err != nil {
					insertErr = err
					return
				}
				inserted++
			}
		})

		seen := map[uuid.UUID]int{}
		var last uuid.UUID
		cursor := ""
		pages := 0
		for {
			path := "/v1/jobs?jobType=page&limit=37"
			if cursor != "" {
				path += "&cursor=" + cursor
			}
			r := b.do(t, docket.RoleViewer, "GET", path, nil)
			require.Equal(t, http.StatusOK, r.Status, string(r.Body))
			var page listResponse
			r.JSON(t, &page)
			require.LessOrEqual(t, len(page.Items), 37)
			for _, it := range page.Items {
				if last != uuid.Nil {
					require.Negative(t, bytes.Compare(it.JobID[:], last[:]), "newest first, no repeats")
				}
				last = it.JobID
				seen[it.JobID]++
			}
			pages++
			if page.NextCursor == nil {
				break
			}
			cursor = *page.NextCursor
		}
		close(stop)
		wg.Wait()
		require.NoError(t, insertErr)
		require.Positive(t, inserted, "the concurrent inserter ran")
		require.GreaterOrEqual(t, pages, 1000/37)
		for id := range existing {
			require.Equal(t, 1, seen[id], "job %s", id)
		}
	})
}

func TestJobSummary(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		r := b.do(t, docket.RoleViewer, "GET", "/v1/jobs/summary", nil)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		require.JSONEq(t, `{"byStatus":{"CREATED":0,"QUEUED":0,"RUNNING":0,"RETRY":0,"SUCCESS":0,"DEAD":0,"CANCELED":0},"byQueue":{}}`, string(r.Body))

		b.jobInState(t, "a", docket.JobStateQueued)
		b.jobInState(t, "a", docket.JobStateQueued)
		b.jobInState(t, "b", docket.JobStateDead)
		b.jobInState(t, "b", docket.JobStateCanceled)
		r = b.do(t, docket.RoleViewer, "GET", "/v1/jobs/summary", nil)
		require.JSONEq(t, `{
			"byStatus":{"CREATED":0,"QUEUED":2,"RUNNING":0,"RETRY":0,"SUCCESS":0,"DEAD":1,"CANCELED":1},
			"byQueue":{
				"a":{"CREATED":0,"QUEUED":2,"RUNNING":0,"RETRY":0,"SUCCESS":0,"DEAD":0,"CANCELED":0},
				"b":{"CREATED":0,"QUEUED":0,"RUNNING":0,"RETRY":0,"SUCCESS":0,"DEAD":1,"CANCELED":1}}}`, string(r.Body))
	})
}

// Each role against each route of jobs.go and queues.go: 2xx or 403 as the
// role table says; no key or a bad key is 401.
func TestJobAndQueueAuth(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		admin, producer, viewer := docket.RoleAdmin, docket.RoleProducer, docket.RoleViewer
		job := b.insertJob(t, "auth", nil)
		type call struct {
			method, path string
			body         func() any // fresh per call
			allowed      []docket.Role
		}
		fresh := func() string { return b.insertJob(t, "auth", nil).ID.String() }
		calls := []call{
			{"POST", "/v1/jobs", func() any { return `{"jobType":"auth"}` }, []docket.Role{admin, producer}},
			{"POST", "/v1/jobs:batch", func() any { return `{"jobs":[{"jobType":"auth"}]}` }, []docket.Role{admin, producer}},
			{"GET", "/v1/jobs", nil, []docket.Role{admin, producer, viewer}},
			{"GET", "/v1/jobs/summary", nil, []docket.Role{admin, producer, viewer}},
			{"GET", "/v1/jobs/" + job.ID.String(), nil, []docket.Role{admin, producer, viewer}},
			{"POST", "/v1/jobs/{fresh}/cancel", nil, []docket.Role{admin, producer}},
			{"POST", "/v1/jobs/{fresh}/retry", nil, []docket.Role{admin, producer}},
			{"GET", "/v1/jobs/" + job.ID.String() + "/attempts", nil, []docket.Role{admin}},
			{"GET", "/v1/queues", nil, []docket.Role{admin, producer, viewer}},
			{"POST", "/v1/queues/auth/pause", nil, []docket.Role{admin}},
			{"POST", "/v1/queues/auth/resume", nil, []docket.Role{admin}},
		}
		// Every route of these files is in the table above.
		var covered []string
		for _, c := range calls {
			covered = append(covered, c.method+" "+c.path)
		}
		srv := New(Config{Client: b.client})
		for _, rt := range append(srv.jobRoutes(), srv.queueRoutes()...) {
			found := false
			for _, c := range covered {
				m, p, _ := strings.Cut(c, " ")
				found = found || (m == rt.Method && routeMatches(rt.Path, p))
			}
			require.True(t, found, "route %s %s is not in the auth table", rt.Method, rt.Path)
		}

		for _, c := range calls {
			for _, role := range docket.Roles {
				path := strings.ReplaceAll(c.path, "{fresh}", fresh())
				var body any
				if c.body != nil {
					body = c.body()
				}
				r := b.do(t, role, c.method, path, body)
				if slices.Contains(c.allowed, role) {
					require.True(t, r.Status >= 200 && r.Status < 300, "%s %s as %s: %d %s", c.method, path, role, r.Status, r.Body)
				} else {
					r.Problem(t, http.StatusForbidden)
				}
			}
			path := strings.ReplaceAll(c.path, "{fresh}", fresh())
			b.do(t, "", c.method, path, nil).Problem(t, http.StatusUnauthorized)
			b.do(t, "", c.method, path, nil, "Authorization", "Bearer not-a-key").Problem(t, http.StatusUnauthorized)
			b.do(t, "", c.method, path, nil, "Authorization", "Basic "+b.keys[admin]).Problem(t, http.StatusUnauthorized)
		}
	})
}

// routeMatches reports whether a concrete path fits a route pattern.
func routeMatches(pattern, path string) bool {
	ps, xs := strings.Split(pattern, "/"), strings.Split(path, "/")
	if len(ps) != len(xs) {
		return false
	}
	for i := range ps {
		if !strings.HasPrefix(ps[i], "{") && !strings.HasPrefix(xs[i], "{") && ps[i] != xs[i] {
			return false
		}
	}
	return true
}

// FuzzJobRequests feeds arbitrary input to the decoders of jobs.go: a job,
// a batch, a list query. Whatever the input, the answer is success or a 4xx
// problem, never a panic or a 5xx.
func FuzzJobRequests(f *testing.F) {
	for _, seed := range []string{
		`{"jobType":"a","payload":{"x":[1,2]},"priority":3,"runAt":"2030-01-02T03:04:05Z","maxAttempts":2,"timeoutSeconds":5}`,
		`{"jobs":[{"jobType":"a"},{"jobType":1},7,null]}`, `{"jobType":"a","payload":{"s":"\u0000"}}`,
		`{"jobType":"a b"}`, `{"jobType":"a","runAt":"x"}`, `{`, `null`, `[]`, `{"jobs":null}`,
		`status=QUEUED,DEAD&limit=5&cursor=AZ0AAAAAAAAAAAAAAAAAAA`, `limit=-1`, `cursor=%%%`, `priority=1e3`,
	} {
		f.Add([]byte(seed))
	}
	check := func(t *testing.T, what string, err error) {
		if err == nil {
			return
		}
		p := problemFor(err)
		if p.Status < 400 || p.Status >= 500 {
			t.Fatalf("%s: %d %v", what, p.Status, err)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := decodeBatchItem(data)
		check(t, "job", err)

		var batch batchRequest
		if json.Unmarshal(data, &batch) == nil {
			check(t, "batch", batch.Validate())
			for _, item := range batch.Jobs {
				_, err := decodeBatchItem(item)
				check(t, "batch item", err)
			}
		}

		if q, err := url.ParseQuery(string(data)); err == nil {
			_, err := parseListQuery(q, nil)
			check(t, "list query", err)
			if len(q["include"]) > 0 {
				_, err := parseInclude(q)
				check(t, "include", err)
			}
		}
	})
}
