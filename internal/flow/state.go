package flow

import (
	"fmt"
	"slices"
)

// RunState is the state of a workflow run. The spelling is the API's.
type RunState string

// The closed set of run states.
const (
	RunRunning   RunState = "RUNNING"
	RunPaused    RunState = "PAUSED"
	RunSucceeded RunState = "SUCCEEDED"
	RunFailed    RunState = "FAILED"
	RunCanceled  RunState = "CANCELED"
)

// RunStates lists every run state.
var RunStates = []RunState{RunRunning, RunPaused, RunSucceeded, RunFailed, RunCanceled}

// Valid reports whether s is one of the known run states.
func (s RunState) Valid() bool { return slices.Contains(RunStates, s) }

// Terminal reports whether a run in state s is over (a FAILED run may
// still be retried).
func (s RunState) Terminal() bool {
	return s == RunSucceeded || s == RunFailed || s == RunCanceled
}

// runMachine: the states a run may move to from each state.
//
//	RUNNING → PAUSED      pause: no new step instance is released
//	PAUSED → RUNNING      resume
//	RUNNING, PAUSED → SUCCEEDED  every step is done and none failed the run
//	                      (a paused run whose last running steps end is over)
//	RUNNING, PAUSED → FAILED     a step with onFailure "fail" failed
//	RUNNING, PAUSED → CANCELED   cancel
//	FAILED → RUNNING      retry: failed steps and their descendants run again
var runMachine = machine[RunState]{of: "run", next: map[RunState][]RunState{
	RunRunning:   {RunPaused, RunSucceeded, RunFailed, RunCanceled},
	RunPaused:    {RunRunning, RunSucceeded, RunFailed, RunCanceled},
	RunSucceeded: {},
	RunFailed:    {RunRunning},
	RunCanceled:  {},
}}

// CanRunTransition reports whether the run state machine allows from → to.
func CanRunTransition(from, to RunState) bool { return runMachine.can(from, to) }

// CheckRunTransition returns an *InvalidTransitionError when from → to is
// not in the run state machine, and nil otherwise.
func CheckRunTransition(from, to RunState) error { return runMachine.check(from, to) }

// StepState is the state of one step instance of a run (a step without
// forEach has one instance, index 0).
type StepState string

// The closed set of step instance states.
const (
	StepPending   StepState = "PENDING"
	StepRunning   StepState = "RUNNING"
	StepSucceeded StepState = "SUCCEEDED"
	StepFailed    StepState = "FAILED"
	StepSkipped   StepState = "SKIPPED"
	StepCanceled  StepState = "CANCELED"
)

// StepStates lists every step instance state.
var StepStates = []StepState{StepPending, StepRunning, StepSucceeded, StepFailed, StepSkipped, StepCanceled}

// Valid reports whether s is one of the known step states.
func (s StepState) Valid() bool { return slices.Contains(StepStates, s) }

// Done reports whether a step instance in state s has ended.
func (s StepState) Done() bool {
	return s == StepSucceeded || s == StepFailed || s == StepSkipped || s == StepCanceled
}

// stepMachine: the states a step instance may move to from each state.
//
//	PENDING → RUNNING     released: its job, unit or signal wait exists
//	PENDING → SKIPPED     its `if` is false, or its parents' ends skip it
//	PENDING → FAILED      its `if` or `forEach` failed to evaluate, or the
//	                      fan-out is over MaxForEachItems
//	PENDING → CANCELED    the run was canceled or failed before release
//	RUNNING → SUCCEEDED   its job succeeded, unit was finalized, signal came
//	RUNNING → FAILED      its job went DEAD, or its signal timed out
//	RUNNING → SKIPPED     its signal timed out and its onFailure is
//	                      "continue"
//	RUNNING → CANCELED    the run was canceled
//	SUCCEEDED, FAILED, SKIPPED, CANCELED → PENDING
//	                      retry of the run: the instance is a failed step or
//	                      downstream of one (see RetrySteps)
var stepMachine = machine[StepState]{of: "step", next: map[StepState][]StepState{
	StepPending:   {StepRunning, StepSkipped, StepFailed, StepCanceled},
	StepRunning:   {StepSucceeded, StepFailed, StepSkipped, StepCanceled},
	StepSucceeded: {StepPending},
	StepFailed:    {StepPending},
	StepSkipped:   {StepPending},
	StepCanceled:  {StepPending},
}}

// CanStepTransition reports whether the step state machine allows from → to.
func CanStepTransition(from, to StepState) bool { return stepMachine.can(from, to) }

// CheckStepTransition returns an *InvalidTransitionError when from → to is
// not in the step state machine, and nil otherwise.
func CheckStepTransition(from, to StepState) error { return stepMachine.check(from, to) }

// machine is a state machine: next[from] lists every state allowed after
// from; nothing outside the table is ever allowed.
type machine[S ~string] struct {
	of   string // "run" or "step", for errors
	next map[S][]S
}

func (m machine[S]) can(from, to S) bool { return slices.Contains(m.next[from], to) }

func (m machine[S]) check(from, to S) error {
	if !m.can(from, to) {
		return &InvalidTransitionError{Of: m.of, From: string(from), To: string(to)}
	}
	return nil
}

// InvalidTransitionError is a refused change of a run's or a step
// instance's state. Nothing was changed.
type InvalidTransitionError struct {
	Of string // "run" or "step"
	ID string // may be empty when the check happened before any lookup
	// From is the state the row was found in when a store refused the
	// change (it was not in the expected state or generation), and the
	// asked-for from state when the state machine refused it before any
	// lookup.
	From string
	To   string
}

func (e *InvalidTransitionError) Error() string {
	if e.ID == "" {
		return fmt.Sprintf("invalid %s transition %s -> %s", e.Of, e.From, e.To)
	}
	return fmt.Sprintf("invalid transition of %s %s: %s -> %s", e.Of, e.ID, e.From, e.To)
}
