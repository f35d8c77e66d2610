package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// launch hands acquired jobs to the executors. The execution stays in the
// running set (and keeps its lease renewed) until its completion is
// flushed.
func (e *Engine) launch(ctx context.Context, p *producer, rows []*job.Row) {
	// Handlers outlive the producer's context: one parent without its
	// cancellation for the whole batch.
	base := context.WithoutCancel(ctx)
	exs := make([]*execution, len(rows))
	for i, row := range rows {
		ex := &execution{
			row: row, ref: job.Ref{ID: row.ID, Attempt: row.Attempt}, handler: e.handlers[row.Type],
			producer: p, store: e.store, now: e.cfg.Now,
		}
		ex.actx.ex, ex.actx.parent = ex, base
		ex.leaseExpires.Store(row.LeaseExpiresAt.UnixNano())
		exs[i] = ex
	}
	e.mu.Lock()
	for _, ex := range exs {
		e.running[ex.ref] = ex
	}
	e.mu.Unlock()
	e.executors.launch(exs)
}

// growStack makes an executor's stack big enough for an attempt while the
// goroutine is still shallow. A goroutine starts with a small stack and
// the runtime doubles it by copying when a call needs more; an attempt
// (contexts, the handler, decoding its arguments) outgrows the start size
// deep in its calls, where the copy has many frames to walk and adjust: a
// tenth of the engine's CPU per job in the burn benchmark. Growing once, up
// front, copies one frame.
//
//go:noinline
func growStack(i int) byte {
	var frame [stackReserve]byte
	frame[i] = 1
	return frame[i/2]
}

// stackReserve is the frame growStack reserves.
const stackReserve = 6 << 10

// execute runs the handler and hands the attempt's end to the completer.
func (e *Engine) execute(ex *execution) {
	defer ex.cancel(nil)
	fin := e.run(ex)
	ex.returned.Store(true)
	if fin == nil {
		// The lease was lost: whatever happened, this attempt no longer
		// counts. Another attempt (or the rescuer) owns the job now.
		e.finished(ex)
		return
	}
	e.completer.add(ex, fin)
}

func (e *Engine) timeout(ex *execution) time.Duration {
	switch {
	case ex.row.Timeout > 0:
		return ex.row.Timeout
	case ex.handler != nil && ex.handler.Timeout > 0:
		return ex.handler.Timeout
	}
	return e.cfg.JobTimeout
}

// run calls the handler with the job's deadline and turns its return into
// the attempt's end. nil means the lease was lost and nothing is recorded.
func (e *Engine) run(ex *execution) *store.JobFinishParams {
	if ex.handler == nil {
		return e.retryOrDead(ex, job.OutcomeError, fmt.Sprintf("no handler registered for job type %q on node %s", ex.row.Type, e.cfg.NodeID), false)
	}
	// The deadline counts from the attempt's start on the engine's clock.
	remaining := e.timeout(ex) - e.cfg.Now().Sub(ex.row.AttemptedAt)
	// The handler's context carries the execution (for SetResult,
	// Progress, RowOf), the execution's cancellation and this deadline,
	// on the wall clock as context.WithTimeout would.
	ex.actx.setDeadline(time.Now().Add(remaining))
	defer ex.actx.end()

	result, msg, panicked, err := callHandler(&ex.actx, ex)
	switch {
	case errors.Is(ex.actx.execCauseNow(), errLeaseLost):
		return nil
	case err == nil:
		if result == nil {
			result = ex.result
		}
		ex.success = store.JobFinishParams{
			ID: ex.ref.ID, Attempt: ex.ref.Attempt, State: job.StateSuccess,
			Outcome: job.OutcomeSuccess, Result: result, FinishedAt: e.cfg.Now(),
		}
		return &ex.success
	}
	// The context's cause only matters for a failure: read after a
	// success it cost a clock reading (pastDeadline), one of five a
	// successful attempt made, where the clock was 2.6 % of the process's
	// CPU in the burn benchmark (docs/benchmarks.md, round nine).
	cause := ex.actx.causeNow()
	switch {
	case errors.Is(cause, ErrCancelRequested):
		return &store.JobFinishParams{
			ID: ex.ref.ID, Attempt: ex.ref.Attempt, State: job.StateCanceled,
			Outcome: job.OutcomeCanceled, Error: "canceled while running: " + msg, FinishedAt: e.cfg.Now(),
		}
	case errors.Is(cause, errShutdown):
		return e.retryOrDead(ex, job.OutcomeInterrupted, "interrupted by worker shutdown: "+msg, true)
	case panicked:
		return e.retryOrDead(ex, job.OutcomePanic, msg, false)
	case errors.Is(cause, errTimeout):
		return e.retryOrDead(ex, job.OutcomeTimeout, fmt.Sprintf("timed out after %v: %s", e.timeout(ex), msg), false)
	}
	if fatal := (*FatalError)(nil); errors.As(err, &fatal) {
		return &store.JobFinishParams{
			ID: ex.ref.ID, Attempt: ex.ref.Attempt, State: job.StateDead,
			Outcome: job.OutcomeError, Error: msg, FinishedAt: e.cfg.Now(),
		}
	}
	return e.retryOrDead(ex, job.OutcomeError, msg, false)
}

// callHandler runs the handler, turning a panic into an error with its
// stack. msg is err's text, read once, here, under the recover: an Error
// method that panics (a typed nil pointer) is a panic of the handler,
// where run, reading it to record the attempt, crashed the process.
func callHandler(ctx context.Context, ex *execution) (result []byte, msg string, panicked bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
			msg, panicked = err.Error(), true
		}
	}()
	result, err = ex.handler.Work(ctx, ex.row)
	if err != nil {
		msg = err.Error()
	}
	return result, msg, false, err
}

// retryOrDead ends an attempt that failed: RETRY after the type's backoff,
// or DEAD when it was the last allowed attempt. now=true retries at once
// (a lease given back, not a failure of the job).
func (e *Engine) retryOrDead(ex *execution, outcome job.Outcome, msg string, now bool) *store.JobFinishParams {
	return e.failure(ex.row, ex.handler, outcome, msg, now)
}

func (e *Engine) failure(row *job.Row, h *Handler, outcome job.Outcome, msg string, now bool) *store.JobFinishParams {
	t := e.cfg.Now()
	fin := &store.JobFinishParams{
		ID: row.ID, Attempt: row.Attempt, Outcome: outcome, Error: msg, FinishedAt: t,
	}
	// An interrupted attempt (the worker shut down) is refunded by the
	// store, so it never uses up the budget: always RETRY.
	if outcome != job.OutcomeInterrupted && row.AttemptsUsed() >= row.MaxAttempts {
		fin.State = job.StateDead
		return fin
	}
	fin.State = job.StateRetry
	fin.RunAt = t
	if !now {
		policy := e.cfg.RetryBackoff
		if h != nil {
			policy = h.Backoff.Or(policy)
		}
		fin.RunAt = t.Add(policy.Delay(row.Attempt))
	}
	return fin
}
