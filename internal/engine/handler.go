package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/docket-run/docket/internal/backoff"
	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// Handler runs jobs of one type.
type Handler struct {
	// Work runs one attempt. A nil error means SUCCESS with the returned
	// result (nil for none); *FatalError means DEAD; any other error RETRY
	// (DEAD once attempts are used up). A panic counts as a retryable error.
	Work func(ctx context.Context, row *job.Row) (json.RawMessage, error)
	// Timeout overrides Config.JobTimeout for this type (a job's own
	// timeout overrides both).
	Timeout time.Duration
	// Backoff overrides Config.RetryBackoff for this type, field by field
	// (an unset field is the Config's: backoff.Policy.Or).
	Backoff backoff.Policy
}

// FatalError marks a handler error that must not be retried: the job goes
// to DEAD at once.
type FatalError struct{ Err error }

func (e *FatalError) Error() string {
	if e.Err == nil { // Fatal(nil): a fatal end with nothing more to say
		return "fatal"
	}
	return "fatal: " + e.Err.Error()
}
func (e *FatalError) Unwrap() error { return e.Err }

// ErrCancelRequested is the cause of a handler context canceled because the
// job was canceled while it ran.
var ErrCancelRequested = errors.New("job cancel requested")

// Causes of a handler context's end that the engine itself decides.
var (
	// errTimeout wraps context.DeadlineExceeded, so that errors.Is on the
	// cause of a timed-out handler context (or of one derived from it)
	// matches it as it matches the context's Err.
	errTimeout   = fmt.Errorf("job timeout exceeded: %w", context.DeadlineExceeded)
	errShutdown  = errors.New("worker shutting down")
	errLeaseLost = errors.New("job lease lost")
)

// execution is one attempt of one job running on this node.
type execution struct {
	row      *job.Row
	ref      job.Ref
	handler  *Handler
	producer *producer
	// actx is the context the handler gets, built as it is used.
	actx  attemptContext
	store Store
	now   func() time.Time
	// result set through SetResult; read after the handler returned.
	result json.RawMessage
	// success is the end of an attempt whose handler succeeded, written
	// once by the execution's goroutine when the handler returned: the
	// completion points at it instead of allocating its own (the common
	// end; other ends are rare and allocate).
	success store.JobFinishParams
	// returned is set once the handler returned and its completion was
	// decided: from then on the completer owns the attempt's end.
	returned atomic.Bool
	// leaseExpires is the lease's end (unix nanoseconds, engine clock) as
	// last renewed; past it the attempt no longer counts and the handler is
	// canceled, even if the database could not be reached to say so.
	leaseExpires atomic.Int64
}

type executionKey struct{}

// cancel cancels the attempt with cause (its context's cause).
func (ex *execution) cancel(cause error) { ex.actx.cancel(cause) }

func executionFrom(ctx context.Context) *execution {
	ex, _ := ctx.Value(executionKey{}).(*execution)
	return ex
}

// ErrNotInJob is returned by Progress and SetResult outside a handler.
var ErrNotInJob = errors.New("context does not belong to a running job")

// ReportProgress persists progress (0..100) of the job running in ctx.
func ReportProgress(ctx context.Context, percent float64, message string) error {
	ex := executionFrom(ctx)
	if ex == nil {
		return ErrNotInJob
	}
	if !(percent >= 0 && percent <= 100) { // NaN too
		return errors.New("progress must be between 0 and 100")
	}
	return ex.store.JobProgress(ctx, &store.JobProgressParams{
		Ref: ex.ref, Progress: &percent, Message: message, Now: ex.now(),
	})
}

// SetResult records the result a successful attempt stores with the job.
func SetResult(ctx context.Context, result json.RawMessage) error {
	ex := executionFrom(ctx)
	if ex == nil {
		return ErrNotInJob
	}
	ex.result = result
	return nil
}

// RowOf returns the job running in ctx, as acquired; nil outside a
// handler.
func RowOf(ctx context.Context) *job.Row {
	if ex := executionFrom(ctx); ex != nil {
		return ex.row
	}
	return nil
}
