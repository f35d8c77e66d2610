// Package quality holds the decisions of crowd quality control as pure
// functions: which assignment must be a test question, a contributor's
// trust, the posterior of their accuracy and when it flags them, the
// behaviour checks (too fast, one answer for everything, always the first
// option), dynamic overlap (finalize, ask one more, or finalize with low
// confidence at the maximum), whether a judgment agreed with its unit's
// result, and the repair of a unit whose judgments were tainted or
// un-tainted (recompute or reopen, with the audit record of a changed
// result).
//
// It does no I/O: no database, no clock, no randomness. Every input is a
// plain value (counts, settings, the recent answers, the time of an event)
// and every output a plain decision that says why, with the events to
// write. The store and the judgment transaction call it; docs/quality.md
// describes the rules and the settings.
//
// How the callers use it:
//
//   - A pool's settings: Decode its settings JSON (or a "quality" object
//     of the task template; Settings decodes itself strictly there too).
//   - Taking an assignment: NextAssignment on the contributor's counts and
//     trust in the pool; when it says Test, take a golden unit the contributor has
//     no assignment for in any state (TestExcludedStates), and a regular
//     unit when there is none.
//   - A judgment of a golden unit: EvaluateTest (score, trust, event),
//     then CheckTrust; a judgment of any unit: CheckSpeed (count the
//     failures, then CheckTooFast) and CheckPattern on the contributor's
//     last answers (AnswerOf). The judgment stores Trust.Snapshot.
//   - A flag or un-flag (Decision, Forgive): taint or un-taint the
//     contributor's judgments in the pool, then PlanRepair each unit they
//     judged; for a recomputed or reopened FINALIZED unit, NewAudit gives
//     the audit row and unit.result_changed when something changed.
//   - A unit with new clean judgments: aggregate them, then DecideOverlap;
//     on finalize, Agreements gives unit.finalized's per-judgment
//     agreement.
package quality

import (
	"encoding/json"

	"github.com/google/uuid"
)

// Event types quality control writes to the outbox, in the transaction of
// the change they describe.
const (
	// EventTestJudgmentEvaluated: a judgment of a golden unit was scored.
	EventTestJudgmentEvaluated = "test_judgment.evaluated"
	// EventContributorFlagged: a contributor was flagged in a pool.
	EventContributorFlagged = "contributor.flagged"
	// EventContributorUnflagged: a flag was lifted (an admin forgave, or
	// the trust that caused it rose again after a re-scoring).
	EventContributorUnflagged = "contributor.unflagged"
	// EventJudgmentCheckFailed: one judgment failed a behaviour check
	// (too fast).
	EventJudgmentCheckFailed = "judgment.check_failed"
	// EventUnitResultChanged: the result of a FINALIZED unit changed, or
	// the unit was reopened, because judgments were tainted or un-tainted.
	EventUnitResultChanged = "unit.result_changed"
)

// Event is one outbox row to write: its type and its data (one of the
// *Data types of this package), which marshals to the event's JSON.
type Event struct {
	Type string
	Data any
}

// TestJudgmentEvaluatedData is the data of test_judgment.evaluated.
type TestJudgmentEvaluatedData struct {
	JudgmentID    uuid.UUID `json:"judgmentId"`
	ContributorID uuid.UUID `json:"contributorId"`
	PoolID        uuid.UUID `json:"poolId"`
	Correct       bool      `json:"correct"`
	// Trust is the contributor's trust after this answer.
	Trust float64 `json:"trust"`
}

// ContributorFlaggedData is the data of contributor.flagged and
// contributor.unflagged.
type ContributorFlaggedData struct {
	ContributorID uuid.UUID `json:"contributorId"`
	PoolID        uuid.UUID `json:"poolId"`
	// Check is what caused the (un)flag: a FlagCheck.
	Check FlagCheck `json:"check"`
	// Reason says it in words, with the numbers.
	Reason string `json:"reason"`
	// Taint: the contributor's judgments in the pool are tainted (flag) or
	// un-tainted (unflag) with it.
	Taint bool `json:"taint"`
}

// JudgmentCheckFailedData is the data of judgment.check_failed.
type JudgmentCheckFailedData struct {
	JudgmentID    uuid.UUID `json:"judgmentId"`
	ContributorID uuid.UUID `json:"contributorId"`
	PoolID        uuid.UUID `json:"poolId"`
	Check         FlagCheck `json:"check"`
	Reason        string    `json:"reason"`
}

// UnitResultChangedData is the data of unit.result_changed: the audit
// record of the change.
type UnitResultChangedData struct {
	UnitID uuid.UUID `json:"unitId"`
	PoolID uuid.UUID `json:"poolId"`
	Audit
}

// Result is a unit's aggregated answer: what unit.finalized carries and
// what an audit record compares.
type Result struct {
	// Value is the result object, keyed by field name; nil for none (a
	// reopened unit).
	Value json.RawMessage `json:"result"`
	// Confidence is nil when the task has no categorical field.
	Confidence *float64 `json:"confidence"`
}
