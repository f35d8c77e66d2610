package flow

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"
)

// Version is one stored version of a workflow definition.
type Version struct {
	Name    string
	Version int // 1, 2, …: one more for each changed definition
	// Hash is the content hash of Definition (Hash), "sha256:<hex>".
	Hash string
	// Definition is the canonical JSON (Canonical) of the definition.
	Definition json.RawMessage
	CreatedAt  time.Time
}

// Run is one stored workflow run: an input flowing through one version of
// a workflow.
type Run struct {
	ID       uuid.UUID // UUIDv7
	Workflow string
	Version  int // the version the run is pinned to
	State    RunState
	Input    json.RawMessage
	Output   json.RawMessage // set when the run SUCCEEDED; nil otherwise
	Error    string          // why the run FAILED or was CANCELED
	// CancelRequested: a cancel of the RUNNING or PAUSED run waits for
	// its running step jobs to stop; the run becomes CANCELED once nothing
	// runs.
	CancelRequested bool
	// IdempotencyKey is unique per workflow (all its versions); "" for none.
	IdempotencyKey string
	CreatedAt      time.Time
	UpdatedAt      time.Time
	FinishedAt     time.Time // zero while RUNNING or PAUSED
}

// StepInstance is one stored instance of a step of a run: index 0 for a
// step without forEach, one per item for a fan-out step.
type StepInstance struct {
	RunID uuid.UUID
	Step  string
	Index int
	Kind  Kind
	// Generation starts at 1 and grows by one each time the instance is
	// reset to PENDING by a retry of its run. Changes to the instance are
	// guarded by it, so the job, unit or signal of an earlier generation
	// cannot complete the instance of a later one.
	Generation int
	State      StepState
	JobID      uuid.UUID // the job of a job step while released; uuid.Nil otherwise
	UnitID     uuid.UUID // the unit of a human step while released; uuid.Nil otherwise
	Output     json.RawMessage
	Error      string
	Confidence *float64 // human steps, once finalized
	CreatedAt  time.Time
	UpdatedAt  time.Time
	StartedAt  time.Time // when it became RUNNING; zero before
	FinishedAt time.Time // when it ended; zero while not done
}
