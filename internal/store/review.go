package store

import (
	"context"
	"encoding/json"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/flow"
)

// ReviewTx is the store of review steps (docs/workflows.md, "Review
// steps"): a human step whose task reviews the answer of another human
// step. Its methods run in the transaction that records the review's
// verdict (the one finalizing the review's unit), after the run's lock.
type ReviewTx interface {
	// UnitRedo reopens a regular FINALIZED unit to be judged again by
	// other contributors (a review rejected its result): every clean
	// judgment of the unit is tainted (kept as history, excluded from
	// its aggregation), the unit is JUDGABLE again with its result
	// cleared and its target raised by as many judgments as were
	// tainted (at least one), so that the same number of new clean
	// judgments finalizes it; the pool's counters move. The contributors
	// who judged it cannot take it again (one assignment per unit and
	// contributor). A unit that is not FINALIZED is a
	// *crowd.InvalidTransitionError; ErrNotFound when there is none.
	UnitRedo(ctx context.Context, p *UnitRedoParams) (*UnitRedone, error)
	// StepOutputAmend replaces the output and confidence of a SUCCEEDED
	// step instance of generation p.Generation (a review corrected it):
	// the step does not complete again, what its dependents released
	// from now on read changes. Another state or generation is a
	// *flow.InvalidTransitionError; ErrNotFound when there is none.
	StepOutputAmend(ctx context.Context, p *StepOutputAmendParams) (*flow.StepInstance, error)
	// UnitJudges lists who judged a unit, one entry per clean (untainted)
	// judgment, oldest first: the contributor, their trust snapshot and
	// how many judgments they had given in the unit's pool before this
	// one (CEL's judges.<step>, for routing a review to new
	// contributors' answers). No judgment, or no unit: an empty list.
	UnitJudges(ctx context.Context, unitID uuid.UUID) ([]UnitJudge, error)
}

// UnitJudge is one clean judgment of a unit, as UnitJudges lists it.
type UnitJudge struct {
	ContributorID uuid.UUID
	Trust         *float64 // the snapshot at submission; nil when none was known
	// Prior counts the contributor's judgments in the pool (test
	// questions and tainted ones included) submitted before this one.
	Prior int
}

// UnitRedoParams names the unit to redo.
type UnitRedoParams struct {
	ID  uuid.UUID
	Now time.Time
}

// Validate names every invalid field.
func (p *UnitRedoParams) Validate() error {
	pr := problemsOf("redo unit")
	pr.Check(p.ID == uuid.Nil, "unitId", "is required")
	pr.Check(p.Now.IsZero(), "now", "is required")
	return pr.Err()
}

// UnitRedone is the unit as UnitRedo left it and how many of its
// judgments it tainted.
type UnitRedone struct {
	Unit    *crowd.Unit
	Tainted int
}

// StepOutputAmendParams: the new output of one SUCCEEDED instance.
type StepOutputAmendParams struct {
	RunID      uuid.UUID
	Step       string
	Index      int
	Generation int
	Output     json.RawMessage
	Confidence *float64
	Now        time.Time
}

// Validate names every invalid field.
func (p *StepOutputAmendParams) Validate() error {
	pr := problemsOf("amend step output")
	pr.Check(p.RunID == uuid.Nil, "runId", "is required")
	pr.Check(p.Step == "", "step", "is required")
	pr.Check(p.Index < 0, "index", "must not be negative")
	pr.Check(p.Generation < 1, "generation", "must be at least 1")
	checkJSON(pr, "output", p.Output)
	c := p.Confidence
	pr.Check(c != nil && !(*c >= 0 && *c <= 1), "confidence", "must be between 0 and 1")
	pr.Check(p.Now.IsZero(), "now", "is required")
	return pr.Err()
}
