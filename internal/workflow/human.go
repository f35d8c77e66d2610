package workflow

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/flow"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/task"
)

// Human steps. Releasing an instance of a human step ensures the step's
// pool (one per workflow version and step, made from the latest version of
// the step's task when the first run reaches it) and inserts one JUDGABLE
// unit, in the advancement's transaction; the instance is RUNNING with the
// unit's id. The unit's input is what a job step's payload carries:
// {"input":…,"steps":{parent:{output,confidence}},"item":…,"index":…}.
// When the unit is FINALIZED, the next advancement of the run (the
// judgment's own transaction calls Advance; the sweeper is the safety
// net) records it exactly as it records a job's SUCCESS: the instance
// SUCCEEDED with the unit's result as output and its confidence.

// stepFailure is an error that fails the step being released (a missing
// task, bad overrides, a closed pool), not the transaction.
type stepFailure struct{ msg string }

func (e *stepFailure) Error() string { return e.msg }

// ensurePool returns the pool of human step s of the run's workflow
// version, creating it from the latest version of the step's task.
func (adv *advance) ensurePool(ctx context.Context, s *flow.Step) (*crowd.Pool, error) {
	if p := adv.pools[s.Name]; p != nil {
		return p, nil
	}
	tv, err := adv.tx.TaskGet(ctx, &store.TaskGetParams{Name: s.Human.Task})
	if errors.Is(err, store.ErrNotFound) {
		return nil, &stepFailure{fmt.Sprintf("human step %q: no task %q (PUT /v1/tasks/%s first)", s.Name, s.Human.Task, s.Human.Task)}
	}
	if err != nil {
		return nil, err
	}
	t, err := task.Parse(tv.Definition)
	if err != nil {
		return nil, &stepFailure{fmt.Sprintf("human step %q: task %q version %d: %v", s.Name, tv.Name, tv.Version, err)}
	}
	t = t.WithDefaults()
	if s.Human.Review != "" {
		if msg := checkReviewTask(t); msg != "" {
			return nil, &stepFailure{fmt.Sprintf("review step %q: task %q version %d: %s", s.Name, tv.Name, tv.Version, msg)}
		}
	}
	o, err := flow.ParseOverrides(s.Human.Overrides)
	if err != nil {
		return nil, &stepFailure{fmt.Sprintf("human step %q: %v", s.Name, err)}
	}
	p := &store.PoolCreateParams{
		Workflow: adv.run.Workflow, WorkflowVersion: adv.run.Version, Step: s.Name, Task: tv.Name, TaskVersion: tv.Version,
		Priority: task.PriorityDefault, Skills: t.Skills, Channels: t.Channels,
		JudgmentsPerUnit: max(t.JudgmentsPerUnit.Min, 1), AssignmentSeconds: max(t.AssignmentSeconds, 1),
		Settings: t.Quality, Now: adv.now,
	}
	if t.Priority != nil {
		p.Priority = *t.Priority
	}
	if o.JudgmentsPerUnit != nil {
		p.JudgmentsPerUnit = int(*o.JudgmentsPerUnit)
	}
	if o.AssignmentSeconds != nil {
		p.AssignmentSeconds = *o.AssignmentSeconds
	}
	if o.Priority != nil {
		p.Priority = *o.Priority
	}
	if o.Skills != nil {
		p.Skills = o.Skills
	}
	if o.Channels != nil {
		p.Channels = o.Channels
	}
	if p.ID, err = uuid.NewV7(); err != nil {
		return nil, err
	}
	pool, _, err := adv.tx.PoolCreate(ctx, p)
	var ve *crowd.ValidationError
	if errors.As(err, &ve) {
		return nil, &stepFailure{fmt.Sprintf("human step %q: %v", s.Name, err)}
	}
	if err != nil {
		return nil, err
	}
	if pool.Status != crowd.PoolOpen && pool.Status != crowd.PoolPaused {
		return nil, &stepFailure{fmt.Sprintf("human step %q: its pool %s is %s: no unit can be added", s.Name, pool.ID, pool.Status)}
	}
	if adv.pools == nil {
		adv.pools = map[string]*crowd.Pool{}
	}
	adv.pools[s.Name] = pool
	return pool, nil
}

// planHuman makes the unit of one instance of human step s, with p.input
// as its input, and sets it on p for insertUnits; a failure of the step
// (not of the store) sets p FAILED instead. A unit is checked here, alone,
// so that a unit the store would refuse fails its instance, not every
// advancement of the run (its values are checked before: expr refuses a
// value that cannot be stored).
func (adv *advance) planHuman(ctx context.Context, s *flow.Step, p *planned) error {
	pool, err := adv.ensurePool(ctx, s)
	var sf *stepFailure
	if errors.As(err, &sf) {
		p.state, p.err = flow.StepFailed, sf.msg
		return nil
	}
	if err != nil {
		return err
	}
	in := p.input
	if s.Human.Review != "" {
		var skip string
		if in, skip, err = adv.reviewInput(ctx, s, in); err != nil {
			return err
		}
		if skip != "" {
			p.state, p.err = flow.StepSkipped, skip
			return nil
		}
	}
	id, err := uuid.NewV7()
	if err != nil {
		return err
	}
	u := &store.UnitInsertParams{ID: id, RunID: adv.run.ID, StepIndex: p.index, ParentUnitID: adv.parentUnit(s.Name, p.index), Input: in}
	err = (&store.UnitInsertManyParams{PoolID: pool.ID, State: crowd.UnitJudgable, Now: adv.now, Units: []*store.UnitInsertParams{u}}).Validate()
	var ve *crowd.ValidationError
	if errors.As(err, &ve) {
		p.state, p.err = flow.StepFailed, fmt.Sprintf("human step %q: %v", s.Name, err)
		return nil
	}
	if err != nil {
		return err
	}
	p.unit = u
	return nil
}

// insertUnits inserts the units planHuman made for the instances of human
// step s, in one statement (COPY on PostgreSQL for many), and sets each
// instance's unitID.
func (adv *advance) insertUnits(ctx context.Context, s *flow.Step, plans []*planned) error {
	var (
		units []*store.UnitInsertParams
		of    []*planned
	)
	for _, p := range plans {
		if p.unit != nil && p.state == flow.StepRunning {
			units = append(units, p.unit)
			of = append(of, p)
		}
	}
	if len(units) == 0 {
		return nil
	}
	pool := adv.pools[s.Name]
	if pool == nil {
		return fmt.Errorf("human step %q: units without a pool", s.Name)
	}
	res, err := adv.tx.UnitInsertMany(ctx, &store.UnitInsertManyParams{PoolID: pool.ID, State: crowd.UnitJudgable, Now: adv.now, Units: units})
	if err != nil {
		return fmt.Errorf("human step %q: %w", s.Name, err)
	}
	if len(res) != len(units) {
		return fmt.Errorf("human step %q: %d units inserted of %d", s.Name, len(res), len(units))
	}
	for i, p := range of {
		p.unitID, p.unit = res[i].ID, nil
	}
	return nil
}

// parentUnit is the unit of the nearest human ancestor of step name (the
// instance of the same index when that step fanned out too, else its
// first), uuid.Nil when there is none.
func (adv *advance) parentUnit(name string, index int) uuid.UUID {
	g := adv.c.g
	seen := map[string]bool{name: true}
	level := []string{name}
	for len(level) > 0 {
		var next []string
		for _, n := range level {
			for _, parent := range g.Parents(n) {
				if seen[parent] {
					continue
				}
				seen[parent] = true
				next = append(next, parent)
			}
		}
		for _, n := range next {
			if g.Step(n).Kind() != flow.KindHuman {
				continue
			}
			if in := adv.instance(n, index); in != nil && in.UnitID != uuid.Nil {
				return in.UnitID
			}
			for _, in := range adv.steps[n] {
				if in.UnitID != uuid.Nil {
					return in.UnitID
				}
			}
		}
		level = next
	}
	return uuid.Nil
}

// recordUnitEnds moves the RUNNING human instances whose unit ended:
// FINALIZED → SUCCEEDED with the unit's result as output and its
// confidence; CANCELED → CANCELED in a canceled run, FAILED otherwise,
// with the error what ended it said (AdvanceUnitCanceled: its pool was
// closed before it had its judgments), else "unit … was canceled".
func (adv *advance) recordUnitEnds(ctx context.Context) error {
	if !hasHumanStep(adv.c.g) {
		return nil // no query for runs without human steps
	}
	ends, err := adv.tx.StepUnitEnds(ctx, adv.run.ID)
	if err != nil {
		return err
	}
	for _, e := range ends {
		st := adv.instance(e.Step, e.Index)
		if st == nil || st.State != flow.StepRunning || st.Generation != e.Generation || st.UnitID != e.UnitID {
			continue
		}
		var (
			to flow.StepState
			p  store.StepTransitionParams
		)
		switch e.UnitState {
		case crowd.UnitFinalized:
			if adv.c.g.ReviewOf(e.Step) != "" {
				if err := adv.recordReview(ctx, st, e); err != nil {
					return err
				}
				continue
			}
			to, p.Output, p.Confidence = flow.StepSucceeded, e.Result, e.Confidence
		case crowd.UnitCanceled:
			to, p.Error = flow.StepFailed, fmt.Sprintf("unit %s was canceled", e.UnitID)
			if why := adv.canceledWhy[e.UnitID]; why != "" {
				p.Error = why
			}
			if adv.run.State == flow.RunCanceled || adv.run.CancelRequested {
				to = flow.StepCanceled
			}
		default:
			continue
		}
		if _, err := adv.transition(ctx, st, to, p); err != nil {
			return err
		}
	}
	return adv.recordRedos(ctx)
}

// hasHumanStep reports whether the workflow has a human step.
func hasHumanStep(g *flow.Graph) bool {
	for _, name := range g.Order() {
		if g.Step(name).Kind() == flow.KindHuman {
			return true
		}
	}
	return false
}
