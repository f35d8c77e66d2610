package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// attemptContext is the context a handler gets: the execution's
// cancellation (lease lost, cancel requested, shutdown, each with its
// cause) under the attempt's deadline (cause errTimeout), answering
// executionKey with the execution.
//
// It behaves exactly as context.WithDeadlineCause over
// context.WithCancelCause of the batch's parent (what the engine built for
// every attempt before), and it is those two contexts, but built only
// when something needs them: the first call of Done, or of Value with a key
// other than executionKey (context.Cause, and every context derived from
// this one, ask through these). Until then Deadline and Err are answered
// from the deadline and the events recorded, and a cancellation or the
// attempt's end is recorded instead of applied; building replays them in
// the order they happened. A handler that never waits on its context (a
// no-op, a computation) costs no context, timer or cancel function at all:
// those were a tenth of the engine's CPU per job in the burn benchmark
// (docs/benchmarks.md). One that does costs what it did.
type attemptContext struct {
	ex     *execution
	parent context.Context // the batch's parent, without cancellation

	built atomic.Pointer[builtContexts]

	mu       sync.Mutex
	deadline time.Time // set by run before the handler is called
	// The first cancellation of the execution and its cause (the cause of
	// the execution's context).
	execCause error
	// How the attempt's context ended, as first decided: (Canceled, a
	// cause) or (DeadlineExceeded, errTimeout); nil while it has not.
	err, cause error
	// execFirst: the attempt ended because the execution was canceled
	// (rather than by its deadline or its end).
	execFirst bool
}

// builtContexts are the standard contexts an attemptContext stands for.
type builtContexts struct {
	exec          context.Context // WithCancelCause(parent)
	cancelExec    context.CancelCauseFunc
	attempt       context.Context // WithDeadlineCause(exec, deadline, errTimeout)
	cancelAttempt context.CancelFunc
}

var _ context.Context = (*attemptContext)(nil)

// setDeadline starts the attempt: its context ends at d.
func (c *attemptContext) setDeadline(d time.Time) {
	c.mu.Lock()
	c.deadline = d
	c.mu.Unlock()
}

// pastDeadline reports whether the deadline has passed. c.mu is held.
func (c *attemptContext) pastDeadline() bool {
	return !c.deadline.IsZero() && !time.Now().Before(c.deadline)
}

// endLocked records the attempt's context's end, unless it has one. c.mu
// is held.
func (c *attemptContext) endLocked(cause error, exec bool) {
	if c.err != nil {
		return
	}
	if c.pastDeadline() {
		c.err, c.cause = context.DeadlineExceeded, errTimeout
		return
	}
	c.err, c.cause, c.execFirst = context.Canceled, cause, exec
}

// cancel cancels the execution with cause (context.Canceled when nil), as
// a context.CancelCauseFunc: the first cause stays.
func (c *attemptContext) cancel(cause error) {
	if cause == nil {
		cause = context.Canceled
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if b := c.built.Load(); b != nil {
		b.cancelExec(cause)
		return
	}
	if c.execCause == nil {
		c.execCause = cause
	}
	c.endLocked(cause, true)
}

// end releases the attempt's context once the handler returned, as the
// cancel function of context.WithDeadlineCause.
func (c *attemptContext) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if b := c.built.Load(); b != nil {
		b.cancelAttempt()
		return
	}
	c.endLocked(context.Canceled, false)
}

// build makes the standard contexts, replaying what was recorded.
func (c *attemptContext) build() *builtContexts {
	if b := c.built.Load(); b != nil {
		return b
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if b := c.built.Load(); b != nil {
		return b
	}
	b := &builtContexts{}
	b.exec, b.cancelExec = context.WithCancelCause(c.parent)
	under := b.exec
	switch {
	case c.execFirst:
		// Canceled before its deadline: the attempt's context inherits
		// the cancellation when it is made.
		b.cancelExec(c.execCause)
	case c.err == context.Canceled:
		// Ended by run before its deadline (and before any
		// cancellation): a canceled context in between gives the
		// attempt's context that end, its deadline still reported.
		var cancel context.CancelFunc
		under, cancel = context.WithCancel(b.exec)
		cancel()
	}
	if c.deadline.IsZero() {
		// Asked before run set the deadline: only the cancellation.
		b.attempt, b.cancelAttempt = context.WithCancel(under)
	} else {
		// A deadline already past (and nothing before it) ends it at
		// once, with errTimeout.
		b.attempt, b.cancelAttempt = context.WithDeadlineCause(under, c.deadline, errTimeout)
	}
	if c.execCause != nil && !c.execFirst {
		b.cancelExec(c.execCause) // after the attempt's own end
	}
	c.built.Store(b)
	return b
}

// execCauseNow is context.Cause of the execution's context.
func (c *attemptContext) execCauseNow() error {
	if b := c.built.Load(); b != nil {
		return context.Cause(b.exec)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if b := c.built.Load(); b != nil {
		return context.Cause(b.exec)
	}
	return c.execCause
}

// causeNow is context.Cause of the attempt's context.
func (c *attemptContext) causeNow() error {
	if b := c.built.Load(); b != nil {
		return context.Cause(b.attempt)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if b := c.built.Load(); b != nil { // built since the first look: it answers now
		return context.Cause(b.attempt)
	}
	if c.err == nil && c.pastDeadline() {
		return errTimeout
	}
	return c.cause
}

func (c *attemptContext) Deadline() (time.Time, bool) {
	if b := c.built.Load(); b != nil {
		return b.attempt.Deadline()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deadline, !c.deadline.IsZero()
}

func (c *attemptContext) Done() <-chan struct{} { return c.build().attempt.Done() }

func (c *attemptContext) Err() error {
	if b := c.built.Load(); b != nil {
		return b.attempt.Err()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if b := c.built.Load(); b != nil { // built since the first look: it answers now
		return b.attempt.Err()
	}
	if c.err == nil && c.pastDeadline() {
		return context.DeadlineExceeded
	}
	return c.err
}

// Value answers executionKey with the execution; any other key is asked of
// the standard contexts (context.Cause asks for the cancelable one there,
// and a derived context registers with it).
func (c *attemptContext) Value(key any) any {
	if key == (executionKey{}) {
		return c.ex
	}
	return c.build().attempt.Value(key)
}

func (c *attemptContext) String() string { return "docket attempt context" }
