package store

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/quality"
)

// UnitRepairParams applies one repair plan (quality.PlanRepair) to one
// regular unit:
//
//   - quality.RepairRetarget: a NEW, JUDGABLE or PAUSED unit gets Target
//     as its judgments per unit (its free slots follow);
//   - quality.RepairRecompute: a FINALIZED unit gets Result and
//     Confidence and Target; it stays FINALIZED (no unit.finalized:
//     the caller writes unit.result_changed when the result changed);
//   - quality.RepairReopen: a FINALIZED unit goes back to JUDGABLE with
//     Target, its result, confidence and finalization time cleared, and
//     the pool's counters move (finalized − 1, judgable + 1).
//
// A unit in another state, or golden, is a *crowd.InvalidTransitionError;
// ErrNotFound when there is none.
type UnitRepairParams struct {
	ID         uuid.UUID
	Action     quality.RepairAction
	Target     int
	Result     json.RawMessage // RepairRecompute only, required there
	Confidence *float64        // RepairRecompute only
	Now        time.Time
}

// Validate names every invalid field.
func (p *UnitRepairParams) Validate() error {
	pr := problemsOf("repair unit")
	pr.Check(p.ID == uuid.Nil, "unitId", "is required")
	switch p.Action {
	case quality.RepairRecompute:
		checkJSON(pr, "result", p.Result)
		pr.Check(p.Confidence != nil && !(*p.Confidence >= 0 && *p.Confidence <= 1), "confidence", "must be between 0 and 1")
	case quality.RepairRetarget, quality.RepairReopen:
		pr.Check(p.Result != nil, "result", "only a recompute sets a result")
		pr.Check(p.Confidence != nil, "confidence", "only a recompute sets a confidence")
	default:
		pr.Add("action", "must be retarget, recompute or reopen, not %q", p.Action)
	}
	pr.Check(p.Target < 1, "target", "must be at least 1")
	pr.Check(p.Now.IsZero(), "now", "is required")
	return pr.Err()
}

// QualityEventInsertParams writes one event of quality control to the
// outbox, in the transaction of the change it describes.
type QualityEventInsertParams struct {
	// Type is one of QualityEventTypes.
	Type string
	// Data is the event's data (one of the *Data types of package
	// quality), encoded as JSON by the store.
	Data any
	Now  time.Time
}

// QualityEventTypes are the event types QualityEventInsert writes.
var QualityEventTypes = []string{
	quality.EventTestJudgmentEvaluated,
	quality.EventContributorFlagged,
	quality.EventContributorUnflagged,
	quality.EventJudgmentCheckFailed,
	quality.EventUnitResultChanged,
}

// Validate names every invalid field.
func (p *QualityEventInsertParams) Validate() error {
	pr := problemsOf("insert quality event")
	known := false
	for _, t := range QualityEventTypes {
		known = known || t == p.Type
	}
	pr.Check(!known, "type", "%q is not an event of quality control", p.Type)
	pr.Check(p.Data == nil, "data", "is required")
	if p.Data != nil {
		if _, err := json.Marshal(p.Data); err != nil {
			pr.Add("data", "must encode as JSON: %v", err)
		}
	}
	pr.Check(p.Now.IsZero(), "now", "is required")
	return pr.Err()
}
