package docket_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// sureTask needs 2 judgments a unit, and more (up to 5) while the answer
// is under 0.99 confident: a unit judged "yes" and "no" holds the pool's
// judgments per unit and still waits for a third.
const sureTask = `{"title": "Same product?",
 "fields": [{"name": "same", "kind": "choice", "required": true, "options": [{"value": "yes"}, {"value": "no"}]}],
 "judgmentsPerUnit": {"min": 2, "max": 5, "targetConfidence": 0.99}}`

// closeFlow is label (human, sureTask) → ship (job).
func closeFlow(t *testing.T, c *docket.Client) {
	t.Helper()
	ctx := context.Background()
	tmpl, err := docket.ParseTask([]byte(sureTask))
	require.NoError(t, err)
	_, _, err = c.TaskPut(ctx, "sure", tmpl)
	require.NoError(t, err)
	def, err := docket.NewWorkflow("closing").
		Human("label", "sure").
		Job("ship", "h.step", docket.After("label")).
		Definition()
	require.NoError(t, err)
	_, _, err = c.WorkflowPut(ctx, def)
	require.NoError(t, err)
}

// takeUnit has a new contributor take the unit want of pool: other units
// the take hands them are given back, until want comes.
func takeUnit(t *testing.T, c *docket.Client, pool, want uuid.UUID) *docket.TakenAssignment {
	t.Helper()
	ctx := context.Background()
	who, err := c.ContributorCreate(ctx, docket.ContributorCreateParams{ExternalID: uuid.NewString()})
	require.NoError(t, err)
	for range 20 {
		taken, err := c.AssignmentTake(ctx, pool, who.ID)
		require.NoError(t, err)
		if taken.Unit.ID == want {
			return taken
		}
		_, err = c.AssignmentRelease(ctx, taken.Assignment.ID, who.ID)
		require.NoError(t, err)
	}
	t.Fatalf("unit %s was never handed out", want)
	return nil
}

// TestPoolCloseEndsUnits: closing a pool by hand ends its open units and
// so the runs waiting on them. Four runs reach the human step: unit 1
// holds its 2 judgments (yes, no: asking for a third), unit 2 one, unit 3
// one and a live assignment, unit 4 a live assignment only; a golden unit
// is in the pool too. The close finalizes unit 1 with what it has (low
// confidence; its step SUCCEEDED with the unit's result, ship released)
// and cancels unit 2 (its step FAILED naming the pool and the unit, "1 of
// 2", and the run FAILED), all at once; units 3 and 4 wait for their
// assignments. The live judgment on unit 3 comes after the close and
// counts; unit 4's assignment is given back; the pool-completer's call
// then finalizes unit 3 and cancels unit 4 ("0 of 2"), and completes the
// pool. The golden unit stays JUDGABLE. Counters match; calling again
// changes nothing.
func TestPoolCloseEndsUnits(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend, fastConfig()) // no worker: the test calls PoolsComplete
		ctx := context.Background()
		c := b.client
		closeFlow(t, c)
		var runs, units []uuid.UUID
		for i := range 4 {
			res, err := c.RunStart(ctx, "closing", map[string]int{"n": i}, nil)
			require.NoError(t, err)
			run, err := c.RunGet(ctx, res.Run.ID)
			require.NoError(t, err)
			runs, units = append(runs, run.ID), append(units, stepNamed(t, run, "label").UnitID)
		}
		u, err := c.UnitGet(ctx, units[0])
		require.NoError(t, err)
		pool := u.PoolID
		judge := func(a *docket.TakenAssignment, answer string) *docket.SubmittedJudgment {
			t.Helper()
			sub, err := c.JudgmentSubmit(ctx, a.Assignment.ID, a.Assignment.ContributorID, json.RawMessage(answer))
			require.NoError(t, err)
			return sub
		}
		judge(takeUnit(t, c, pool, units[0]), `{"same":"yes"}`)
		require.Nil(t, judge(takeUnit(t, c, pool, units[0]), `{"same":"no"}`).Finalized, "one more is asked for")
		judge(takeUnit(t, c, pool, units[1]), `{"same":"yes"}`)
		judge(takeUnit(t, c, pool, units[2]), `{"same":"yes"}`)
		live3 := takeUnit(t, c, pool, units[2])
		live4 := takeUnit(t, c, pool, units[3])
		golden, err := c.GoldenAdd(ctx, pool, []docket.GoldenUnit{{Input: json.RawMessage(`{}`), Answer: json.RawMessage(`{"same":"yes"}`)}})
		require.NoError(t, err)

		p, err := c.PoolClose(ctx, pool)
		require.NoError(t, err)
		require.Equal(t, docket.PoolClosed, p.Status, "two units wait for their assignments")
		require.Equal(t, 1, p.Counts.Finalized)
		require.Equal(t, 1, p.Counts.Canceled)
		require.Equal(t, 2, p.Counts.Open())

		unitState := func(i int) *docket.Unit {
			t.Helper()
			u, err := c.UnitGet(ctx, units[i])
			require.NoError(t, err)
			return u
		}
		u1 := unitState(0)
		require.Equal(t, docket.UnitFinalized, u1.State)
		require.True(t, u1.LowConfidence, "finalized under the target confidence")
		require.NotNil(t, u1.Confidence)
		run1, err := c.RunGet(ctx, runs[0])
		require.NoError(t, err)
		require.Equal(t, docket.RunRunning, run1.State)
		label1 := stepNamed(t, run1, "label")
		require.Equal(t, docket.StepSucceeded, label1.State)
		require.JSONEq(t, string(u1.Result), string(label1.Output))
		require.Equal(t, *u1.Confidence, *label1.Confidence)
		require.Equal(t, docket.StepRunning, stepNamed(t, run1, "ship").State, "the run went on")

		require.Equal(t, docket.UnitCanceled, unitState(1).State)
		run2, err := c.RunGet(ctx, runs[1])
		require.NoError(t, err)
		require.Equal(t, docket.RunFailed, run2.State)
		label2 := stepNamed(t, run2, "label")
		require.Equal(t, docket.StepFailed, label2.State)
		require.Equal(t, fmt.Sprintf("pool %s was closed before unit %s had enough judgments (1 of 2)", pool, units[1]), label2.Error)
		require.Contains(t, run2.Error, label2.Error)

		for _, i := range []int{2, 3} {
			require.Equal(t, docket.UnitJudgable, unitState(i).State, "unit %d has a live assignment", i+1)
			run, err := c.RunGet(ctx, runs[i])
			require.NoError(t, err)
			require.Equal(t, docket.RunRunning, run.State)
			require.Equal(t, docket.StepRunning, stepNamed(t, run, "label").State)
		}
		n, err := c.PoolsComplete(ctx)
		require.NoError(t, err)
		require.Zero(t, n, "the live assignments hold their units")
		require.Equal(t, docket.UnitJudgable, unitState(2).State)

		judge(live3, `{"same":"yes"}`) // after the close: it counts
		_, err = c.AssignmentRelease(ctx, live4.Assignment.ID, live4.Assignment.ContributorID)
		require.NoError(t, err)
		n, err = c.PoolsComplete(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n, "the pool completes once its units ended")

		u3 := unitState(2)
		require.Equal(t, docket.UnitFinalized, u3.State)
		require.Equal(t, 2, u3.JudgmentCount, "the judgment after the close counted")
		run3, err := c.RunGet(ctx, runs[2])
		require.NoError(t, err)
		require.Equal(t, docket.StepSucceeded, stepNamed(t, run3, "label").State)
		require.JSONEq(t, `{"same":"yes"}`, string(stepNamed(t, run3, "label").Output))

		require.Equal(t, docket.UnitCanceled, unitState(3).State)
		run4, err := c.RunGet(ctx, runs[3])
		require.NoError(t, err)
		require.Equal(t, docket.RunFailed, run4.State)
		require.Equal(t, fmt.Sprintf("pool %s was closed before unit %s had enough judgments (0 of 2)", pool, units[3]), stepNamed(t, run4, "label").Error)

		g, err := c.UnitGet(ctx, golden[0].ID)
		require.NoError(t, err)
		require.Equal(t, docket.UnitJudgable, g.State, "a golden unit is not ended")
		p, err = c.PoolGet(ctx, pool)
		require.NoError(t, err)
		require.Equal(t, docket.PoolCompleted, p.Status)
		require.Equal(t, 2, p.Counts.Finalized)
		require.Equal(t, 2, p.Counts.Canceled)
		require.Zero(t, p.Counts.Open())
		require.Equal(t, 1, p.Counts.Golden)
		require.Zero(t, p.Counts.ActiveAssignments)

		n, err = c.PoolsComplete(ctx)
		require.NoError(t, err)
		require.Zero(t, n)
		for i, id := range runs {
			run, err := c.RunGet(ctx, id)
			require.NoError(t, err)
			if i == 1 || i == 3 {
				require.Equal(t, docket.RunFailed, run.State)
			}
			require.Equal(t, 1, stepNamed(t, run, "label").Generation, "run %d", i+1)
		}
	})
}
