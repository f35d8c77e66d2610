package quality

import (
	"encoding/json"
	"math/rand/v2"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/task"
)

// marks makes n judgments: the first before of them tainted before, the
// first after of them tainted after.
func marks(n, before, after int) []Mark {
	out := make([]Mark, n)
	for i := range out {
		out[i] = Mark{JudgmentID: uuid.New(), WasTainted: i < before, Tainted: i < after}
	}
	return out
}

var jpu35 = task.JudgmentsPerUnit{Min: 3, Max: 5, TargetConfidence: 0.9}

func TestPlanRepairFinalized(t *testing.T) {
	t.Parallel()
	r := PlanRepair(crowd.UnitFinalized, false, 5, jpu35, marks(5, 0, 2))
	require.Equal(t, Repair{Action: RepairRecompute, Clean: 3, Tainted: 2, Target: 5,
		Reason: "2 judgments changed taint, 3 clean and 2 tainted now: at least the minimum 3 clean, result recomputed"}, r)
	r = PlanRepair(crowd.UnitFinalized, false, 5, jpu35, marks(5, 0, 3))
	require.Equal(t, RepairReopen, r.Action)
	require.Equal(t, 2, r.Clean)
	require.Equal(t, 6, r.Target, "3 tainted + the minimum 3: one free slot beyond the 5 submitted")
	// Un-flagging: the reopened unit's judgments count again.
	r = PlanRepair(crowd.UnitFinalized, false, 3, jpu35, marks(3, 3, 0))
	require.Equal(t, RepairRecompute, r.Action)
	require.Equal(t, 3, r.Target)

	require.Equal(t, RepairNone, PlanRepair(crowd.UnitFinalized, false, 3, jpu35, marks(3, 1, 1)).Action, "no change")
	require.Equal(t, RepairNone, PlanRepair(crowd.UnitJudgable, true, 3, jpu35, marks(3, 0, 1)).Action, "golden")
	require.Equal(t, RepairNone, PlanRepair(crowd.UnitCanceled, false, 3, jpu35, marks(3, 0, 1)).Action, "canceled")
}

func TestPlanRepairOpen(t *testing.T) {
	t.Parallel()
	r := PlanRepair(crowd.UnitJudgable, false, 3, jpu35, marks(2, 0, 1))
	require.Equal(t, RepairRetarget, r.Action)
	require.Equal(t, 4, r.Target, "one slot reopens for the tainted judgment")
	require.False(t, r.Evaluate)
	// Back again: the target returns, and the unit has its three clean
	// judgments: evaluate it now.
	r = PlanRepair(crowd.UnitJudgable, false, 4, jpu35, marks(3, 1, 0))
	require.Equal(t, 3, r.Target)
	require.True(t, r.Evaluate)
	// Dynamic overlap had raised the target to 5 clean: it stays 5 clean.
	r = PlanRepair(crowd.UnitPaused, false, 5, jpu35, marks(4, 0, 2))
	require.Equal(t, 7, r.Target)
	// The clamp: never fewer than Min nor more than Max clean wanted.
	require.Equal(t, 2+5, PlanRepair(crowd.UnitJudgable, false, 9, jpu35, marks(4, 0, 2)).Target)
	require.Equal(t, 1+3, PlanRepair(crowd.UnitJudgable, false, 1, jpu35, marks(4, 0, 1)).Target)
}

// Property: tainting a contributor's judgments and un-tainting them again
// gives an open unit its target back.
func TestPlanRepairRoundTrip(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(5, 6))
	for range 1000 {
		jpu := task.JudgmentsPerUnit{Min: 1 + rng.IntN(4)}
		jpu.Max = jpu.Min + rng.IntN(4)
		target := jpu.Min + rng.IntN(jpu.Max-jpu.Min+1)
		n := rng.IntN(target + 1)
		k := rng.IntN(n + 1)
		there := PlanRepair(crowd.UnitJudgable, false, target, jpu, marks(n, 0, k))
		back := PlanRepair(crowd.UnitJudgable, false, there.Target, jpu, marks(n, k, 0))
		if k == 0 {
			require.Equal(t, RepairNone, there.Action)
		}
		require.Equal(t, target, back.Target, "target %d, %d judgments, %d tainted", target, n, k)
		require.Equal(t, there.Target-k, target, "as many clean wanted")
	}
}

func TestNewAudit(t *testing.T) {
	t.Parallel()
	cause := Cause{ContributorID: worker, Check: CheckTrust, Reason: "trust 0.300 is below the minimum 0.500 after 4 test questions (1 right)"}
	repair := PlanRepair(crowd.UnitFinalized, false, 5, jpu35, marks(5, 0, 2))
	old := Result{Value: json.RawMessage(`{"same": "yes", "n": 1}`), Confidence: conf(0.6)}

	a, changed := NewAudit(old, Result{Value: json.RawMessage(`{"n":1,"same":"yes"}`), Confidence: conf(0.6)}, repair, cause)
	require.False(t, changed, "same JSON value, same confidence")
	require.Equal(t, RepairRecompute, a.Action)
	require.Equal(t, "contributor "+worker.String()+" flagged (trust: "+cause.Reason+"); "+repair.Reason, a.Why)

	_, changed = NewAudit(old, Result{Value: json.RawMessage(`{"same": "no", "n": 1}`), Confidence: conf(0.6)}, repair, cause)
	require.True(t, changed, "another answer")
	_, changed = NewAudit(old, Result{Value: old.Value, Confidence: conf(1)}, repair, cause)
	require.True(t, changed, "another confidence")
	_, changed = NewAudit(old, Result{Value: old.Value}, repair, cause)
	require.True(t, changed, "no confidence any more")
	_, changed = NewAudit(Result{Value: old.Value}, Result{Value: json.RawMessage(`{"n": 1, "same": "yes"}`)}, repair, cause)
	require.False(t, changed, "neither has a confidence")
	a, _ = NewAudit(old, old, repair, Cause{ContributorID: worker, Check: CheckForgiven, Untaint: true, Reason: "forgiven by admin"})
	require.Contains(t, a.Why, "un-flagged (forgiven: forgiven by admin)")
	a, changed = NewAudit(old, Result{}, PlanRepair(crowd.UnitFinalized, false, 5, jpu35, marks(5, 0, 3)), cause)
	require.True(t, changed, "reopened")
	require.Equal(t, RepairReopen, a.Action)

	b, err := json.Marshal(UnitResultChangedData{UnitID: uuid.Nil, PoolID: pool, Audit: a})
	require.NoError(t, err)
	var back map[string]any
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, map[string]any{"result": nil, "confidence": nil}, back["new"])
	require.Equal(t, "reopen", back["action"])
	require.Contains(t, back, "why")
	require.Contains(t, back, "old")
}
