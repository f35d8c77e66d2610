package api

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
	"github.com/docket-run/docket/remote"
)

type remoteArgs struct {
	Text string `json:"text"`
}

func (remoteArgs) JobType() string { return "remote.echo" }

func (b *bundle) lease(t *testing.T, max int) []remote.Lease {
	t.Helper()
	r := b.do(t, docket.RoleWorker, "POST", "/v1/leases",
		map[string]any{"queues": []string{"remote.echo"}, "max": max, "waitSeconds": 0, "leaseSeconds": 30, "workerId": "py-1"})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var resp remote.LeaseResponse
	r.JSON(t, &resp)
	return resp.Leases
}

func TestLeaseProtocol(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		ctx := context.Background()
		var ids []string
		for _, text := range []string{"a", "b", "c"} {
			res, err := b.client.Insert(ctx, remoteArgs{Text: text}, &docket.InsertOpts{MaxAttempts: 3})
			require.NoError(t, err)
			ids = append(ids, res.Job.ID.String())
		}
		leases := b.lease(t, 10)
		require.Len(t, leases, 3)
		require.Equal(t, ids[0], leases[0].JobID.String())
		jobID, attempt, err := docket.ParseLeaseID(leases[0].LeaseID)
		require.NoError(t, err)
		require.Equal(t, leases[0].JobID, jobID)
		require.Equal(t, 1, attempt)
		require.JSONEq(t, `{"text":"a"}`, string(leases[0].Payload))
		require.Equal(t, "remote.echo", leases[0].JobType)
		require.Empty(t, b.lease(t, 10), "everything is leased")

		// Heartbeat with progress, then complete with a result.
		l := leases[0]
		r := b.do(t, docket.RoleWorker, "POST", "/v1/leases/"+l.LeaseID+"/heartbeat", map[string]any{"progress": 50, "message": "half"})
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		var hb remote.HeartbeatResponse
		r.JSON(t, &hb)
		require.False(t, hb.CancelRequested)
		require.True(t, hb.ExpiresAt.After(l.ExpiresAt) || hb.ExpiresAt.Equal(l.ExpiresAt))
		r = b.do(t, docket.RoleWorker, "POST", "/v1/leases/"+l.LeaseID+"/complete", map[string]any{"result": map[string]string{"echo": "a"}})
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		require.JSONEq(t, `{"status":"SUCCESS"}`, string(r.Body))
		row, err := b.client.Get(ctx, l.JobID)
		require.NoError(t, err)
		require.Equal(t, docket.JobStateSuccess, row.State)
		require.JSONEq(t, `{"echo":"a"}`, string(row.Result))
		require.Equal(t, "py-1", mustAttempts(t, b, row)[0].Node)

		// A result PostgreSQL could not store is refused up front, on every backend.
		nul := b.do(t, docket.RoleWorker, "POST", "/v1/leases/"+leases[1].LeaseID+"/complete", `{"result":{"s":"a\u0000b"}}`).Problem(t, http.StatusBadRequest)
		require.Equal(t, "result", nul.Errors[0].Field)
		for _, bad := range []string{"{\"result\":\"\xff\"}", `{"result":"\ud800"}`, `{"result":{"k":"\udfff"}}`} {
			p := b.do(t, docket.RoleWorker, "POST", "/v1/leases/"+leases[1].LeaseID+"/complete", bad).Problem(t, http.StatusBadRequest)
			require.Equal(t, "result", p.Errors[0].Field, bad)
		}

		// The same lease again is fenced: 409, nothing changes.
		p := b.do(t, docket.RoleWorker, "POST", "/v1/leases/"+l.LeaseID+"/complete", nil).Problem(t, http.StatusConflict)
		require.Contains(t, p.Type, "lease-lost")
		b.do(t, docket.RoleWorker, "POST", "/v1/leases/"+l.LeaseID+"/heartbeat", nil).Problem(t, http.StatusConflict)
		b.do(t, docket.RoleWorker, "POST", "/v1/leases/"+l.LeaseID+"/fail", map[string]any{"error": "x", "retryable": true}).Problem(t, http.StatusConflict)

		// A retryable failure → RETRY; a final one → DEAD.
		r = b.do(t, docket.RoleWorker, "POST", "/v1/leases/"+leases[1].LeaseID+"/fail", map[string]any{"error": "timeout talking to S3", "retryable": true})
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		require.JSONEq(t, `{"status":"RETRY"}`, string(r.Body))
		r = b.do(t, docket.RoleWorker, "POST", "/v1/leases/"+leases[2].LeaseID+"/fail", map[string]any{"error": "bad input", "retryable": false})
		require.JSONEq(t, `{"status":"DEAD"}`, string(r.Body))
		row, err = b.client.Get(ctx, leases[2].JobID)
		require.NoError(t, err)
		require.Equal(t, "bad input", row.LastError)
	})
}

// TestLeaseHeartbeatMessageAlone: a heartbeat with a message and no
// progress (third-party workers send one) renews the lease and records the
// message, keeping the job's progress; it was a 400, so the lease was not
// renewed and the job expired and was retried.
func TestLeaseHeartbeatMessageAlone(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		ctx := context.Background()
		_, err := b.client.Insert(ctx, remoteArgs{Text: "a"}, nil)
		require.NoError(t, err)
		l := b.lease(t, 1)[0] // 30 s
		heartbeat := func(body any) remote.HeartbeatResponse {
			t.Helper()
			r := b.do(t, docket.RoleWorker, "POST", "/v1/leases/"+l.LeaseID+"/heartbeat", body)
			require.Equal(t, http.StatusOK, r.Status, string(r.Body))
			var hb remote.HeartbeatResponse
			r.JSON(t, &hb)
			return hb
		}
		view := func() (v struct {
			Progress        float64   `json:"progress"`
			ProgressMessage string    `json:"progressMessage"`
			LeaseExpiresAt  time.Time `json:"leaseExpiresAt"`
		}) {
			t.Helper()
			r := b.do(t, docket.RoleAdmin, "GET", "/v1/jobs/"+l.JobID.String()+"?include=attempts", nil)
			require.Equal(t, http.StatusOK, r.Status, string(r.Body))
			r.JSON(t, &v)
			return v
		}

		// A message alone before any progress: the progress stays 0.
		heartbeat(map[string]any{"message": "downloading"})
		got := view()
		require.Zero(t, got.Progress)
		require.Equal(t, "downloading", got.ProgressMessage)

		heartbeat(map[string]any{"progress": 40, "message": "resized"})
		hb := heartbeat(map[string]any{"message": "uploading", "leaseSeconds": 600})
		require.True(t, hb.ExpiresAt.After(l.ExpiresAt.Add(9*time.Minute)), "renewed for 600 s: %v, leased until %v", hb.ExpiresAt, l.ExpiresAt)
		got = view()
		require.InDelta(t, 40, got.Progress, 1e-9, "the progress is kept")
		require.Equal(t, "uploading", got.ProgressMessage)
		require.True(t, got.LeaseExpiresAt.Equal(hb.ExpiresAt), "stored lease %v, answered %v", got.LeaseExpiresAt, hb.ExpiresAt)
	})
}

func mustAttempts(t *testing.T, b *bundle, row *docket.JobRow) []*docket.JobAttempt {
	t.Helper()
	atts, err := b.client.Attempts(context.Background(), row.ID)
	require.NoError(t, err)
	return atts
}

func TestLeaseCancelWhileHeld(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		ctx := context.Background()
		_, err := b.client.Insert(ctx, remoteArgs{Text: "x"}, nil)
		require.NoError(t, err)
		l := b.lease(t, 1)[0]
		_, err = b.client.Cancel(ctx, l.JobID)
		require.NoError(t, err)
		r := b.do(t, docket.RoleWorker, "POST", "/v1/leases/"+l.LeaseID+"/heartbeat", "")
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		var hb remote.HeartbeatResponse
		r.JSON(t, &hb)
		require.True(t, hb.CancelRequested, "the holder learns of the cancel")
		r = b.do(t, docket.RoleWorker, "POST", "/v1/leases/"+l.LeaseID+"/fail", map[string]any{"error": "stopped on request", "retryable": true})
		require.JSONEq(t, `{"status":"CANCELED"}`, string(r.Body))
	})
}

// TestLeaseRelease: a lease given back (no body, or a reason) leaves the
// job RETRY with the attempt refunded, and is fenced afterwards; a cancel
// requested meanwhile ends the job CANCELED.
func TestLeaseRelease(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		ctx := context.Background()
		for _, text := range []string{"a", "b"} {
			_, err := b.client.Insert(ctx, remoteArgs{Text: text}, &docket.InsertOpts{MaxAttempts: 1})
			require.NoError(t, err)
		}
		leases := b.lease(t, 2)
		require.Len(t, leases, 2)

		r := b.do(t, docket.RoleWorker, "POST", "/v1/leases/"+leases[0].LeaseID+"/release", nil)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		require.JSONEq(t, `{"status":"RETRY"}`, string(r.Body))
		row, err := b.client.Get(ctx, leases[0].JobID)
		require.NoError(t, err)
		require.Equal(t, docket.JobStateRetry, row.State)
		require.Equal(t, 0, row.AttemptsUsed())
		require.Equal(t, docket.OutcomeInterrupted, mustAttempts(t, b, row)[0].Outcome)
		b.do(t, docket.RoleWorker, "POST", "/v1/leases/"+leases[0].LeaseID+"/release", nil).Problem(t, http.StatusConflict)
		b.do(t, docket.RoleWorker, "POST", "/v1/leases/"+leases[0].LeaseID+"/complete", nil).Problem(t, http.StatusConflict)

		p := b.do(t, docket.RoleWorker, "POST", "/v1/leases/"+leases[1].LeaseID+"/release", map[string]any{"reason": strings.Repeat("x", remote.ErrorMaxBytes+1)}).Problem(t, http.StatusBadRequest)
		require.Equal(t, "reason", p.Errors[0].Field)
		_, err = b.client.Cancel(ctx, leases[1].JobID)
		require.NoError(t, err)
		r = b.do(t, docket.RoleWorker, "POST", "/v1/leases/"+leases[1].LeaseID+"/release", map[string]any{"reason": "shutting down"})
		require.JSONEq(t, `{"status":"CANCELED"}`, string(r.Body))
		b.do(t, docket.RoleProducer, "POST", "/v1/leases/"+leases[1].LeaseID+"/release", nil).Problem(t, http.StatusForbidden)
	})
}

// Leases granted to a request already cut (the worker went away while they
// were being leased) are given back at once, the attempt refunded: a job
// on its last attempt is not left to expire into DEAD.
func TestLeaseGivenBackWhenWorkerGone(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		ctx := context.Background()
		res, err := b.client.Insert(ctx, remoteArgs{Text: "a"}, &docket.InsertOpts{MaxAttempts: 1})
		require.NoError(t, err)
		leases, err := b.client.Lease(ctx, docket.LeaseParams{Queues: []string{"remote.echo"}, Max: 1, Duration: 30 * time.Second, WorkerID: "py-1"})
		require.NoError(t, err)
		require.Len(t, leases, 1)

		cut, cancel := context.WithCancel(ctx)
		cancel()
		New(Config{Client: b.client}).giveBackGone(cut, leases)
		row, err := b.client.Get(ctx, res.Job.ID)
		require.NoError(t, err)
		require.Contains(t, []docket.JobState{docket.JobStateRetry, docket.JobStateQueued}, row.State, "given back, not RUNNING")
		require.Equal(t, 0, row.AttemptsUsed(), "the attempt refunded")
		require.Equal(t, leaseGoneReason, row.LastError)
		require.Equal(t, docket.OutcomeInterrupted, mustAttempts(t, b, row)[0].Outcome)
	})
}

func TestLeaseValidationAndAuth(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Backends()[0])
	ok := map[string]any{"queues": []string{"q"}, "max": 1, "waitSeconds": 0, "leaseSeconds": 30, "workerId": "w"}
	with := func(k string, v any) map[string]any {
		m := map[string]any{}
		for kk, vv := range ok {
			m[kk] = vv
		}
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	cases := []struct {
		body  any
		field string
	}{
		{with("queues", nil), "queues"},
		{with("queues", []string{}), "queues"},
		{with("queues", []string{"bad queue"}), "queues[0]"},
		{with("queues", manyQueues(remote.LeaseQueuesMax+1)), "queues"},
		{with("max", 0), "max"},
		{with("max", 101), "max"},
		{with("waitSeconds", 31), "waitSeconds"},
		{with("leaseSeconds", 4), "leaseSeconds"},
		{with("leaseSeconds", nil), "leaseSeconds"},
		// Seconds that overflow a duration are out of range, not wrapped
		// into it (18446744079 s would be a lease of 5.3 s, 18446744074 s a
		// wait of 0.3 s).
		{with("leaseSeconds", int64(18446744079)), "leaseSeconds"},
		{with("waitSeconds", int64(18446744074)), "waitSeconds"},
		{with("leaseSeconds", int64(9223372037)), "leaseSeconds"},
		{with("workerId", nil), "workerId"},
		{with("max", "ten"), "max"},
		{with("extra", 1), "extra"},
	}
	for _, c := range cases {
		p := b.do(t, docket.RoleWorker, "POST", "/v1/leases", c.body).Problem(t, http.StatusBadRequest)
		require.Len(t, p.Errors, 1, "%v", c.body)
		require.Equal(t, c.field, p.Errors[0].Field, "%v", c.body)
	}
	p := b.do(t, docket.RoleWorker, "POST", "/v1/leases", `{"queues": [`).Problem(t, http.StatusBadRequest)
	require.Contains(t, p.Detail, "malformed JSON")
	p = b.do(t, docket.RoleWorker, "POST", "/v1/leases/not-a-lease/complete", nil).Problem(t, http.StatusBadRequest)
	require.Equal(t, "leaseId", p.Errors[0].Field)
	p = b.do(t, docket.RoleWorker, "POST", "/v1/leases/0192f5a0-0000-7000-8000-000000000000.1/fail", map[string]any{"error": "x"}).Problem(t, http.StatusBadRequest)
	require.Equal(t, "retryable", p.Errors[0].Field)
	b.do(t, docket.RoleWorker, "POST", "/v1/leases/0192f5a0-0000-7000-8000-000000000000.1/heartbeat", map[string]any{"progress": 101}).Problem(t, http.StatusBadRequest)
	// A message alone passes: on a lease nobody holds, it is lost (409).
	b.do(t, docket.RoleWorker, "POST", "/v1/leases/0192f5a0-0000-7000-8000-000000000000.1/heartbeat", map[string]any{"message": "halfway"}).Problem(t, http.StatusConflict)

	// Several bad fields at once: one answer names every one.
	const held = "/v1/leases/0192f5a0-0000-7000-8000-000000000000.1/"
	for _, c := range []struct {
		path   string
		body   any
		fields []string
	}{
		{held + "heartbeat", map[string]any{"progress": 101, "leaseSeconds": 1, "message": strings.Repeat("m", remote.MessageMaxBytes+1)},
			[]string{"progress", "leaseSeconds", "message"}},
		{held + "fail", map[string]any{"error": ""}, []string{"error", "retryable"}},
		// A message alone is no bad field (it keeps the job's progress).
		{held + "heartbeat", map[string]any{"message": "halfway", "leaseSeconds": 1}, []string{"leaseSeconds"}},
		// Unknown keys are refused on every lease call, as on every body.
		{held + "heartbeat", map[string]any{"progres": 5}, []string{"progres"}},
		{held + "heartbeat", map[string]any{"progress": 101, "extra": 1}, []string{"progress", "extra"}},
		{held + "release", map[string]any{"reasn": "x"}, []string{"reasn"}},
		{held + "complete", map[string]any{"reslt": 1}, []string{"reslt"}},
		{held + "fail", map[string]any{"error": "x", "retryable": true, "extra": 1}, []string{"extra"}},
		// A key is a field only as spelled (encoding/json would take any case).
		{held + "heartbeat", map[string]any{"PROGRESS": 5}, []string{"PROGRESS"}},
		{held + "heartbeat", map[string]any{"leaseseconds": 60, "Message": "m"}, []string{"leaseseconds", "Message"}},
		{held + "release", map[string]any{"Reason": "x"}, []string{"Reason"}},
		{held + "complete", map[string]any{"RESULT": 1}, []string{"RESULT"}},
		{held + "fail", map[string]any{"Error": "x", "retryable": true}, []string{"Error", "error"}},
		{"/v1/leases", map[string]any{"Queues": []string{"q"}, "max": 1, "leaseSeconds": 30, "workerId": "w"}, []string{"Queues", "queues"}},
		{held + "fail", map[string]any{"error": strings.Repeat("e", remote.ErrorMaxBytes+1)}, []string{"error", "retryable"}},
		{"/v1/leases", map[string]any{"queues": []string{"q"}, "max": 0, "waitSeconds": 31, "leaseSeconds": 4, "workerId": "w"},
			[]string{"max", "waitSeconds", "leaseSeconds"}},
		{"/v1/leases", map[string]any{"queues": []string{"q"}, "max": 101}, []string{"max", "workerId", "leaseSeconds"}},
		{"/v1/leases", map[string]any{"queues": []string{"bad queue", "q", "also bad"}, "max": 0, "leaseSeconds": 30, "workerId": "w"},
			[]string{"queues[0]", "queues[2]", "max"}},
	} {
		p := b.do(t, docket.RoleWorker, "POST", c.path, c.body).Problem(t, http.StatusBadRequest)
		got := make([]string, len(p.Errors))
		for i, e := range p.Errors {
			got[i] = e.Field
		}
		require.ElementsMatch(t, c.fields, got, "%s %v", c.path, c.body)
	}
	b.do(t, docket.RoleWorker, "POST", "/v1/leases", "{}", "Content-Type", "text/plain").Problem(t, http.StatusUnsupportedMediaType)
	// Only application/json is JSON: not every type that begins with it.
	for _, ct := range []string{"application/jsonl", "application/json-patch+json", "application/json;;"} {
		b.do(t, docket.RoleWorker, "POST", "/v1/leases", "{}", "Content-Type", ct).Problem(t, http.StatusUnsupportedMediaType)
	}
	// A compressed body is a 415 that says so (it was a 400 "malformed
	// JSON at byte 1: invalid character"), on every body a client sends.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(`{"queues":["q"],"leaseSeconds":30,"workerId":"w"}`))
	require.NoError(t, zw.Close())
	for _, path := range []string{"/v1/leases", "/v1/leases/0192f5a0-0000-7000-8000-000000000000.1/complete", "/v1/workflows/wf/runs:batch"} {
		r := b.do(t, docket.RoleAdmin, "POST", path, gz.String(), "Content-Encoding", "gzip")
		p := r.Problem(t, http.StatusUnsupportedMediaType)
		require.Contains(t, p.Detail, `Content-Encoding "gzip"`, path)
		require.Equal(t, "identity", r.Header.Get("Accept-Encoding"), path)
	}
	r0 := b.do(t, docket.RoleWorker, "POST", "/v1/leases", ok, "Content-Encoding", "identity")
	require.Equal(t, http.StatusOK, r0.Status, string(r0.Body))
	for _, ct := range []string{"application/json; charset=utf-8", "Application/JSON"} {
		p := b.do(t, docket.RoleWorker, "POST", "/v1/leases", "{}", "Content-Type", ct).Problem(t, http.StatusBadRequest)
		require.Equal(t, "queues", p.Errors[0].Field, ct)
	}

	// Only workers and admins speak the lease protocol.
	for role, status := range map[docket.Role]int{
		docket.RoleAdmin: 200, docket.RoleWorker: 200, docket.RoleProducer: 403, docket.RoleViewer: 403, "": 401,
	} {
		r := b.do(t, role, "POST", "/v1/leases", ok)
		require.Equal(t, status, r.Status, "role %q: %s", role, r.Body)
	}
	r := b.do(t, "", "POST", "/v1/leases", ok, "Authorization", "Bearer dk_wrong")
	require.Equal(t, http.StatusUnauthorized, r.Status)
	require.True(t, strings.HasPrefix(r.Header.Get("Content-Type"), "application/problem+json"))

	// Nothing due: an empty list, after waiting.
	r = b.do(t, docket.RoleWorker, "POST", "/v1/leases", with("waitSeconds", 1))
	require.Equal(t, http.StatusOK, r.Status)
	var resp remote.LeaseResponse
	require.NoError(t, json.Unmarshal(r.Body, &resp))
	require.Empty(t, resp.Leases)
	require.Equal(t, "[]", string(mustRaw(t, r.Body, "leases")), "an empty list, not null")
}

func mustRaw(t *testing.T, body []byte, key string) json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(body, &m))
	return m[key]
}

// TestLeaseIDOutOfRange: a lease id whose attempt no job can reach (beyond
// the database's 32-bit attempt counter) is malformed on every backend,
// not a database error.
func TestLeaseIDOutOfRange(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		for _, action := range []string{"heartbeat", "complete", "fail", "release"} {
			var body any
			if action == "fail" {
				body = map[string]any{"error": "x", "retryable": true}
			}
			for _, attempt := range []string{"2147483648", "9223372036854775807"} {
				p := b.do(t, docket.RoleWorker, "POST", "/v1/leases/0192f5a0-0000-7000-8000-000000000000."+attempt+"/"+action, body).Problem(t, http.StatusBadRequest)
				require.Equal(t, "leaseId", p.Errors[0].Field, attempt)
			}
		}
	})
}

// TestLeaseTextWithNUL: a worker's error, release reason or progress
// message holding NUL (a program's output, say) is recorded, the NUL as
// U+FFFD, on every backend; PostgreSQL refused it (a 500, the failure
// not recorded, the heartbeat's lease renewed but its progress not).
func TestLeaseTextWithNUL(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		ctx := context.Background()
		for range 2 {
			_, err := b.client.Insert(ctx, docket.RawArgs{Type: "remote.echo"}, &docket.InsertOpts{MaxAttempts: 3})
			require.NoError(t, err)
		}
		leases := b.lease(t, 2)
		require.Len(t, leases, 2)
		r := b.do(t, docket.RoleWorker, "POST", "/v1/leases/"+leases[0].LeaseID+"/heartbeat", `{"progress": 10, "message": "a\u0000b"}`)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		r = b.do(t, docket.RoleWorker, "POST", "/v1/leases/"+leases[0].LeaseID+"/fail", `{"error": "exit 1: \u0000\u0001", "retryable": true}`)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		row, err := b.client.Get(ctx, leases[0].JobID)
		require.NoError(t, err)
		require.Equal(t, docket.JobStateRetry, row.State)
		require.Equal(t, "exit 1: \uFFFD\u0001", row.LastError)
		r = b.do(t, docket.RoleWorker, "POST", "/v1/leases/"+leases[1].LeaseID+"/release", `{"reason": "\u0000"}`)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		require.Equal(t, "\uFFFD", mustAttempts(t, b, &docket.JobRow{ID: leases[1].JobID})[0].Error)
	})
}

// TestJSONNumbersWrittenOutInFull: PostgreSQL's jsonb keeps a number as a
// numeric and prints it in full, so a payload of 1e131072 failed the
// insert (a 500) and 1e131071, eight bytes, came back from every read as
// 131,072 digits. A number of more than 400 digits written out in full is
// refused as a payload and as a result, on every backend, naming the
// field; every float64 passes and comes back as the same float64.
func TestJSONNumbersWrittenOutInFull(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		for _, n := range []string{"1e131072", "1e131071", "1e400", "1e-400", "0e10000000000000000000"} {
			p := b.do(t, docket.RoleProducer, "POST", "/v1/jobs", `{"jobType":"remote.echo","payload":{"n":`+n+`}}`).Problem(t, http.StatusBadRequest)
			require.Equal(t, "payload", p.Errors[0].Field, n)
			require.Contains(t, p.Errors[0].Message, "400 digits", n)
		}
		const floats = `[1.7976931348623157e308,-4.9406564584124654e-324,5e-324,1e-300,123456789012345678901234567890]`
		r := b.do(t, docket.RoleProducer, "POST", "/v1/jobs", `{"jobType":"remote.echo","payload":`+floats+`}`)
		require.Equal(t, http.StatusAccepted, r.Status, string(r.Body))
		leases := b.lease(t, 1)
		require.Len(t, leases, 1)
		var want, got []float64
		require.NoError(t, json.Unmarshal([]byte(floats), &want))
		require.NoError(t, json.Unmarshal(leases[0].Payload, &got))
		require.Equal(t, want, got)

		path := "/v1/leases/" + leases[0].LeaseID + "/complete"
		p := b.do(t, docket.RoleWorker, "POST", path, `{"result":{"n":[1,1e131072]}}`).Problem(t, http.StatusBadRequest)
		require.Equal(t, "result", p.Errors[0].Field)
		r = b.do(t, docket.RoleWorker, "POST", path, `{"result":{"n":1.7976931348623157e308}}`)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	})
}

// manyQueues names n queues.
func manyQueues(n int) []string {
	qs := make([]string, n)
	for i := range qs {
		qs[i] = fmt.Sprintf("q%d", i)
	}
	return qs
}

// TestLeaseIDNeedsItsToken: a lease id made up from a job's id and attempt
// (any reader sees the id; the attempt is 1 on a first run) renews, ends and
// releases nothing: 409 on each call, and the job keeps its lease; the id
// POST /v1/leases gave works.
func TestLeaseIDNeedsItsToken(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		b.insertJob(t, "remote.echo", nil)
		leases := b.lease(t, 1)
		require.Len(t, leases, 1)
		made := leases[0].JobID.String() + ".1"
		for _, call := range []struct {
			action string
			body   any
		}{
			{"heartbeat", map[string]any{"message": "forged", "leaseSeconds": 3600}},
			{"complete", map[string]any{"result": map[string]any{"forged": true}}},
			{"fail", map[string]any{"error": "forged", "retryable": false}},
			{"release", map[string]any{"reason": "forged"}},
		} {
			p := b.do(t, docket.RoleWorker, "POST", "/v1/leases/"+made+"/"+call.action, call.body).Problem(t, http.StatusConflict)
			// Such an id is what a worker holds across an upgrade from a
			// docket before lease tokens: the answer says so.
			require.Contains(t, p.Type, "lease-lost")
			require.Contains(t, p.Detail, "the lease id has no token: an older docket gave it", call.action)
			// Another lease's token is refused as lost, nothing more said.
			forged := made + "." + strings.SplitN(leases[0].LeaseID, ".", 3)[2] + "x"
			p = b.do(t, docket.RoleWorker, "POST", "/v1/leases/"+forged+"/"+call.action, call.body).Problem(t, http.StatusConflict)
			require.Contains(t, p.Detail, "the lease is no longer held", call.action)
		}
		job := b.do(t, docket.RoleAdmin, "GET", "/v1/jobs/"+leases[0].JobID.String()+"?include=attempts", nil)
		require.Equal(t, http.StatusOK, job.Status)
		var view struct {
			State           string    `json:"status"`
			ProgressMessage *string   `json:"progressMessage"`
			LeaseExpiresAt  time.Time `json:"leaseExpiresAt"`
		}
		job.JSON(t, &view)
		require.Equal(t, "RUNNING", view.State, "not ended by a made-up lease id")
		require.Nil(t, view.ProgressMessage)
		require.WithinDuration(t, leases[0].ExpiresAt, view.LeaseExpiresAt, time.Second, "the lease was not renewed")
		r := b.do(t, docket.RoleWorker, "POST", "/v1/leases/"+leases[0].LeaseID+"/complete", nil)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	})
}

// TestLeaseTokenNotLogged: a lease call that fails on the server is logged
// with its path, but without the lease id's token, which proves the lease
// to whoever holds it (docs/api.md, Leases): the job id and attempt are
// logged, the token is not.
func TestLeaseTokenNotLogged(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		var logs syncBuffer
		b := setup(t, backend, func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
		_, err := b.client.Insert(context.Background(), remoteArgs{Text: "a"}, nil)
		require.NoError(t, err)
		leases := b.lease(t, 1)
		require.Len(t, leases, 1)
		id := leases[0].LeaseID
		parts := strings.SplitN(id, ".", 3)
		require.Len(t, parts, 3, "<job id>.<attempt>.<token>")
		token := parts[2]
		require.NotEmpty(t, token)

		require.NoError(t, b.client.Close()) // every call now fails on the server
		for _, action := range []string{"heartbeat", "complete"} {
			r := b.do(t, docket.RoleWorker, "POST", "/v1/leases/"+id+"/"+action, map[string]any{})
			require.GreaterOrEqual(t, r.Status, 500, string(r.Body))
		}
		log := logs.String()
		require.Contains(t, log, "request failed")
		require.Contains(t, log, "/v1/leases/"+leases[0].JobID.String()+".1.", "the path is logged")
		require.NotContains(t, log, token, "the lease's token is not")
	})
}

// TestLeaseScopedKey: a worker key scoped to queues leases only from
// them: a request naming none leases from all of them, one naming
// another queue is 403 naming queues (and those queues), nothing leased;
// it cannot renew, complete, fail or release the lease of a job outside
// them (403 naming leaseId, the job untouched), while its own leases work
// as any; keys of any queue behave as before (queues required).
func TestLeaseScopedKey(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		ctx := context.Background()
		scoped, _, err := b.client.CreateWorkerKey(ctx, "thumbs", []string{"images", "video"})
		require.NoError(t, err)
		as := func(secret string) []string { return []string{"Authorization", "Bearer " + secret} }
		var images, video, mail []uuid.UUID
		for _, q := range []string{"images", "video", "mail", "images", "mail"} {
			res, err := b.client.Insert(ctx, docket.RawArgs{Type: "t", Payload: json.RawMessage(`{"secret":"` + q + `"}`)}, &docket.InsertOpts{Queue: q})
			require.NoError(t, err)
			switch q {
			case "images":
				images = append(images, res.Job.ID)
			case "video":
				video = append(video, res.Job.ID)
			default:
				mail = append(mail, res.Job.ID)
			}
		}
		lease := func(secret string, body map[string]any) *response {
			t.Helper()
			body["leaseSeconds"], body["workerId"], body["max"] = 60, "w", 10
			return b.do(t, "", "POST", "/v1/leases", body, as(secret)...)
		}
		for _, tc := range []struct {
			queues  []string
			outside string
		}{{[]string{"mail"}, "mail"}, {[]string{"images", "mail", "other", "mail"}, "mail, other"}} {
			p := lease(scoped, map[string]any{"queues": tc.queues}).Problem(t, http.StatusForbidden)
			require.Equal(t, []string{"queues"}, problemFields(p))
			require.Equal(t, "this key may lease only from images, video, not from "+tc.outside, p.Errors[0].Message)
		}
		for _, id := range append(append(images, video...), mail...) {
			row, err := b.client.Get(ctx, id)
			require.NoError(t, err)
			require.Equal(t, docket.JobStateQueued, row.State, "nothing leased by a refused request")
		}
		// No queue named: the key's queues.
		r := lease(scoped, map[string]any{})
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		var got remote.LeaseResponse
		r.JSON(t, &got)
		var leased []uuid.UUID
		for _, l := range got.Leases {
			require.Contains(t, []string{"images", "video"}, l.Queue)
			leased = append(leased, l.JobID)
		}
		require.ElementsMatch(t, append(append([]uuid.UUID{}, images...), video...), leased)
		own := got.Leases[0].LeaseID

		// A key of any queue: queues still required; it leases mail.
		p := lease(b.keys[docket.RoleWorker], map[string]any{}).Problem(t, http.StatusBadRequest)
		require.Equal(t, []string{"queues"}, problemFields(p))
		r = lease(b.keys[docket.RoleWorker], map[string]any{"queues": []string{"mail"}})
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		var other remote.LeaseResponse
		r.JSON(t, &other)
		require.Len(t, other.Leases, 2)
		foreign := other.Leases[0]
		for _, action := range []struct {
			path string
			body any
		}{
			{"heartbeat", map[string]any{"progress": 50}},
			{"complete", map[string]any{"result": map[string]any{"stolen": true}}},
			{"fail", map[string]any{"error": "x", "retryable": false}},
			{"release", map[string]any{}},
		} {
			p := b.do(t, "", "POST", "/v1/leases/"+foreign.LeaseID+"/"+action.path, action.body, as(scoped)...).Problem(t, http.StatusForbidden)
			require.Equal(t, []string{"leaseId"}, problemFields(p), action.path)
		}
		row, err := b.client.Get(ctx, foreign.JobID)
		require.NoError(t, err)
		require.Equal(t, docket.JobStateRunning, row.State, "untouched")
		require.Equal(t, foreign.Attempt, row.Attempt)
		require.Zero(t, row.Progress)
		// The holder of any queue ends it as usual.
		r = b.do(t, docket.RoleWorker, "POST", "/v1/leases/"+foreign.LeaseID+"/complete", map[string]any{})
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))

		// Its own leases: renewed and ended as any.
		r = b.do(t, "", "POST", "/v1/leases/"+own+"/heartbeat", map[string]any{"progress": 10}, as(scoped)...)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		r = b.do(t, "", "POST", "/v1/leases/"+own+"/complete", map[string]any{}, as(scoped)...)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		// A lease id of no job is refused as for any key.
		none := b.do(t, "", "POST", "/v1/leases/0192f5a0-0000-7000-8000-000000000000.1.x/complete", map[string]any{}, as(scoped)...).Problem(t, http.StatusConflict)
		// A forged token for a job in another queue: the same 409, so the
		// key learns nothing of the job (the token is checked before any
		// read of it).
		for _, path := range []string{"heartbeat", "complete"} {
			forged := b.do(t, "", "POST", "/v1/leases/"+other.Leases[1].JobID.String()+".1.x/"+path, map[string]any{}, as(scoped)...).Problem(t, http.StatusConflict)
			require.Equal(t, none.Type, forged.Type, path)
			require.Equal(t, none.Detail, forged.Detail, path)
		}
	})
}
