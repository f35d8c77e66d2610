package docket_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

const sameTask = `{"title": "Same product?",
 "fields": [{"name": "same", "kind": "choice", "required": true, "options": [{"value": "yes"}, {"value": "no"}]}],
 "judgmentsPerUnit": {"min": 3}}`

// humanFlow is fetch (job) → label (human) → ship (job, when the crowd is
// sure) or recheck (job, when it is not).
func humanFlow(t *testing.T, c *docket.Client) {
	t.Helper()
	ctx := context.Background()
	tmpl, err := docket.ParseTask([]byte(sameTask))
	require.NoError(t, err)
	_, _, err = c.TaskPut(ctx, "same", tmpl)
	require.NoError(t, err)
	def, err := docket.NewWorkflow("review").
		Job("fetch", "h.step").
		Human("label", "same", docket.After("fetch")).
		Job("ship", "h.step", docket.After("label"), docket.If("steps.label.confidence > 0.5")).
		Job("recheck", "h.step", docket.After("label"), docket.If("steps.label.confidence <= 0.5")).
		Definition()
	require.NoError(t, err)
	_, _, err = c.WorkflowPut(ctx, def)
	require.NoError(t, err)
}

func leaseOne(t *testing.T, c *docket.Client) *docket.Lease {
	t.Helper()
	ls, err := c.Lease(context.Background(), docket.LeaseParams{Queues: []string{"h.step"}, Max: 1, Duration: time.Minute, WorkerID: "remote-1"})
	require.NoError(t, err)
	require.Len(t, ls, 1)
	return ls[0]
}

func stepNamed(t *testing.T, run *docket.Run, name string) *docket.RunStep {
	t.Helper()
	for _, s := range run.Steps {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("run %s has no step %q", run.ID, name)
	return nil
}

// TestRunHumanStep: job → human → job. Releasing the human step creates
// its pool and one unit carrying the run input and the parent's output;
// three contributors judge it (majority yes); the unit finalizing
// completes the step in the judgment's transaction, so at once the run
// releases ship (its `if` reads the human step's confidence; recheck is
// SKIPPED), whose payload carries the human output and confidence; the
// run SUCCEEDED.
func TestRunHumanStep(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend, fastConfig()) // no worker started: no sweeper either
		ctx := context.Background()
		humanFlow(t, b.client)
		res, err := b.client.RunStart(ctx, "review", map[string]string{"sku": "A1"}, nil)
		require.NoError(t, err)
		require.NoError(t, b.client.LeaseComplete(ctx, leaseOne(t, b.client).ID, json.RawMessage(`{"title":"red shoe"}`)))

		run, err := b.client.RunGet(ctx, res.Run.ID)
		require.NoError(t, err)
		label := stepNamed(t, run, "label")
		require.Equal(t, docket.StepRunning, label.State)
		require.NotEqual(t, uuid.Nil, label.UnitID)
		unit, err := b.client.UnitGet(ctx, label.UnitID)
		require.NoError(t, err)
		require.Equal(t, docket.UnitJudgable, unit.State)
		require.Equal(t, res.Run.ID, unit.RunID, "root_data_id is the run")
		require.Equal(t, uuid.Nil, unit.ParentUnitID, "no human ancestor")
		require.JSONEq(t, `{"input":{"sku":"A1"},"steps":{"fetch":{"state":"SUCCEEDED","output":{"title":"red shoe"},"confidence":null}}}`, string(unit.Input))

		pools, err := b.client.PoolList(ctx, docket.PoolListParams{Workflow: "review"})
		require.NoError(t, err)
		require.Len(t, pools, 1)
		pool := pools[0]
		require.Equal(t, "label", pool.Step)
		require.Equal(t, "same", pool.Task)
		require.Equal(t, 3, pool.JudgmentsPerUnit)
		require.Equal(t, unit.PoolID, pool.ID)

		var finalized *docket.Unit
		for i, answer := range []string{`{"same":"yes"}`, `{"same":"no"}`, `{"same":"yes"}`} {
			who, err := b.client.ContributorCreate(ctx, docket.ContributorCreateParams{ExternalID: uuid.NewString()})
			require.NoError(t, err)
			taken, err := b.client.AssignmentTake(ctx, pool.ID, who.ID)
			require.NoError(t, err)
			require.Equal(t, unit.ID, taken.Unit.ID)
			sub, err := b.client.JudgmentSubmit(ctx, taken.Assignment.ID, who.ID, json.RawMessage(answer))
			require.NoError(t, err)
			if i < 2 {
				require.Nil(t, sub.Finalized)
				run, err := b.client.RunGet(ctx, res.Run.ID)
				require.NoError(t, err)
				require.Equal(t, docket.StepRunning, stepNamed(t, run, "label").State, "not before the last judgment")
			}
			finalized = sub.Finalized
		}
		require.NotNil(t, finalized)
		require.NotNil(t, finalized.Confidence)
		conf := *finalized.Confidence
		require.Greater(t, conf, 0.5)

		// Completed in the judgment's transaction: no worker, no sweeper.
		run, err = b.client.RunGet(ctx, res.Run.ID)
		require.NoError(t, err)
		label = stepNamed(t, run, "label")
		require.Equal(t, docket.StepSucceeded, label.State)
		require.JSONEq(t, `{"same":"yes"}`, string(label.Output))
		require.NotNil(t, label.Confidence)
		require.InDelta(t, conf, *label.Confidence, 1e-9)
		require.Equal(t, docket.StepSkipped, stepNamed(t, run, "recheck").State)
		require.Equal(t, docket.StepRunning, stepNamed(t, run, "ship").State)

		ship := leaseOne(t, b.client)
		var payload struct {
			Steps map[string]struct {
				Output     json.RawMessage
				Confidence *float64
			}
		}
		require.NoError(t, json.Unmarshal(ship.Job.Payload, &payload))
		require.JSONEq(t, `{"same":"yes"}`, string(payload.Steps["label"].Output))
		require.NotNil(t, payload.Steps["label"].Confidence)
		require.InDelta(t, conf, *payload.Steps["label"].Confidence, 1e-9)
		require.NoError(t, b.client.LeaseComplete(ctx, ship.ID, json.RawMessage(`{"shipped":true}`)))
		run = waitRun(t, b.client, res.Run.ID, docket.RunSucceeded)
		require.JSONEq(t, `{"ship":{"shipped":true},"recheck":null}`, string(run.Output))
	})
}

// TestRunHumanStepCancel: canceling a run whose human step waits on its
// unit cancels the unit (no one can take it any more) and the step, and
// the run ends CANCELED; a paused run releases no unit.
func TestRunHumanStepCancel(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend, fastConfig())
		ctx := context.Background()
		humanFlow(t, b.client)

		// Paused before fetch ends: no unit.
		paused, err := b.client.RunStart(ctx, "review", nil, nil)
		require.NoError(t, err)
		_, err = b.client.RunPause(ctx, paused.Run.ID)
		require.NoError(t, err)
		require.NoError(t, b.client.LeaseComplete(ctx, leaseOne(t, b.client).ID, json.RawMessage(`{}`)))
		run, err := b.client.RunGet(ctx, paused.Run.ID)
		require.NoError(t, err)
		require.Equal(t, docket.StepPending, stepNamed(t, run, "label").State, "paused: not released")
		pools, err := b.client.PoolList(ctx, docket.PoolListParams{Workflow: "review"})
		require.NoError(t, err)
		require.Empty(t, pools, "no unit, so no pool yet")
		_, err = b.client.RunResume(ctx, paused.Run.ID)
		require.NoError(t, err)
		run, err = b.client.RunGet(ctx, paused.Run.ID)
		require.NoError(t, err)
		label := stepNamed(t, run, "label")
		require.Equal(t, docket.StepRunning, label.State, "resumed: released")

		_, err = b.client.RunCancel(ctx, paused.Run.ID)
		require.NoError(t, err)
		run = waitRun(t, b.client, paused.Run.ID, docket.RunCanceled)
		require.Equal(t, docket.StepCanceled, stepNamed(t, run, "label").State)
		unit, err := b.client.UnitGet(ctx, label.UnitID)
		require.NoError(t, err)
		require.Equal(t, docket.UnitCanceled, unit.State)
		who, err := b.client.ContributorCreate(ctx, docket.ContributorCreateParams{ExternalID: uuid.NewString()})
		require.NoError(t, err)
		_, err = b.client.AssignmentTake(ctx, unit.PoolID, who.ID)
		require.Error(t, err, "a canceled unit is not handed out")
	})
}

// TestRunHumanStepMissingTask: a human step whose task does not exist
// fails its step (and the run) with an error naming the task.
func TestRunHumanStepMissingTask(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend, fastConfig())
		ctx := context.Background()
		def, err := docket.NewWorkflow("orphan").Human("label", "nosuch").Definition()
		require.NoError(t, err)
		_, _, err = b.client.WorkflowPut(ctx, def)
		require.NoError(t, err)
		res, err := b.client.RunStart(ctx, "orphan", nil, nil)
		require.NoError(t, err)
		run, err := b.client.RunGet(ctx, res.Run.ID)
		require.NoError(t, err)
		require.Equal(t, docket.RunFailed, run.State)
		require.Equal(t, docket.StepFailed, run.Steps[0].State)
		require.Contains(t, run.Steps[0].Error, `no task "nosuch"`)
	})
}

// TestRunHumanStepFanOutAndOverrides: a human step with forEach makes one
// unit per item (each with its item), in a pool whose overrides apply;
// the fan-in step's unit sees the list of outputs and names the first
// instance's unit as its parent unit.
func TestRunHumanStepFanOutAndOverrides(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend, fastConfig())
		ctx := context.Background()
		tmpl, err := docket.ParseTask([]byte(sameTask))
		require.NoError(t, err)
		_, _, err = b.client.TaskPut(ctx, "same", tmpl)
		require.NoError(t, err)
		def, err := docket.NewWorkflow("pairs").
			Human("each", "same", docket.ForEach("input.items"), docket.StepOverrides(json.RawMessage(`{"judgmentsPerUnit":{"min":1},"priority":2}`))).
			Human("check", "same", docket.After("each"), docket.StepOverrides(json.RawMessage(`{"judgmentsPerUnit":1}`))).
			Definition()
		require.NoError(t, err)
		_, _, err = b.client.WorkflowPut(ctx, def)
		require.NoError(t, err)
		res, err := b.client.RunStart(ctx, "pairs", map[string]any{"items": []string{"x", "y"}}, nil)
		require.NoError(t, err)
		run, err := b.client.RunGet(ctx, res.Run.ID)
		require.NoError(t, err)
		var units []*docket.Unit
		for _, s := range run.Steps {
			if s.Name != "each" {
				continue
			}
			require.Equal(t, docket.StepRunning, s.State)
			u, err := b.client.UnitGet(ctx, s.UnitID)
			require.NoError(t, err)
			require.Equal(t, s.Index, u.StepIndex)
			units = append(units, u)
		}
		require.Len(t, units, 2, "one unit per item")
		require.JSONEq(t, `{"input":{"items":["x","y"]},"steps":{},"item":"y","index":1}`, string(units[1].Input))
		pool, err := b.client.PoolGet(ctx, units[0].PoolID)
		require.NoError(t, err)
		require.Equal(t, units[1].PoolID, pool.ID, "one pool for the step")
		require.Equal(t, 1, pool.JudgmentsPerUnit, "override")
		require.Equal(t, 2, pool.Priority, "override")

		judge := func(poolID uuid.UUID, answer string) *docket.Unit {
			who, err := b.client.ContributorCreate(ctx, docket.ContributorCreateParams{ExternalID: uuid.NewString()})
			require.NoError(t, err)
			taken, err := b.client.AssignmentTake(ctx, poolID, who.ID)
			require.NoError(t, err)
			sub, err := b.client.JudgmentSubmit(ctx, taken.Assignment.ID, who.ID, json.RawMessage(answer))
			require.NoError(t, err)
			require.NotNil(t, sub.Finalized, "one judgment per unit")
			return sub.Finalized
		}
		judge(pool.ID, `{"same":"yes"}`)
		judge(pool.ID, `{"same":"no"}`)

		run, err = b.client.RunGet(ctx, res.Run.ID)
		require.NoError(t, err)
		check := stepNamed(t, run, "check")
		require.Equal(t, docket.StepRunning, check.State, "fan-in released once both units finalized")
		cu, err := b.client.UnitGet(ctx, check.UnitID)
		require.NoError(t, err)
		require.Equal(t, units[0].ID, cu.ParentUnitID, "nearest human ancestor")
		var in struct {
			Steps map[string]struct{ Output []map[string]string }
		}
		require.NoError(t, json.Unmarshal(cu.Input, &in))
		require.Len(t, in.Steps["each"].Output, 2)
		require.ElementsMatch(t, []string{"yes", "no"}, []string{in.Steps["each"].Output[0]["same"], in.Steps["each"].Output[1]["same"]})

		judge(cu.PoolID, `{"same":"yes"}`)
		run = waitRun(t, b.client, res.Run.ID, docket.RunSucceeded)
		require.JSONEq(t, `{"check":{"same":"yes"}}`, string(run.Output))
	})
}

// TestJudgmentOnCanceledUnit: a judgment through an assignment whose unit
// was canceled (its run was) is refused with RefusedUnitCanceled and not
// stored — the work is no longer wanted; the assignment is left as it
// was. A judgment that came before the cancel stays, and a judgment on a
// unit of a run that goes on is stored as usual.
func TestJudgmentOnCanceledUnit(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend, fastConfig())
		ctx := context.Background()
		humanFlow(t, b.client)
		res, err := b.client.RunStart(ctx, "review", nil, nil)
		require.NoError(t, err)
		require.NoError(t, b.client.LeaseComplete(ctx, leaseOne(t, b.client).ID, json.RawMessage(`{}`)))
		run, err := b.client.RunGet(ctx, res.Run.ID)
		require.NoError(t, err)
		unitID := stepNamed(t, run, "label").UnitID
		unit, err := b.client.UnitGet(ctx, unitID)
		require.NoError(t, err)

		take := func() (*docket.Contributor, *docket.TakenAssignment) {
			who, err := b.client.ContributorCreate(ctx, docket.ContributorCreateParams{ExternalID: uuid.NewString()})
			require.NoError(t, err)
			taken, err := b.client.AssignmentTake(ctx, unit.PoolID, who.ID)
			require.NoError(t, err)
			require.Equal(t, unitID, taken.Unit.ID)
			return who, taken
		}
		early, earlyA := take()
		late, lateA := take()
		sub, err := b.client.JudgmentSubmit(ctx, earlyA.Assignment.ID, early.ID, json.RawMessage(`{"same":"yes"}`))
		require.NoError(t, err)
		require.True(t, sub.Created, "before the cancel: stored")

		_, err = b.client.RunCancel(ctx, res.Run.ID)
		require.NoError(t, err)
		unit, err = b.client.UnitGet(ctx, unitID)
		require.NoError(t, err)
		require.Equal(t, docket.UnitCanceled, unit.State)

		_, err = b.client.JudgmentSubmit(ctx, lateA.Assignment.ID, late.ID, json.RawMessage(`{"same":"no"}`))
		var ae *docket.AssignmentError
		require.ErrorAs(t, err, &ae)
		require.Equal(t, docket.RefusedUnitCanceled, ae.Reason)
		require.Equal(t, lateA.Assignment.ID, ae.AssignmentID)
		require.Contains(t, err.Error(), "no longer wanted")

		judgments, err := b.client.JudgmentList(ctx, unitID)
		require.NoError(t, err)
		require.Len(t, judgments, 1, "only the judgment before the cancel")
		require.Equal(t, sub.Judgment.ID, judgments[0].ID)
		unit, err = b.client.UnitGet(ctx, unitID)
		require.NoError(t, err)
		require.Equal(t, 1, unit.JudgmentCount)
		a, err := b.client.AssignmentGet(ctx, lateA.Assignment.ID)
		require.NoError(t, err)
		require.Equal(t, docket.AssignmentActive, a.State, "nothing changed")
		// The earlier judgment sent again is still answered as stored.
		again, err := b.client.JudgmentSubmit(ctx, earlyA.Assignment.ID, early.ID, json.RawMessage(`{"same":"yes"}`))
		require.NoError(t, err)
		require.False(t, again.Created)
		run = waitRun(t, b.client, res.Run.ID, docket.RunCanceled)
		require.Equal(t, docket.StepCanceled, stepNamed(t, run, "label").State)
	})
}
