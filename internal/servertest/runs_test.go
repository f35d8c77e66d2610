package servertest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/servertest"
	"github.com/docket-run/docket/internal/testdb"
	"github.com/docket-run/docket/remote"
)

// The workflow runtime end to end: the real binary on each backend, runs
// driven over HTTP only, their job steps worked by a remote worker (the
// lease endpoints) in this test.

// e2eWorkflows are stored once per server.
var e2eWorkflows = map[string]string{
	"diamond": `{"steps": [
	  {"name": "top", "job": {"type": "e2e.echo"}},
	  {"name": "left", "after": ["top"], "job": {"type": "e2e.echo"}},
	  {"name": "right", "after": ["top"], "job": {"type": "e2e.echo"}},
	  {"name": "join", "after": ["left", "right"], "job": {"type": "e2e.echo"}}]}`,
	"fan": `{"steps": [
	  {"name": "list", "job": {"type": "e2e.items"}},
	  {"name": "each", "after": ["list"], "forEach": "steps.list.output.items", "job": {"type": "e2e.each"}},
	  {"name": "sum", "after": ["each"], "job": {"type": "e2e.sum"}}]}`,
	"cond": `{"steps": [
	  {"name": "check", "job": {"type": "e2e.echo"}},
	  {"name": "maybe", "after": ["check"], "if": "steps.check.output.go", "job": {"type": "e2e.echo"}}]}`,
	"failfast": `{"steps": [
	  {"name": "a", "job": {"type": "e2e.echo"}},
	  {"name": "bad", "after": ["a"], "job": {"type": "e2e.fail", "maxAttempts": 1}},
	  {"name": "tail", "after": ["bad"], "job": {"type": "e2e.echo"}},
	  {"name": "side", "after": ["a"], "job": {"type": "e2e.hold", "queue": "e2e.never"}}]}`,
	"failcont": `{"steps": [
	  {"name": "a", "job": {"type": "e2e.echo"}},
	  {"name": "bad", "after": ["a"], "onFailure": "continue", "job": {"type": "e2e.fail", "maxAttempts": 1}},
	  {"name": "tail", "after": ["bad"], "trigger": "all_done", "job": {"type": "e2e.echo"}}]}`,
	"hold": `{"steps": [
	  {"name": "first", "job": {"type": "e2e.hold", "queue": "e2e.manual"}},
	  {"name": "second", "after": ["first"], "job": {"type": "e2e.echo"}}]}`,
	"retry": `{"steps": [
	  {"name": "a", "job": {"type": "e2e.echo"}},
	  {"name": "b", "after": ["a"], "job": {"type": "e2e.flaky", "maxAttempts": 1}},
	  {"name": "c", "after": ["b"], "job": {"type": "e2e.echo"}},
	  {"name": "d", "after": ["a"], "job": {"type": "e2e.echo"}}]}`,
	"approval": `{"steps": [
	  {"name": "approve", "signal": {"timeout": "2s"}},
	  {"name": "after", "after": ["approve"], "job": {"type": "e2e.echo"}}]}`,
	"idem": `{"steps": [{"name": "wait", "signal": {"timeout": "1h"}}]}`,
}

// stepPayload is what a step job's payload holds.
type stepPayload struct {
	Run struct {
		ID    string `json:"id"`
		Step  string `json:"step"`
		Index int    `json:"index"`
	} `json:"run"`
	Input json.RawMessage `json:"input"`
	Steps map[string]struct {
		Output json.RawMessage `json:"output"`
	} `json:"steps"`
	Item json.RawMessage `json:"item"`
}

// e2eWorker leases the jobs of the automatic step types and works them
// until the test ends.
type e2eWorker struct {
	c       *remote.Client
	mu      sync.Mutex
	flaked  map[string]bool // runs whose flaky step failed once
	perStep map[string]int  // "run/step/index" → times worked
}

func startE2EWorker(t *testing.T, srv *servertest.Server, key string) *e2eWorker {
	c, err := remote.NewClient(srv.URL, key, nil)
	require.NoError(t, err)
	w := &e2eWorker{c: c, flaked: map[string]bool{}, perStep: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		max, wait, lease := 50, 1, 30
		for ctx.Err() == nil {
			leases, err := c.Lease(ctx, &remote.LeaseRequest{
				Queues: []string{"e2e.echo", "e2e.items", "e2e.each", "e2e.sum", "e2e.fail", "e2e.flaky"},
				Max:    &max, WaitSeconds: &wait, LeaseSeconds: &lease, WorkerID: "e2e",
			})
			if err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			for _, l := range leases {
				w.work(ctx, &l)
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

func (w *e2eWorker) work(ctx context.Context, l *remote.Lease) {
	var p stepPayload
	_ = json.Unmarshal(l.Payload, &p)
	w.mu.Lock()
	w.perStep[fmt.Sprintf("%s/%s/%d", p.Run.ID, p.Run.Step, p.Run.Index)]++
	flaked := w.flaked[p.Run.ID]
	if l.JobType == "e2e.flaky" {
		w.flaked[p.Run.ID] = true
	}
	w.mu.Unlock()
	var result any
	switch l.JobType {
	case "e2e.echo":
		n := 1.0
		for _, parent := range p.Steps {
			var out struct{ N float64 }
			_ = json.Unmarshal(parent.Output, &out)
			n += out.N
		}
		var in struct{ Go bool }
		_ = json.Unmarshal(p.Input, &in)
		result = map[string]any{"step": p.Run.Step, "n": n, "go": in.Go}
	case "e2e.items":
		var in struct{ N int }
		_ = json.Unmarshal(p.Input, &in)
		items := make([]int, in.N)
		for i := range items {
			items[i] = i
		}
		result = map[string]any{"items": items}
	case "e2e.each":
		var item int
		_ = json.Unmarshal(p.Item, &item)
		result = map[string]any{"n": item}
	case "e2e.sum":
		var outs []struct{ N int }
		_ = json.Unmarshal(p.Steps["each"].Output, &outs)
		sum := 0
		for _, o := range outs {
			sum += o.N
		}
		result = map[string]any{"sum": sum, "count": len(outs)}
	case "e2e.fail":
		_, _ = w.c.Fail(ctx, l.LeaseID, "boom", false)
		return
	case "e2e.flaky":
		if !flaked {
			_, _ = w.c.Fail(ctx, l.LeaseID, "flaky the first time", false)
			return
		}
		result = map[string]any{"step": p.Run.Step, "n": 1}
	}
	b, _ := json.Marshal(result)
	_ = w.c.Complete(ctx, l.LeaseID, b)
}

func (w *e2eWorker) worked(run, step string, index int) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.perStep[fmt.Sprintf("%s/%s/%d", run, step, index)]
}

// e2eRun is the part of a run the tests read.
type e2eRun struct {
	RunID           string          `json:"runId"`
	Status          string          `json:"status"`
	Output          json.RawMessage `json:"output"`
	Error           string          `json:"error"`
	CancelRequested bool            `json:"cancelRequested"`
	Existing        bool            `json:"existing"`
	Steps           []struct {
		Name       string          `json:"name"`
		Index      int             `json:"index"`
		Status     string          `json:"status"`
		Generation int             `json:"generation"`
		JobID      string          `json:"jobId"`
		Output     json.RawMessage `json:"output"`
		Error      string          `json:"error"`
	} `json:"steps"`
}

// stepStates maps "name" (index 0) to its status.
func (r *e2eRun) stepStates() map[string]string {
	out := map[string]string{}
	for _, s := range r.Steps {
		if s.Index == 0 {
			out[s.Name] = s.Status
		}
	}
	return out
}

type e2e struct {
	t   *testing.T
	srv *servertest.Server
	key string
}

func (e *e2e) start(workflow string, body any) string {
	e.t.Helper()
	r := e.srv.Do(e.t, e.key, "POST", "/v1/workflows/"+workflow+"/runs", body)
	require.Equal(e.t, http.StatusAccepted, r.Status, string(r.Body))
	var run e2eRun
	r.JSON(e.t, &run)
	return run.RunID
}

func (e *e2e) get(id string) *e2eRun {
	e.t.Helper()
	r := e.srv.Do(e.t, e.key, "GET", "/v1/runs/"+id, nil)
	require.Equal(e.t, http.StatusOK, r.Status, string(r.Body))
	var run e2eRun
	r.JSON(e.t, &run)
	return &run
}

func (e *e2e) op(id, op string, status int) *e2eRun {
	e.t.Helper()
	r := e.srv.Do(e.t, e.key, "POST", "/v1/runs/"+id+"/"+op, nil)
	require.Equal(e.t, status, r.Status, string(r.Body))
	var run e2eRun
	if status == http.StatusOK {
		r.JSON(e.t, &run)
	} else {
		require.Equal(e.t, "application/problem+json", r.Header.Get("Content-Type"))
	}
	return &run
}

// wait polls the run until it is in state.
func (e *e2e) wait(id, state string) *e2eRun {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		run := e.get(id)
		if run.Status == state {
			return run
		}
		require.True(e.t, time.Now().Before(deadline), "run %s is %s, not %s: %+v", id, run.Status, state, run.stepStates())
		time.Sleep(20 * time.Millisecond)
	}
}

// leaseOne takes the one job of queue, waiting for it.
func (e *e2e) leaseOne(queue string) remote.Lease {
	e.t.Helper()
	c, err := remote.NewClient(e.srv.URL, e.key, nil)
	require.NoError(e.t, err)
	wait, lease := 10, 30
	leases, err := c.Lease(context.Background(), &remote.LeaseRequest{Queues: []string{queue}, WaitSeconds: &wait, LeaseSeconds: &lease, WorkerID: "e2e-manual"})
	require.NoError(e.t, err)
	require.Len(e.t, leases, 1)
	return leases[0]
}

func TestRunsEndToEnd(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		env := servertest.FastEnv()
		env["DOCKET_WORKFLOW_SWEEP_INTERVAL"] = "200ms"
		srv := servertest.Start(t, servertest.Options{DatabaseURL: backend.URL(t), Env: env})
		e := &e2e{t: t, srv: srv, key: srv.AdminKey}
		for name, def := range e2eWorkflows {
			r := srv.Do(t, e.key, "PUT", "/v1/workflows/"+name, def)
			require.Equal(t, http.StatusCreated, r.Status, "%s: %s", name, r.Body)
		}
		w := startE2EWorker(t, srv, e.key)
		manual, err := remote.NewClient(srv.URL, e.key, nil)
		require.NoError(t, err)
		ctx := context.Background()

		// A diamond: join sees both branches (n = 1 + 2 + 2).
		diamond := e.start("diamond", map[string]any{"input": map[string]any{}})
		// A fan-out of 100, then the fan-in sees every output in order.
		fan := e.start("fan", map[string]any{"input": map[string]any{"n": 100}})
		// if on a parent's output: skipped, and not.
		skip := e.start("cond", map[string]any{"input": map[string]any{"go": false}})
		take := e.start("cond", map[string]any{"input": map[string]any{"go": true}})
		// A failing step: fail (the run fails; the side branch's queued job
		// is canceled; tail, never released, is listed CANCELED), continue (the
		// run goes on).
		failfast := e.start("failfast", nil)
		failcont := e.start("failcont", nil)

		run := e.wait(diamond, "SUCCEEDED")
		require.JSONEq(t, `{"join": {"step": "join", "n": 5, "go": false}}`, string(run.Output))
		for _, s := range run.Steps {
			require.Equal(t, 1, w.worked(diamond, s.Name, 0), "step %s worked once", s.Name)
		}
		// Its events: the run created and ended, each step released and
		// ended, all about this run, in order.
		evs := sseEvents(t, srv, e.key, "/v1/runs/"+diamond+"/events", 10)
		var seen []string
		for _, ev := range evs {
			require.Equal(t, "runs/"+diamond, ev["subject"])
			data := ev["data"].(map[string]any)
			seen = append(seen, fmt.Sprintf("%s %v>%v", ev["type"], data["step"], data["to"]))
		}
		require.Equal(t, "run.state_changed <nil>>RUNNING", seen[0])
		require.Equal(t, "run.state_changed <nil>>SUCCEEDED", seen[9])
		require.ElementsMatch(t, []string{
			"step.state_changed top>RUNNING", "step.state_changed top>SUCCEEDED",
			"step.state_changed left>RUNNING", "step.state_changed left>SUCCEEDED",
			"step.state_changed right>RUNNING", "step.state_changed right>SUCCEEDED",
			"step.state_changed join>RUNNING", "step.state_changed join>SUCCEEDED",
		}, seen[1:9])

		run = e.wait(fan, "SUCCEEDED")
		require.JSONEq(t, `{"sum": {"sum": 4950, "count": 100}}`, string(run.Output))
		require.Len(t, run.Steps, 102)
		for _, s := range run.Steps {
			require.Equal(t, "SUCCEEDED", s.Status)
			if s.Name == "each" {
				require.JSONEq(t, fmt.Sprintf(`{"n": %d}`, s.Index), string(s.Output))
			}
		}

		run = e.wait(skip, "SUCCEEDED")
		require.Equal(t, map[string]string{"check": "SUCCEEDED", "maybe": "SKIPPED"}, run.stepStates())
		run = e.wait(take, "SUCCEEDED")
		require.Equal(t, map[string]string{"check": "SUCCEEDED", "maybe": "SUCCEEDED"}, run.stepStates())

		run = e.wait(failfast, "FAILED")
		require.Contains(t, run.Error, "boom")
		require.Equal(t, map[string]string{"a": "SUCCEEDED", "bad": "FAILED", "tail": "CANCELED", "side": "CANCELED"}, run.stepStates())
		run = e.wait(failcont, "SUCCEEDED")
		require.Equal(t, map[string]string{"a": "SUCCEEDED", "bad": "FAILED", "tail": "SUCCEEDED"}, run.stepStates())

		// Cancel mid-run: the running step's job is asked to stop, the run
		// is CANCELED once it did, and nothing after it runs.
		cancelRun := e.start("hold", nil)
		l := e.leaseOne("e2e.manual")
		got := e.op(cancelRun, "cancel", http.StatusOK)
		require.True(t, got.CancelRequested)
		require.Equal(t, "RUNNING", got.Status, "a step job still runs")
		hb, err := manual.Heartbeat(ctx, l.LeaseID, &remote.HeartbeatRequest{})
		require.NoError(t, err)
		require.True(t, hb.CancelRequested, "the worker learns of the cancel")
		_, err = manual.Fail(ctx, l.LeaseID, "stopped on request", false)
		require.NoError(t, err)
		run = e.wait(cancelRun, "CANCELED")
		require.Equal(t, map[string]string{"first": "CANCELED", "second": "CANCELED"}, run.stepStates())
		e.op(cancelRun, "cancel", http.StatusOK) // again: a no-op
		e.op(cancelRun, "retry", http.StatusConflict)

		// Pause then resume: nothing is released while paused.
		pauseRun := e.start("hold", nil)
		l = e.leaseOne("e2e.manual")
		require.Equal(t, "PAUSED", e.op(pauseRun, "pause", http.StatusOK).Status)
		e.op(pauseRun, "pause", http.StatusOK)
		require.NoError(t, manual.Complete(ctx, l.LeaseID, json.RawMessage(`{"n": 10}`)))
		time.Sleep(300 * time.Millisecond) // longer than a sweep
		run = e.get(pauseRun)
		require.Equal(t, "PAUSED", run.Status)
		require.Equal(t, map[string]string{"first": "SUCCEEDED", "second": "PENDING"}, run.stepStates())
		require.Equal(t, "RUNNING", e.op(pauseRun, "resume", http.StatusOK).Status)
		run = e.wait(pauseRun, "SUCCEEDED")
		require.JSONEq(t, `{"second": {"step": "second", "n": 11, "go": false}}`, string(run.Output))

		// Retry re-runs only the failed step and what is downstream of it.
		retryRun := e.start("retry", nil)
		failed := e.wait(retryRun, "FAILED")
		// d, b's sibling, may still be running when b's failure fails the
		// run: a running step finishes, and its end is still recorded.
		for deadline := time.Now().Add(30 * time.Second); failed.stepStates()["d"] == "RUNNING"; {
			require.True(t, time.Now().Before(deadline), "step d still RUNNING: %+v", failed.stepStates())
			time.Sleep(20 * time.Millisecond)
			failed = e.get(retryRun)
		}
		require.Equal(t, map[string]string{"a": "SUCCEEDED", "b": "FAILED", "c": "CANCELED", "d": "SUCCEEDED"}, failed.stepStates())
		require.Equal(t, "RUNNING", e.op(retryRun, "retry", http.StatusOK).Status)
		run = e.wait(retryRun, "SUCCEEDED")
		before := map[string]string{}
		for _, s := range failed.Steps {
			before[s.Name] = s.JobID
		}
		for _, s := range run.Steps {
			switch s.Name {
			case "a", "d":
				require.Equal(t, 1, s.Generation, s.Name)
				require.Equal(t, before[s.Name], s.JobID, "%s kept its job", s.Name)
				require.Equal(t, 1, w.worked(retryRun, s.Name, 0), "%s ran once", s.Name)
			case "b":
				require.Equal(t, 2, s.Generation, "the failed step runs again")
				require.NotEqual(t, before[s.Name], s.JobID, "with a new job")
			case "c":
				require.Equal(t, "", before[s.Name], "downstream of b: never released before the retry")
				require.Equal(t, 1, w.worked(retryRun, "c", 0))
			}
		}
		require.Equal(t, 2, w.worked(retryRun, "b", 0))
		e.op(retryRun, "retry", http.StatusConflict)

		// A signal approved, and one timing out.
		approved := e.start("approval", nil)
		timedOut := e.start("approval", nil)
		r := srv.Do(t, e.key, "POST", "/v1/runs/"+approved+"/signals/approve", map[string]any{"output": map[string]any{"n": 41}})
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		r = srv.Do(t, e.key, "POST", "/v1/runs/"+approved+"/signals/after", map[string]any{})
		require.Equal(t, http.StatusConflict, r.Status, "a job step takes no signal: %s", r.Body)
		run = e.wait(approved, "SUCCEEDED")
		require.JSONEq(t, `{"after": {"step": "after", "n": 42, "go": false}}`, string(run.Output))
		run = e.wait(timedOut, "FAILED")
		require.Equal(t, map[string]string{"approve": "FAILED", "after": "CANCELED"}, run.stepStates())
		r = srv.Do(t, e.key, "POST", "/v1/runs/"+timedOut+"/signals/approve", nil)
		require.Equal(t, http.StatusConflict, r.Status, "too late: %s", r.Body)

		// 50 concurrent starts with one key: one run.
		var wg sync.WaitGroup
		ids := make([]string, 50)
		for i := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := srv.Try(e.key, "POST", "/v1/workflows/idem/runs", map[string]any{"input": i}, "Idempotency-Key", "once")
				if err == nil && r.Status == http.StatusAccepted {
					var run e2eRun
					_ = json.Unmarshal(r.Body, &run)
					ids[i] = run.RunID
				} else if err == nil {
					ids[i] = fmt.Sprintf("status %d: %s", r.Status, r.Body)
				} else {
					ids[i] = err.Error()
				}
			}()
		}
		wg.Wait()
		for _, id := range ids {
			require.Equal(t, ids[0], id)
		}
		var page struct {
			Items []e2eRun `json:"items"`
		}
		srv.Do(t, e.key, "GET", "/v1/runs?workflow=idem", nil).JSON(t, &page)
		require.Len(t, page.Items, 1)
	})
}
