package crowd

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"
)

// TaskVersion is one stored version of a task template.
type TaskVersion struct {
	Name    string
	Version int    // 1, 2, …: one more for each changed definition
	Hash    string // content hash of Definition, computed by the caller
	// Definition is the template as JSON, kept byte for byte.
	Definition json.RawMessage
	CreatedAt  time.Time
}

// Pool is the units of one human step of one workflow version.
type Pool struct {
	ID              uuid.UUID
	Workflow        string
	WorkflowVersion int
	Step            string
	Task            string
	TaskVersion     int
	Status          PoolStatus
	Priority        int
	Skills          []string // every one is required of a contributor
	Channels        []string // a contributor needs one of them; empty: any
	// JudgmentsPerUnit is the target a new unit gets when its insert does
	// not give one.
	JudgmentsPerUnit  int
	AssignmentSeconds int
	// Settings are the step's quality-control and aggregation settings,
	// opaque to the store ({} for none).
	Settings  json.RawMessage
	Counts    PoolCounts
	CreatedAt time.Time
	UpdatedAt time.Time
}

// PoolCounts are a pool's counters, exact: each moves in the statement
// that changes what it counts. Units by state count regular units; golden
// units are counted apart, in Golden.
type PoolCounts struct {
	New, Judgable, Paused, Finalized, Canceled int
	Golden                                     int
	Judgments                                  int // every judgment, golden ones too
	ActiveAssignments                          int
}

// Open is how many regular units are not final yet.
func (c PoolCounts) Open() int { return c.New + c.Judgable + c.Paused }

// Unit is one item of work of a pool.
type Unit struct {
	ID     uuid.UUID
	PoolID uuid.UUID
	// RunID is the run the unit belongs to (root_data_id); uuid.Nil for a
	// golden unit added by hand.
	RunID uuid.UUID
	// StepIndex is the index of the run's step instance (0 without
	// forEach); with RunID and the pool's step it names the instance.
	StepIndex int
	// ParentUnitID is the unit of the nearest human ancestor step; uuid.Nil
	// for none.
	ParentUnitID uuid.UUID
	Input        json.RawMessage
	State        UnitState
	Golden       bool
	Answer       json.RawMessage // the known answer of a golden unit; nil otherwise
	// Feedback is the requester's explanation of a golden unit's answer,
	// shown to a contributor after they answered it; "" for none.
	Feedback string
	// SlotsTaken counts the ACTIVE and SUBMITTED assignments: slots free
	// when an assignment expires or is released.
	SlotsTaken       int
	JudgmentsPerUnit int // the current target
	JudgmentCount    int
	Result           json.RawMessage // set when FINALIZED
	Confidence       *float64        // set when FINALIZED
	// LowConfidence: FINALIZED with a confidence under its task's target
	// confidence — it reached the maximum of judgments without the target,
	// or a repair recomputed it lower (docs/quality.md, "Dynamic
	// overlap"). The store does not keep it: docket.Client's UnitGet and
	// UnitList set it from the pool's task.
	LowConfidence bool
	FinalizedAt   time.Time // zero unless FINALIZED
	CreatedAt     time.Time
	UpdatedAt     time.Time
}

// Contributor is a person (or a simulated one) who does human work.
type Contributor struct {
	ID         uuid.UUID
	ExternalID string // the requester's id of the person; unique
	Name       string
	Skills     []string
	Channels   []string
	State      ContributorState
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// Assignment is the lease of one slot of a unit to one contributor.
type Assignment struct {
	ID            uuid.UUID
	UnitID        uuid.UUID
	PoolID        uuid.UUID
	ContributorID uuid.UUID
	State         AssignmentState
	StartedAt     time.Time
	ExpiresAt     time.Time
	HeartbeatAt   time.Time
	FinishedAt    time.Time // when it left ACTIVE; zero while ACTIVE
}

// Taken is an assignment just taken, with what the contributor needs.
type Taken struct {
	Assignment *Assignment
	Unit       *Unit
}

// Judgment is one contributor's answer for one unit, through one
// assignment.
type Judgment struct {
	ID            uuid.UUID
	AssignmentID  uuid.UUID
	UnitID        uuid.UUID
	PoolID        uuid.UUID
	ContributorID uuid.UUID
	Data          json.RawMessage
	// Trust is the contributor's trust in the pool when the judgment came
	// in; nil when none was known.
	Trust *float64
	// Golden: the judgment answers a golden unit (a test question).
	Golden bool
	// Tainted judgments are excluded from aggregation (their contributor
	// was found unreliable, or a review rejected their unit's result).
	Tainted     bool
	StartedAt   time.Time // the assignment's start
	SubmittedAt time.Time
}

// PoolContributor is what a pool knows of one contributor: trust and a
// flag, kept per pool (quality control).
type PoolContributor struct {
	PoolID        uuid.UUID
	ContributorID uuid.UUID
	Trust         *float64 // nil before any test question
	TestsAnswered int
	TestsCorrect  int
	// Flagged contributors get no more assignments in the pool.
	Flagged    bool
	FlagReason string
	FlaggedAt  time.Time // zero unless flagged
	UpdatedAt  time.Time
}
