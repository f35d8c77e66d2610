package crowd

import (
	"encoding/json"

	"github.com/google/uuid"
)

// Event types written to the outbox by the store, in the same transaction
// as the change they describe.
const (
	EventJudgmentReceived  = "judgment.received"
	EventUnitFinalized     = "unit.finalized"
	EventAssignmentExpired = "assignment.expired"
	EventPoolUpdated       = "pool.updated"
)

// JudgmentReceivedData is the data of a judgment.received outbox row.
type JudgmentReceivedData struct {
	JudgmentID    uuid.UUID `json:"judgmentId"`
	AssignmentID  uuid.UUID `json:"assignmentId"`
	UnitID        uuid.UUID `json:"unitId"`
	PoolID        uuid.UUID `json:"poolId"`
	ContributorID uuid.UUID `json:"contributorId"`
	Golden        bool      `json:"golden"`
	// JudgmentCount is the unit's count with this judgment, and
	// JudgmentsPerUnit its target then.
	JudgmentCount    int `json:"judgmentCount"`
	JudgmentsPerUnit int `json:"judgmentsPerUnit"`
}

// UnitFinalizedData is the data of a unit.finalized outbox row.
type UnitFinalizedData struct {
	UnitID        uuid.UUID       `json:"unitId"`
	PoolID        uuid.UUID       `json:"poolId"`
	RunID         *uuid.UUID      `json:"runId,omitempty"`
	StepIndex     int             `json:"stepIndex"`
	Result        json.RawMessage `json:"result"`
	Confidence    *float64        `json:"confidence"`
	JudgmentCount int             `json:"judgmentCount"`
	// LowConfidence: the unit reached its maximum of judgments with its
	// confidence still under the target (dynamic overlap).
	LowConfidence bool `json:"lowConfidence"`
	// Judgments says, for each clean judgment the result was computed
	// from, whether it agreed with the result; empty when the task has no
	// field the result decides (only text and boxes).
	Judgments []JudgmentAgreement `json:"judgments"`
}

// JudgmentAgreement is one judgment of a finalized unit and whether it
// agreed with the unit's result (every field the result decides).
type JudgmentAgreement struct {
	JudgmentID    uuid.UUID `json:"judgmentId"`
	ContributorID uuid.UUID `json:"contributorId"`
	Agreed        bool      `json:"agreed"`
}

// ExpiredAssignment is one assignment inside an assignment.expired row.
type ExpiredAssignment struct {
	AssignmentID  uuid.UUID `json:"assignmentId"`
	UnitID        uuid.UUID `json:"unitId"`
	PoolID        uuid.UUID `json:"poolId"`
	ContributorID uuid.UUID `json:"contributorId"`
}

// AssignmentExpiredData is the data of an assignment.expired outbox row:
// the assignments one reaper batch expired.
type AssignmentExpiredData struct {
	Assignments []ExpiredAssignment `json:"assignments"`
}

// PoolUpdatedData is the data of a pool.updated outbox row: a change of
// the pool's status.
type PoolUpdatedData struct {
	PoolID uuid.UUID  `json:"poolId"`
	From   PoolStatus `json:"from,omitempty"` // "" for a pool just created
	To     PoolStatus `json:"to"`
}
