package docket

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/engine"
	"github.com/docket-run/docket/internal/flow"
	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/service"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/workflow"
)

// A run is one input flowing through a version of a workflow definition
// (see WorkflowDefinition). RunStart inserts it and releases its first
// steps in one transaction; from then on each step is released when its
// trigger is met, in the transaction that records the end of its parents:
// by the Worker that completed a parent's job, by LeaseComplete and
// LeaseFail for remote workers, and — should a process die between a
// job's completion and the advancement it triggers — by the workflow
// sweeper of the maintenance leader (WorkerConfig.WorkflowSweepInterval).
// So a run never waits on the event bus.
//
// A job step's job has the payload
//
//	{"run": {"id": …, "step": …, "index": …}, "input": <run input>,
//	 "steps": {"<parent>": {"state": …, "output": …, "confidence": …}},
//	 "item": …, "index": …}
//
// (item and index only in a fan-out instance), or, for a step with an
// input expression (StepInput), {"run": …, "input": <its value>, "item":
// …, "index": …}; its handler's result
// (SetResult, or a remote worker's result) is the step's output. RunOf
// tells a Go handler which run and step it works for.

// Errors of the run operations.
var (
	// ErrRunConflict: the run's state (or the step's kind or state) does
	// not allow the operation; nothing was changed. The HTTP API answers
	// 409. Repeating an operation that took effect is not a conflict.
	ErrRunConflict = workflow.ErrConflict
	// ErrStepNotFound: RunSignal names a step the run's workflow does
	// not have; nothing was changed. The HTTP API answers 404.
	ErrStepNotFound = workflow.ErrNoStep
	// ErrWorkflowNotFound: RunStart names a workflow (or version) that is
	// not stored.
	ErrWorkflowNotFound = workflow.ErrNoWorkflow
)

// Run is a workflow run. RunGet fills Steps; RunList and the operations
// leave it nil.
type Run struct {
	ID       uuid.UUID
	Workflow string
	Version  int // the workflow version the run is pinned to
	State    RunState
	Input    json.RawMessage
	// Output is set once the run SUCCEEDED: an object with the output of
	// each step that has no dependents.
	Output json.RawMessage
	// Error says why the run FAILED (the step and its error) or that it
	// was CANCELED.
	Error string
	// CancelRequested: RunCancel was called while step jobs ran; the run
	// becomes CANCELED once they stopped.
	CancelRequested bool
	IdempotencyKey  string
	CreatedAt       time.Time
	UpdatedAt       time.Time
	FinishedAt      time.Time // zero while RUNNING or PAUSED
	Steps           []*RunStep
}

// RunStep is one instance of a step of a run: index 0, or one per item of
// a fan-out step. A step that was not released yet is listed once, PENDING
// (CANCELED, with an Error saying so, once the run ended without it).
type RunStep struct {
	Name  string
	Index int
	Kind  string // "job", "signal" or "human"
	State StepState
	// Generation grows by one each time a retry of the run resets the
	// instance.
	Generation int
	JobID      uuid.UUID // the job of a released job step; uuid.Nil otherwise
	UnitID     uuid.UUID // the unit of a released human step; uuid.Nil otherwise
	Output     json.RawMessage
	Error      string
	Confidence *float64
	StartedAt  time.Time // zero before it was released
	FinishedAt time.Time // zero while not done
}

func runOf(r *flow.Run) *Run {
	if r == nil {
		return nil
	}
	return &Run{
		ID: r.ID, Workflow: r.Workflow, Version: r.Version, State: r.State, Input: r.Input,
		Output: r.Output, Error: r.Error, CancelRequested: r.CancelRequested, IdempotencyKey: r.IdempotencyKey,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, FinishedAt: r.FinishedAt,
	}
}

// flows returns the client's advancer, made on first use: it holds the
// CEL environment and the compiled workflow versions, which programs that
// only work plain jobs never need.
func (c *Client) flows() (*workflow.Advancer, error) {
	c.flowOnce.Do(func() {
		c.flowAdv, c.flowErr = workflow.NewAdvancer(c.cfg.Now)
	})
	return c.flowAdv, c.flowErr
}

// flowState is the workflow part of a Client.
type flowState struct {
	flowOnce sync.Once
	flowAdv  *workflow.Advancer
	flowErr  error
}

// RunStartOpts are the options of RunStart; the zero value takes every
// default.
type RunStartOpts struct {
	// IdempotencyKey: starting a run of the same workflow with this key
	// again returns the run that has it (Duplicate) instead of a new one.
	// Unique per workflow, across its versions.
	IdempotencyKey string
	// Version pins the run to this version; default the latest.
	Version int
}

// RunStartParams is one run of RunStartMany.
type RunStartParams struct {
	Workflow string
	Input    any // encoded with encoding/json; a json.RawMessage is kept as is
	Opts     *RunStartOpts
}

// RunStartResult is the run started, or the one that had the key.
type RunStartResult struct {
	Run       *Run
	Duplicate bool
}

// RunStart starts a run of the workflow named workflow on input (any
// value encoding/json encodes; nil is null): the run is inserted RUNNING
// and its first steps released, in one transaction.
func (c *Client) RunStart(ctx context.Context, workflowName string, input any, opts *RunStartOpts) (*RunStartResult, error) {
	res, err := c.RunStartMany(ctx, []RunStartParams{{Workflow: workflowName, Input: input, Opts: opts}})
	if err != nil {
		return nil, err
	}
	return res[0], nil
}

// RunStartMany starts many runs in one transaction (runs:batch). Results
// are in the order of runs.
func (c *Client) RunStartMany(ctx context.Context, runs []RunStartParams) ([]*RunStartResult, error) {
	if len(runs) == 0 {
		return nil, nil
	}
	adv, err := c.flows()
	if err != nil {
		return nil, err
	}
	params := make([]*workflow.StartParams, len(runs))
	for i, r := range runs {
		p, err := runStartParams(r)
		if err != nil {
			if len(runs) > 1 {
				return nil, fmt.Errorf("run %d: %w", i, err)
			}
			return nil, err
		}
		params[i] = p
	}
	res, err := adv.Start(ctx, c.store, params)
	if err != nil {
		return nil, fmt.Errorf("start %d runs: %w", len(runs), err)
	}
	out := make([]*RunStartResult, len(res))
	for i, r := range res {
		out[i] = &RunStartResult{Run: runOf(r.Run), Duplicate: r.Duplicate}
	}
	return out, nil
}

func runStartParams(r RunStartParams) (*workflow.StartParams, error) {
	var errs []error
	if msg := flow.CheckWorkflowName(r.Workflow); msg != "" {
		errs = append(errs, &ValidationError{Field: "workflow", Message: msg})
	}
	input, err := json.Marshal(r.Input)
	if err != nil {
		errs = append(errs, &ValidationError{Field: "input", Message: "cannot be encoded as JSON: " + err.Error()})
	} else if msg := store.JSONUnstorable(input); msg != "" {
		errs = append(errs, &ValidationError{Field: "input", Message: msg})
	}
	opts := r.Opts
	if opts == nil {
		opts = &RunStartOpts{}
	}
	if len(opts.IdempotencyKey) > 255 {
		errs = append(errs, &ValidationError{Field: "idempotencyKey", Message: "must be at most 255 bytes"})
	} else if !store.TextStorable(opts.IdempotencyKey) {
		errs = append(errs, &ValidationError{Field: "idempotencyKey", Message: store.TextMessage})
	}
	if opts.Version < 0 {
		errs = append(errs, &ValidationError{Field: "version", Message: "must be at least 1 (0 or absent: the latest)"})
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &workflow.StartParams{Workflow: r.Workflow, Version: opts.Version, Input: input, IdempotencyKey: opts.IdempotencyKey}, nil
}

// RunGet reads a run with every step instance, in the order of the DAG
// (parents first), then by index. ErrNotFound when there is none.
func (c *Client) RunGet(ctx context.Context, id uuid.UUID) (*Run, error) {
	r, err := c.store.RunGet(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("get run %s: %w", id, err)
	}
	list, err := c.store.StepList(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("get run %s: %w", id, err)
	}
	run := runOf(r)
	var order []string
	released := map[string]bool{}
	if adv, err := c.flows(); err == nil {
		if g, err := adv.Graph(ctx, c.store, r.Workflow, r.Version); err == nil {
			order = g.Order()
			for _, st := range list {
				released[st.Step] = true
			}
			for _, name := range order {
				if !released[name] {
					run.Steps = append(run.Steps, unreleasedStep(r, name, string(g.Step(name).Kind())))
				}
			}
		}
	}
	for _, st := range list {
		run.Steps = append(run.Steps, &RunStep{
			Name: st.Step, Index: st.Index, Kind: string(st.Kind), State: st.State, Generation: st.Generation,
			JobID: st.JobID, UnitID: st.UnitID, Output: st.Output, Error: st.Error, Confidence: st.Confidence,
			StartedAt: st.StartedAt, FinishedAt: st.FinishedAt,
		})
	}
	rank := map[string]int{}
	for i, name := range order {
		rank[name] = i
	}
	slices.SortStableFunc(run.Steps, func(a, b *RunStep) int {
		if a.Name != b.Name {
			if d := rank[a.Name] - rank[b.Name]; d != 0 {
				return d
			}
			if a.Name < b.Name {
				return -1
			}
			return 1
		}
		return a.Index - b.Index
	})
	return run, nil
}

// notReleasedMessage is the error of a step a finished run never
// released.
const notReleasedMessage = "not released: the run ended before this step's trigger was met"

// unreleasedStep is how RunGet lists a step of run r that has no
// instance: PENDING while the run may still release it (RUNNING, PAUSED),
// CANCELED once the run is over (FAILED or CANCELED: it will not run,
// unless the run is retried, which makes it PENDING again). A SUCCEEDED
// run has an instance of every step (a skipped one is SKIPPED).
func unreleasedStep(r *flow.Run, name, kind string) *RunStep {
	st := &RunStep{Name: name, Kind: kind, State: StepPending, Generation: 1}
	if r.State.Terminal() {
		st.State, st.Error, st.FinishedAt = StepCanceled, notReleasedMessage, r.FinishedAt
	}
	return st
}

// RunListParams filter RunList; the zero value lists the newest runs.
type RunListParams struct {
	Workflow      string
	States        []RunState
	CreatedAfter  time.Time // created at or after
	CreatedBefore time.Time // created before
	// Before is the cursor: only runs with a smaller id (older), uuid.Nil
	// for the newest. Pass the last id of a page to get the next.
	Before uuid.UUID
	Limit  int // default 100, at most 1000
}

// RunList lists runs newest first, without their steps.
func (c *Client) RunList(ctx context.Context, p RunListParams) ([]*Run, error) {
	for i, s := range p.States {
		if !s.Valid() {
			return nil, &ValidationError{Field: fmt.Sprintf("states[%d]", i), Message: fmt.Sprintf("unknown run state %q", s)}
		}
	}
	switch {
	case p.Limit == 0:
		p.Limit = 100
	case p.Limit < 0 || p.Limit > 1000:
		return nil, &ValidationError{Field: "limit", Message: "must be between 1 and 1000"}
	}
	runs, err := c.store.RunList(ctx, &store.RunListParams{
		Workflow: p.Workflow, States: p.States, CreatedAfter: p.CreatedAfter, CreatedBefore: p.CreatedBefore,
		BeforeID: p.Before, Limit: p.Limit,
	})
	if err != nil {
		return nil, fieldErrors(err)
	}
	out := make([]*Run, len(runs))
	for i, r := range runs {
		out[i] = runOf(r)
	}
	return out, nil
}

// runOp runs one operation of the advancer.
func (c *Client) runOp(ctx context.Context, what string, id uuid.UUID, op func(*workflow.Advancer) (*flow.Run, error)) (*Run, error) {
	adv, err := c.flows()
	if err != nil {
		return nil, err
	}
	r, err := op(adv)
	if err != nil {
		return nil, fmt.Errorf("%s run %s: %w", what, id, err)
	}
	return runOf(r), nil
}

// RunCancel cancels a RUNNING or PAUSED run: its step jobs that have not
// started are CANCELED, running ones are asked to stop (their handlers'
// contexts end with ErrCancelRequested; remote workers learn it from
// LeaseHeartbeat), no step is released any more, and the run becomes
// CANCELED once no step job runs — at once when none does; until then it
// is returned with CancelRequested. Canceling a run again returns it
// unchanged; a SUCCEEDED or FAILED run is ErrRunConflict.
func (c *Client) RunCancel(ctx context.Context, id uuid.UUID) (*Run, error) {
	return c.runOp(ctx, "cancel", id, func(a *workflow.Advancer) (*flow.Run, error) { return a.Cancel(ctx, c.store, id) })
}

// RunPause pauses a RUNNING run: no step is released while it is PAUSED;
// running steps finish. Pausing a PAUSED run returns it unchanged; a
// finished run is ErrRunConflict.
func (c *Client) RunPause(ctx context.Context, id uuid.UUID) (*Run, error) {
	return c.runOp(ctx, "pause", id, func(a *workflow.Advancer) (*flow.Run, error) { return a.Pause(ctx, c.store, id) })
}

// RunResume resumes a PAUSED run and releases the steps that became ready
// meanwhile. Resuming a RUNNING run returns it unchanged; a finished run is
// ErrRunConflict.
func (c *Client) RunResume(ctx context.Context, id uuid.UUID) (*Run, error) {
	return c.runOp(ctx, "resume", id, func(a *workflow.Advancer) (*flow.Run, error) { return a.Resume(ctx, c.store, id) })
}

// RunRetry runs a FAILED run again: its failed and canceled steps and
// every step downstream of them run again (new jobs, fresh attempts);
// steps that succeeded keep their outputs. Retrying a run that is RUNNING
// or PAUSED returns it unchanged; a SUCCEEDED or CANCELED run is
// ErrRunConflict, as is a FAILED run with a step downstream of a failed
// one still RUNNING (released before the run failed, by trigger
// all_done): the error names it and nothing is changed; retry once it
// ended, or force the retry (RunRetryWith).
func (c *Client) RunRetry(ctx context.Context, id uuid.UUID) (*Run, error) {
	return c.RunRetryWith(ctx, id, RunRetryParams{})
}

// RunRetryParams are the options of RunRetryWith.
type RunRetryParams struct {
	// Force: a step downstream of a failed one still RUNNING, which
	// refuses a plain retry (its job runs on after the run failed, for
	// as long as its timeout allows), is canceled first, in the retry's
	// transaction — its jobs CANCELED or, when running, asked to stop
	// (their handlers' contexts end with ErrCancelRequested; a result
	// they still report is not used), its units CANCELED, its instances
	// CANCELED — and runs again with the others. Without such a step,
	// Force changes nothing.
	Force bool
}

// RunRetryWith is RunRetry with options (POST /v1/runs/{runId}/retry
// with {"force": true}).
func (c *Client) RunRetryWith(ctx context.Context, id uuid.UUID, p RunRetryParams) (*Run, error) {
	return c.runOp(ctx, "retry", id, func(a *workflow.Advancer) (*flow.Run, error) {
		return a.RetryWith(ctx, c.store, id, workflow.RetryOptions{Force: p.Force})
	})
}

// RunSignal delivers output (any value encoding/json encodes) to the
// signal step named step of a run: the step SUCCEEDED with output, and the
// run goes on. A step the run's workflow does not have is
// ErrStepNotFound (whatever the run's state); a step that is not a signal
// step or is not waiting (not released yet, signaled already, timed out),
// or a finished run, is ErrRunConflict.
func (c *Client) RunSignal(ctx context.Context, id uuid.UUID, step string, output any) (*Run, error) {
	b, err := json.Marshal(output)
	if err != nil {
		return nil, &ValidationError{Field: "output", Message: "cannot be encoded as JSON: " + err.Error()}
	}
	if msg := store.JSONUnstorable(b); msg != "" {
		return nil, &ValidationError{Field: "output", Message: msg}
	}
	return c.runOp(ctx, "signal", id, func(a *workflow.Advancer) (*flow.Run, error) {
		return a.Signal(ctx, c.store, id, step, b)
	})
}

// RunContext is what a job step's handler knows of its run.
type RunContext struct {
	RunID uuid.UUID `json:"id"`
	Step  string    `json:"step"`
	Index int       `json:"index"` // the fan-out instance; 0 otherwise
}

// StepPayload is the payload of a job step's job. Embed it in the args of
// a handler that runs workflow steps:
//
//	type PublishArgs struct{ docket.StepPayload }
//
//	func (PublishArgs) JobType() string { return "publish" }
type StepPayload struct {
	Run RunContext `json:"run"`
	// Input is the run's input, or, when the step has an input
	// expression (StepInput), its value.
	Input json.RawMessage `json:"input"`
	// Steps has what the step's parents gave: their state, output (a list
	// in index order for a fan-out parent) and confidence. Nil when the
	// step has an input expression.
	Steps map[string]StepView `json:"steps"`
	// Item and Index: the element of a fan-out instance and its position;
	// absent otherwise.
	Item  json.RawMessage `json:"item,omitempty"`
	Index *int            `json:"index,omitempty"`
}

// StepView is what a step's dependents see of it.
type StepView = flow.StepView

// RunOf returns the run, step and index of the job step running in ctx;
// false for a plain job or outside a handler.
func RunOf(ctx context.Context) (RunContext, bool) {
	row := engine.RowOf(ctx)
	if row == nil {
		return RunContext{}, false
	}
	ref, ok := workflow.StepRefOf(row.Payload)
	if !ok {
		return RunContext{}, false
	}
	return RunContext{RunID: ref.RunID, Step: ref.Step, Index: ref.Index}, true
}

// WorkflowSweepIntervalDefault is the default
// WorkerConfig.WorkflowSweepInterval.
const WorkflowSweepIntervalDefault = 5 * time.Second

// workflowRuntime wires a worker's engine to the workflow runtime: the
// queue of runs whose step jobs ended on this worker (fed by
// OnJobsEnded, drained by a few goroutines), and the sweeper run by the
// maintenance leader. The advancer is made on the first step job seen, so
// a worker of plain jobs never builds a CEL environment.
func (c WorkerConfig) workflowRuntime(client *Client, cfg *engine.Config) {
	queue := &lazyQueue{client: client}
	cfg.OnJobsEnded = func(rows []*job.Row) {
		if runs := stepRuns(rows); len(runs) > 0 {
			queue.enqueue(runs)
		}
	}
	// Under a light load the completer writes a batch at once, and the
	// runs of its step jobs are advanced in the same transaction: the
	// next step's job is committed with its parent's end, a transaction
	// earlier than through the queue.
	cfg.JobsEndedTx = &engine.JobsEndedHook{
		Match: func(r *job.Row) bool {
			_, ok := workflow.IsStepPayload(r.Payload)
			return ok
		},
		// The runs first, in id order, as every other transaction that
		// changes a run and its jobs takes them (a cancel holds the run
		// and stops its jobs): the ends written next lock the jobs.
		Lock: func(ctx context.Context, tx store.Tx, rows []*job.Row) error {
			return lockStepRuns(ctx, tx, rows)
		},
		Handle: func(ctx context.Context, tx store.Tx, rows []*job.Row) error {
			adv, err := client.flows()
			if err != nil {
				return err
			}
			return adv.AdvanceRunsTx(ctx, tx, stepRuns(rows))
		},
		// One at a time on both backends. On PostgreSQL, four at once
		// (as many as the workflow queue has goroutines) was bimodal on a
		// quiet machine: step-to-step p50 3.4–10.5 ms but p99 26–29 ms in
		// most runs, past the 25 ms target; one at a time gave p50 9–12
		// and p99 21–22 ms (docs/benchmarks.md, "Re-measured on a quiet
		// machine").
		Concurrency: 1,
	}
	cfg.Services = append(cfg.Services, queue)
	interval := c.WorkflowSweepInterval
	if interval <= 0 {
		interval = WorkflowSweepIntervalDefault
	}
	sweeper := &workflow.Sweeper{Advancer: client.flows, Store: client.store, Log: client.cfg.Logger, Now: client.cfg.Now}
	cfg.Maintenance = append(cfg.Maintenance, &service.Loop{Name: "workflow_sweeper", Interval: interval, Fn: sweeper.Sweep})
}

// lazyQueue is a worker's workflow.Queue, made and started when the first
// step job ends while the worker runs.
type lazyQueue struct {
	client *Client

	mu    sync.Mutex
	ctx   context.Context // set while the worker runs
	queue *workflow.Queue // started while set
}

func (l *lazyQueue) Start(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ctx = ctx
	return nil
}

func (l *lazyQueue) Stop() {
	l.mu.Lock()
	q := l.queue
	l.ctx, l.queue = nil, nil
	l.mu.Unlock()
	if q != nil {
		q.Stop() // runs still queued are left to the sweeper
	}
}

func (l *lazyQueue) enqueue(runs []uuid.UUID) {
	l.mu.Lock()
	if l.queue == nil && l.ctx != nil {
		adv, err := l.client.flows()
		if err != nil {
			l.mu.Unlock()
			l.client.cfg.Logger.Error("workflow runtime unavailable; the sweeper cannot advance runs either", "service", "workflow", "error", err)
			return
		}
		q := workflow.NewQueue(adv, l.client.store, l.client.cfg.Logger, 0)
		if err := q.Start(l.ctx); err == nil {
			l.queue = q
		}
	}
	q := l.queue
	l.mu.Unlock()
	if q != nil {
		q.Enqueue(runs...)
	}
}

// lockStepRuns locks the runs of the step jobs rows, in id order, each
// once (one statement for a run, the usual case of a light load). A run
// pruned since is skipped: there is nothing to advance.
func lockStepRuns(ctx context.Context, tx store.Tx, rows []*job.Row) error {
	runs := stepRuns(rows)
	slices.SortFunc(runs, func(x, y uuid.UUID) int { return bytes.Compare(x[:], y[:]) })
	for _, id := range slices.Compact(runs) {
		if err := lockRun(ctx, tx, id); err != nil {
			return err
		}
	}
	return nil
}

// stepRuns is the runs of the workflow step jobs among rows, in rows'
// order (a run once per job of it).
func stepRuns(rows []*job.Row) []uuid.UUID {
	var runs []uuid.UUID
	for _, r := range rows {
		if id, ok := workflow.IsStepPayload(r.Payload); ok {
			runs = append(runs, id)
		}
	}
	return runs
}
