package flow

import "github.com/google/uuid"

// Event types written to the outbox by the store, in the same transaction
// as the change they describe.
const (
	EventRunStateChanged  = "run.state_changed"
	EventStepStateChanged = "step.state_changed"
)

// RunTransition is one run's state change inside a run.state_changed
// outbox row. From is "" for a run just created.
type RunTransition struct {
	RunID    uuid.UUID `json:"runId"`
	Workflow string    `json:"workflow"`
	Version  int       `json:"version"`
	From     RunState  `json:"from"`
	To       RunState  `json:"to"`
}

// RunStateChangedData is the data of one run.state_changed outbox row: the
// transitions made by one store call (one for a transition, one per new run
// for an insert).
type RunStateChangedData struct {
	Transitions []RunTransition `json:"transitions"`
}

// StepTransition is one step instance's state change inside a
// step.state_changed outbox row. From is "" for an instance just created.
type StepTransition struct {
	RunID      uuid.UUID `json:"runId"`
	Step       string    `json:"step"`
	Index      int       `json:"index"`
	Generation int       `json:"generation"`
	From       StepState `json:"from"`
	To         StepState `json:"to"`
}

// StepStateChangedData is the data of one step.state_changed outbox row:
// the transitions made by one store call.
type StepStateChangedData struct {
	Transitions []StepTransition `json:"transitions"`
}
