package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// approvalWorkflow needs no worker: a signal step, then a job step whose
// job just waits in its queue.
const approvalWorkflow = `{"steps": [
  {"name": "approve", "signal": {"timeout": "1h"}},
  {"name": "ship", "after": ["approve"], "if": "steps.approve.output.ok", "job": {"type": "ship"}}]}`

func startRun(t *testing.T, b *bundle, name string, body any, status int, headers ...string) *startRunResponse {
	t.Helper()
	r := b.do(t, docket.RoleProducer, "POST", "/v1/workflows/"+name+"/runs", body, headers...)
	require.Equal(t, status, r.Status, string(r.Body))
	var v startRunResponse
	r.JSON(t, &v)
	return &v
}

func getRun(t *testing.T, b *bundle, id fmt.Stringer) *runDetail {
	t.Helper()
	r := b.do(t, docket.RoleViewer, "GET", "/v1/runs/"+id.String(), nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var v runDetail
	r.JSON(t, &v)
	return &v
}

func TestRunStartGetAndOperations(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		putWorkflow(t, b, docket.RoleProducer, "approval", approvalWorkflow, http.StatusCreated)

		run := startRun(t, b, "approval", `{"input": {"order": 7}, "idempotencyKey": "o-7"}`, http.StatusAccepted)
		require.False(t, run.Existing)
		require.Equal(t, docket.RunRunning, run.Status)
		require.Equal(t, "approval", run.Workflow)
		require.Equal(t, 1, run.Version)
		require.JSONEq(t, `{"order": 7}`, string(run.Input))
		// The same key, in the header this time: the same run.
		again := startRun(t, b, "approval", `{"input": {"order": 7}}`, http.StatusAccepted, "Idempotency-Key", "o-7")
		require.True(t, again.Existing)
		require.Equal(t, run.RunID, again.RunID)
		p := b.do(t, docket.RoleProducer, "POST", "/v1/workflows/approval/runs", `{"idempotencyKey": "a"}`, "Idempotency-Key", "b").Problem(t, http.StatusBadRequest)
		require.Equal(t, "idempotencyKey", p.Errors[0].Field)
		// A bad header and a bad body: one problem names them all.
		p = b.do(t, docket.RoleProducer, "POST", "/v1/workflows/approval/runs", `{"version": -1, "extra": 1}`, "Idempotency-Key", strings.Repeat("k", 300)).Problem(t, http.StatusBadRequest)
		require.ElementsMatch(t, []string{"extra", "idempotencyKey", "version"}, problemFields(p), p.Detail)
		p = b.do(t, docket.RoleProducer, "POST", "/v1/workflows/approval/runs", `{"version": -1, "idempotencyKey": "a"}`, "Idempotency-Key", "b").Problem(t, http.StatusBadRequest)
		require.ElementsMatch(t, []string{"idempotencyKey", "version"}, problemFields(p), p.Detail)
		p = b.do(t, docket.RoleProducer, "POST", "/v1/workflows/approval/runs", nil, "Idempotency-Key", strings.Repeat("k", 300)).Problem(t, http.StatusBadRequest)
		require.Equal(t, []string{"idempotencyKey"}, problemFields(p), p.Detail)
		// No body: a run on null.
		bare := startRun(t, b, "approval", nil, http.StatusAccepted)
		require.Equal(t, "null", string(bare.Input))

		// GET shows every step, the unreleased one PENDING.
		got := getRun(t, b, run.RunID)
		require.Len(t, got.Steps, 2)
		require.Equal(t, "approve", got.Steps[0].Name)
		require.Equal(t, docket.StepRunning, got.Steps[0].Status)
		require.Equal(t, "signal", got.Steps[0].Kind)
		require.NotNil(t, got.Steps[0].StartedAt)
		require.Equal(t, "ship", got.Steps[1].Name)
		require.Equal(t, docket.StepPending, got.Steps[1].Status)
		require.Nil(t, got.Steps[1].JobID)
		require.Nil(t, got.FinishedAt)

		// Pause, pause again (no-op), signal still lands, resume releases.
		r := b.do(t, docket.RoleProducer, "POST", "/v1/runs/"+run.RunID.String()+"/pause", nil)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		r = b.do(t, docket.RoleProducer, "POST", "/v1/runs/"+run.RunID.String()+"/pause", nil)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		var v runView
		r.JSON(t, &v)
		require.Equal(t, docket.RunPaused, v.Status)
		r = b.do(t, docket.RoleProducer, "POST", "/v1/runs/"+run.RunID.String()+"/signals/approve", `{"output": {"ok": true}}`)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		require.Equal(t, docket.StepPending, getRun(t, b, run.RunID).Steps[1].Status, "no step is released while PAUSED")
		r = b.do(t, docket.RoleAdmin, "POST", "/v1/runs/"+run.RunID.String()+"/resume", nil)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		got = getRun(t, b, run.RunID)
		require.Equal(t, docket.StepRunning, got.Steps[1].Status)
		require.NotNil(t, got.Steps[1].JobID, "the job step's job")
		require.JSONEq(t, `{"ok": true}`, string(got.Steps[0].Output))

		// A second signal, a signal to a job step: 409.
		b.do(t, docket.RoleProducer, "POST", "/v1/runs/"+run.RunID.String()+"/signals/approve", `{"output": 1}`).Problem(t, http.StatusConflict)
		b.do(t, docket.RoleProducer, "POST", "/v1/runs/"+run.RunID.String()+"/signals/ship", nil).Problem(t, http.StatusConflict)
		// A step the workflow does not have: 404 naming it, as an unknown
		// run is.
		p = b.do(t, docket.RoleProducer, "POST", "/v1/runs/"+run.RunID.String()+"/signals/nosuch", nil).Problem(t, http.StatusNotFound)
		require.Equal(t, fmt.Sprintf("run %s has no step \"nosuch\"", run.RunID), p.Detail)
		// Retry of a RUNNING run is a no-op; cancel; cancel again no-op;
		// then resume, pause and retry are 409.
		r = b.do(t, docket.RoleProducer, "POST", "/v1/runs/"+run.RunID.String()+"/retry", nil)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		for range 2 {
			r = b.do(t, docket.RoleProducer, "POST", "/v1/runs/"+run.RunID.String()+"/cancel", nil)
			require.Equal(t, http.StatusOK, r.Status, string(r.Body))
			r.JSON(t, &v)
			require.Equal(t, docket.RunCanceled, v.Status, "the step's job had not started: canceled at once")
		}
		for _, op := range []string{"resume", "pause", "retry"} {
			b.do(t, docket.RoleProducer, "POST", "/v1/runs/"+run.RunID.String()+"/"+op, nil).Problem(t, http.StatusConflict)
		}
		got = getRun(t, b, run.RunID)
		require.NotNil(t, got.FinishedAt)
		require.Equal(t, docket.StepCanceled, got.Steps[1].Status)
		// The step's CANCELED job is not retried on its own, nor is its
		// CANCELED run: the problem says to start a new one.
		p = b.do(t, docket.RoleProducer, "POST", "/v1/jobs/"+got.Steps[1].JobID.String()+"/retry", nil).Problem(t, http.StatusConflict)
		require.Contains(t, p.Type, "run-conflict")
		require.Contains(t, p.Detail, "is CANCELED, which is not retried: start a new run")

		// Errors: unknown workflow and version 404, bad fields 400, no run
		// 404, viewers may not act.
		b.do(t, docket.RoleProducer, "POST", "/v1/workflows/nope/runs", `{}`).Problem(t, http.StatusNotFound)
		b.do(t, docket.RoleProducer, "POST", "/v1/workflows/approval/runs", `{"version": 9}`).Problem(t, http.StatusNotFound)
		p = b.do(t, docket.RoleProducer, "POST", "/v1/workflows/approval/runs", `{"input": 1, "idempotencyKey": "`+strings.Repeat("k", 300)+`", "version": -1, "extra": 1}`).Problem(t, http.StatusBadRequest)
		var fields []string
		for _, fe := range p.Errors {
			fields = append(fields, fe.Field)
		}
		require.ElementsMatch(t, []string{"extra", "idempotencyKey", "version"}, fields, p.Detail)
		for _, bad := range []string{`{"input": "a\u0000b"}`, `{"input": "a\ud800b"}`, "{\"input\": \"a\xffb\"}"} {
			p = b.do(t, docket.RoleProducer, "POST", "/v1/workflows/approval/runs", bad).Problem(t, http.StatusBadRequest)
			require.Equal(t, "input", p.Errors[0].Field, bad)
		}
		p = b.do(t, docket.RoleProducer, "POST", "/v1/workflows/approval/runs", `{"idempotencyKey": "a\u0000b"}`).Problem(t, http.StatusBadRequest)
		require.Equal(t, "idempotencyKey", p.Errors[0].Field)
		b.do(t, docket.RoleViewer, "GET", "/v1/runs/0190c3a5-0000-7000-8000-000000000000", nil).Problem(t, http.StatusNotFound)
		b.do(t, docket.RoleViewer, "GET", "/v1/runs/x", nil).Problem(t, http.StatusBadRequest)
		b.do(t, docket.RoleProducer, "POST", "/v1/runs/0190c3a5-0000-7000-8000-000000000000/cancel", nil).Problem(t, http.StatusNotFound)
		b.do(t, docket.RoleViewer, "POST", "/v1/workflows/approval/runs", `{}`).Problem(t, http.StatusForbidden)
		b.do(t, docket.RoleViewer, "POST", "/v1/runs/"+run.RunID.String()+"/cancel", nil).Problem(t, http.StatusForbidden)
		b.do(t, docket.RoleWorker, "GET", "/v1/runs", nil).Problem(t, http.StatusForbidden)
	})
}

func TestRunStartConcurrentKey(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		putWorkflow(t, b, docket.RoleProducer, "approval", approvalWorkflow, http.StatusCreated)
		var wg sync.WaitGroup
		ids := make([]string, 20)
		for i := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := b.do(t, docket.RoleProducer, "POST", "/v1/workflows/approval/runs", `{"input": 1}`, "Idempotency-Key", "same")
				if r.Status == http.StatusAccepted {
					var v startRunResponse
					_ = json.Unmarshal(r.Body, &v)
					ids[i] = v.RunID.String()
				} else {
					ids[i] = fmt.Sprintf("status %d: %s", r.Status, r.Body)
				}
			}()
		}
		wg.Wait()
		for _, id := range ids {
			require.Equal(t, ids[0], id)
		}
		runs, err := b.client.RunList(t.Context(), docket.RunListParams{Workflow: "approval"})
		require.NoError(t, err)
		require.Len(t, runs, 1)
	})
}

func TestRunList(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		putWorkflow(t, b, docket.RoleProducer, "approval", approvalWorkflow, http.StatusCreated)
		putWorkflow(t, b, docket.RoleProducer, "other", approvalWorkflow, http.StatusCreated)
		var ids []string
		for i := range 5 {
			ids = append(ids, startRun(t, b, "approval", map[string]any{"input": i}, http.StatusAccepted).RunID.String())
		}
		startRun(t, b, "other", nil, http.StatusAccepted)
		r := b.do(t, docket.RoleProducer, "POST", "/v1/runs/"+ids[1]+"/pause", nil)
		require.Equal(t, http.StatusOK, r.Status)

		// Pages of 2, newest first, within one workflow.
		var seen []string
		next := "/v1/runs?workflow=approval&limit=2"
		for next != "" {
			var page runsResponse
			b.do(t, docket.RoleViewer, "GET", next, nil).JSON(t, &page)
			require.LessOrEqual(t, len(page.Items), 2)
			for _, it := range page.Items {
				require.Equal(t, "approval", it.Workflow)
				seen = append(seen, it.RunID.String())
			}
			next = ""
			if page.NextCursor != nil {
				next = "/v1/runs?workflow=approval&limit=2&cursor=" + *page.NextCursor
			}
		}
		require.Equal(t, []string{ids[4], ids[3], ids[2], ids[1], ids[0]}, seen)

		var page runsResponse
		b.do(t, docket.RoleViewer, "GET", "/v1/runs?state=paused,SUCCEEDED", nil).JSON(t, &page)
		require.Len(t, page.Items, 1)
		require.Equal(t, ids[1], page.Items[0].RunID.String())
		b.do(t, docket.RoleViewer, "GET", "/v1/runs?createdAfter=2999-01-01T00:00:00Z", nil).JSON(t, &page)
		require.Empty(t, page.Items)
		b.do(t, docket.RoleViewer, "GET", "/v1/runs?createdBefore=2999-01-01T00:00:00Z", nil).JSON(t, &page)
		require.Len(t, page.Items, 6)
		// Nothing was created before year 1: the instant Go calls zero is
		// a filter as any other (it listed every run), and so is its
		// spelling in another offset.
		for _, at := range []string{"0001-01-01T00:00:00Z", "0001-01-01T01:00:00%2B01:00"} {
			page = runsResponse{}
			b.do(t, docket.RoleViewer, "GET", "/v1/runs?createdBefore="+at, nil).JSON(t, &page)
			require.Empty(t, page.Items, at)
		}
		b.do(t, docket.RoleViewer, "GET", "/v1/runs?createdAfter=0001-01-01T00:00:00Z", nil).JSON(t, &page)
		require.Len(t, page.Items, 6)

		p := b.do(t, docket.RoleViewer, "GET", "/v1/runs?state=DONE&createdAfter=yesterday&limit=0&cursor=zz&nope=1", nil).Problem(t, http.StatusBadRequest)
		require.Equal(t, []string{"nope", "state", "createdAfter", "limit", "cursor"}, problemFields(p), "an unknown parameter first, with the bad values: %s", p.Detail)
		p = b.do(t, docket.RoleViewer, "GET", "/v1/runs?state=DONE&createdAfter=yesterday&limit=0&cursor=zz", nil).Problem(t, http.StatusBadRequest)
		var fields []string
		for _, fe := range p.Errors {
			fields = append(fields, fe.Field)
		}
		require.ElementsMatch(t, []string{"state", "createdAfter", "limit", "cursor"}, fields, p.Detail)
	})
}

func TestRunBatch(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		putWorkflow(t, b, docket.RoleProducer, "approval", approvalWorkflow, http.StatusCreated)
		batch := func(ct, query, body string) *response {
			return b.do(t, docket.RoleProducer, "POST", "/v1/workflows/approval/runs:batch"+query, body, "Content-Type", ct)
		}
		count := func() int {
			n := 0
			p := docket.RunListParams{Workflow: "approval", Limit: 1000}
			for {
				runs, err := b.client.RunList(t.Context(), p)
				require.NoError(t, err)
				n += len(runs)
				if len(runs) < p.Limit {
					return n
				}
				p.Before = runs[len(runs)-1].ID
			}
		}

		// JSON.
		r := batch("application/json", "", `{"runs": [{"input": 1, "idempotencyKey": "j1"}, {"input": {"a": [2]}}]}`)
		require.Equal(t, http.StatusAccepted, r.Status, string(r.Body))
		var res runBatchResponse
		r.JSON(t, &res)
		require.Equal(t, 2, res.Started)
		require.Len(t, res.Items, 2)
		require.JSONEq(t, `{"a": [2]}`, string(getRun(t, b, res.Items[1].RunID).Input))
		// JSON lines, one key again.
		r = batch("application/x-ndjson", "", "{\"input\": 1, \"idempotencyKey\": \"j1\"}\n\n{\"input\": 3}\n")
		require.Equal(t, http.StatusAccepted, r.Status, string(r.Body))
		r.JSON(t, &res)
		require.Equal(t, 1, res.Started)
		require.Equal(t, 1, res.Existing)
		require.True(t, res.Items[0].Existing)
		// CSV: the header keys the input; keyColumn makes the key.
		r = batch("text/csv; charset=utf-8", "?keyColumn=id", "\xef\xbb\xbfid,left,right\np1,\"a, b\",c\np2,d,\"e \"\"f\"\"\"\n")
		require.Equal(t, http.StatusAccepted, r.Status, string(r.Body))
		r.JSON(t, &res)
		require.Equal(t, 2, res.Started)
		got := getRun(t, b, res.Items[1].RunID)
		require.Equal(t, `{"id":"p2","left":"d","right":"e \"f\""}`, string(got.Input), "header order kept")
		require.Equal(t, "p2", got.IdempotencyKey)
		require.Equal(t, 5, count())

		// More than one chunk (a transaction each): every run, in order.
		var lines strings.Builder
		for i := range runChunk*2 + 100 {
			fmt.Fprintf(&lines, "{\"input\": %d, \"idempotencyKey\": \"c%d\"}\n", i, i)
		}
		r = batch("application/x-ndjson", "", lines.String())
		require.Equal(t, http.StatusAccepted, r.Status)
		r.JSON(t, &res)
		require.Equal(t, runChunk*2+100, res.Started)
		for i, it := range res.Items {
			require.Equal(t, i, it.Index)
		}
		require.JSONEq(t, "2050", string(getRun(t, b, res.Items[2050].RunID).Input))
		require.Equal(t, "c2050", getRun(t, b, res.Items[2050].RunID).IdempotencyKey)
		require.Equal(t, 5+runChunk*2+100, count())

		// Bad runs: every one named, nothing written.
		p := batch("application/json", "", `{"runs": [{"input": 1}, 7, {"input": 1, "x": 2}, {"idempotencyKey": "d"}, {"idempotencyKey": "d"}]}`).Problem(t, http.StatusBadRequest)
		var fields []string
		for _, fe := range p.Errors {
			fields = append(fields, fe.Field)
		}
		require.Equal(t, []string{"runs[1]", "runs[2].x", "runs[4].idempotencyKey"}, fields, p.Detail)
		p = batch("application/json", "", `{"runs": [{"idempotencyKey": "d"}, {"idempotencyKey": "d"}, {"input": "\u0000"}]}`).Problem(t, http.StatusBadRequest)
		fields = nil
		for _, fe := range p.Errors {
			fields = append(fields, fe.Field)
		}
		require.Equal(t, []string{"runs[1].idempotencyKey", "runs[2].input"}, fields, p.Detail)
		p = batch("application/x-ndjson", "", "{\"input\": 1}\n[1]\n{\"input\": 1, \"idempotencyKey\": 5}\n").Problem(t, http.StatusBadRequest)
		require.Len(t, p.Errors, 2, p.Detail)
		require.Equal(t, "runs[1]", p.Errors[0].Field)
		require.Contains(t, p.Errors[0].Message, "line 2")
		require.Equal(t, "runs[2].idempotencyKey", p.Errors[1].Field)
		p = batch("text/csv", "", "a,b\n1,2\n3\n4,5,6\n").Problem(t, http.StatusBadRequest)
		require.Len(t, p.Errors, 2, p.Detail)
		require.Equal(t, "runs[1]", p.Errors[0].Field)
		require.Contains(t, p.Errors[0].Message, "line 3")
		// A broken quote is named by its row, the first row's too (it was
		// "the batch has no runs").
		for body, field := range map[string]string{"a,b\n\"1,2\n": "runs[0]", "a,b\n1,2\n3,\"4\n": "runs[1]"} {
			p = batch("text/csv", "", body).Problem(t, http.StatusBadRequest)
			require.Equal(t, []string{field}, problemFields(p), p.Detail)
			require.Contains(t, p.Errors[0].Message, "quote", p.Detail)
		}
		p = batch("text/csv", "", "a,a,\n1,2,3\n").Problem(t, http.StatusBadRequest)
		require.Len(t, p.Errors, 2, p.Detail)
		batch("text/csv", "?keyColumn=zz", "a\n1\n").Problem(t, http.StatusBadRequest)
		// An empty key cell would start a run without a key, which a
		// resent batch would start again.
		p = batch("text/csv", "?keyColumn=id", "id,x\np9,1\n,2\n").Problem(t, http.StatusBadRequest)
		require.Len(t, p.Errors, 1, p.Detail)
		require.Equal(t, "runs[1].idempotencyKey", p.Errors[0].Field)
		require.Contains(t, p.Errors[0].Message, "line 3")
		batch("application/json", "?keyColumn=a", `{"runs": [{}]}`).Problem(t, http.StatusBadRequest)
		batch("text/csv", "", "a\n").Problem(t, http.StatusBadRequest)
		batch("application/json", "", `{"runs": []}`).Problem(t, http.StatusBadRequest)
		batch("application/xml", "", `<runs/>`).Problem(t, http.StatusUnsupportedMediaType)
		batch("application/json", "?version=3", `{"runs": [{}]}`).Problem(t, http.StatusNotFound)
		// A version that does not exist, named by a run past the first
		// transaction: refused before any run starts (the first 1,000
		// were started, and the problem said there was no workflow).
		lines.Reset()
		for i := range runChunk {
			fmt.Fprintf(&lines, "{\"input\": %d}\n", i)
		}
		lines.WriteString("{\"input\": 0, \"version\": 9}\n")
		p = batch("application/x-ndjson", "", lines.String()).Problem(t, http.StatusNotFound)
		require.Contains(t, p.Detail, `workflow "approval" has no version 9`)
		require.Contains(t, p.Detail, fmt.Sprintf("runs[%d]", runChunk))
		require.NotContains(t, p.Detail, "were started")
		require.Equal(t, 5+runChunk*2+100, count(), "nothing was started")
		r = b.do(t, docket.RoleProducer, "POST", "/v1/workflows/nope/runs:batch", `{"runs": [{}]}`)
		r.Problem(t, http.StatusNotFound)
		require.Equal(t, 5+runChunk*2+100, count(), "nothing was written by a refused batch")
		b.do(t, docket.RoleViewer, "POST", "/v1/workflows/approval/runs:batch", `{"runs": [{}]}`).Problem(t, http.StatusForbidden)
	})
}

func TestRunEvents(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := eventsSetup(t, backend)
		putWorkflow(t, b, docket.RoleProducer, "approval", approvalWorkflow, http.StatusCreated)
		other := startRun(t, b, "approval", nil, http.StatusAccepted)
		run := startRun(t, b, "approval", `{"input": 1}`, http.StatusAccepted)
		r := b.do(t, docket.RoleProducer, "POST", "/v1/runs/"+run.RunID.String()+"/cancel", nil)
		require.Equal(t, http.StatusOK, r.Status)
		r = b.do(t, docket.RoleProducer, "POST", "/v1/runs/"+other.RunID.String()+"/cancel", nil)
		require.Equal(t, http.StatusOK, r.Status)

		s := b.stream(t, docket.RoleViewer, "/v1/runs/"+run.RunID.String()+"/events")
		// run created, approve created RUNNING, approve canceled, run canceled.
		evs := s.read(t, 4)
		var types []string
		for _, ev := range evs {
			types = append(types, ev.Event)
			require.Contains(t, ev.Data, run.RunID.String())
			require.NotContains(t, ev.Data, other.RunID.String())
		}
		require.Contains(t, types, "run.state_changed")
		require.Contains(t, types, "step.state_changed")
		var last struct {
			Data struct {
				To string `json:"to"`
			} `json:"data"`
		}
		require.NoError(t, json.Unmarshal([]byte(evs[len(evs)-1].Data), &last))
		require.Equal(t, "CANCELED", last.Data.To)

		only := b.stream(t, docket.RoleViewer, "/v1/runs/"+run.RunID.String()+"/events?types=run.state_changed")
		for _, ev := range only.read(t, 2) {
			require.Equal(t, "run.state_changed", ev.Event)
		}
		b.do(t, docket.RoleViewer, "GET", "/v1/runs/0190c3a5-0000-7000-8000-000000000000/events", nil).Problem(t, http.StatusNotFound)
		b.do(t, docket.RoleViewer, "GET", "/v1/runs/"+run.RunID.String()+"/events?types=nope", nil).Problem(t, http.StatusBadRequest)
		// A malformed Last-Event-ID is a 400 naming it (it was a 500),
		// with every other bad part; one not in the history is 410.
		p := b.do(t, docket.RoleViewer, "GET", "/v1/runs/"+run.RunID.String()+"/events", nil, "Last-Event-ID", "garbage").Problem(t, http.StatusBadRequest)
		require.Equal(t, []string{"Last-Event-ID"}, problemFields(p), p.Detail)
		p = b.do(t, docket.RoleViewer, "GET", "/v1/runs/42/events?types=nope&lastEventId=x", nil).Problem(t, http.StatusBadRequest)
		require.ElementsMatch(t, []string{"runId", "types", "lastEventId"}, problemFields(p), p.Detail)
		b.do(t, docket.RoleViewer, "GET", "/v1/runs/"+run.RunID.String()+"/events", nil, "Last-Event-ID", "999999-0").Problem(t, http.StatusGone)
		// job.state_changed is never about a run (its subject is the job):
		// it streamed nothing, for ever.
		p = b.getWithin(t, docket.RoleViewer, "/v1/runs/"+run.RunID.String()+"/events?types=job.state_changed").Problem(t, http.StatusBadRequest)
		require.Contains(t, p.Detail, "never in this stream, which carries only run.state_changed, step.state_changed")
	})
}

// TestRunRetryWhileDownstreamRuns: a FAILED run whose step "report"
// (all_done after the failed "a") still runs is not retried: 409
// run-conflict naming the step, nothing changed; once report ended, the
// retry is 200.
func TestRunRetryWhileDownstreamRuns(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		ctx := context.Background()
		putWorkflow(t, b, docket.RoleProducer, "downstream", `{"steps": [
		  {"name": "a", "job": {"type": "ds.a", "maxAttempts": 1}, "onFailure": "continue"},
		  {"name": "report", "after": ["a"], "trigger": "all_done", "job": {"type": "ds.report"}},
		  {"name": "boom", "after": ["a"], "trigger": "all_done", "job": {"type": "ds.boom", "maxAttempts": 1}}]}`, http.StatusCreated)
		run := startRun(t, b, "downstream", `{"input": {}}`, http.StatusAccepted)
		lease := func(queue string) *docket.Lease {
			t.Helper()
			ls, err := b.client.Lease(ctx, docket.LeaseParams{Queues: []string{queue}, Max: 1, Duration: time.Minute, WorkerID: "w"})
			require.NoError(t, err)
			require.Len(t, ls, 1)
			return ls[0]
		}
		_, err := b.client.LeaseFail(ctx, lease("ds.a").ID, "no", false)
		require.NoError(t, err)
		report := lease("ds.report") // runs on while boom fails the run
		_, err = b.client.LeaseFail(ctx, lease("ds.boom").ID, "boom", false)
		require.NoError(t, err)
		before := getRun(t, b, run.RunID)
		require.Equal(t, docket.RunFailed, before.Status)

		p := b.do(t, docket.RoleProducer, "POST", "/v1/runs/"+run.RunID.String()+"/retry", nil).Problem(t, http.StatusConflict)
		require.Contains(t, p.Type, "run-conflict")
		require.Contains(t, p.Detail, `step "report" is still RUNNING; retry after it ends, or force the retry (POST /v1/runs/`+run.RunID.String()+`/retry with {"force": true}`)
		require.Equal(t, before, getRun(t, b, run.RunID), "nothing changed")
		p = b.do(t, docket.RoleProducer, "POST", "/v1/runs/"+run.RunID.String()+"/retry", map[string]any{"force": false}).Problem(t, http.StatusConflict)
		require.Contains(t, p.Detail, `still RUNNING`, "force false is no force")
		p = b.do(t, docket.RoleProducer, "POST", "/v1/runs/"+run.RunID.String()+"/retry", map[string]any{"force": "yes", "forse": true}).Problem(t, http.StatusBadRequest)
		require.ElementsMatch(t, []string{"force", "forse"}, problemFields(p), "every bad field named")
		require.Equal(t, before, getRun(t, b, run.RunID), "nothing changed")

		if backend.Name == "sqlite" {
			// Once report ended, a plain retry goes.
			require.NoError(t, b.client.LeaseComplete(ctx, report.ID, json.RawMessage(`{}`)))
			r := b.do(t, docket.RoleProducer, "POST", "/v1/runs/"+run.RunID.String()+"/retry", nil)
			require.Equal(t, http.StatusOK, r.Status, string(r.Body))
			require.Equal(t, docket.RunRunning, getRun(t, b, run.RunID).Status)
			return
		}
		// Forced: report's job is asked to stop and every step runs
		// again, generation 2.
		r := b.do(t, docket.RoleProducer, "POST", "/v1/runs/"+run.RunID.String()+"/retry", map[string]any{"force": true})
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		after := getRun(t, b, run.RunID)
		require.Equal(t, docket.RunRunning, after.Status)
		hb, err := b.client.LeaseHeartbeat(ctx, report.ID, time.Minute, nil, "")
		require.NoError(t, err)
		require.True(t, hb.CancelRequested)
	})
}
