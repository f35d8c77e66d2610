package docket

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/workflow"
)

// Get returns one job; ErrNotFound when there is none.
func (c *Client) Get(ctx context.Context, id uuid.UUID) (*JobRow, error) {
	return c.store.JobGet(ctx, id)
}

// ListParams filter List. Zero fields filter nothing.
type ListParams struct {
	States   []JobState
	Types    []string
	Queues   []string
	Priority *int
	// Before is the cursor: jobs with ids below it (the previous page's
	// last id). uuid.Nil starts at the newest.
	Before uuid.UUID
	// Limit; default 100, at most 1000.
	Limit int
	// Args, when set, keeps the jobs whose payload holds a value (see
	// ArgsMatch: it scans only the newest jobs); a bad one is a
	// *ValidationError.
	Args *ArgsMatch
}

// List lists jobs newest first.
func (c *Client) List(ctx context.Context, p ListParams) ([]*JobRow, error) {
	if p.Limit <= 0 {
		p.Limit = 100
	}
	p.Limit = min(p.Limit, 1000)
	sp := &store.JobListParams{
		States: p.States, Types: p.Types, Queues: p.Queues, Priority: p.Priority,
		BeforeID: p.Before, Limit: p.Limit,
	}
	if p.Args != nil {
		if err := p.Args.Validate(); err != nil {
			return nil, err
		}
		sp.Payload = p.Args.storeMatch()
	}
	rows, err := c.store.JobList(ctx, sp)
	return rows, fieldErrors(err)
}

// Attempts lists a job's attempts, oldest first, with the running one.
func (c *Client) Attempts(ctx context.Context, id uuid.UUID) ([]*JobAttempt, error) {
	return c.store.JobAttemptList(ctx, id)
}

// Cancel cancels a job: at once when it waits (CREATED, QUEUED, RETRY); when
// it runs, its handler's context is canceled and the holder records
// CANCELED (the returned row has CancelRequested). Canceling a canceled job
// changes nothing; SUCCESS and DEAD give *InvalidTransitionError. A
// workflow step's job canceled at once has its run advanced in the same
// transaction, as the end of a lease does: its step fails with it, and
// the run, now rather than at the workflow sweeper's next round. When
// the advancement fails, the job is canceled alone (logged) and the
// sweeper advances the run, as for the end of a lease: a run whose
// advancement keeps failing is when its jobs most need canceling.
// Canceling the job again advances nothing.
func (c *Client) Cancel(ctx context.Context, id uuid.UUID) (*JobRow, error) {
	// A job's payload never changes: whether it is a step's is read
	// once, before any lock. A plain job (and a missing one: JobCancel
	// reports it) is canceled by the one call.
	var runID uuid.UUID
	if cur, err := c.store.JobGet(ctx, id); err == nil {
		runID, _ = workflow.IsStepPayload(cur.Payload)
	} else if !errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("cancel job %s: %w", id, err)
	}
	if runID == uuid.Nil {
		return c.cancelAlone(ctx, id)
	}
	var row *JobRow
	err := c.store.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		var err error
		row, err = c.cancelStepJob(ctx, tx, id, runID)
		return err
	})
	var af *advanceFailure
	if errors.As(err, &af) && ctx.Err() == nil {
		c.cfg.Logger.Warn("cancel a step job with its run's advancement failed; canceling it alone, the sweeper advances the run",
			"service", "workflow", "run_id", runID.String(), "job_id", id.String(), "error", af.err)
		return c.cancelAlone(ctx, id)
	}
	if err != nil {
		return nil, err
	}
	return row, nil
}

// cancelAlone cancels job id by itself, in a transaction of its own.
func (c *Client) cancelAlone(ctx context.Context, id uuid.UUID) (*JobRow, error) {
	res, err := c.store.JobCancel(ctx, &store.JobCancelParams{ID: id, Now: c.cfg.Now()})
	if err != nil {
		return nil, err
	}
	return res.Job, nil
}

// advanceFailure is a failed advancement of the run of a step job being
// canceled: Cancel then cancels the job alone.
type advanceFailure struct{ err error }

func (e *advanceFailure) Error() string { return "advance the run: " + e.err.Error() }

func (e *advanceFailure) Unwrap() error { return e.err }

// cancelStepJob cancels job id, a step's of run runID, in tx and, when
// that moved it to CANCELED, advances the run there too. The run is
// locked first, as every transaction that changes a run and its jobs
// takes them (see lockStepRuns).
func (c *Client) cancelStepJob(ctx context.Context, tx store.Tx, id, runID uuid.UUID) (*JobRow, error) {
	if err := lockRun(ctx, tx, runID); err != nil {
		return nil, fmt.Errorf("cancel job %s: lock run %s: %w", id, runID, err)
	}
	res, err := tx.JobCancel(ctx, &store.JobCancelParams{ID: id, Now: c.cfg.Now()})
	if err != nil {
		return nil, err
	}
	if !res.Canceled {
		return res.Job, nil
	}
	adv, err := c.flows()
	if err != nil {
		return nil, &advanceFailure{err: err}
	}
	if _, err := adv.Advance(ctx, tx, runID); err != nil {
		return nil, &advanceFailure{err: err}
	}
	return res.Job, nil
}

// Retry puts a DEAD or CANCELED job back in its queue with attempts reset.
// A job that is waiting or running is returned unchanged; a job that
// succeeded gives *InvalidTransitionError, and so does a RUNNING job
// whose cancel is requested (Reason ReasonCancelRequested): it will not
// run again, so nothing is changed, the request is kept, and the job can
// be retried once it has ended. The DEAD or CANCELED job of a
// workflow step is ErrRunConflict, nothing changed: its end would reach
// no step (the step ended with the job), so it would run after its run
// was canceled, or once for nothing and again when its run is retried.
// Retry the run (RunRetry) instead.
func (c *Client) Retry(ctx context.Context, id uuid.UUID) (*JobRow, error) {
	if err := c.refuseStepJobRetry(ctx, id); err != nil {
		return nil, err
	}
	return c.store.JobRetry(ctx, &store.JobRetryParams{ID: id, Now: c.cfg.Now()})
}

// refuseStepJobRetry is ErrRunConflict for an ended job of a step of a
// run that exists (a plain job whose payload merely looks like a step's
// is retried as any other).
func (c *Client) refuseStepJobRetry(ctx context.Context, id uuid.UUID) error {
	row, err := c.store.JobGet(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil // JobRetry reports it
	case err != nil:
		return fmt.Errorf("retry job %s: %w", id, err)
	case row.State != JobStateDead && row.State != JobStateCanceled:
		return nil // JobRetry changes no other
	}
	ref, ok := workflow.StepRefOf(row.Payload)
	if !ok {
		return nil
	}
	run, err := c.store.RunGet(ctx, ref.RunID)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		return err
	}
	if run.State == RunCanceled || run.State == RunSucceeded {
		// RunRetry refuses these too: say what is left to do.
		return fmt.Errorf("retry job %s: %w: it is the job of step %q[%d] of run %s, which ended with it; run %s is %s, which is not retried: start a new run",
			id, ErrRunConflict, ref.Step, ref.Index, ref.RunID, ref.RunID, run.State)
	}
	return fmt.Errorf("retry job %s: %w: it is the job of step %q[%d] of run %s, which ended with it; retry the run instead (RunRetry, POST /v1/runs/%s/retry)",
		id, ErrRunConflict, ref.Step, ref.Index, ref.RunID, ref.RunID)
}

// QueueInfo is a queue's pause flag and job counts by state.
type QueueInfo = store.Queue

// PauseQueue stops every worker from acquiring jobs of queue (running jobs
// finish). ResumeQueue undoes it. A name no queue can have (see
// InsertOpts.Queue) is a *ValidationError.
func (c *Client) PauseQueue(ctx context.Context, queue string) error {
	if err := validName("queue", queue); err != nil {
		return err
	}
	return fieldErrors(c.store.QueueSetPaused(ctx, &store.QueueSetPausedParams{Name: queue, Paused: true, Now: c.cfg.Now()}))
}

// ResumeQueue lets workers acquire jobs of queue again.
func (c *Client) ResumeQueue(ctx context.Context, queue string) error {
	if err := validName("queue", queue); err != nil {
		return err
	}
	return fieldErrors(c.store.QueueSetPaused(ctx, &store.QueueSetPausedParams{Name: queue, Paused: false, Now: c.cfg.Now()}))
}

// Queues lists queues with their counts and pause flags.
func (c *Client) Queues(ctx context.Context) ([]*QueueInfo, error) {
	return c.store.QueueList(ctx)
}

// QueueCounts lists the queues as Queues does, with counts that cost what
// cap allows, not what the jobs table holds: a queue's QUEUED jobs are
// counted up to cap+1, and of every other state at most cap+1 jobs are
// read over all queues and counted by queue. QueueInfo.AtLeast names the
// counts that are lower bounds (a read that stopped at cap+1). cap must
// be positive.
func (c *Client) QueueCounts(ctx context.Context, cap int) ([]*QueueInfo, error) {
	return c.store.QueueCount(ctx, &store.QueueCountParams{Cap: cap})
}

// QueueListParams pages Client.QueueList.
type QueueListParams struct {
	// Cap bounds the counts as QueueCounts' cap does; it must be positive.
	Cap int
	// After is the cursor: only queues whose name sorts after it (the
	// previous page's last name). "" starts at the first.
	After string
	// Limit; default 100, at most 1000.
	Limit int
}

// QueueList is QueueCounts a page at a time: at most p.Limit queues whose
// name sorts after p.After, by name, each with the counts and lower bounds
// it has in the whole list. A queue made meanwhile shows on a later page
// or not at all, never twice.
func (c *Client) QueueList(ctx context.Context, p QueueListParams) ([]*QueueInfo, error) {
	if p.Cap <= 0 {
		return nil, &ValidationError{Field: "Cap", Message: fmt.Sprintf("%d must be positive", p.Cap)}
	}
	if p.Limit <= 0 {
		p.Limit = 100
	}
	p.Limit = min(p.Limit, 1000)
	return c.store.QueueCount(ctx, &store.QueueCountParams{Cap: p.Cap, After: p.After, Limit: p.Limit})
}

// CountByState counts jobs per state over all queues.
func (c *Client) CountByState(ctx context.Context) (map[JobState]int, error) {
	counts, err := c.store.JobCount(ctx)
	if err != nil {
		return nil, err
	}
	out := map[JobState]int{}
	for _, n := range counts {
		out[n.State] += n.Count
	}
	return out, nil
}

// JobOverview is the dashboard's bounded view of the jobs: queue depths,
// the DEAD count, jobs finished per minute and the newest jobs' wait
// before their start (see OverviewParams for the bounds).
type JobOverview = store.JobOverview

// QueueDepth is one queue's QUEUED, RUNNING and RETRY jobs in a
// JobOverview.
type QueueDepth = store.QueueDepth

// FinishedMinute is the jobs finished in one minute by final state.
type FinishedMinute = store.FinishedMinute

// OverviewParams bounds Client.Overview: counts stop at Cap+1 (a queue's
// QUEUED jobs, the DEAD jobs; at most Cap+1 RUNNING and Cap+1 RETRY jobs
// are read over all queues), at most FinishedCap jobs finished since
// Since are read (newest first), and the waits are those of the newest
// LatencyOf of them. No read grows with the size of the jobs table.
type OverviewParams = store.JobOverviewParams

// Overview reads the dashboard's figures with bounded queries.
func (c *Client) Overview(ctx context.Context, p *OverviewParams) (*JobOverview, error) {
	return c.store.JobOverview(ctx, p)
}
