package docket_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/flow/expr"
	"github.com/docket-run/docket/internal/testdb"
)

// Review steps (docs/workflows.md, "Review steps"): label (two
// judgments) → review (reviews label when the crowd is unsure, or for a
// sample of runs at input.rate) → ship (a job that reads
// steps.label.output).

const (
	labelTask = `{"title": "Same product?",
 "fields": [{"name": "same", "kind": "choice", "required": true, "options": [{"value": "yes"}, {"value": "no"}]}],
 "judgmentsPerUnit": {"min": 2}}`
	reviewTask = `{"title": "Check the answer",
 "fields": [{"name": "verdict", "kind": "choice", "required": true,
             "options": [{"value": "approve"}, {"value": "correct"}, {"value": "reject"}]},
            {"name": "same", "kind": "choice", "options": [{"value": "yes"}, {"value": "no"}]}],
 "judgmentsPerUnit": {"min": 1}}`
)

type reviewBundle struct {
	*bundle
	t *testing.T
}

func reviewSetup(t *testing.T, backend testdb.Backend, qaTask string) *reviewBundle {
	t.Helper()
	return reviewSetupIf(t, backend, qaTask, "steps.label.confidence < 0.8 || sample(input.rate)")
}

// reviewSetupIf is reviewSetup with cond as the review step's `if`.
func reviewSetupIf(t *testing.T, backend testdb.Backend, qaTask, cond string) *reviewBundle {
	t.Helper()
	b := &reviewBundle{bundle: setup(t, backend, fastConfig()), t: t} // no worker: every advance is the judgment's own
	ctx := context.Background()
	for name, doc := range map[string]string{"label2": labelTask, "qa": qaTask} {
		tmpl, err := docket.ParseTask([]byte(doc))
		require.NoError(t, err)
		_, _, err = b.client.TaskPut(ctx, name, tmpl)
		require.NoError(t, err)
	}
	def, err := docket.NewWorkflow("reviewed").
		Human("label", "label2").
		Human("review", "qa", docket.After("label"), docket.Reviews("label"),
			docket.If(cond)).
		Job("ship", "h.step", docket.After("label", "review")).
		Definition()
	require.NoError(t, err)
	_, _, err = b.client.WorkflowPut(ctx, def)
	require.NoError(t, err)
	return b
}

func (b *reviewBundle) start(rate float64) uuid.UUID {
	b.t.Helper()
	res, err := b.client.RunStart(context.Background(), "reviewed", map[string]any{"sku": "A1", "rate": rate}, nil)
	require.NoError(b.t, err)
	return res.Run.ID
}

func (b *reviewBundle) run(id uuid.UUID) *docket.Run {
	b.t.Helper()
	run, err := b.client.RunGet(context.Background(), id)
	require.NoError(b.t, err)
	return run
}

func (b *reviewBundle) contributor() uuid.UUID {
	b.t.Helper()
	who, err := b.client.ContributorCreate(context.Background(), docket.ContributorCreateParams{ExternalID: uuid.NewString()})
	require.NoError(b.t, err)
	return who.ID
}

// judge has contributor who take an assignment of unit's pool (it must
// be unit) and submit answer.
func (b *reviewBundle) judge(unitID, who uuid.UUID, answer string) *docket.SubmittedJudgment {
	b.t.Helper()
	ctx := context.Background()
	unit, err := b.client.UnitGet(ctx, unitID)
	require.NoError(b.t, err)
	taken, err := b.client.AssignmentTake(ctx, unit.PoolID, who)
	require.NoError(b.t, err)
	require.Equal(b.t, unitID, taken.Unit.ID)
	sub, err := b.client.JudgmentSubmit(ctx, taken.Assignment.ID, who, json.RawMessage(answer))
	require.NoError(b.t, err)
	return sub
}

// label has two new contributors answer the label step; it returns them.
func (b *reviewBundle) label(runID uuid.UUID, a, c string) []uuid.UUID {
	b.t.Helper()
	return b.labelBy(runID, []uuid.UUID{b.contributor(), b.contributor()}, a, c)
}

// labelBy has who answer the label step, a and c.
func (b *reviewBundle) labelBy(runID uuid.UUID, who []uuid.UUID, a, c string) []uuid.UUID {
	b.t.Helper()
	unit := stepNamed(b.t, b.run(runID), "label").UnitID
	b.judge(unit, who[0], `{"same":"`+a+`"}`)
	require.NotNil(b.t, b.judge(unit, who[1], `{"same":"`+c+`"}`).Finalized)
	return who
}

// shipSees leases ship's job and returns steps.label.output of its
// payload.
func (b *reviewBundle) shipSees() string {
	b.t.Helper()
	var payload struct {
		Steps map[string]struct{ Output json.RawMessage }
	}
	require.NoError(b.t, json.Unmarshal(leaseOne(b.t, b.client).Job.Payload, &payload))
	return string(payload.Steps["label"].Output)
}

// TestReviewApprove: an unsure label (yes against no) is reviewed; the
// reviewer sees label's input and answer; approve keeps it, and ship
// reads it.
func TestReviewApprove(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := reviewSetup(t, backend, reviewTask)
		ctx := context.Background()
		id := b.start(0)
		b.label(id, "yes", "no")
		run := b.run(id)
		label, review := stepNamed(t, run, "label"), stepNamed(t, run, "review")
		require.Equal(t, docket.StepSucceeded, label.State)
		require.Less(t, *label.Confidence, 0.8)
		require.Equal(t, docket.StepRunning, review.State)

		unit, err := b.client.UnitGet(ctx, review.UnitID)
		require.NoError(t, err)
		labelUnit, err := b.client.UnitGet(ctx, label.UnitID)
		require.NoError(t, err)
		var in struct {
			Review struct {
				Step       string
				UnitID     uuid.UUID
				Input      json.RawMessage
				Output     json.RawMessage
				Confidence *float64
			}
		}
		require.NoError(t, json.Unmarshal(unit.Input, &in))
		require.Equal(t, "label", in.Review.Step)
		require.Equal(t, label.UnitID, in.Review.UnitID)
		require.JSONEq(t, string(labelUnit.Input), string(in.Review.Input))
		require.JSONEq(t, string(label.Output), string(in.Review.Output))
		require.InDelta(t, *label.Confidence, *in.Review.Confidence, 1e-9)

		b.judge(review.UnitID, b.contributor(), `{"verdict":"approve"}`)
		run = b.run(id)
		review = stepNamed(t, run, "review")
		require.Equal(t, docket.StepSucceeded, review.State)
		require.JSONEq(t, `{"verdict":"approve","output":`+string(label.Output)+`}`, string(review.Output))
		require.JSONEq(t, string(label.Output), string(stepNamed(t, run, "label").Output))
		require.JSONEq(t, string(label.Output), b.shipSees())
	})
}

// TestReviewCorrect: the reviewer's corrected answer becomes label's
// output, which ship reads; the unit keeps the crowd's result.
func TestReviewCorrect(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := reviewSetup(t, backend, reviewTask)
		ctx := context.Background()
		id := b.start(0)
		b.label(id, "yes", "no")
		label := stepNamed(t, b.run(id), "label")
		var first struct{ Same string }
		require.NoError(t, json.Unmarshal(label.Output, &first))
		fixed := map[string]string{"yes": "no", "no": "yes"}[first.Same]
		require.NotEmpty(t, fixed)

		b.judge(stepNamed(t, b.run(id), "review").UnitID, b.contributor(), `{"verdict":"correct","same":"`+fixed+`"}`)
		run := b.run(id)
		want := `{"same":"` + fixed + `"}`
		require.JSONEq(t, want, string(stepNamed(t, run, "label").Output), "the corrected answer is label's output")
		review := stepNamed(t, run, "review")
		require.Equal(t, docket.StepSucceeded, review.State)
		require.JSONEq(t, `{"verdict":"correct","output":`+want+`}`, string(review.Output))
		require.Equal(t, 1.0, *stepNamed(t, run, "label").Confidence, "the review's confidence")
		unit, err := b.client.UnitGet(ctx, label.UnitID)
		require.NoError(t, err)
		require.JSONEq(t, string(label.Output), string(unit.Result), "the unit keeps the crowd's answer")
		require.JSONEq(t, want, b.shipSees())
	})
}

// TestReviewReject: reject redoes label's unit: its judgments are kept
// but tainted, the first judges cannot take it again, two others answer,
// and their answer becomes label's output; the review waits for it (ship
// is not released before), then ends with verdict reject.
func TestReviewReject(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := reviewSetup(t, backend, reviewTask)
		ctx := context.Background()
		id := b.start(0)
		first := b.label(id, "yes", "no")
		label := stepNamed(t, b.run(id), "label")
		review := stepNamed(t, b.run(id), "review")
		b.judge(review.UnitID, b.contributor(), `{"verdict":"reject"}`)

		run := b.run(id)
		require.Equal(t, docket.StepRunning, stepNamed(t, run, "review").State, "the review waits for the redo")
		require.Equal(t, docket.StepPending, stepNamed(t, run, "ship").State)
		require.Equal(t, docket.StepSucceeded, stepNamed(t, run, "label").State, "label completed once")
		unit, err := b.client.UnitGet(ctx, label.UnitID)
		require.NoError(t, err)
		require.Equal(t, docket.UnitJudgable, unit.State)
		require.Equal(t, 4, unit.JudgmentsPerUnit, "two more judgments")
		held, err := b.client.UnitGet(ctx, review.UnitID)
		require.NoError(t, err)
		require.Equal(t, docket.UnitPaused, held.State, "the review's unit is held")
		js, err := b.client.JudgmentList(ctx, label.UnitID)
		require.NoError(t, err)
		require.Len(t, js, 2, "the rejected judgments are kept")
		for _, j := range js {
			require.True(t, j.Tainted, "and excluded")
		}
		for _, who := range first {
			_, err := b.client.AssignmentTake(ctx, unit.PoolID, who)
			require.True(t, docket.IsNoUnit(err), "a first judge may not redo it: %v", err)
		}

		b.judge(label.UnitID, b.contributor(), `{"same":"no"}`)
		require.Equal(t, docket.StepRunning, stepNamed(t, b.run(id), "review").State)
		sub := b.judge(label.UnitID, b.contributor(), `{"same":"no"}`)
		require.NotNil(t, sub.Finalized)
		require.JSONEq(t, `{"same":"no"}`, string(sub.Finalized.Result), "only the redo counts")
		require.Equal(t, 1.0, *sub.Finalized.Confidence)

		run = b.run(id)
		require.JSONEq(t, `{"same":"no"}`, string(stepNamed(t, run, "label").Output))
		require.Equal(t, 1.0, *stepNamed(t, run, "label").Confidence)
		review = stepNamed(t, run, "review")
		require.Equal(t, docket.StepSucceeded, review.State)
		require.JSONEq(t, `{"verdict":"reject","output":{"same":"no"}}`, string(review.Output))
		held, err = b.client.UnitGet(ctx, review.UnitID)
		require.NoError(t, err)
		require.Equal(t, docket.UnitFinalized, held.State)
		require.JSONEq(t, `{"verdict":"reject"}`, string(held.Result))
		require.JSONEq(t, `{"same":"no"}`, b.shipSees())
	})
}

// TestReviewRejectThenCancel: canceling the run while the redo is open
// cancels the redo's unit and the held review unit.
func TestReviewRejectThenCancel(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := reviewSetup(t, backend, reviewTask)
		ctx := context.Background()
		id := b.start(0)
		b.label(id, "yes", "no")
		run := b.run(id)
		label, review := stepNamed(t, run, "label"), stepNamed(t, run, "review")
		b.judge(review.UnitID, b.contributor(), `{"verdict":"reject"}`)
		_, err := b.client.RunCancel(ctx, id)
		require.NoError(t, err)
		for _, u := range []uuid.UUID{label.UnitID, review.UnitID} {
			unit, err := b.client.UnitGet(ctx, u)
			require.NoError(t, err)
			require.Equal(t, docket.UnitCanceled, unit.State)
		}
		require.Equal(t, docket.RunCanceled, b.run(id).State)
	})
}

// TestReviewRouting: a sure label (two yes) is not reviewed at rate 0
// (the review is SKIPPED and ship reads the crowd's answer), is reviewed
// at rate 1, and at rate 0.5 exactly the runs sample() draws for
// (run id and step name) are reviewed.
func TestReviewRouting(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := reviewSetup(t, backend, reviewTask)
		id := b.start(0)
		b.label(id, "yes", "yes")
		run := b.run(id)
		require.Equal(t, 1.0, *stepNamed(t, run, "label").Confidence)
		require.Equal(t, docket.StepSkipped, stepNamed(t, run, "review").State)
		require.JSONEq(t, `{"same":"yes"}`, b.shipSees())

		id = b.start(1)
		b.label(id, "yes", "yes")
		require.Equal(t, docket.StepRunning, stepNamed(t, b.run(id), "review").State)

		in, out := 0, 0
		for range 8 {
			id := b.start(0.5)
			b.label(id, "no", "no")
			want, err := expr.Sample(0.5, id.String()+"/review")
			require.NoError(t, err)
			state := stepNamed(t, b.run(id), "review").State
			if want {
				in++
				require.Equal(t, docket.StepRunning, state, "run %s", id)
			} else {
				out++
				require.Equal(t, docket.StepSkipped, state, "run %s", id)
			}
		}
		t.Logf("sample(0.5): %d reviewed, %d not", in, out)
	})
}

// TestReviewRoutingByJudges: judges.label lists who answered, with
// their earlier judgments in the pool: only answers given by someone new
// (no earlier judgment) are reviewed.
func TestReviewRoutingByJudges(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := reviewSetupIf(t, backend, reviewTask, "judges.label.exists(j, j.prior < 1)")
		veteran, newcomer := b.contributor(), b.contributor()
		id := b.start(0)
		b.labelBy(id, []uuid.UUID{veteran, newcomer}, "yes", "yes")
		require.Equal(t, docket.StepRunning, stepNamed(t, b.run(id), "review").State, "both are new")

		id = b.start(0)
		b.labelBy(id, []uuid.UUID{veteran, newcomer}, "yes", "yes")
		require.Equal(t, docket.StepSkipped, stepNamed(t, b.run(id), "review").State, "both judged once before")

		id = b.start(0)
		b.labelBy(id, []uuid.UUID{veteran, b.contributor()}, "yes", "yes")
		require.Equal(t, docket.StepRunning, stepNamed(t, b.run(id), "review").State, "one is new")
	})
}

// TestReviewTaskWithoutVerdict: a review step whose task has no verdict
// field fails with a message naming it.
func TestReviewTaskWithoutVerdict(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := reviewSetup(t, backend, labelTask)
		id := b.start(1)
		b.label(id, "yes", "no")
		run := b.run(id)
		review := stepNamed(t, run, "review")
		require.Equal(t, docket.StepFailed, review.State)
		require.Contains(t, review.Error, `review step "review": task "qa" version 1: a review task needs a required choice field "verdict"`)
		require.Equal(t, docket.RunFailed, run.State)
	})
}

// TestReviewValidation: the definition errors name the step and the
// field, every one of them.
func TestReviewValidation(t *testing.T) {
	t.Parallel()
	_, err := docket.DecodeWorkflow([]byte(`{"name":"w","steps":[
		{"name":"fetch","job":{"type":"t"}},
		{"name":"label","human":{"task":"t"}},
		{"name":"a","after":["fetch"],"human":{"task":"r","review":"fetch"}},
		{"name":"b","human":{"task":"r","review":"label"}},
		{"name":"c","after":["label"],"human":{"task":"r","review":"nope"}}]}`))
	var ve *docket.WorkflowValidationError
	require.ErrorAs(t, err, &ve)
	got := map[string]string{}
	for _, fe := range ve.Errors {
		got[fe.Field] = fe.Message
	}
	require.Equal(t, map[string]string{
		"steps[2].human.review": `step "a": review names step "fetch", which is not a human step (only a human step's answer can be reviewed)`,
		"steps[3].human.review": `step "b": review names step "label", which is not an ancestor of "b" (add it to after)`,
		"steps[4].human.review": `step "c": review names unknown step "nope"`,
	}, got, fmt.Sprint(ve.Errors))
}
