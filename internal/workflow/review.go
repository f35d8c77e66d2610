package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/flow"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/task"
)

// Review steps (docs/workflows.md, "Review steps"). A human step with
// `review: "label"` reviews the answer of human step label, an ancestor.
//
// Release. Its unit's input is a human step's input plus
//
//	"review": {"step": "label", "unitId": …, "input": <label's unit input>,
//	           "output": <label's output>, "confidence": …}
//
// so that the reviewer sees what the labellers saw and what they
// answered. When label has no answer (it was skipped, or failed with
// onFailure continue), the review step is SKIPPED. Its task must have a
// required choice field `verdict` whose options are among approve,
// correct and reject, approve included; otherwise the step fails.
//
// Verdict. When the review's unit is FINALIZED, its aggregated verdict
// decides, in that advancement's transaction (the one of the judgment
// that finalized it), under the run's lock:
//
//   - approve: label's output stands. The review step SUCCEEDED with
//     output {"verdict": "approve", "output": <label's output>}.
//   - correct: the review's other fields, laid over label's output,
//     become label's output (StepOutputAmend; its confidence becomes the
//     review's): the steps released after this read them as
//     steps.label.output. The review SUCCEEDED with {"verdict":
//     "correct", "output": <the corrected output>}.
//   - reject: label's unit is redone (UnitRedo: its judgments tainted —
//     kept, excluded from aggregation —, JUDGABLE again for as many new
//     judgments, which only contributors who have not judged it may
//     give). The review's own unit is held: reopened and PAUSED, with
//     its judgments (a held unit has as many judgments as its target,
//     which no other PAUSED unit has: it would have been finalized). The
//     review step stays RUNNING. When the redo finalizes label's unit,
//     that judgment's advancement (recordRedos) ends the review: the new
//     result becomes label's output, the held unit is finalized again
//     with {"verdict": "reject"}, and the review step SUCCEEDED with
//     {"verdict": "reject", "output": <the redo's result>}. The redo is
//     not reviewed again.
//
// Label's step completes once (its SUCCEEDED is never undone); a
// correction or a redo changes the output its later readers see. Steps
// that depend on label but not on the review may have read the first
// answer already: put a step after the review to read the reviewed one.

// reviewSection is the `review` member of a review step's unit input.
type reviewSection struct {
	Step       string          `json:"step"`
	UnitID     uuid.UUID       `json:"unitId"`
	Input      json.RawMessage `json:"input"`
	Output     json.RawMessage `json:"output"`
	Confidence *float64        `json:"confidence"`
}

// checkReviewTask says what is wrong with t as the task of a review
// step, "" when nothing is.
func checkReviewTask(t *task.Template) string {
	for _, f := range t.Fields {
		if f.Name != flow.VerdictField {
			continue
		}
		if f.Kind != task.KindChoice || !f.Required {
			return fmt.Sprintf("its field %q must be a required choice field", flow.VerdictField)
		}
		approve := false
		for _, o := range f.Options {
			if !slices.Contains(flow.Verdicts, o.Value) {
				return fmt.Sprintf("its field %q has option %q; a verdict is one of approve, correct, reject", flow.VerdictField, o.Value)
			}
			approve = approve || o.Value == flow.VerdictApprove
		}
		if !approve {
			return fmt.Sprintf("its field %q needs the option %q", flow.VerdictField, flow.VerdictApprove)
		}
		return ""
	}
	return fmt.Sprintf("a review task needs a required choice field %q (approve, correct, reject)", flow.VerdictField)
}

// reviewInput adds the review section to in, the unit input of review
// step s. skip is why the step is skipped instead ("" to go on).
func (adv *advance) reviewInput(ctx context.Context, s *flow.Step, in []byte) (out []byte, skip string, err error) {
	name := s.Human.Review
	r := adv.instance(name, 0)
	if r == nil || r.State != flow.StepSucceeded || r.UnitID == uuid.Nil {
		state := flow.StepPending
		if r != nil {
			state = r.State
		}
		return nil, fmt.Sprintf("step %q: step %q, which it reviews, has no answer (it is %s)", s.Name, name, state), nil
	}
	unit, err := adv.tx.UnitGet(ctx, r.UnitID)
	if err != nil {
		return nil, "", fmt.Errorf("review step %q: read the unit of step %q: %w", s.Name, name, err)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(in, &doc); err != nil {
		return nil, "", fmt.Errorf("review step %q: %w", s.Name, err)
	}
	sec, err := json.Marshal(reviewSection{Step: name, UnitID: unit.ID, Input: unit.Input, Output: jsonOrNull(r.Output), Confidence: r.Confidence})
	if err != nil {
		return nil, "", fmt.Errorf("review step %q: %w", s.Name, err)
	}
	doc["review"] = sec
	out, err = json.Marshal(doc)
	if err != nil {
		return nil, "", fmt.Errorf("review step %q: %w", s.Name, err)
	}
	return out, "", nil
}

func jsonOrNull(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return b
}

// reviewOutput is the output of a review step.
type reviewOutput struct {
	Verdict string          `json:"verdict"`
	Output  json.RawMessage `json:"output"`
}

// recordReview records the FINALIZED unit e of review instance st by its
// verdict.
func (adv *advance) recordReview(ctx context.Context, st *flow.StepInstance, e *store.StepUnitEnd) error {
	name := adv.c.g.ReviewOf(st.Step)
	fail := func(format string, args ...any) error {
		_, err := adv.transition(ctx, st, flow.StepFailed, store.StepTransitionParams{Error: fmt.Sprintf("review step %q: ", st.Step) + fmt.Sprintf(format, args...)})
		return err
	}
	var result map[string]json.RawMessage
	if err := json.Unmarshal(e.Result, &result); err != nil {
		return fail("its unit's result is not an object: %v", err)
	}
	var verdict string
	if err := json.Unmarshal(result[flow.VerdictField], &verdict); err != nil || !slices.Contains(flow.Verdicts, verdict) {
		return fail("its unit's result has no verdict (approve, correct or reject): %s", e.Result)
	}
	r := adv.instance(name, 0)
	if r == nil || r.State != flow.StepSucceeded {
		return fail("step %q, which it reviews, has no answer any more", name)
	}
	succeed := func(output json.RawMessage) error {
		out, err := json.Marshal(reviewOutput{Verdict: verdict, Output: jsonOrNull(output)})
		if err != nil {
			return err
		}
		_, err = adv.transition(ctx, st, flow.StepSucceeded, store.StepTransitionParams{Output: out, Confidence: e.Confidence})
		return err
	}
	switch verdict {
	case flow.VerdictApprove:
		return succeed(r.Output)
	case flow.VerdictCorrect:
		corrected, err := overlay(r.Output, result)
		if err != nil {
			return fail("%v", err)
		}
		if err := adv.amend(ctx, r, corrected, e.Confidence); err != nil {
			return err
		}
		return succeed(corrected)
	}
	// reject: redo the reviewed unit, hold the review's. Lock order
	// (store.QualityTx): the run is held, then the unit, then the taint
	// of its judgments — as a flag's repair takes them (run, unit, taint).
	_, err := adv.tx.UnitRedo(ctx, &store.UnitRedoParams{ID: r.UnitID, Now: adv.now})
	var ite *crowd.InvalidTransitionError
	switch {
	case errors.As(err, &ite):
		// Not FINALIZED: quality control reopened it already; its next
		// finalization ends the review all the same.
	case err != nil:
		return err
	}
	if _, err := adv.tx.UnitTransition(ctx, &store.UnitTransitionParams{ID: e.UnitID, From: crowd.UnitFinalized, To: crowd.UnitJudgable, Now: adv.now}); err != nil {
		return err
	}
	_, err = adv.tx.UnitTransition(ctx, &store.UnitTransitionParams{ID: e.UnitID, From: crowd.UnitJudgable, To: crowd.UnitPaused, Now: adv.now})
	return err
}

// recordRedos ends the review instances held for a redo (reject) whose
// reviewed unit is FINALIZED again: see the top of this file. A reviewed
// unit CANCELED fails the review and cancels its held unit.
func (adv *advance) recordRedos(ctx context.Context) error {
	g := adv.c.g
	for _, name := range g.Order() {
		reviewed := g.ReviewOf(name)
		if reviewed == "" {
			continue
		}
		st := adv.instance(name, 0)
		if st == nil || st.State != flow.StepRunning || st.UnitID == uuid.Nil {
			continue
		}
		held, err := adv.tx.UnitGet(ctx, st.UnitID)
		if err != nil {
			return err
		}
		if !isHeld(held) {
			continue
		}
		r := adv.instance(reviewed, 0)
		if r == nil || r.State != flow.StepSucceeded || r.UnitID == uuid.Nil {
			continue
		}
		redo, err := adv.tx.UnitGet(ctx, r.UnitID)
		if err != nil {
			return err
		}
		switch redo.State {
		case crowd.UnitCanceled:
			if _, err := adv.transition(ctx, st, flow.StepFailed, store.StepTransitionParams{
				Error: fmt.Sprintf("review step %q: the redo of step %q's unit %s was canceled", name, reviewed, redo.ID) + because(adv.canceledWhy[redo.ID]),
			}); err != nil {
				return err
			}
			// The held unit ends with its review: nothing ends it later
			// (a closed pool leaves a held unit to its redo).
			if _, err := adv.tx.UnitTransition(ctx, &store.UnitTransitionParams{ID: held.ID, From: crowd.UnitPaused, To: crowd.UnitCanceled, Now: adv.now}); err != nil {
				return err
			}
			continue
		case crowd.UnitFinalized:
		default:
			continue // the redo goes on
		}
		if err := adv.amend(ctx, r, redo.Result, redo.Confidence); err != nil {
			return err
		}
		if _, err := adv.tx.UnitTransition(ctx, &store.UnitTransitionParams{ID: held.ID, From: crowd.UnitPaused, To: crowd.UnitJudgable, Now: adv.now}); err != nil {
			return err
		}
		verdict, err := json.Marshal(map[string]string{flow.VerdictField: flow.VerdictReject})
		if err != nil {
			return err
		}
		if _, err := adv.tx.UnitFinalize(ctx, &store.UnitFinalizeParams{ID: held.ID, Result: verdict, Now: adv.now}); err != nil {
			return err
		}
		out, err := json.Marshal(reviewOutput{Verdict: flow.VerdictReject, Output: jsonOrNull(redo.Result)})
		if err != nil {
			return err
		}
		if _, err := adv.transition(ctx, st, flow.StepSucceeded, store.StepTransitionParams{Output: out, Confidence: redo.Confidence}); err != nil {
			return err
		}
	}
	return nil
}

// isHeld reports whether u is a review's unit held for a redo: PAUSED
// with all its judgments (any other unit reaching its target is
// finalized at once, and a held one was).
func isHeld(u *crowd.Unit) bool {
	return u.State == crowd.UnitPaused && u.JudgmentCount >= u.JudgmentsPerUnit
}

// redoUnit is the unit of the step that review instance st rejected,
// whose redo the review holds: canceled with st when the run is canceled
// while the review is held, for that unit belongs to a SUCCEEDED step,
// which a cancel does not visit. uuid.Nil when st reviews nothing.
func (adv *advance) redoUnit(st *flow.StepInstance) uuid.UUID {
	if adv.c.g == nil {
		return uuid.Nil // a version that no longer decodes: its reviews are unknown
	}
	reviewed := adv.c.g.ReviewOf(st.Step)
	if reviewed == "" {
		return uuid.Nil
	}
	r := adv.instance(reviewed, 0)
	if r == nil {
		return uuid.Nil
	}
	return r.UnitID
}

// because is ": why", or "" when why is.
func because(why string) string {
	if why == "" {
		return ""
	}
	return ": " + why
}

// amend replaces the output of SUCCEEDED instance r (the reviewed step)
// and what this advancement knows of it.
func (adv *advance) amend(ctx context.Context, r *flow.StepInstance, output json.RawMessage, confidence *float64) error {
	got, err := adv.tx.StepOutputAmend(ctx, &store.StepOutputAmendParams{
		RunID: r.RunID, Step: r.Step, Index: r.Index, Generation: r.Generation,
		Output: output, Confidence: confidence, Now: adv.now,
	})
	if err != nil {
		return err
	}
	adv.set(got)
	return nil
}

// overlay lays the fields of a review's result, but its verdict, over the
// reviewed output (an object keyed by field name).
func overlay(output json.RawMessage, review map[string]json.RawMessage) (json.RawMessage, error) {
	fields := map[string]json.RawMessage{}
	if len(output) > 0 && string(output) != "null" {
		if err := json.Unmarshal(output, &fields); err != nil {
			return nil, fmt.Errorf("the reviewed output is not an object: %w", err)
		}
	}
	for k, v := range review {
		if k != flow.VerdictField && string(v) != "null" {
			fields[k] = v
		}
	}
	return json.Marshal(fields)
}
