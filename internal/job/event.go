package job

import "github.com/google/uuid"

// Event types written to the outbox by the store.
const (
	EventStateChanged = "job.state_changed"
	EventProgress     = "job.progress"
)

// Transition is one job's state change inside a job.state_changed outbox row.
type Transition struct {
	JobID   uuid.UUID `json:"jobId"`
	JobType string    `json:"jobType"`
	Queue   string    `json:"queue"`
	From    State     `json:"from"`
	To      State     `json:"to"`
	Attempt int       `json:"attempt"`
}

// TransitionFrom describes r's change from state from to its current
// state.
func (r *Row) TransitionFrom(from State) Transition {
	return Transition{JobID: r.ID, JobType: r.Type, Queue: r.Queue, From: from, To: r.State, Attempt: r.Attempt}
}

// StateChangedData is the data of one job.state_changed outbox row. One row
// describes every transition made by one statement (a batch acquired or
// completed together); the relay fans it out as one event per job.
type StateChangedData struct {
	Transitions []Transition `json:"transitions"`
}

// ProgressData is the data of one job.progress outbox row.
type ProgressData struct {
	JobID    uuid.UUID `json:"jobId"`
	Attempt  int       `json:"attempt"`
	Progress float64   `json:"progress"`
	Message  string    `json:"message,omitempty"`
}
