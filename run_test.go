package docket_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// stepArgs is what a job step's handler receives.
type stepArgs struct{ docket.StepPayload }

func (stepArgs) JobType() string { return "wf.step" }

// diamond is top → left, right → join, every step a wf.step job.
func diamond(t *testing.T, name string) *docket.WorkflowDefinition {
	t.Helper()
	def, err := docket.NewWorkflow(name).
		Job("top", "wf.step").
		Job("left", "wf.step", docket.After("top")).
		Job("right", "wf.step", docket.After("top")).
		Job("join", "wf.step", docket.After("left", "right")).
		Definition()
	require.NoError(t, err)
	return def
}

// stepHandler records each job's runs and answers with the step's name and
// the sum of its parents' outputs plus one.
type stepHandler struct {
	mu   sync.Mutex
	runs map[uuid.UUID]int // job id → attempts run
	bad  atomic.Int64      // RunOf disagreeing with the payload
}

func (h *stepHandler) work(ctx context.Context, j *docket.Job[stepArgs]) error {
	h.mu.Lock()
	if h.runs == nil {
		h.runs = map[uuid.UUID]int{}
	}
	h.runs[j.ID]++
	h.mu.Unlock()
	rc, ok := docket.RunOf(ctx)
	if !ok || rc != j.Args.Run {
		h.bad.Add(1)
	}
	sum := 1.0
	for _, p := range j.Args.Steps {
		if p.State != docket.StepSucceeded {
			return docket.Fatal(fmt.Errorf("parent is %s", p.State))
		}
		var out struct{ N float64 }
		if err := json.Unmarshal(p.Output, &out); err != nil {
			return docket.Fatal(err)
		}
		sum += out.N
	}
	return docket.SetResult(ctx, map[string]any{"step": j.Args.Run.Step, "n": sum})
}

func waitRun(t *testing.T, c *docket.Client, id uuid.UUID, want docket.RunState) *docket.Run {
	t.Helper()
	var run *docket.Run
	eventually(t, 30*time.Second, fmt.Sprintf("run %s to be %s", id, want), func() bool {
		var err error
		run, err = c.RunGet(context.Background(), id)
		require.NoError(t, err)
		return run.State == want
	})
	return run
}

// TestRunDiamondOnWorker: a worker's completions advance runs (the
// sweeper is set far off, so only the fast path can), RunOf gives the
// handler its step, and RunGet lists every step instance in DAG order.
func TestRunDiamondOnWorker(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		cfg := fastConfig()
		cfg.WorkflowSweepInterval = time.Hour
		b := setup(t, backend, cfg)
		ctx := context.Background()
		_, _, err := b.client.WorkflowPut(ctx, diamond(t, "diamond"))
		require.NoError(t, err)
		h := &stepHandler{}
		docket.AddHandler(b.worker, h.work)

		// Before the worker runs: only the root is released; the rest is
		// listed PENDING.
		res, err := b.client.RunStart(ctx, "diamond", map[string]int{"x": 1}, &docket.RunStartOpts{IdempotencyKey: "d1"})
		require.NoError(t, err)
		require.False(t, res.Duplicate)
		run, err := b.client.RunGet(ctx, res.Run.ID)
		require.NoError(t, err)
		var names []string
		for _, s := range run.Steps {
			names = append(names, fmt.Sprintf("%s:%s", s.Name, s.State))
		}
		require.Equal(t, []string{"top:RUNNING", "left:PENDING", "right:PENDING", "join:PENDING"}, names)
		require.NotEqual(t, uuid.Nil, run.Steps[0].JobID)

		b.start(t)
		run = waitRun(t, b.client, res.Run.ID, docket.RunSucceeded)
		require.JSONEq(t, `{"join":{"step":"join","n":5}}`, string(run.Output), "join = 1 + left (2) + right (2)")
		require.Len(t, run.Steps, 4)
		for _, s := range run.Steps {
			require.Equal(t, docket.StepSucceeded, s.State, s.Name)
		}
		require.Zero(t, h.bad.Load(), "RunOf agrees with the payload")

		again, err := b.client.RunStart(ctx, "diamond", map[string]int{"x": 2}, &docket.RunStartOpts{IdempotencyKey: "d1"})
		require.NoError(t, err)
		require.True(t, again.Duplicate)
		require.Equal(t, res.Run.ID, again.Run.ID)

		runs, err := b.client.RunList(ctx, docket.RunListParams{Workflow: "diamond", States: []docket.RunState{docket.RunSucceeded}})
		require.NoError(t, err)
		require.Len(t, runs, 1)

		_, err = b.client.RunStart(ctx, "nope", nil, nil)
		require.ErrorIs(t, err, docket.ErrWorkflowNotFound)
		_, err = b.client.RunPause(ctx, res.Run.ID)
		require.ErrorIs(t, err, docket.ErrRunConflict)
		_, err = b.client.RunCancel(ctx, uuid.Must(uuid.NewV7()))
		require.ErrorIs(t, err, docket.ErrNotFound)
	})
}

// TestRunRemoteWorker: a step job ended through LeaseComplete advances
// its run, as does one failed through LeaseFail.
func TestRunRemoteWorker(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend, fastConfig()) // no worker started: no sweeper either
		ctx := context.Background()
		def, err := docket.NewWorkflow("remote").
			Job("a", "remote.step").
			Job("b", "remote.step", docket.After("a")).
			Definition()
		require.NoError(t, err)
		_, _, err = b.client.WorkflowPut(ctx, def)
		require.NoError(t, err)
		res, err := b.client.RunStart(ctx, "remote", nil, nil)
		require.NoError(t, err)
		lease := func() *docket.Lease {
			ls, err := b.client.Lease(ctx, docket.LeaseParams{Queues: []string{"remote.step"}, Max: 1, Duration: time.Minute, WorkerID: "remote-1"})
			require.NoError(t, err)
			require.Len(t, ls, 1)
			return ls[0]
		}
		require.NoError(t, b.client.LeaseComplete(ctx, lease().ID, json.RawMessage(`{"ok":1}`)))
		run, err := b.client.RunGet(ctx, res.Run.ID)
		require.NoError(t, err)
		require.Equal(t, docket.StepSucceeded, run.Steps[0].State)
		require.JSONEq(t, `{"ok":1}`, string(run.Steps[0].Output))
		require.Equal(t, docket.StepRunning, run.Steps[1].State, "b is released at once")

		state, err := b.client.LeaseFail(ctx, lease().ID, "no luck", false)
		require.NoError(t, err)
		require.Equal(t, docket.JobStateDead, state)
		run, err = b.client.RunGet(ctx, res.Run.ID)
		require.NoError(t, err)
		require.Equal(t, docket.RunFailed, run.State)
		require.Contains(t, run.Error, "no luck")
	})
}

// TestRunOperationsOnWorker: cancel asks a running step job to stop;
// signals through the client.
func TestRunOperationsOnWorker(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend, fastConfig())
		ctx := context.Background()
		def, err := docket.NewWorkflow("ops").
			Job("slow", "test.block").
			Signal("approve").
			Job("after", "wf.step", docket.After("approve")).
			Definition()
		require.NoError(t, err)
		_, _, err = b.client.WorkflowPut(ctx, def)
		require.NoError(t, err)
		started := make(chan struct{}, 1)
		docket.AddHandler(b.worker, func(ctx context.Context, j *docket.Job[blockArgs]) error {
			select {
			case started <- struct{}{}:
			default:
			}
			<-ctx.Done()
			return ctx.Err()
		})
		h := &stepHandler{}
		docket.AddHandler(b.worker, h.work)
		b.start(t)

		res, err := b.client.RunStart(ctx, "ops", nil, nil)
		require.NoError(t, err)
		<-started
		_, err = b.client.RunSignal(ctx, res.Run.ID, "slow", nil)
		require.ErrorIs(t, err, docket.ErrRunConflict, "not a signal step")
		_, err = b.client.RunSignal(ctx, res.Run.ID, "approve", map[string]string{"by": "ann"})
		require.NoError(t, err)
		stepState := func(name string) docket.StepState {
			run, err := b.client.RunGet(ctx, res.Run.ID)
			require.NoError(t, err)
			for _, s := range run.Steps {
				if s.Name == name {
					return s.State
				}
			}
			t.Fatalf("no step %q", name)
			return ""
		}
		eventually(t, 20*time.Second, "after to succeed", func() bool { return stepState("after") == docket.StepSucceeded })
		run, err := b.client.RunCancel(ctx, res.Run.ID)
		require.NoError(t, err)
		require.Equal(t, docket.RunRunning, run.State, "its handler still runs")
		require.True(t, run.CancelRequested)
		run = waitRun(t, b.client, res.Run.ID, docket.RunCanceled)
		require.Equal(t, "canceled", run.Error)
		require.Equal(t, docket.StepCanceled, stepState("slow"), "the handler saw ErrCancelRequested and stopped")
	})
}

// TestRunRace: two workers (each its own client, as two processes would
// be) drive 200 diamonds: every run SUCCEEDED and every step's job ran
// exactly once.
func TestRunRace(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		ctx := context.Background()
		url := backend.URL(t)
		h := &stepHandler{}
		var clients []*docket.Client
		for i := range 2 {
			client, err := docket.NewClient(ctx, docket.Config{DatabaseURL: url, AutoMigrate: i == 0})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, client.Close()) })
			clients = append(clients, client)
		}
		_, _, err := clients[0].WorkflowPut(ctx, diamond(t, "race"))
		require.NoError(t, err)
		for i, client := range clients {
			cfg := fastConfig()
			cfg.NodeID = fmt.Sprintf("race-%d", i)
			// A lease long enough that no completion outlives it: SQLite's
			// one writer stalled completions past 5 s under -race on a
			// loaded machine, and a rescued job runs twice (jobs are at
			// least once); this test is about each step being released
			// once, so it keeps "one attempt per step job" strict.
			cfg.LeaseDuration = time.Minute
			cfg.Queues = map[string]int{"wf.step": 8}
			cfg.WorkflowSweepInterval = 200 * time.Millisecond
			w := docket.NewWorker(client, cfg)
			docket.AddHandler(w, h.work)
			require.NoError(t, w.Start(ctx))
			t.Cleanup(func() {
				sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				w.Stop(sctx)
			})
		}
		const n = 200
		params := make([]docket.RunStartParams, n)
		for i := range params {
			params[i] = docket.RunStartParams{Workflow: "race", Input: i}
		}
		res, err := clients[1].RunStartMany(ctx, params)
		require.NoError(t, err)
		require.Len(t, res, n)
		eventually(t, 120*time.Second, "every run to succeed", func() bool {
			runs, err := clients[0].RunList(ctx, docket.RunListParams{Workflow: "race", States: []docket.RunState{docket.RunSucceeded}, Limit: 1000})
			require.NoError(t, err)
			return len(runs) == n
		})
		jobs := map[uuid.UUID]bool{}
		for _, r := range res {
			run, err := clients[0].RunGet(ctx, r.Run.ID)
			require.NoError(t, err)
			require.Equal(t, docket.RunSucceeded, run.State)
			require.JSONEq(t, `{"join":{"step":"join","n":5}}`, string(run.Output))
			require.Len(t, run.Steps, 4)
			for _, s := range run.Steps {
				require.Equal(t, docket.StepSucceeded, s.State)
				require.False(t, jobs[s.JobID], "one job per step")
				jobs[s.JobID] = true
				atts, err := clients[0].Attempts(ctx, s.JobID)
				require.NoError(t, err)
				require.Len(t, atts, 1, "step %s of run %s ran once", s.Name, run.ID)
			}
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		require.Len(t, h.runs, 4*n, "no other job ran")
		for id, times := range h.runs {
			require.Equal(t, 1, times, "job %s", id)
		}
		require.Zero(t, h.bad.Load())
	})
}

// TestRunSweeperAfterJobCanceled: a step job canceled on its own (the job
// API, not the run's) ends without a completion to trigger its run: the
// sweeper of the maintenance leader records it, and the run fails.
func TestRunSweeperAfterJobCanceled(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		cfg := fastConfig()
		cfg.WorkflowSweepInterval = 50 * time.Millisecond
		b := setup(t, backend, cfg)
		ctx := context.Background()
		def, err := docket.NewWorkflow("swept").Job("a", "nobody.works.this").Definition()
		require.NoError(t, err)
		_, _, err = b.client.WorkflowPut(ctx, def)
		require.NoError(t, err)
		b.start(t)
		res, err := b.client.RunStart(ctx, "swept", nil, nil)
		require.NoError(t, err)
		run, err := b.client.RunGet(ctx, res.Run.ID)
		require.NoError(t, err)
		_, err = b.client.Cancel(ctx, run.Steps[0].JobID)
		require.NoError(t, err)
		run = waitRun(t, b.client, res.Run.ID, docket.RunFailed)
		require.Equal(t, docket.StepFailed, run.Steps[0].State)
		require.Contains(t, run.Steps[0].Error, "was canceled")
	})
}

// TestRunGetStepStates: RunGet reports every step state right, driven by
// a remote worker: RUNNING (released, its job queued or leased),
// SUCCEEDED, SKIPPED (`if` false), FAILED (its job DEAD), CANCELED (a
// signal wait of a run that failed), PENDING (not released in a running
// run) — and a step a finished run never released as CANCELED, not
// PENDING; a retry makes it PENDING again.
func TestRunGetStepStates(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend, fastConfig()) // no worker started
		ctx := context.Background()
		def, err := docket.NewWorkflow("states").
			Job("a", "states.step").
			Signal("wait").
			Job("skipped", "states.step", docket.After("a"), docket.If("false")).
			Job("c", "states.step", docket.After("a")).
			Job("d", "states.step", docket.After("c")).
			Definition()
		require.NoError(t, err)
		_, _, err = b.client.WorkflowPut(ctx, def)
		require.NoError(t, err)
		res, err := b.client.RunStart(ctx, "states", nil, nil)
		require.NoError(t, err)
		states := func() map[string]docket.StepState {
			t.Helper()
			run, err := b.client.RunGet(ctx, res.Run.ID)
			require.NoError(t, err)
			out := map[string]docket.StepState{}
			for _, s := range run.Steps {
				out[s.Name] = s.State
				if s.State == docket.StepPending || s.State == docket.StepCanceled && s.Name == "d" {
					require.Equal(t, uuid.Nil, s.JobID, "%s was never released", s.Name)
					require.True(t, s.StartedAt.IsZero(), s.Name)
				}
			}
			return out
		}
		lease := func() *docket.Lease {
			ls, err := b.client.Lease(ctx, docket.LeaseParams{Queues: []string{"states.step"}, Max: 1, Duration: time.Minute, WorkerID: "w"})
			require.NoError(t, err)
			require.Len(t, ls, 1)
			return ls[0]
		}
		R, S, P, F, C, K := docket.StepRunning, docket.StepSucceeded, docket.StepPending, docket.StepFailed, docket.StepCanceled, docket.StepSkipped
		require.Equal(t, map[string]docket.StepState{"a": R, "wait": R, "skipped": P, "c": P, "d": P}, states(), "a's job queued")
		require.NoError(t, b.client.LeaseComplete(ctx, lease().ID, json.RawMessage(`{}`)))
		require.Equal(t, map[string]docket.StepState{"a": S, "wait": R, "skipped": K, "c": R, "d": P}, states())
		l := lease()
		require.Equal(t, map[string]docket.StepState{"a": S, "wait": R, "skipped": K, "c": R, "d": P}, states(), "c's job leased")
		_, err = b.client.LeaseFail(ctx, l.ID, "broken", false)
		require.NoError(t, err)
		run, err := b.client.RunGet(ctx, res.Run.ID)
		require.NoError(t, err)
		require.Equal(t, docket.RunFailed, run.State)
		require.Equal(t, map[string]docket.StepState{"a": S, "wait": C, "skipped": K, "c": F, "d": C}, states(), "d will not run")
		for _, s := range run.Steps {
			if s.Name == "d" {
				require.Contains(t, s.Error, "not released")
			}
		}
		_, err = b.client.RunRetry(ctx, res.Run.ID)
		require.NoError(t, err)
		require.Equal(t, map[string]docket.StepState{"a": S, "wait": R, "skipped": K, "c": R, "d": P}, states(), "retried: d may run again")
	})
}

// TestRunStepJobNotRetriedAlone: the job of a workflow step is not put
// back in its queue by the job API (Client.Retry): its end would reach no
// step (the instance ended already), so a canceled run's step would run
// after the cancel, and a failed run's step would run once for nothing
// and again when the run is retried. It is ErrRunConflict, nothing
// changes; the run is what is retried.
func TestRunStepJobNotRetriedAlone(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend, fastConfig()) // no worker started
		ctx := context.Background()
		def, err := docket.NewWorkflow("alone").Job("a", "alone.step", docket.StepMaxAttempts(1)).Definition()
		require.NoError(t, err)
		_, _, err = b.client.WorkflowPut(ctx, def)
		require.NoError(t, err)

		// A DEAD step job of a FAILED run.
		failed, err := b.client.RunStart(ctx, "alone", nil, nil)
		require.NoError(t, err)
		ls, err := b.client.Lease(ctx, docket.LeaseParams{Queues: []string{"alone.step"}, Max: 1, Duration: time.Minute, WorkerID: "w"})
		require.NoError(t, err)
		require.Len(t, ls, 1)
		_, err = b.client.LeaseFail(ctx, ls[0].ID, "broken", false)
		require.NoError(t, err)
		run := waitRun(t, b.client, failed.Run.ID, docket.RunFailed)
		_, err = b.client.Retry(ctx, run.Steps[0].JobID)
		require.ErrorIs(t, err, docket.ErrRunConflict)
		require.ErrorContains(t, err, "retry the run")
		row, err := b.client.Get(ctx, run.Steps[0].JobID)
		require.NoError(t, err)
		require.Equal(t, docket.JobStateDead, row.State, "nothing changed")

		// A CANCELED step job of a CANCELED run.
		canceled, err := b.client.RunStart(ctx, "alone", nil, nil)
		require.NoError(t, err)
		run, err = b.client.RunCancel(ctx, canceled.Run.ID)
		require.NoError(t, err)
		require.Equal(t, docket.RunCanceled, run.State)
		run, err = b.client.RunGet(ctx, canceled.Run.ID)
		require.NoError(t, err)
		_, err = b.client.Retry(ctx, run.Steps[0].JobID)
		require.ErrorIs(t, err, docket.ErrRunConflict)
		// Not "retry the run": a canceled run is not retried (RunRetry
		// would be 409 too).
		require.NotContains(t, err.Error(), "retry the run")
		require.ErrorContains(t, err, "run "+canceled.Run.ID.String()+" is CANCELED")
		require.ErrorContains(t, err, "start a new run")
		row, err = b.client.Get(ctx, run.Steps[0].JobID)
		require.NoError(t, err)
		require.Equal(t, docket.JobStateCanceled, row.State, "nothing changed")

		// A plain job is retried as before, even one whose payload looks
		// like a step's but names no run.
		spoof, err := b.client.Insert(ctx, docket.RawArgs{Type: "alone.plain", Payload: json.RawMessage(`{"run":{"id":"` + uuid.NewString() + `","step":"a","index":0}}`)}, nil)
		require.NoError(t, err)
		_, err = b.client.Cancel(ctx, spoof.Job.ID)
		require.NoError(t, err)
		row, err = b.client.Retry(ctx, spoof.Job.ID)
		require.NoError(t, err)
		require.Equal(t, docket.JobStateQueued, row.State)
	})
}

// TestStepJobCancelAdvancesRun: canceling a step's waiting job by hand
// (Client.Cancel, POST /v1/jobs/{id}/cancel) ends its step and fails the
// run in the same call, as a lease's end does. The run stayed RUNNING
// until the workflow sweeper came by (5 s): meanwhile the job's retry
// said "retry the run instead" and the run's retry changed nothing.
func TestStepJobCancelAdvancesRun(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend, fastConfig()) // no worker started: no sweeper
		ctx := context.Background()
		def, err := docket.NewWorkflow("cancelstep").Job("a", "cancelstep.a").Job("b", "cancelstep.b", docket.After("a")).Definition()
		require.NoError(t, err)
		_, _, err = b.client.WorkflowPut(ctx, def)
		require.NoError(t, err)
		started, err := b.client.RunStart(ctx, "cancelstep", nil, nil)
		require.NoError(t, err)
		run, err := b.client.RunGet(ctx, started.Run.ID)
		require.NoError(t, err)
		jobID := run.Steps[0].JobID

		row, err := b.client.Cancel(ctx, jobID)
		require.NoError(t, err)
		require.Equal(t, docket.JobStateCanceled, row.State)
		run, err = b.client.RunGet(ctx, started.Run.ID)
		require.NoError(t, err)
		require.Equal(t, docket.RunFailed, run.State, "at once")
		require.Equal(t, docket.StepFailed, run.Steps[0].State)

		run, err = b.client.RunRetry(ctx, started.Run.ID)
		require.NoError(t, err)
		require.Equal(t, docket.RunRunning, run.State)
		run, err = b.client.RunGet(ctx, started.Run.ID)
		require.NoError(t, err)
		require.Equal(t, 2, run.Steps[0].Generation)
		require.NotEqual(t, jobID, run.Steps[0].JobID, "a new job")
	})
}
