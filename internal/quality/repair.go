package quality

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/task"
)

// Mark is one judgment of a unit with its taint before and after a flag
// or an un-flag.
type Mark struct {
	JudgmentID uuid.UUID
	WasTainted bool
	Tainted    bool
}

// RepairAction is what a change of taints does to one unit.
type RepairAction string

// The repair actions.
const (
	// RepairNone: no judgment of the unit changed taint, or the unit is
	// golden or CANCELED.
	RepairNone RepairAction = "none"
	// RepairRecompute: a FINALIZED unit with at least jpu.Min clean
	// judgments: aggregate the clean ones again; it stays FINALIZED.
	RepairRecompute RepairAction = "recompute"
	// RepairReopen: a FINALIZED unit left with fewer clean judgments than
	// jpu.Min: back to JUDGABLE with Target slots, its result cleared.
	RepairReopen RepairAction = "reopen"
	// RepairRetarget: a unit not final: its target moves so that it gets
	// as many clean judgments as before (slots reopen for tainted ones).
	RepairRetarget RepairAction = "retarget"
)

// Repair is the plan for one unit.
type Repair struct {
	Action RepairAction
	// Clean and Tainted count the unit's judgments after the change.
	Clean, Tainted int
	// Target is the unit's new judgments_per_unit (unchanged with
	// RepairNone). The target counts tainted judgments too — their
	// submitted assignments keep their slots — so that a unit gets the
	// clean judgments it wants: Target = Tainted + the clean ones wanted.
	Target int
	// Evaluate (RepairRetarget): the unit now has at least jpu.Min clean
	// judgments; run DecideOverlap on it now, since no judgment to come
	// may trigger it.
	Evaluate bool
	Reason   string
}

// PlanRepair decides what a change of taints does to one unit (state, its
// current judgments_per_unit target, its judgments with their taints
// before and after), with jpu its task's judgments per unit (defaults
// filled). The target of a unit counts tainted judgments plus the clean
// ones it wants (at first jpu.Min, one more for each dynamic-overlap
// step, never more than jpu.Max):
//
//   - FINALIZED, clean ≥ Min: recompute from the clean judgments (the
//     target becomes the judgments it has);
//   - FINALIZED, clean < Min: reopen (JUDGABLE) with target Tainted + Min;
//   - NEW, JUDGABLE, PAUSED: target − tainted before + tainted after,
//     kept within Tainted + Min … Tainted + Max;
//   - golden or CANCELED units, or no taint changed: nothing.
//
// A recomputed unit is not reopened for a confidence under the target: a
// finalized result may have fed a workflow already, and the audit record
// carries the new confidence.
func PlanRepair(state crowd.UnitState, golden bool, target int, jpu task.JudgmentsPerUnit, judgments []Mark) Repair {
	var changed, before, after int
	for _, m := range judgments {
		if m.WasTainted != m.Tainted {
			changed++
		}
		if m.WasTainted {
			before++
		}
		if m.Tainted {
			after++
		}
	}
	clean := len(judgments) - after
	r := Repair{Action: RepairNone, Clean: clean, Tainted: after, Target: target}
	switch {
	case golden:
		r.Reason = "a golden unit is never aggregated"
		return r
	case state == crowd.UnitCanceled:
		r.Reason = "the unit is canceled"
		return r
	case changed == 0:
		r.Reason = "no judgment of the unit changed taint"
		return r
	}
	what := fmt.Sprintf("%d judgments changed taint, %d clean and %d tainted now", changed, clean, after)
	switch state {
	case crowd.UnitFinalized:
		if clean >= jpu.Min {
			r.Action, r.Target = RepairRecompute, len(judgments)
			r.Reason = fmt.Sprintf("%s: at least the minimum %d clean, result recomputed", what, jpu.Min)
			return r
		}
		r.Action, r.Target = RepairReopen, after+jpu.Min
		r.Reason = fmt.Sprintf("%s: under the minimum %d clean, reopened for %d more", what, jpu.Min, jpu.Min-clean)
		return r
	}
	r.Action = RepairRetarget
	r.Target = min(max(target-before+after, after+jpu.Min), after+jpu.Max)
	r.Evaluate = clean >= jpu.Min && clean >= r.Target-after
	r.Reason = fmt.Sprintf("%s: target %d → %d", what, target, r.Target)
	return r
}

// Cause is why a unit's judgments changed taint: the flag or un-flag of
// one contributor.
type Cause struct {
	ContributorID uuid.UUID `json:"contributorId"`
	Check         FlagCheck `json:"check"`
	// Untaint: the contributor was un-flagged (their judgments count
	// again); otherwise flagged.
	Untaint bool   `json:"untaint"`
	Reason  string `json:"reason"`
}

// Audit is the record of a change of a finalized unit's result: a row of
// the audit table and the data of unit.result_changed.
type Audit struct {
	Old    Result       `json:"old"`
	New    Result       `json:"new"`
	Action RepairAction `json:"action"`
	Cause  Cause        `json:"cause"`
	// Why says it in words: the cause and the repair.
	Why string `json:"why"`
}

// NewAudit compares a unit's result before and after a repair (after:
// the recomputed result; the zero Result for a reopened unit) and
// returns the audit record, and whether anything changed: the result
// object (compared as JSON values, so key order and spacing do not
// matter) or the confidence. A repair that changes nothing writes no
// audit row and no event.
func NewAudit(before, after Result, repair Repair, cause Cause) (Audit, bool) {
	a := Audit{Old: before, New: after, Action: repair.Action, Cause: cause}
	verb := "flagged"
	if cause.Untaint {
		verb = "un-flagged"
	}
	a.Why = fmt.Sprintf("contributor %s %s (%s: %s); %s", cause.ContributorID, verb, cause.Check, cause.Reason, repair.Reason)
	return a, !sameJSON(before.Value, after.Value) || !sameFloat(before.Confidence, after.Confidence)
}

func sameJSON(a, b json.RawMessage) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	if bytes.Equal(a, b) {
		return true
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

func sameFloat(a, b *float64) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}
