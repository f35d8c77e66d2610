package docket

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/aggregate"
	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/quality"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/task"
)

// Live aggregation and dynamic overlap (docs/quality.md, "Dynamic
// overlap"). When a judgment brings its unit to its target
// (judgment_count = judgments_per_unit), JudgmentSubmit's transaction
// calls unitTargetReached, which aggregates the unit's clean judgments
// with the pool's methods and decides (quality.DecideOverlap):
//
//   - confidence at or over the task's targetConfidence (or no target):
//     FINALIZED, unit.finalized;
//   - under the target and under the maximum: the unit's target grows by
//     one (UnitRetarget), so one more assignment can be taken; the unit
//     stays JUDGABLE and the next judgment decides again;
//   - under the target at the maximum: FINALIZED with the confidence it
//     has, unit.finalized saying lowConfidence.
//
// It all runs in the judgment's transaction, after the unit's row was
// locked by the insert: of concurrent judgments of one unit exactly one
// brings it to its target, and it alone decides.

// PriorTrust is the weight of a judgment whose contributor had no trust
// in the pool when it came in (no test question answered yet): the
// middle of the trust scale, what quality.NewTrust starts at.
const PriorTrust = 0.5

// overlapOf is the dynamic overlap of a pool's units: at least the pool's
// judgments per unit (the task's min, or the workflow step's override),
// at most the task's max (never under the min), with the task's target
// confidence.
func overlapOf(pool *Pool, ct *task.Compiled) task.JudgmentsPerUnit {
	j := ct.Template.JudgmentsPerUnit
	j.Min = max(pool.JudgmentsPerUnit, 1)
	j.Max = max(j.Max, j.Min)
	return j
}

// unitTargetReached decides a regular JUDGABLE unit whose judgment count
// reached its target, in the judgment's transaction: finalize it (and
// complete its run's human step), or give it one more slot. It returns
// the unit when it finalized it. models are the pool's worker-quality
// models (poolModels, read before the transaction; nil for none).
// judgments are the unit's, as tx.JudgmentList would list them now, when
// the caller has them (JudgmentBegun.UnitJudgments); nil: read here.
// finalized, when set, gets the finalized unit instead (nil is returned),
// maybe only later in the transaction: a unit of no run (no step to
// complete with it) is finalized by tx.UnitFinalizeLater, which a
// judgment batch sends with its other judgments' finalizations.
func (c *Client) unitTargetReached(ctx context.Context, tx store.Tx, pool *Pool, ct *task.Compiled,
	models map[string]*aggregate.Model, unit *store.JudgedUnit, judgments []*Judgment, finalized func(*Unit),
) (*Unit, error) {
	if judgments == nil {
		var err error
		if judgments, err = tx.JudgmentList(ctx, &store.JudgmentListParams{UnitID: unit.ID}); err != nil {
			return nil, err
		}
	}
	clean := untainted(judgments)
	result, confidence, err := aggregateUnitWith(ct, clean, models)
	if err != nil {
		return nil, fmt.Errorf("aggregate unit %s: %w", unit.ID, err)
	}
	now := c.cfg.Now()
	d := quality.DecideOverlap(len(clean), overlapOf(pool, ct), confidence)
	switch d.Action {
	case quality.OverlapWait, quality.OverlapOneMore:
		// Wait: tainted judgments left it short of the clean ones it needs
		// (a flag's repair usually raised the target already); one more:
		// under the target confidence. Either way the target grows past
		// the judgments it has, so that the takes hand out what is missing.
		missing := 1
		if d.Action == quality.OverlapWait {
			missing = overlapOf(pool, ct).Min - len(clean)
		}
		target := unit.JudgmentCount + missing
		if target <= unit.JudgmentsPerUnit {
			return nil, nil
		}
		_, err := tx.UnitRetarget(ctx, &store.UnitRetargetParams{ID: unit.ID, JudgmentsPerUnit: target, Now: now})
		return nil, err
	}
	return c.finalizeUnit(ctx, tx, ct, unit.ID, unit.RunID, clean, result, confidence, d.LowConfidence, now, finalized)
}

// untainted is the judgments that count towards a unit's answer: those
// quality control has not tainted.
func untainted(judgments []*Judgment) []*Judgment {
	var clean []*Judgment
	for _, j := range judgments {
		if !j.Tainted {
			clean = append(clean, j)
		}
	}
	return clean
}

// finalizeUnit moves a regular JUDGABLE unit (of run runID, uuid.Nil for
// none) to FINALIZED with result and confidence, the aggregate of its
// clean judgments, writing unit.finalized with their agreements, and
// completes its run's human step, all in tx; finalized as in
// unitTargetReached. Both a unit reaching its target and one ended by
// its pool's close (crowd_close.go) are finalized here.
func (c *Client) finalizeUnit(ctx context.Context, tx store.Tx, ct *task.Compiled, unitID, runID uuid.UUID, clean []*Judgment,
	result json.RawMessage, confidence *float64, low bool, now time.Time, finalized func(*Unit),
) (*Unit, error) {
	agreements, err := finalizedAgreements(ct, result, clean)
	if err != nil {
		return nil, fmt.Errorf("agreement of unit %s: %w", unitID, err)
	}
	fp := &store.UnitFinalizeParams{ID: unitID, Result: result, Confidence: confidence,
		LowConfidence: low, Judgments: agreements, Now: now}
	if finalized != nil && runID == uuid.Nil {
		return nil, tx.UnitFinalizeLater(ctx, fp, finalized)
	}
	fin, err := tx.UnitFinalize(ctx, fp)
	if err != nil {
		return nil, err
	}
	if c.completeHumanStep != nil && fin.RunID != uuid.Nil {
		if err := c.completeHumanStep(ctx, tx, fin, HumanStepOutput{Output: result, Confidence: confidence}); err != nil {
			return nil, err
		}
	}
	if finalized != nil {
		finalized(fin)
		return nil, nil
	}
	return fin, nil
}

// finalizedAgreements says, for each clean judgment, whether it agreed
// with the result (quality.Agreements), as unit.finalized carries it.
func finalizedAgreements(ct *task.Compiled, result json.RawMessage, clean []*Judgment) ([]crowd.JudgmentAgreement, error) {
	judged := make([]quality.Judged, len(clean))
	who := make(map[uuid.UUID]uuid.UUID, len(clean))
	// Oldest first, as the result's kept lists are.
	for i, j := range clean {
		judged[len(clean)-1-i] = quality.Judged{ID: j.ID, Data: j.Data}
		who[j.ID] = j.ContributorID
	}
	as, err := quality.Agreements(ct, result, judged)
	if err != nil {
		return nil, err
	}
	out := make([]crowd.JudgmentAgreement, len(as))
	for i, a := range as {
		out[i] = crowd.JudgmentAgreement{JudgmentID: a.JudgmentID, ContributorID: who[a.JudgmentID], Agreed: a.Agreed}
	}
	return out, nil
}

// modelBased reports whether a categorical method learns worker quality
// across the pool (a Model the leader re-estimates): every method but
// majority (each judgment one vote) and weighted (each judgment's trust
// snapshot its weight).
func modelBased(m aggregate.Method) bool {
	return m != aggregate.MethodMajority && m != aggregate.MethodWeighted
}

// modelFields lists the choice and rating fields of ct whose method is
// model-based: those the pool-estimator estimates.
func modelFields(ct *task.Compiled) []task.Field {
	var out []task.Field
	for _, f := range ct.Fields {
		if (f.Kind == task.KindChoice || f.Kind == task.KindRating) && modelBased(aggregate.Method(f.Aggregation)) {
			out = append(out, f)
		}
	}
	return out
}

// fieldClasses are the classes of a choice field (its options' values, in
// order) or a rating field (1 … scale).
func fieldClasses(f task.Field) []string {
	var classes []string
	if f.Kind == task.KindRating {
		for i := 1; i <= max(f.Scale, 1); i++ {
			classes = append(classes, strconv.Itoa(i))
		}
		return classes
	}
	for _, o := range f.Options {
		classes = append(classes, o.Value)
	}
	return classes
}

// aggregateUnitWith turns the untainted judgments of one unit into its
// result (an object keyed by field name) and confidence (the lowest of its
// categorical fields', nil when it has none).
//
// Choice and rating fields use their method: majority counts each
// judgment once; weighted weighs it by its trust snapshot (PriorTrust
// when it has none); a model-based method (wawa, zencrowd, ds, glad,
// ebcc, auto) gives the unit's posterior under the pool's current model
// of that field (models, by field name: each contributor's estimated
// confusion matrix or weight, a contributor the model has not met
// weighed as the pool's average), without re-estimating anything. With
// no model yet (the leader has not estimated the pool), or an answer the
// model has no class for, it falls back to the weighted vote. A
// multi_choice field uses its method when it is a vote and the weighted
// vote otherwise; number fields their numeric method; text and bbox
// fields keep every answer (a list).
func aggregateUnitWith(ct *task.Compiled, judgments []*Judgment, models map[string]*aggregate.Model) (json.RawMessage, *float64, error) {
	type answer struct {
		worker string
		value  any
	}
	perField := map[string][]answer{}
	trust := map[string]float64{}
	// Oldest first, so ties and kept lists follow submission order.
	for i := len(judgments) - 1; i >= 0; i-- {
		j := judgments[i]
		if j.Tainted {
			continue
		}
		parsed, err := ct.ParseJudgment(j.Data)
		if err != nil {
			return nil, nil, fmt.Errorf("judgment %s: %w", j.ID, err)
		}
		w := j.ContributorID.String()
		trust[w] = PriorTrust
		if j.Trust != nil {
			trust[w] = *j.Trust
		}
		for name, v := range parsed {
			perField[name] = append(perField[name], answer{worker: w, value: v})
		}
	}
	result := map[string]any{}
	var confidence *float64
	lower := func(c float64) {
		if confidence == nil || c < *confidence {
			confidence = &c
		}
	}
	for _, f := range ct.Fields {
		answers := perField[f.Name]
		if len(answers) == 0 {
			continue
		}
		switch f.Kind {
		case task.KindChoice, task.KindRating:
			votes := make([]aggregate.Vote, len(answers))
			for i, a := range answers {
				votes[i] = aggregate.Vote{Worker: a.worker, Label: fmt.Sprint(a.value)}
			}
			item, err := categoricalItem(f, votes, trust, models[f.Name])
			if err != nil {
				return nil, nil, err
			}
			if f.Kind == task.KindRating {
				n, _ := strconv.Atoi(item.Label)
				result[f.Name] = n
			} else {
				result[f.Name] = item.Label
			}
			lower(item.Confidence)
		case task.KindMultiChoice:
			in := make([]aggregate.MultiJudgment, len(answers))
			for i, a := range answers {
				sel, _ := a.value.([]string)
				in[i] = aggregate.MultiJudgment{Item: "u", Worker: a.worker, Selected: sel}
			}
			res, err := aggregate.MultiChoice(voteMethod(f.Aggregation), in, aggregate.Options{Trust: trust})
			if err != nil {
				return nil, nil, err
			}
			sel := res.Items[0].Selected
			if sel == nil {
				sel = []string{}
			}
			result[f.Name] = sel
		case task.KindNumber:
			in := make([]aggregate.NumericJudgment, len(answers))
			for i, a := range answers {
				v, _ := a.value.(float64)
				in[i] = aggregate.NumericJudgment{Item: "u", Worker: a.worker, Value: v}
			}
			method := aggregate.NumericMethod(f.Aggregation)
			if !slices.Contains(aggregate.NumericMethods(), method) {
				method = aggregate.NumericMedian
			}
			res, err := aggregate.Numeric(method, in, aggregate.Options{})
			if err != nil {
				return nil, nil, err
			}
			result[f.Name] = res.Items[0].Value
		default:
			all := make([]any, len(answers))
			for i, a := range answers {
				all[i] = a.value
			}
			result[f.Name] = all
		}
	}
	b, err := json.Marshal(result)
	if err != nil {
		return nil, nil, err
	}
	return b, confidence, nil
}

// categoricalItem aggregates one choice or rating field of one unit: the
// posterior under model when the field's method is model-based and the
// model knows every answer, else the field's vote (the weighted vote for
// a model-based method).
func categoricalItem(f task.Field, votes []aggregate.Vote, trust map[string]float64, model *aggregate.Model) (aggregate.ItemResult, error) {
	method := aggregate.Method(f.Aggregation)
	if model != nil && modelBased(method) {
		item, err := model.Posterior("u", votes)
		if err == nil {
			return item, nil
		}
		if !errors.Is(err, aggregate.ErrInput) {
			return item, err
		}
		// A class the model never saw (or a model of other classes): the
		// vote below, until the next estimate learns it.
	}
	if method != aggregate.MethodMajority {
		method = aggregate.MethodWeighted
	}
	in := make([]aggregate.Judgment, len(votes))
	for i, v := range votes {
		in[i] = aggregate.Judgment{Item: "u", Worker: v.Worker, Label: v.Label}
	}
	res, err := aggregate.Categorical(method, in, aggregate.Options{Classes: fieldClasses(f), Trust: trust})
	if err != nil {
		return aggregate.ItemResult{}, err
	}
	return res.Items[0], nil
}

func voteMethod(m string) aggregate.Method {
	switch aggregate.Method(m) {
	case aggregate.MethodMajority, aggregate.MethodWeighted, aggregate.MethodWawa:
		return aggregate.Method(m)
	}
	return aggregate.MethodWeighted
}
