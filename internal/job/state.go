// Package job holds the value types shared by the store, the engine and the
// public API: job rows, attempts, and the job state machine.
package job

import (
	"fmt"
	"slices"
)

// State is a job's lifecycle state. The spelling is the API's.
type State string

// The closed set of job states.
const (
	StateCreated  State = "CREATED"
	StateQueued   State = "QUEUED"
	StateRunning  State = "RUNNING"
	StateRetry    State = "RETRY"
	StateSuccess  State = "SUCCESS"
	StateDead     State = "DEAD"
	StateCanceled State = "CANCELED"
)

// States lists every state in lifecycle order.
var States = []State{
	StateCreated, StateQueued, StateRunning, StateRetry,
	StateSuccess, StateDead, StateCanceled,
}

// Valid reports whether s is one of the known states.
func (s State) Valid() bool { return slices.Contains(States, s) }

// Terminal reports whether a job in state s is finished (it may still be
// manually retried when DEAD or CANCELED).
func (s State) Terminal() bool {
	return s == StateSuccess || s == StateDead || s == StateCanceled
}

// transitions is the job state machine: transitions[from] lists every state a
// job may move to from `from`. Nothing outside this table is ever allowed.
var transitions = map[State][]State{
	StateCreated:  {StateQueued, StateCanceled},
	StateQueued:   {StateRunning, StateCanceled},
	StateRunning:  {StateSuccess, StateRetry, StateDead, StateCanceled},
	StateRetry:    {StateQueued, StateDead, StateCanceled},
	StateSuccess:  {},
	StateDead:     {StateQueued},
	StateCanceled: {StateQueued},
}

// CanTransition reports whether the state machine allows from → to.
func CanTransition(from, to State) bool {
	return slices.Contains(transitions[from], to)
}

// CheckTransition returns an *InvalidTransitionError when from → to is not in
// the state machine, and nil otherwise.
func CheckTransition(from, to State) error {
	if !CanTransition(from, to) {
		return &InvalidTransitionError{From: from, To: to}
	}
	return nil
}

// InvalidTransitionError is returned when a state change is refused: either
// the state machine does not allow it, or the job was no longer in the state
// (or attempt) the caller expected. Nothing was changed.
type InvalidTransitionError struct {
	JobID string // may be empty when the check happened before any lookup
	From  State  // the state the job was in (or was expected to be in)
	To    State  // the state that was asked for
	// Reason, when not empty, says why a change the state machine allows
	// is refused (ReasonCancelRequested).
	Reason string
}

// ReasonCancelRequested is the Reason of a retry refused because the job
// is RUNNING with a cancel requested: it will not run again, and can be
// retried once it has ended.
const ReasonCancelRequested = "a cancel is requested: it will not run again (it ends CANCELED, unless its attempt succeeds or fails for good first); retry it once it has ended"

func (e *InvalidTransitionError) Error() string {
	var s string
	if e.JobID == "" {
		s = fmt.Sprintf("invalid job transition %s -> %s", e.From, e.To)
	} else {
		s = fmt.Sprintf("invalid transition of job %s: %s -> %s", e.JobID, e.From, e.To)
	}
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}
