package quality

import (
	"encoding/json"
	"fmt"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/task"
)

// OverlapAction is what dynamic overlap does with a unit.
type OverlapAction string

// The overlap actions.
const (
	// OverlapWait: fewer clean judgments than the minimum; the unit waits
	// for the slots it has.
	OverlapWait OverlapAction = "wait"
	// OverlapFinalize: finalize with the result.
	OverlapFinalize OverlapAction = "finalize"
	// OverlapOneMore: the confidence is below the target and the unit is
	// under its maximum: it gets one more slot.
	OverlapOneMore OverlapAction = "one_more"
	// OverlapFinalizeLow: at the maximum and still below the target:
	// finalize with the confidence it has, flagged lowConfidence.
	OverlapFinalizeLow OverlapAction = "finalize_low_confidence"
)

// Overlap is the dynamic-overlap decision for one unit.
type Overlap struct {
	Action OverlapAction
	// LowConfidence is set with OverlapFinalizeLow: unit.finalized says
	// so.
	LowConfidence bool
	Reason        string
}

// DecideOverlap decides on a unit that has clean (untainted, regular)
// judgments and, when clean ≥ jpu.Min, the confidence the aggregation
// gives them (from package aggregate: the posterior of the answer, or the
// lowest of the categorical fields'; nil when the task has none). jpu has
// its defaults filled (task.Template.WithDefaults).
//
//   - clean < Min: wait;
//   - no target (TargetConfidence 0), no confidence, or confidence ≥
//     target: finalize;
//   - under Max: one more slot;
//   - at Max (or past it): finalize with low confidence.
func DecideOverlap(clean int, jpu task.JudgmentsPerUnit, confidence *float64) Overlap {
	switch {
	case clean < jpu.Min:
		return Overlap{Action: OverlapWait, Reason: fmt.Sprintf("%d of the %d judgments needed", clean, jpu.Min)}
	case jpu.TargetConfidence <= 0:
		return Overlap{Action: OverlapFinalize, Reason: fmt.Sprintf("%d judgments, no target confidence", clean)}
	case confidence == nil:
		return Overlap{Action: OverlapFinalize, Reason: fmt.Sprintf("%d judgments, no categorical field to be confident about", clean)}
	case *confidence >= jpu.TargetConfidence:
		return Overlap{Action: OverlapFinalize, Reason: fmt.Sprintf("%d judgments, confidence %.3f reaches the target %.3f", clean, *confidence, jpu.TargetConfidence)}
	case clean < jpu.Max:
		return Overlap{Action: OverlapOneMore, Reason: fmt.Sprintf("%d judgments, confidence %.3f under the target %.3f: one more (maximum %d)",
			clean, *confidence, jpu.TargetConfidence, jpu.Max)}
	}
	return Overlap{Action: OverlapFinalizeLow, LowConfidence: true, Reason: fmt.Sprintf(
		"%d judgments, the maximum %d, confidence %.3f still under the target %.3f", clean, jpu.Max, *confidence, jpu.TargetConfidence)}
}

// Agreement says whether one judgment agreed with its unit's result.
type Agreement struct {
	JudgmentID uuid.UUID `json:"judgmentId"`
	Agreed     bool      `json:"agreed"`
}

// Judged is one clean judgment of a unit, as stored.
type Judged struct {
	ID   uuid.UUID
	Data json.RawMessage
}

// Agreements says, for each judgment, whether it agreed with the unit's
// result (the stored result object): every field the result decides
// (choice, rating, multi_choice, number; not text or bbox, which keep
// every answer) compared as a golden answer would be (task.Compare: the
// same choice, the same set, a number within the field's tolerance). A
// task with no such field gives nil: there is nothing to agree with.
func Agreements(ct *task.Compiled, result json.RawMessage, judgments []Judged) ([]Agreement, error) {
	answer, err := ResultAnswer(ct, result)
	if err != nil || answer == nil {
		return nil, err
	}
	out := make([]Agreement, 0, len(judgments))
	for _, j := range judgments {
		parsed, err := ct.ParseJudgment(j.Data)
		if err != nil {
			return nil, fmt.Errorf("judgment %s: %w", j.ID, err)
		}
		out = append(out, Agreement{JudgmentID: j.ID, Agreed: ct.Score(answer, parsed).Correct})
	}
	return out, nil
}

// ResultAnswer reads a unit's result as a golden answer of the fields it
// decides (see Agreements); nil when it decides none.
func ResultAnswer(ct *task.Compiled, result json.RawMessage) (task.Judgment, error) {
	var all map[string]json.RawMessage
	if err := json.Unmarshal(result, &all); err != nil {
		return nil, fmt.Errorf("unit result: %w", err)
	}
	keep := map[string]json.RawMessage{}
	for _, f := range ct.Fields {
		switch f.Kind {
		case task.KindChoice, task.KindRating, task.KindMultiChoice, task.KindNumber:
			if v, ok := all[f.Name]; ok && string(v) != "null" {
				keep[f.Name] = v
			}
		}
	}
	if len(keep) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(keep)
	if err != nil {
		return nil, err
	}
	return ct.ParseAnswer(b)
}
