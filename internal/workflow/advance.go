package workflow

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/flow"
	"github.com/docket-run/docket/internal/flow/expr"
	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/jsonappend"
	"github.com/docket-run/docket/internal/store"
)

// Defaults of a step's job, as for a job inserted with no options.
const (
	jobPriorityDefault    = 1
	jobMaxAttemptsDefault = 25
)

// droppedMessage marks an instance of a fan-out step left over from an
// earlier generation: after a retry, the forEach yielded fewer items than
// before. Such an instance is SKIPPED with this error and is not part of
// the step's output.
const droppedMessage = "not an item of this generation: the step's forEach yielded fewer items after the retry"

// Advancer advances runs. It is safe for concurrent use; share one per
// process so its compiled versions are shared.
type Advancer struct {
	cache *cache
	now   func() time.Time
}

// NewAdvancer makes an advancer reading the time from now.
func NewAdvancer(now func() time.Time) (*Advancer, error) {
	c, err := newCache()
	if err != nil {
		return nil, err
	}
	if now == nil {
		now = time.Now
	}
	return &Advancer{cache: c, now: now}, nil
}

// Advance brings run runID up to date inside tx: it locks the run, records
// the ends of its step jobs and timed-out signals, releases every step
// whose trigger is met (while the run is RUNNING), and finishes the run
// when its outcome is known, and returns the run as it left it. A run
// with nothing new is left unchanged. An unknown run is no error (nil). An error of an expression or
// of a stored definition fails its step or run, never Advance; an error
// returned is one of the store, and tx must then be rolled back.
func (a *Advancer) Advance(ctx context.Context, tx store.Tx, runID uuid.UUID) (*flow.Run, error) {
	return a.advanceIn(ctx, tx, runID, nil, nil)
}

// AdvanceUnitCanceled is Advance in the transaction that CANCELED unit
// unitID of the run, saying why: the unit's step FAILS with why as its
// error (a review held for that unit's redo says it too). The message
// comes from what ended the unit, not from the state of its pool at the
// time of some later advancement.
func (a *Advancer) AdvanceUnitCanceled(ctx context.Context, tx store.Tx, runID, unitID uuid.UUID, why string) (*flow.Run, error) {
	return a.advanceIn(ctx, tx, runID, nil, map[uuid.UUID]string{unitID: why})
}

// advanceIn is Advance; with batch set, the steps it releases RUNNING as
// new instances are added to batch, which the caller flushes before the
// transaction commits.
//
// The time of the advancement is read once the run is locked: read
// before, while another transaction held the lock and recorded a
// parent's end, the steps released here would start before that end.
func (a *Advancer) advanceIn(ctx context.Context, tx store.Tx, runID uuid.UUID, batch *startBatch, canceledWhy map[uuid.UUID]string) (*flow.Run, error) {
	run, err := tx.RunLock(ctx, runID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	adv, err := a.load(ctx, tx, run) // its now is read here, locked
	if err != nil {
		return nil, err
	}
	adv.batch, adv.canceledWhy = batch, canceledWhy
	if err := adv.advance(ctx); err != nil {
		return nil, err
	}
	return adv.run, nil
}

// advance is one advancement of one run.
type advance struct {
	tx  store.Tx
	c   *compiled
	run *flow.Run
	now time.Time
	// steps maps each step name to its instances, by index.
	steps map[string][]*flow.StepInstance
	// fresh: the run was inserted by this transaction, so it has no step
	// instance and no job to record; batch, when set, takes the releases
	// of such runs (see startBatch).
	fresh bool
	// canceledWhy says, by unit id, why a unit this transaction CANCELED
	// ended (AdvanceUnitCanceled): the error of its step. A CANCELED unit
	// not in it ended otherwise ("unit … was canceled").
	canceledWhy map[uuid.UUID]string
	batch       *startBatch
	// ends, when endsRead, are the ends of the run's step jobs read with
	// the run (Store.RunLoadMany): recordJobEnds does not read them again.
	ends     []*store.StepJobEnd
	endsRead bool
	// pools caches the pools of the human steps released (human.go).
	pools map[string]*crowd.Pool
}

// startBatch collects the jobs and RUNNING instances released for the
// runs started or advanced together: they are written by two statements
// at the end (flush) instead of two per released step of each run. What
// needs them in the store before the end (canceling the released steps
// of a run that fails) flushes the batch first.
type startBatch struct {
	jobs  []*store.JobInsertParams
	steps []*store.StepInsertParams
	// ends are the ends of step jobs recorded by the advancements of the
	// batch (RUNNING → SUCCEEDED, FAILED, CANCELED), made by one statement.
	ends []*store.StepTransitionParams
	// runs are the runs of the batch that SUCCEEDED, written after the
	// ends (their events after their steps').
	runs []*store.RunTransitionParams
}

func (b *startBatch) flush(ctx context.Context, tx store.Tx, now time.Time) error {
	if len(b.ends) > 0 {
		got, err := tx.StepTransitionMany(ctx, &store.StepTransitionManyParams{Transitions: b.ends, Now: now})
		if err != nil {
			return err
		}
		if len(got) != len(b.ends) {
			// The runs are locked and their instances read in this
			// transaction: this cannot happen, and must not commit.
			return fmt.Errorf("record step job ends: %d of %d instances changed under the run lock", len(b.ends)-len(got), len(b.ends))
		}
		b.ends = nil
	}
	if len(b.jobs) > 0 {
		res, err := tx.JobInsertMany(ctx, &store.JobInsertManyParams{Jobs: b.jobs, Now: now})
		if err != nil {
			return err
		}
		for _, r := range res {
			if r.Duplicate {
				return fmt.Errorf("release steps of new runs: job %s exists already", r.Job.ID)
			}
		}
	}
	if len(b.steps) > 0 {
		res, err := tx.StepInsertMany(ctx, &store.StepInsertManyParams{Steps: b.steps, Now: now})
		if err != nil {
			return err
		}
		for _, r := range res {
			if r.Duplicate {
				return fmt.Errorf("release step %s: released already", store.InstanceID(r.Step.RunID, r.Step.Step, r.Step.Index))
			}
		}
	}
	b.jobs, b.steps = nil, nil
	for _, p := range b.runs {
		if _, err := tx.RunTransition(ctx, p); err != nil {
			return err
		}
	}
	b.runs = nil
	return nil
}

func (a *Advancer) load(ctx context.Context, tx store.Tx, run *flow.Run) (*advance, error) {
	list, err := tx.StepList(ctx, run.ID)
	if err != nil {
		return nil, err
	}
	return a.loaded(ctx, tx, run, list)
}

// loaded is load with the run's instances read already.
func (a *Advancer) loaded(ctx context.Context, tx store.Tx, run *flow.Run, list []*flow.StepInstance) (*advance, error) {
	c, err := a.cache.get(ctx, tx, run.Workflow, run.Version)
	if err != nil {
		return nil, err
	}
	adv := &advance{tx: tx, c: c, run: run, now: a.now(), steps: map[string][]*flow.StepInstance{}}
	for _, st := range list {
		adv.steps[st.Step] = append(adv.steps[st.Step], st)
	}
	for _, insts := range adv.steps {
		slices.SortFunc(insts, func(x, y *flow.StepInstance) int { return x.Index - y.Index })
	}
	return adv, nil
}

func (adv *advance) advance(ctx context.Context) error {
	if adv.c.err != nil {
		// A version that no longer compiles releases nothing; what it
		// released ends as in any run, and the run fails (or, being
		// canceled, is canceled).
		if !adv.fresh {
			if err := adv.recordJobEnds(ctx); err != nil {
				return err
			}
		}
		switch {
		case adv.run.State.Terminal():
			return nil
		case adv.run.CancelRequested:
			_, err := adv.cancelWhenIdle(ctx)
			return err
		}
		return adv.finish(ctx, flow.RunFailed, nil, adv.c.err.Error())
	}
	if !adv.fresh {
		if err := adv.recordJobEnds(ctx); err != nil {
			return err
		}
		if err := adv.recordUnitEnds(ctx); err != nil {
			return err
		}
	}
	if adv.run.CancelRequested && !adv.run.State.Terminal() {
		_, err := adv.cancelWhenIdle(ctx)
		return err
	}
	if err := adv.timeOutSignals(ctx); err != nil {
		return err
	}
	switch adv.run.State {
	case flow.RunRunning:
		if done, err := adv.conclude(ctx); done || err != nil {
			return err
		}
		if err := adv.release(ctx); err != nil {
			return err
		}
		_, err := adv.conclude(ctx)
		return err
	case flow.RunPaused:
		// No step is released; the run may still end with its last
		// running steps.
		_, err := adv.conclude(ctx)
		return err
	}
	return nil // a finished run only records the ends of what still ran
}

// set replaces the instance st.Step[st.Index] by st, or adds it. A step's
// instances are kept in index order, so both are a binary search (and
// the instances of a fan-out, added in order, an append each).
func (adv *advance) set(st *flow.StepInstance) {
	insts := adv.steps[st.Step]
	i, found := slices.BinarySearchFunc(insts, st.Index, byIndex)
	if found {
		insts[i] = st
		return
	}
	adv.steps[st.Step] = slices.Insert(insts, i, st)
}

func (adv *advance) instance(step string, index int) *flow.StepInstance {
	insts := adv.steps[step]
	if i, found := slices.BinarySearchFunc(insts, index, byIndex); found {
		return insts[i]
	}
	return nil
}

func byIndex(in *flow.StepInstance, index int) int { return cmp.Compare(in.Index, index) }

// transition changes one instance; a refusal (another advancement got
// there first, which the run lock makes impossible, or a stale generation)
// is reported as ok = false, and tx stays usable.
func (adv *advance) transition(ctx context.Context, st *flow.StepInstance, to flow.StepState, p store.StepTransitionParams) (bool, error) {
	p.RunID, p.Step, p.Index, p.Generation = st.RunID, st.Step, st.Index, st.Generation
	p.From, p.To, p.Now = st.State, to, adv.now
	got, err := adv.tx.StepTransition(ctx, &p)
	var ite *flow.InvalidTransitionError
	if errors.As(err, &ite) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	adv.set(got)
	return true, nil
}

// recordJobEnds moves the RUNNING instances whose job ended: SUCCESS →
// SUCCEEDED with the job's result as output; DEAD → FAILED; CANCELED →
// CANCELED in a canceled run, FAILED otherwise (someone canceled the job
// itself).
func (adv *advance) recordJobEnds(ctx context.Context) error {
	ends := adv.ends
	if !adv.endsRead {
		var err error
		if ends, err = adv.tx.StepJobEnds(ctx, adv.run.ID); err != nil {
			return err
		}
	}
	adv.ends, adv.endsRead = nil, false // what follows may end more jobs
	for _, e := range ends {
		st := adv.instance(e.Step, e.Index)
		if st == nil || st.State != flow.StepRunning || st.Generation != e.Generation || st.JobID != e.JobID {
			continue
		}
		var (
			to flow.StepState
			p  store.StepTransitionParams
		)
		switch e.JobState {
		case job.StateSuccess:
			to, p.Output = flow.StepSucceeded, e.Result
		case job.StateDead:
			to, p.Error = flow.StepFailed, fmt.Sprintf("job %s is DEAD: %s", e.JobID, e.Error)
		case job.StateCanceled:
			to, p.Error = flow.StepFailed, fmt.Sprintf("job %s was canceled", e.JobID)
			if e.Error != "" { // a cancel by hand records none
				p.Error += ": " + e.Error
			}
			if adv.run.State == flow.RunCanceled || adv.run.CancelRequested {
				to = flow.StepCanceled
			}
		default:
			continue
		}
		if adv.batch != nil {
			// Written with the batch's other ends; the instance is known
			// as that change leaves it (see store.StepTransitionParams).
			p.RunID, p.Step, p.Index, p.Generation = st.RunID, st.Step, st.Index, st.Generation
			p.From, p.To, p.Now = st.State, to, adv.now
			adv.batch.ends = append(adv.batch.ends, &p)
			ended := *st
			ended.State, ended.Output, ended.Error, ended.Confidence = to, p.Output, p.Error, nil
			ended.FinishedAt, ended.UpdatedAt = adv.now, adv.now
			adv.set(&ended)
			continue
		}
		if _, err := adv.transition(ctx, st, to, p); err != nil {
			return err
		}
	}
	return nil
}

// timeOutSignals ends the RUNNING signal instances whose step's timeout
// has passed: FAILED, or SKIPPED when the step's onFailure is "continue".
func (adv *advance) timeOutSignals(ctx context.Context) error {
	if adv.run.State.Terminal() {
		return nil
	}
	for _, name := range adv.c.g.Order() {
		s := adv.c.g.Step(name)
		if s.Signal == nil {
			continue
		}
		for _, st := range adv.steps[name] {
			if st.State != flow.StepRunning || !signalTimedOut(s, st, adv.now) {
				continue
			}
			to := flow.StepFailed
			if s.OnFailure.OrDefault() == flow.OnFailureContinue {
				to = flow.StepSkipped
			}
			msg := fmt.Sprintf("signal step %q: no signal within its timeout of %s", name, s.Signal.Timeout)
			if _, err := adv.transition(ctx, st, to, store.StepTransitionParams{Error: msg}); err != nil {
				return err
			}
		}
	}
	return nil
}

// signalTimedOut reports whether st, a wait of signal step s, is past
// s's timeout at now: the sweeper then fails it (timeOutSignals), and a
// signal is refused from that moment (Signal), before the sweep.
func signalTimedOut(s *flow.Step, st *flow.StepInstance, now time.Time) bool {
	if s.Signal.Timeout == "" {
		return false
	}
	timeout, err := s.Signal.Timeout.Parse()
	return err == nil && timeout > 0 && !now.Before(st.StartedAt.Add(timeout)) // an unparsable one is refused by validation
}

// record folds the instances of a step into what flow's rules read.
func (adv *advance) record(name string) *flow.Record {
	insts := adv.steps[name]
	if len(insts) == 0 {
		return &flow.Record{} // not released: PENDING
	}
	s := adv.c.g.Step(name)
	r := &flow.Record{FanOut: s != nil && s.ForEach != ""}
	for _, in := range insts {
		if r.FanOut && in.State == flow.StepSkipped && in.Error == droppedMessage {
			continue
		}
		if r.FanOut && isEmptyFanOut(in) {
			return &flow.Record{FanOut: true} // SUCCEEDED, output []
		}
		r.Instances = append(r.Instances, flow.Instance{Index: in.Index, State: in.State, Output: in.Output, Confidence: in.Confidence})
	}
	return r
}

// isEmptyFanOut: the one instance recording a fan-out over an empty list
// (SUCCEEDED without a job or unit; every released instance of a job or
// human step has one).
func isEmptyFanOut(in *flow.StepInstance) bool {
	return in.Index == 0 && in.State == flow.StepSucceeded && in.JobID == uuid.Nil && in.UnitID == uuid.Nil && in.Kind != flow.KindSignal
}

func (adv *advance) records() (map[string]*flow.Record, map[string]flow.StepState) {
	recs := map[string]*flow.Record{}
	states := map[string]flow.StepState{}
	for _, name := range adv.c.g.Order() {
		r := adv.record(name)
		recs[name], states[name] = r, r.State()
	}
	return recs, states
}

// conclude finishes the run when flow.Outcome says it is over.
func (adv *advance) conclude(ctx context.Context) (bool, error) {
	recs, states := adv.records()
	to, over := flow.Outcome(adv.c.g, states)
	if !over {
		return false, nil
	}
	if to == flow.RunSucceeded {
		out, err := flow.RunOutput(adv.c.g, recs)
		if err != nil {
			// An output that is not JSON cannot come from the store;
			// fail the run rather than the process.
			return true, adv.finish(ctx, flow.RunFailed, nil, err.Error())
		}
		return true, adv.finish(ctx, flow.RunSucceeded, out, "")
	}
	return true, adv.finish(ctx, flow.RunFailed, nil, adv.failure(states))
}

// failure says which step failed the run, and why.
func (adv *advance) failure(states map[string]flow.StepState) string {
	for _, name := range adv.c.g.Order() {
		if states[name] != flow.StepFailed || adv.c.g.Step(name).OnFailure.OrDefault() != flow.OnFailureFail {
			continue
		}
		for _, in := range adv.steps[name] {
			if in.State == flow.StepFailed {
				return fmt.Sprintf("step %q[%d] failed: %s", name, in.Index, in.Error)
			}
		}
		return fmt.Sprintf("step %q failed", name)
	}
	return "a step failed"
}

// finish moves the run to a terminal state. A FAILED run's released
// instances that have not started are canceled (their jobs CANCELED,
// signal waits ended); running jobs finish.
func (adv *advance) finish(ctx context.Context, to flow.RunState, output json.RawMessage, msg string) error {
	p := &store.RunTransitionParams{ID: adv.run.ID, From: adv.run.State, To: to, Output: output, Error: msg, Now: adv.now}
	if adv.batch != nil {
		if to == flow.RunSucceeded {
			// Written by the batch's flush after the step ends it
			// holds, so that the run's event follows its steps' in the
			// outbox; the run is known as that change leaves it.
			adv.batch.runs = append(adv.batch.runs, p)
			ended := *adv.run
			ended.State, ended.Output, ended.Error = to, output, msg
			ended.FinishedAt, ended.UpdatedAt = adv.now, adv.now
			adv.run = &ended
			return nil
		}
		// The step ends recorded so far come first (see above).
		if err := adv.batch.flush(ctx, adv.tx, adv.now); err != nil {
			return err
		}
	}
	run, err := adv.tx.RunTransition(ctx, p)
	if err != nil {
		return err
	}
	adv.run = run
	if to != flow.RunFailed {
		return nil
	}
	_, err = adv.cancelNotStarted(ctx, "the run failed")
	return err
}

// cancelWhenIdle moves on a run being canceled: what has not started is
// canceled, and once no step job runs any more the run is CANCELED. It
// returns the jobs still running.
func (adv *advance) cancelWhenIdle(ctx context.Context) ([]uuid.UUID, error) {
	running, err := adv.cancelNotStarted(ctx, "the run was canceled")
	if err != nil || len(running) > 0 {
		return running, err
	}
	run, err := adv.tx.RunTransition(ctx, &store.RunTransitionParams{
		ID: adv.run.ID, From: adv.run.State, To: flow.RunCanceled, Error: "canceled", Now: adv.now,
	})
	if err != nil {
		return nil, err
	}
	adv.run = run
	return nil, nil
}

// stepOrder is the run's steps, parents first; for a version whose
// structure no longer decodes (no graph), the steps it has instances of,
// by name.
func (adv *advance) stepOrder() []string {
	if adv.c.g != nil {
		return adv.c.g.Order()
	}
	return slices.Sorted(maps.Keys(adv.steps))
}

// runningWork lists the RUNNING instances of the steps names, in that
// order, with their work: their jobs (in the instances' order) and their
// units, each with the unit a review holding for a redo waits for
// (redoUnit), so that a canceled review leaves no redo JUDGABLE with
// nothing waiting for it. The run's end (cancelNotStarted) and a forced
// retry (cancelBlockers) cancel the same work.
func (adv *advance) runningWork(names []string) (insts []*flow.StepInstance, jobs, units []uuid.UUID) {
	for _, name := range names {
		for _, st := range adv.steps[name] {
			if st.State != flow.StepRunning {
				continue
			}
			insts = append(insts, st)
			if st.UnitID != uuid.Nil {
				units = append(units, st.UnitID)
				if redo := adv.redoUnit(st); redo != uuid.Nil {
					units = append(units, redo)
				}
			}
			if st.JobID != uuid.Nil {
				jobs = append(jobs, st.JobID)
			}
		}
	}
	return insts, jobs, units
}

// cancelNotStarted cancels the RUNNING instances whose work has not
// started: a job CREATED, QUEUED or RETRY (the job is CANCELED too), a
// human step's unit not final yet (the unit is CANCELED), a signal wait.
// It returns the jobs that are RUNNING: they may finish. However many
// instances, the jobs are canceled by one store call, the units by one,
// the instances moved by one: a fan-out of 10,000 canceled one
// transition at a time took a minute on PostgreSQL, and one job
// transition a job still 28 s.
func (adv *advance) cancelNotStarted(ctx context.Context, why string) ([]uuid.UUID, error) {
	if adv.batch != nil {
		// The released jobs and instances must exist to be canceled.
		if err := adv.batch.flush(ctx, adv.tx, adv.now); err != nil {
			return nil, err
		}
	}
	insts, jobs, units := adv.runningWork(adv.stepOrder())
	if len(insts) == 0 {
		return nil, nil
	}
	if len(units) > 0 {
		// A unit that ended is left alone (a FINALIZED one was recorded
		// by recordUnitEnds first).
		if _, err := adv.tx.UnitCancelMany(ctx, &store.UnitCancelManyParams{IDs: units, Now: adv.now}); err != nil {
			return nil, err
		}
	}
	var canceled []store.JobCancelManyResult
	if len(jobs) > 0 {
		// Running jobs are left to run: a failed run lets them finish,
		// and a canceled one asks them to stop once it commits (Cancel).
		var err error
		canceled, err = adv.tx.JobCancelMany(ctx, &store.JobCancelManyParams{IDs: jobs, Error: why, LeaveRunning: true, Now: adv.now})
		if err != nil {
			return nil, err
		}
	}
	var (
		running []uuid.UUID
		ends    []*store.StepTransitionParams
	)
	for _, st := range insts {
		if st.JobID != uuid.Nil {
			c := canceled[0]
			canceled = canceled[1:]
			switch {
			case c.State == job.StateRunning:
				running = append(running, st.JobID)
				continue // it may finish
			case !c.Canceled && c.State != "":
				continue // it ended before: recorded by the next advancement
			}
			// CANCELED now, or pruned since (counts as canceled).
		}
		ends = append(ends, &store.StepTransitionParams{
			RunID: st.RunID, Step: st.Step, Index: st.Index, Generation: st.Generation,
			From: st.State, To: flow.StepCanceled, Error: why, Now: adv.now,
		})
	}
	if len(ends) == 0 {
		return running, nil
	}
	got, err := adv.tx.StepTransitionMany(ctx, &store.StepTransitionManyParams{Transitions: ends, Now: adv.now})
	if err != nil {
		return nil, err
	}
	for _, st := range got {
		adv.set(st)
	}
	return running, nil
}

// release walks the steps in topological order and acts on each PENDING
// one by flow.Decide; parents come first, so a release, skip or failure
// is seen by the children in the same walk.
func (adv *advance) release(ctx context.Context) error {
	recs, states := adv.records()
	for _, name := range adv.c.g.Order() {
		if states[name] != flow.StepPending {
			continue
		}
		var err error
		switch d := flow.Decide(adv.c.g, name, states); d.Action {
		case flow.ActionWait:
			continue
		case flow.ActionSkip:
			err = adv.endStep(ctx, name, flow.StepSkipped, d.Reason)
		case flow.ActionCancel:
			err = adv.endStep(ctx, name, flow.StepCanceled, d.Reason)
		case flow.ActionRelease:
			err = adv.releaseStep(ctx, name, recs)
		}
		if err != nil {
			return err
		}
		recs[name] = adv.record(name)
		states[name] = recs[name].State()
	}
	return nil
}

// endStep ends a step that is not released: its PENDING instances (after
// a retry) or a new instance 0 move to state to, with why as the error.
func (adv *advance) endStep(ctx context.Context, name string, to flow.StepState, why string) error {
	return adv.putInstances(ctx, name, []*planned{{index: 0, state: to, err: why}}, true)
}

// planned is what one instance of a released step becomes.
type planned struct {
	index  int
	state  flow.StepState // RUNNING (released), SUCCEEDED (an empty fan-out), SKIPPED or FAILED
	job    *store.JobInsertParams
	unit   *store.UnitInsertParams // a human step's unit, to insert (insertUnits)
	unitID uuid.UUID               // a human step's unit, inserted
	output json.RawMessage
	err    string
	// input is what the instance carries: the value of the step's
	// `input`, or (nil until its job or unit is made) the step input of
	// its parents, the part every instance shares joined with tail, the
	// instance's own part (flow.ItemTail).
	input []byte
	tail  []byte
}

// releaseStep evaluates the step's `if`, `forEach` and `input` and
// creates its instances: a job for each instance of a job step, a unit for
// a human step, a wait for a signal. An expression that fails fails the
// step with the expression's error, as does a fan-out past
// flow.MaxFanOutBytes.
func (adv *advance) releaseStep(ctx context.Context, name string, recs map[string]*flow.Record) error {
	g, wf := adv.c.g, adv.c.wf
	s := g.Step(name)
	celInput, err := adv.celInput(ctx, name, recs, nil)
	var sf *stepFailure
	if errors.As(err, &sf) {
		return adv.endStep(ctx, name, flow.StepFailed, sf.msg)
	}
	if err != nil {
		return err
	}
	has, perInstance := wf.HasCondition(name)
	if has && !perInstance {
		ok, err := wf.ConditionOfRun(ctx, adv.run.ID.String(), name, celInput)
		if err != nil {
			return adv.endStep(ctx, name, flow.StepFailed, err.Error())
		}
		if !ok {
			return adv.endStep(ctx, name, flow.StepSkipped, fmt.Sprintf("step %q: if %q is false", name, s.If))
		}
	}
	items := []*flow.Item{nil}
	if s.ForEach != "" {
		list, err := wf.Items(ctx, name, celInput)
		if err != nil {
			return adv.endStep(ctx, name, flow.StepFailed, err.Error())
		}
		if len(list) == 0 {
			return adv.putInstances(ctx, name, []*planned{{index: 0, state: flow.StepSucceeded, output: json.RawMessage("[]")}}, true)
		}
		items = make([]*flow.Item, len(list))
		for i, v := range list {
			// An expression can make a string no backend stores alike
			// (a NUL, written "\u0000"): the step fails, as for a value
			// with no JSON form, rather than every advancement of the
			// run (PostgreSQL refuses the payload).
			if msg := store.JSONUnstorable(v); msg != "" {
				return adv.endStep(ctx, name, flow.StepFailed, fmt.Sprintf("step %q: forEach: item %d: %s", name, i, msg))
			}
			items[i] = &flow.Item{Value: v, Index: i}
		}
	}
	plans, shared, err := adv.planInputs(ctx, s, recs, celInput, items, has && perInstance)
	if errors.As(err, &sf) {
		return adv.endStep(ctx, name, flow.StepFailed, sf.msg)
	}
	if err != nil {
		return err
	}
	for _, p := range plans {
		if p.state != flow.StepRunning {
			continue
		}
		if p.input == nil && shared != nil {
			p.input = shared.With(p.tail)
		}
		if err := adv.plan(ctx, s, p); err != nil {
			return err
		}
	}
	if err := adv.insertUnits(ctx, s, plans); err != nil {
		return err
	}
	return adv.putInstances(ctx, name, plans, s.ForEach != "")
}

// planInputs decides, for each item (a nil item: the one instance of a
// step without forEach), whether its instance runs — its per-instance
// `if` (cond) — and what it carries: the value of the step's `input`
// (InstanceInput) when it has one. It writes nothing. A *stepFailure fails
// the step instead: its `input` failed for an instance, or the instances
// of a fan-out would carry more than flow.MaxFanOutBytes in all (counted
// without building the step inputs they share). The variables of the
// expressions are decoded from celInput once, and each instance adds its
// item to them. shared, when the step has no `input`, holds the part of
// the step input of its parents that every instance carries, encoded
// once.
func (adv *advance) planInputs(ctx context.Context, s *flow.Step, recs map[string]*flow.Record, celInput []byte, items []*flow.Item, cond bool) (plans []*planned, shared *flow.Inputs, err error) {
	wf := adv.c.wf
	custom := wf.HasInput(s.Name)
	runID := adv.run.ID.String()
	var vars *expr.Vars
	if cond || custom {
		if vars, err = expr.DecodeVars(celInput); err != nil {
			return nil, nil, &stepFailure{fmt.Sprintf("step %q: %v", s.Name, err)}
		}
	}
	if !custom && s.Kind() != flow.KindSignal {
		if shared, err = flow.NewInputs(adv.run.Input, recs, adv.c.g.Parents(s.Name)); err != nil {
			return nil, nil, &stepFailure{err.Error()}
		}
	}
	plans = make([]*planned, len(items))
	total := 0
	for i, item := range items {
		p := &planned{state: flow.StepRunning}
		plans[i] = p
		if item != nil {
			p.index = item.Index
		}
		iv := vars
		if vars != nil && item != nil {
			v, err := vars.WithItem(item.Value, item.Index)
			if err != nil {
				p.state, p.err = flow.StepFailed, fmt.Sprintf("step %q[%d]: %v", s.Name, p.index, err)
				continue
			}
			iv = v
		}
		if cond {
			ok, err := wf.ConditionVars(ctx, runID, s.Name, iv)
			switch {
			case err != nil:
				p.state, p.err = flow.StepFailed, err.Error()
				continue
			case !ok:
				p.state, p.err = flow.StepSkipped, fmt.Sprintf("step %q[%d]: if %q is false", s.Name, p.index, s.If)
				continue
			}
		}
		if s.Kind() == flow.KindSignal {
			continue
		}
		var n int
		if custom {
			v, err := wf.Input(ctx, runID, s.Name, iv)
			if err != nil {
				var ee *expr.EvalError
				if item != nil && errors.As(err, &ee) {
					return nil, nil, &stepFailure{fmt.Sprintf("step %q[%d]: input: %v", s.Name, p.index, ee.Err)}
				}
				return nil, nil, &stepFailure{err.Error()}
			}
			if msg := store.JSONUnstorable(v); msg != "" { // see the items in releaseStep
				if item != nil {
					return nil, nil, &stepFailure{fmt.Sprintf("step %q[%d]: input: %s", s.Name, p.index, msg)}
				}
				return nil, nil, &stepFailure{fmt.Sprintf("step %q: input: %s", s.Name, msg)}
			}
			if p.input, err = flow.InstanceInput(v, item); err != nil {
				return nil, nil, &stepFailure{fmt.Sprintf("step %q: input: %v", s.Name, err)}
			}
			n = len(p.input)
		} else {
			if p.tail, err = flow.ItemTail(item); err != nil {
				p.state, p.err = flow.StepFailed, err.Error()
				continue
			}
			n = shared.Len(p.tail)
		}
		if s.Job != nil {
			n += payloadHeadLen(s.Name, p.index) - 1 // the head replaces the input's {
		}
		total += n
		if item != nil && custom && total > flow.MaxFanOutBytes {
			return nil, nil, &stepFailure{fmt.Sprintf("step %q: its instances would carry more than %d bytes (64 MiB, the most a fan-out carries in all), past it at instance %d of %d: make its input smaller",
				s.Name, flow.MaxFanOutBytes, p.index, len(items))}
		}
	}
	if items[0] != nil && total > flow.MaxFanOutBytes {
		return nil, nil, &stepFailure{fmt.Sprintf("step %q: its %d instances would carry %d bytes, each the run's input and its parents' outputs; a fan-out carries at most %d bytes (64 MiB) in all: give the step an input expression that keeps what one instance needs",
			s.Name, len(items), total, flow.MaxFanOutBytes)}
	}
	return plans, shared, nil
}

// plan makes the job, unit (human.go) or wait of instance p, which is
// RUNNING and carries p.input.
func (adv *advance) plan(ctx context.Context, s *flow.Step, p *planned) error {
	switch s.Kind() {
	case flow.KindSignal:
		return nil
	case flow.KindHuman:
		return adv.planHuman(ctx, s, p)
	}
	var err error
	p.job, err = jobParams(s.Job, adv.payload(s.Name, p.index, p.input))
	return err
}

// payload is a step job's payload: in, the instance's step input, with
// the run, step and index in front:
//
//	{"run":{"id":"…","step":"…","index":0},"input":…,"steps":{…},"item":…,"index":…}
//
// (with an `input` expression, in is flow.InstanceInput's shape, without
// "steps").
//
// "run" comes first so that the completer tells a step job from a plain
// job by the payload's first bytes (IsStepPayload), without a query.
func (adv *advance) payload(step string, index int, in []byte) []byte {
	b := make([]byte, 0, payloadHeadLen(step, index)+len(in)-1)
	b = append(b, stepPayloadPrefix...)
	b = jsonappend.UUID(b, adv.run.ID)
	b = append(b, `","step":"`...)
	b = append(b, step...) // a step name is [a-z][a-z0-9_]*: no escapes
	b = append(b, `","index":`...)
	b = strconv.AppendInt(b, int64(index), 10)
	b = append(b, "},"...)
	return append(b, in[1:]...) // in is {"input":…}
}

// payloadHeadLen is the length of a step job's payload up to the comma
// after its "run" member, counted without writing it (a fan-out is
// measured before it is built).
func payloadHeadLen(step string, index int) int {
	return len(stepPayloadPrefix) + 36 + len(`","step":"`) + len(step) + len(`","index":`) + len(strconv.Itoa(index)) + len("},")
}

// stepPayloadPrefix starts the payload of every step job.
const stepPayloadPrefix = `{"run":{"id":"`

// IsStepPayload reports whether payload is a step job's, and returns its
// run id. It reads the first bytes only: the completer calls it for each
// finished job. It accepts the payload as written and as PostgreSQL's
// jsonb gives it back (a space after each colon and comma; keys ordered
// by length, so "run", the shortest key, and "id" in it stay first).
func IsStepPayload(payload []byte) (uuid.UUID, bool) {
	rest, ok := skipTokens(payload, `{`, `"run"`, `:`, `{`, `"id"`, `:`, `"`)
	if !ok || len(rest) < 36 {
		return uuid.Nil, false
	}
	id, err := uuid.ParseBytes(rest[:36])
	if err != nil {
		return uuid.Nil, false
	}
	return id, true
}

// skipTokens consumes tokens from b in order, each after optional white
// space, and returns what follows.
func skipTokens(b []byte, tokens ...string) ([]byte, bool) {
	for _, tok := range tokens {
		for len(b) > 0 && (b[0] == ' ' || b[0] == '\n' || b[0] == '\t' || b[0] == '\r') {
			b = b[1:]
		}
		if len(b) < len(tok) || string(b[:len(tok)]) != tok {
			return nil, false
		}
		b = b[len(tok):]
	}
	return b, true
}

// StepRef is the run, step and index a step job belongs to, as its
// payload says.
type StepRef struct {
	RunID uuid.UUID `json:"id"`
	Step  string    `json:"step"`
	Index int       `json:"index"`
}

// StepRefOf reads the "run" member of a step job's payload.
func StepRefOf(payload []byte) (StepRef, bool) {
	if _, ok := IsStepPayload(payload); !ok {
		return StepRef{}, false
	}
	var doc struct {
		Run StepRef `json:"run"`
	}
	if err := json.Unmarshal(payload, &doc); err != nil {
		return StepRef{}, false
	}
	return doc.Run, true
}

func jobParams(js *flow.JobStep, payload []byte) (*store.JobInsertParams, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return nil, fmt.Errorf("make job id: %w", err)
	}
	p := &store.JobInsertParams{
		ID: id, Type: js.Type, Queue: js.Queue, Priority: jobPriorityDefault, Payload: payload,
		State: job.StateQueued, MaxAttempts: js.MaxAttempts,
	}
	if p.Queue == "" {
		p.Queue = js.Type
	}
	if js.Priority != nil {
		p.Priority = *js.Priority
	}
	if p.MaxAttempts == 0 {
		p.MaxAttempts = jobMaxAttemptsDefault
	}
	if d, err := js.Timeout.Parse(); err == nil {
		p.Timeout = d
	}
	return p, nil
}

// putInstances writes the planned instances of a step: the jobs in one
// insert, new instances in one insert, instances that exist (PENDING after
// a retry) by transitions. Instances of an earlier generation beyond the
// plans (a fan-out that shrank) are dropped. A duplicate insert means the
// step was released already, which the run lock rules out: it is an
// error, so the transaction rolls back rather than leaving an orphan job.
// fanOut instances are created even for one plan, so that every instance
// index of the step is accounted for.
func (adv *advance) putInstances(ctx context.Context, name string, plans []*planned, fanOut bool) error {
	s := adv.c.g.Step(name)
	kind := s.Kind()
	if adv.batch != nil && adv.batchable(name, plans) {
		for _, p := range plans {
			ins := &store.StepInsertParams{RunID: adv.run.ID, Step: name, Index: p.index, Kind: kind, State: flow.StepRunning, UnitID: p.unitID,
				TimeoutAt: adv.timeoutAt(s)}
			if p.job != nil {
				ins.JobID = p.job.ID
				adv.batch.jobs = append(adv.batch.jobs, p.job)
			}
			adv.batch.steps = append(adv.batch.steps, ins)
			adv.set(&flow.StepInstance{
				RunID: adv.run.ID, Step: name, Index: p.index, Kind: kind, Generation: 1, State: flow.StepRunning,
				JobID: ins.JobID, UnitID: ins.UnitID, CreatedAt: adv.now, UpdatedAt: adv.now, StartedAt: adv.now,
			})
		}
		return nil
	}
	var (
		jobs    []*store.JobInsertParams
		inserts []*store.StepInsertParams
		later   []*planned // inserted PENDING, then moved
	)
	for _, p := range plans {
		if p.job != nil {
			jobs = append(jobs, p.job)
		}
	}
	if len(jobs) > 0 {
		res, err := adv.tx.JobInsertMany(ctx, &store.JobInsertManyParams{Jobs: jobs, Now: adv.now})
		if err != nil {
			return err
		}
		for _, r := range res {
			if r.Duplicate {
				return fmt.Errorf("release step %q of run %s: job %s exists already", name, adv.run.ID, r.Job.ID)
			}
		}
	}
	for _, p := range plans {
		var jobID uuid.UUID
		if p.job != nil {
			jobID = p.job.ID
		}
		if st := adv.instance(name, p.index); st != nil {
			if err := adv.move(ctx, st, p, jobID); err != nil {
				return err
			}
			continue
		}
		ins := &store.StepInsertParams{RunID: adv.run.ID, Step: name, Index: p.index, Kind: kind, State: flow.StepRunning, JobID: jobID, UnitID: p.unitID,
			TimeoutAt: adv.timeoutAt(s)}
		if p.state == flow.StepSkipped || p.state == flow.StepFailed || p.state == flow.StepCanceled {
			ins.State = flow.StepPending
			later = append(later, p)
		}
		if p.state == flow.StepSucceeded {
			later = append(later, p)
		}
		inserts = append(inserts, ins)
	}
	if len(inserts) > 0 {
		res, err := adv.tx.StepInsertMany(ctx, &store.StepInsertManyParams{Steps: inserts, Now: adv.now})
		if err != nil {
			return err
		}
		for _, r := range res {
			if r.Duplicate {
				return fmt.Errorf("release step %s: released already", store.InstanceID(adv.run.ID, name, r.Step.Index))
			}
			adv.set(r.Step)
		}
	}
	if err := adv.endNew(ctx, name, later); err != nil {
		return err
	}
	if fanOut {
		for _, st := range slices.Clone(adv.steps[name]) {
			if st.Index >= len(plans) && st.State.Done() && st.Error != droppedMessage {
				// A leftover that was running at the retry (see move).
				var err error
				if st, err = adv.reset(ctx, st); err != nil {
					return err
				}
			}
			if st.Index >= len(plans) && st.State == flow.StepPending {
				if _, err := adv.transition(ctx, st, flow.StepSkipped, store.StepTransitionParams{Error: droppedMessage}); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// endNew brings the instances of plans, just inserted PENDING, to their
// planned end: the SKIPPED, FAILED and CANCELED ones by one statement
// (a per-instance `if` can skip thousands), the SUCCEEDED one of an empty
// fan-out through RUNNING, as move does.
func (adv *advance) endNew(ctx context.Context, name string, plans []*planned) error {
	var ends []*store.StepTransitionParams
	for _, p := range plans {
		st := adv.instance(name, p.index)
		if st == nil {
			return fmt.Errorf("release step %s: not inserted", store.InstanceID(adv.run.ID, name, p.index))
		}
		if p.state == flow.StepSucceeded || st.State != flow.StepPending {
			if err := adv.move(ctx, st, p, uuid.Nil); err != nil {
				return err
			}
			continue
		}
		ends = append(ends, &store.StepTransitionParams{RunID: st.RunID, Step: st.Step, Index: st.Index, Generation: st.Generation,
			From: st.State, To: p.state, Output: p.output, Error: p.err, Now: adv.now})
	}
	if len(ends) == 0 {
		return nil
	}
	got, err := adv.tx.StepTransitionMany(ctx, &store.StepTransitionManyParams{Transitions: ends, Now: adv.now})
	if err != nil {
		return err
	}
	if len(got) != len(ends) {
		// The run is locked and its instances were inserted in this
		// transaction: this cannot happen, and must not commit.
		return fmt.Errorf("release step %q of run %s: %d of %d instances ended under the run lock", name, adv.run.ID, len(got), len(ends))
	}
	for _, st := range got {
		adv.set(st)
	}
	return nil
}

// reset moves a done instance back to PENDING, a new generation, and
// returns it as it is then.
func (adv *advance) reset(ctx context.Context, st *flow.StepInstance) (*flow.StepInstance, error) {
	if adv.batch != nil {
		// Its end may be one the batch holds (recordJobEnds): written
		// first, so that the change from it finds it.
		if err := adv.batch.flush(ctx, adv.tx, adv.now); err != nil {
			return nil, err
		}
	}
	ok, err := adv.transition(ctx, st, flow.StepPending, store.StepTransitionParams{})
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("release step %s: refused %s -> %s", store.InstanceID(st.RunID, st.Step, st.Index), st.State, flow.StepPending)
	}
	return adv.instance(st.Step, st.Index), nil
}

// timeoutAt is when a wait of signal step s released now times out: the
// sweeper finds it by this time (store.StepSignalsWaiting). Zero for a
// step of another kind or without a timeout. timeOutSignals decides by
// the definition, with the same result.
func (adv *advance) timeoutAt(s *flow.Step) time.Time {
	if s == nil || s.Signal == nil || s.Signal.Timeout == "" {
		return time.Time{}
	}
	d, err := s.Signal.Timeout.Parse()
	if err != nil || d <= 0 {
		return time.Time{}
	}
	return adv.now.Add(d)
}

// batchable: every plan is a new instance released RUNNING, which the
// start batch can write later (nothing else in this advancement writes
// that row again).
func (adv *advance) batchable(name string, plans []*planned) bool {
	for _, p := range plans {
		if p.state != flow.StepRunning || adv.instance(name, p.index) != nil {
			return false
		}
	}
	return true
}

// move brings an existing PENDING instance (or one just inserted) to its
// planned state; SUCCEEDED goes through RUNNING, as the state machine
// wants.
func (adv *advance) move(ctx context.Context, st *flow.StepInstance, p *planned, jobID uuid.UUID) error {
	if st.State.Done() {
		// An instance of the generation before a retry whose job was
		// still running when the run was retried (see Retry): it ended
		// since, and runs again with the step's other instances.
		var err error
		if st, err = adv.reset(ctx, st); err != nil {
			return err
		}
	}
	if st.State != flow.StepPending && !(st.State == flow.StepRunning && p.state == flow.StepSucceeded) {
		return fmt.Errorf("release step %s: it is %s, not PENDING", store.InstanceID(st.RunID, st.Step, st.Index), st.State)
	}
	if p.state == flow.StepSucceeded && st.State == flow.StepPending {
		if _, err := adv.transition(ctx, st, flow.StepRunning, store.StepTransitionParams{}); err != nil {
			return err
		}
		st = adv.instance(st.Step, st.Index)
	}
	params := store.StepTransitionParams{JobID: jobID, UnitID: p.unitID, Output: p.output, Error: p.err,
		TimeoutAt: adv.timeoutAt(adv.c.g.Step(st.Step))}
	if p.state != flow.StepRunning {
		params.JobID, params.UnitID, params.TimeoutAt = uuid.Nil, uuid.Nil, time.Time{}
	}
	ok, err := adv.transition(ctx, st, p.state, params)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("release step %s: refused %s -> %s", store.InstanceID(st.RunID, st.Step, st.Index), st.State, p.state)
	}
	return nil
}
