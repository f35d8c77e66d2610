package workflow

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/flow"
	"github.com/docket-run/docket/internal/store"
)

// Store is what the advancer needs of the store outside a transaction:
// transactions, and the cooperative cancel of running jobs.
type Store interface {
	store.Transactor
	JobCancelMany(ctx context.Context, p *store.JobCancelManyParams) ([]store.JobCancelManyResult, error)
}

// ErrConflict: the run's state (or the step's kind or state) does not
// allow the operation. Nothing was changed. The API answers 409.
var ErrConflict = errors.New("conflict")

func conflict(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrConflict, fmt.Sprintf(format, args...))
}

// ErrNoStep: an operation named a step its run's workflow does not have.
// Nothing was changed. The API answers 404.
var ErrNoStep = errors.New("no such step")

// ErrNoWorkflow: a run was started on a workflow (or version) that is not
// stored.
var ErrNoWorkflow = errors.New("no such workflow")

// inTx runs fn on the locked, loaded run in one transaction, then asks the
// running jobs fn returned to stop. A missing run is store.ErrNotFound.
// When asking a job to stop fails (other than because it ended), the
// change made by fn stands (it is committed) and the run is returned with
// an error saying so; repeating the operation asks again.
func (a *Advancer) inTx(ctx context.Context, st Store, runID uuid.UUID, fn func(ctx context.Context, adv *advance) ([]uuid.UUID, error)) (*flow.Run, error) {
	var (
		run    *flow.Run
		cancel []uuid.UUID
	)
	err := st.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		r, err := tx.RunLock(ctx, runID)
		if err != nil {
			return err
		}
		adv, err := a.load(ctx, tx, r)
		if err != nil {
			return err
		}
		cancel, err = fn(ctx, adv)
		run = adv.run
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := a.cancelJobs(ctx, st, cancel); err != nil {
		return run, fmt.Errorf("run %s: %w", runID, err)
	}
	return run, nil
}

// cancelJobs asks running jobs to stop, all in one statement
// (JobCancelMany). A job that ended meanwhile (SUCCESS, DEAD or
// CANCELED) or was pruned since is left as it is: its end is recorded by
// the next advancement.
func (a *Advancer) cancelJobs(ctx context.Context, st Store, ids []uuid.UUID) error {
	if len(ids) == 0 {
		return nil
	}
	if _, err := st.JobCancelMany(ctx, &store.JobCancelManyParams{IDs: ids, Now: a.now()}); err != nil {
		return fmt.Errorf("ask %d running jobs to stop: %w", len(ids), err)
	}
	return nil
}

// runningJobs lists the jobs of the run's RUNNING job step instances.
func (adv *advance) runningJobs() []uuid.UUID {
	var ids []uuid.UUID
	for _, name := range adv.stepOrder() {
		for _, st := range adv.steps[name] {
			if st.State == flow.StepRunning && st.JobID != uuid.Nil {
				ids = append(ids, st.JobID)
			}
		}
	}
	return ids
}

// AdvanceRun runs Advance in a transaction of its own. An unknown run is
// no error (nil run).
func (a *Advancer) AdvanceRun(ctx context.Context, st Store, runID uuid.UUID) (*flow.Run, error) {
	var run *flow.Run
	err := st.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		var err error
		run, err = a.Advance(ctx, tx, runID)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("advance run %s: %w", runID, err)
	}
	return run, nil
}

// AdvanceRuns advances runs together in one transaction: each is
// advanced as by Advance, in id order (so that two batches sharing runs
// lock them in the same order and never deadlock), and the jobs and
// instances they release are written by two statements for the whole
// batch. When that transaction fails, each run is advanced in a
// transaction of its own, so that one run's error holds back no other;
// the error returned joins theirs.
func (a *Advancer) AdvanceRuns(ctx context.Context, st Store, runIDs []uuid.UUID) error {
	ids := slices.Clone(runIDs)
	slices.SortFunc(ids, func(x, y uuid.UUID) int { return bytes.Compare(x[:], y[:]) })
	ids = slices.Compact(ids)
	if len(ids) == 1 {
		_, err := a.AdvanceRun(ctx, st, ids[0])
		return err
	}
	err := a.advanceTogether(ctx, st, ids)
	if err == nil || ctx.Err() != nil {
		return err
	}
	var errs []error
	for _, id := range ids {
		if _, err := a.AdvanceRun(ctx, st, id); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// advanceTogether advances runs ids, sorted, in one transaction.
func (a *Advancer) advanceTogether(ctx context.Context, st Store, ids []uuid.UUID) error {
	return st.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		return a.AdvanceRunsTx(ctx, tx, ids)
	})
}

// AdvanceRunsTx advances runs inside tx, as AdvanceRuns does in a
// transaction of its own: each as by Advance, locked in id order (runIDs
// need not be sorted nor distinct), and what they release written by two
// statements for them all. Unknown runs are skipped. The engine's
// completer calls it in the transaction that records the end of their
// step jobs (engine.Config.JobsEndedTx); an error means tx must be
// rolled back.
func (a *Advancer) AdvanceRunsTx(ctx context.Context, tx store.Tx, runIDs []uuid.UUID) error {
	ids := slices.Clone(runIDs)
	slices.SortFunc(ids, func(x, y uuid.UUID) int { return bytes.Compare(x[:], y[:]) })
	ids = slices.Compact(ids)
	batch := &startBatch{}
	loads, err := tx.RunLoadMany(ctx, ids)
	if err != nil {
		return err
	}
	// The runs are locked now: an earlier time could precede the ends
	// recorded by the transactions this one waited for.
	now := a.now()
	for _, l := range loads {
		adv, err := a.loaded(ctx, tx, l.Run, l.Steps)
		if err != nil {
			return fmt.Errorf("advance run %s: %w", l.Run.ID, err)
		}
		adv.batch, adv.now, adv.ends, adv.endsRead = batch, now, l.JobEnds, true
		if err := adv.advance(ctx); err != nil {
			return fmt.Errorf("advance run %s: %w", l.Run.ID, err)
		}
	}
	return batch.flush(ctx, tx, now)
}

// StartParams is one run to start.
type StartParams struct {
	Workflow string
	Version  int             // 0: the latest
	Input    json.RawMessage // nil: null
	// IdempotencyKey: a run of the same workflow with this key exists
	// already → that run, Duplicate.
	IdempotencyKey string
}

// StartResult is the run started, or the run that had the key.
type StartResult struct {
	Run       *flow.Run
	Duplicate bool
}

// Start inserts runs and releases their first steps, all in one
// transaction: a run exists only with its roots released.
func (a *Advancer) Start(ctx context.Context, st Store, runs []*StartParams) ([]*StartResult, error) {
	out := make([]*StartResult, len(runs))
	err := st.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		versions := map[string]int{}
		compiledOf := make([]*compiled, len(runs))
		params := make([]*store.RunInsertParams, len(runs))
		for i, r := range runs {
			version := r.Version
			if version == 0 {
				v, ok := versions[r.Workflow]
				if !ok {
					got, err := tx.WorkflowGet(ctx, &store.WorkflowGetParams{Name: r.Workflow})
					if errors.Is(err, store.ErrNotFound) {
						return fmt.Errorf("%w: %q", ErrNoWorkflow, r.Workflow)
					}
					if err != nil {
						return err
					}
					v = got.Version
					versions[r.Workflow] = v
				}
				version = v
			}
			c, err := a.cache.get(ctx, tx, r.Workflow, version)
			if errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("%w: %q version %d", ErrNoWorkflow, r.Workflow, version)
			}
			if err != nil {
				return err
			}
			if c.err != nil {
				return c.err
			}
			compiledOf[i] = c
			id, err := uuid.NewV7()
			if err != nil {
				return fmt.Errorf("make run id: %w", err)
			}
			input := r.Input
			if len(input) == 0 {
				input = json.RawMessage("null")
			}
			params[i] = &store.RunInsertParams{ID: id, Workflow: r.Workflow, Version: version, Input: input, IdempotencyKey: r.IdempotencyKey}
		}
		res, err := tx.RunInsertMany(ctx, &store.RunInsertManyParams{Runs: params, Now: a.now()})
		if err != nil {
			return err
		}
		// The new runs have no steps yet: each is advanced from what is
		// known, without reading it back, and their first releases are
		// written together.
		batch := &startBatch{}
		now := a.now()
		for i, r := range res {
			out[i] = &StartResult{Run: r.Run, Duplicate: r.Duplicate}
			if r.Duplicate {
				continue
			}
			adv := &advance{tx: tx, c: compiledOf[i], run: r.Run, now: now,
				steps: map[string][]*flow.StepInstance{}, fresh: true, batch: batch}
			if err := adv.advance(ctx); err != nil {
				return err
			}
			out[i].Run = adv.run
		}
		return batch.flush(ctx, tx, now)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Cancel cancels a RUNNING or PAUSED run: step instances whose work has
// not started are CANCELED with their jobs, jobs that are running are
// asked to stop, and the run is CANCELED once no step job runs (at once
// when none does; otherwise it keeps its state with CancelRequested, no
// step is released, and the advancement that records the last running
// job's end cancels it). A CANCELED run is returned as it is; a run being
// canceled too, after its running jobs are asked to stop again. SUCCEEDED
// and FAILED runs are ErrConflict.
func (a *Advancer) Cancel(ctx context.Context, st Store, runID uuid.UUID) (*flow.Run, error) {
	return a.inTx(ctx, st, runID, func(ctx context.Context, adv *advance) ([]uuid.UUID, error) {
		switch {
		case adv.run.State == flow.RunCanceled:
			return nil, nil
		case adv.run.CancelRequested:
			// Asked again: ask the jobs still running again too (an
			// earlier ask may have failed; asking twice is harmless).
			return adv.runningJobs(), nil
		case adv.run.State.Terminal():
			return nil, conflict("run %s is %s: only a RUNNING or PAUSED run can be canceled", adv.run.ID, adv.run.State)
		}
		if err := adv.recordJobEnds(ctx); err != nil {
			return nil, err
		}
		run, err := adv.tx.RunCancelRequest(ctx, &store.RunCancelRequestParams{ID: adv.run.ID, Now: adv.now})
		if err != nil {
			return nil, err
		}
		adv.run = run
		return adv.cancelWhenIdle(ctx)
	})
}

// canceling refuses an operation on a run being canceled.
func canceling(run *flow.Run, op string) error {
	if run.CancelRequested && !run.State.Terminal() {
		return conflict("run %s is being canceled: it cannot be %s", run.ID, op)
	}
	return nil
}

// Pause stops the release of steps of a RUNNING run; running steps go on.
// A PAUSED run is returned as it is; a finished run is ErrConflict.
func (a *Advancer) Pause(ctx context.Context, st Store, runID uuid.UUID) (*flow.Run, error) {
	return a.inTx(ctx, st, runID, func(ctx context.Context, adv *advance) ([]uuid.UUID, error) {
		if err := canceling(adv.run, "paused"); err != nil {
			return nil, err
		}
		switch adv.run.State {
		case flow.RunPaused:
			return nil, nil
		case flow.RunRunning:
		default:
			return nil, conflict("run %s is %s: only a RUNNING run can be paused", adv.run.ID, adv.run.State)
		}
		run, err := adv.tx.RunTransition(ctx, &store.RunTransitionParams{ID: adv.run.ID, From: flow.RunRunning, To: flow.RunPaused, Now: adv.now})
		if err != nil {
			return nil, err
		}
		adv.run = run
		return nil, nil
	})
}

// Resume makes a PAUSED run RUNNING and releases what became ready while
// it was paused. A RUNNING run is returned as it is; a finished run is
// ErrConflict.
func (a *Advancer) Resume(ctx context.Context, st Store, runID uuid.UUID) (*flow.Run, error) {
	return a.inTx(ctx, st, runID, func(ctx context.Context, adv *advance) ([]uuid.UUID, error) {
		if err := canceling(adv.run, "resumed"); err != nil {
			return nil, err
		}
		switch adv.run.State {
		case flow.RunRunning:
			return nil, nil
		case flow.RunPaused:
		default:
			return nil, conflict("run %s is %s: only a PAUSED run can be resumed", adv.run.ID, adv.run.State)
		}
		run, err := adv.tx.RunTransition(ctx, &store.RunTransitionParams{ID: adv.run.ID, From: flow.RunPaused, To: flow.RunRunning, Now: adv.now})
		if err != nil {
			return nil, err
		}
		adv.run = run
		return nil, adv.advance(ctx)
	})
}

// Retry runs a FAILED run again from its failure: every FAILED or
// CANCELED step and everything downstream of it goes back to PENDING (a
// new generation of its instances; new jobs, fresh attempts), steps that
// succeeded keep their outputs, and the run is RUNNING again. A RUNNING
// or PAUSED run is returned as it is (a retry took effect already);
// SUCCEEDED and CANCELED runs are ErrConflict, and so is a FAILED run
// with a step downstream of a failed one still RUNNING
// (flow.RetryBlockers), nothing written: RetryWith with Force cancels
// those steps first.
func (a *Advancer) Retry(ctx context.Context, st Store, runID uuid.UUID) (*flow.Run, error) {
	return a.RetryWith(ctx, st, runID, RetryOptions{})
}

// RetryOptions are the options of a retry.
type RetryOptions struct {
	// Force: the steps that would block the retry (flow.RetryBlockers,
	// RUNNING downstream of a failed step) are canceled first, in the
	// retry's transaction: their units CANCELED, their jobs CANCELED or,
	// when running, asked to stop, the instances CANCELED — and then run
	// again with the rest. Without blockers it changes nothing.
	Force bool
}

// RetryWith is Retry with options.
func (a *Advancer) RetryWith(ctx context.Context, st Store, runID uuid.UUID, o RetryOptions) (*flow.Run, error) {
	return a.inTx(ctx, st, runID, func(ctx context.Context, adv *advance) ([]uuid.UUID, error) {
		if err := canceling(adv.run, "retried"); err != nil {
			return nil, err
		}
		switch adv.run.State {
		case flow.RunRunning, flow.RunPaused:
			return nil, nil
		case flow.RunFailed:
		default:
			return nil, conflict("run %s is %s: only a FAILED run can be retried", adv.run.ID, adv.run.State)
		}
		if adv.c.err != nil {
			return nil, conflict("run %s cannot run again: %v", adv.run.ID, adv.c.err)
		}
		if err := adv.recordJobEnds(ctx); err != nil {
			return nil, err
		}
		_, states := adv.records()
		for name, st := range states {
			// A fan-out step with an instance still running (its job
			// outlived the run's failure) folds RUNNING, but it can only
			// end FAILED or CANCELED when another instance is: it is
			// retried too, or the run would go on without the instances
			// that failed or were canceled (and succeed with its
			// dependents CANCELED). Its running instance ends on its own;
			// the step is released again once it has (see move).
			if st == flow.StepRunning {
				if end := adv.unsuccessfulEnd(name); end != "" {
					states[name] = end
				}
			}
		}
		if running := flow.RetryBlockers(adv.c.g, states); len(running) > 0 {
			// The state table keeps a running step through a retry: it
			// would end with an output computed from the failure and the
			// run could succeed on it. Nothing is written (the
			// transaction rolls back), unless the retry is forced.
			if !o.Force {
				return nil, conflict("run %s: %s", adv.run.ID, stillRunning(adv.run.ID, running))
			}
			if err := adv.cancelBlockers(ctx, running, states); err != nil {
				return nil, err
			}
		}
		run, err := adv.tx.RunTransition(ctx, &store.RunTransitionParams{ID: adv.run.ID, From: flow.RunFailed, To: flow.RunRunning, Now: adv.now})
		if err != nil {
			return nil, err
		}
		adv.run = run
		for _, name := range flow.RetrySteps(adv.c.g, states) {
			for _, inst := range append([]*flow.StepInstance(nil), adv.steps[name]...) {
				if !inst.State.Done() {
					continue
				}
				if _, err := adv.transition(ctx, inst, flow.StepPending, store.StepTransitionParams{}); err != nil {
					return nil, err
				}
			}
		}
		return nil, adv.advance(ctx)
	})
}

// stillRunning says why a retry of run id waits for the steps names, and
// how not to wait.
func stillRunning(id uuid.UUID, names []string) string {
	force := fmt.Sprintf(`(POST /v1/runs/%s/retry with {"force": true}, RunRetryWith with Force)`, id)
	if len(names) == 1 {
		return fmt.Sprintf("step %q is still RUNNING; retry after it ends, or force the retry %s to cancel it and run it again", names[0], force)
	}
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = strconv.Quote(n)
	}
	return fmt.Sprintf("steps %s are still RUNNING; retry after they end, or force the retry %s to cancel them and run them again",
		strings.Join(quoted, ", "), force)
}

// cancelBlockers ends, for a forced retry, the RUNNING instances of the
// steps names (flow.RetryBlockers) and marks them CANCELED in states, in
// this transaction: their jobs are CANCELED or, when running (the usual
// blocker: a failed run lets its running jobs finish), asked to stop
// (JobCancelMany; the job's late end matches no instance any more, the
// retry gives the step a new job); their units CANCELED (UnitCancelMany;
// a run's failure canceled its human steps' units already, so that none
// is left open behind an instance that ends here), with the redo a
// review waits for (runningWork, shared with cancelNotStarted); the
// instances CANCELED.
func (adv *advance) cancelBlockers(ctx context.Context, names []string, states map[string]flow.StepState) error {
	why := fmt.Sprintf("canceled by a forced retry of run %s", adv.run.ID)
	insts, jobs, units := adv.runningWork(names)
	ends := make([]*store.StepTransitionParams, len(insts))
	for i, st := range insts {
		ends[i] = &store.StepTransitionParams{
			RunID: st.RunID, Step: st.Step, Index: st.Index, Generation: st.Generation,
			From: st.State, To: flow.StepCanceled, Error: why, Now: adv.now,
		}
	}
	for _, name := range names {
		states[name] = flow.StepCanceled
	}
	if len(units) > 0 {
		if _, err := adv.tx.UnitCancelMany(ctx, &store.UnitCancelManyParams{IDs: units, Now: adv.now}); err != nil {
			return err
		}
	}
	if len(jobs) > 0 {
		if _, err := adv.tx.JobCancelMany(ctx, &store.JobCancelManyParams{IDs: jobs, Error: why, Now: adv.now}); err != nil {
			return err
		}
	}
	if len(ends) == 0 {
		return nil
	}
	got, err := adv.tx.StepTransitionMany(ctx, &store.StepTransitionManyParams{Transitions: ends, Now: adv.now})
	if err != nil {
		return err
	}
	for _, st := range got {
		adv.set(st)
	}
	return nil
}

// unsuccessfulEnd is FAILED when an instance of step name FAILED, else
// CANCELED when one was CANCELED, else "".
func (adv *advance) unsuccessfulEnd(name string) flow.StepState {
	var end flow.StepState
	for _, in := range adv.steps[name] {
		switch in.State {
		case flow.StepFailed:
			return flow.StepFailed
		case flow.StepCanceled:
			end = flow.StepCanceled
		}
	}
	return end
}

// Signal delivers a signal to the signal step named step of a RUNNING or
// PAUSED run: its instance SUCCEEDED with output, and the run advances.
// A step that is not a signal step, or whose wait is not RUNNING (not
// released yet, signaled already, timed out), is ErrConflict, as is a
// finished run.
func (a *Advancer) Signal(ctx context.Context, st Store, runID uuid.UUID, step string, output json.RawMessage) (*flow.Run, error) {
	return a.inTx(ctx, st, runID, func(ctx context.Context, adv *advance) ([]uuid.UUID, error) {
		// A step the workflow does not have is no resource to signal, in
		// whatever state the run is: not found, not a conflict.
		if adv.c.err == nil && adv.c.g.Step(step) == nil {
			return nil, fmt.Errorf("%w: run %s: workflow %q has no step %q", ErrNoStep, adv.run.ID, adv.run.Workflow, step)
		}
		if adv.run.State.Terminal() {
			return nil, conflict("run %s is %s: it takes no signal", adv.run.ID, adv.run.State)
		}
		if err := canceling(adv.run, "signaled"); err != nil {
			return nil, err
		}
		if adv.c.err != nil {
			return nil, conflict("run %s: %v", adv.run.ID, adv.c.err)
		}
		s := adv.c.g.Step(step)
		switch {
		case s.Signal == nil:
			return nil, conflict("run %s: step %q is a %s step, not a signal step", adv.run.ID, step, s.Kind())
		}
		inst := adv.instance(step, 0)
		if inst == nil {
			return nil, conflict("run %s: signal step %q is not waiting yet (its parents have not ended)", adv.run.ID, step)
		}
		if inst.State != flow.StepRunning {
			return nil, conflict("run %s: signal step %q is %s, not waiting", adv.run.ID, step, inst.State)
		}
		// Past its timeout the wait is over even before the sweeper
		// records it: a late signal must not decide the run.
		if signalTimedOut(s, inst, adv.now) {
			return nil, conflict("run %s: signal step %q timed out: no signal within its timeout of %s", adv.run.ID, step, s.Signal.Timeout)
		}
		if len(output) == 0 {
			output = json.RawMessage("null")
		}
		if _, err := adv.transition(ctx, inst, flow.StepSucceeded, store.StepTransitionParams{Output: output}); err != nil {
			return nil, err
		}
		return nil, adv.advance(ctx)
	})
}

// Graph returns the DAG of a workflow version (to list the steps of a run
// that were not released yet).
func (a *Advancer) Graph(ctx context.Context, r interface {
	WorkflowGet(context.Context, *store.WorkflowGetParams) (*flow.Version, error)
}, name string, version int) (*flow.Graph, error) {
	c, err := a.cache.get(ctx, r, name, version)
	if err != nil {
		return nil, err
	}
	if c.err != nil {
		return nil, c.err
	}
	return c.g, nil
}
