package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/flow"
	"github.com/docket-run/docket/internal/job"
)

// FlowTx is the part of FlowStore that runs in a caller's transaction (Tx)
// as well as on its own: what advancing a run needs, so that "a job
// finished, its step succeeded and the next steps were released" is one
// transaction.
//
// Refused state changes are *flow.InvalidTransitionError (nothing read when
// the state machine has no such change; when the row was not in the
// expected state or generation, its id set and From the state it was
// found in); a missing row is ErrNotFound.
type FlowTx interface {
	// WorkflowGet reads one version of a workflow definition, the latest
	// when p.Version is 0; ErrNotFound when there is none.
	WorkflowGet(ctx context.Context, p *WorkflowGetParams) (*flow.Version, error)

	// RunInsertMany inserts runs in one transaction, each RUNNING. A run
	// whose (workflow, idempotency key) exists already, in the table or
	// earlier in the batch, is not inserted: its result carries the
	// existing run and Duplicate = true. Results are in the order of
	// p.Runs. The workflow version of each run must exist. One
	// run.state_changed outbox row lists the runs inserted (none when
	// every run was a duplicate).
	RunInsertMany(ctx context.Context, p *RunInsertManyParams) ([]*RunInsertResult, error)
	// RunGet reads one run; ErrNotFound when there is none.
	RunGet(ctx context.Context, id uuid.UUID) (*flow.Run, error)
	// RunLock reads one run and locks it until the transaction ends, so
	// that the advancements of one run (on any node) happen one after the
	// other. Outside InTx the lock ends with the call, which makes it
	// RunGet. ErrNotFound when there is no such run.
	RunLock(ctx context.Context, id uuid.UUID) (*flow.Run, error)
	// RunTransition makes one state change of a run, guarded by state =
	// p.From, and writes its run.state_changed outbox row. Entering a
	// terminal state sets finished_at (and the output for SUCCEEDED, the
	// error for FAILED and CANCELED); FAILED → RUNNING (retry) clears them.
	RunTransition(ctx context.Context, p *RunTransitionParams) (*flow.Run, error)
	// RunCancelRequest records that a RUNNING or PAUSED run is being
	// canceled (flow.Run.CancelRequested); a run that has the request is
	// returned as it is. *flow.InvalidTransitionError for a finished run
	// (To CANCELED), ErrNotFound when there is none. It is not a state
	// change: no outbox row.
	RunCancelRequest(ctx context.Context, p *RunCancelRequestParams) (*flow.Run, error)

	// StepInsertMany creates step instances in one transaction, PENDING or
	// directly RUNNING (released, with their job or unit id). An instance
	// whose (run, step, index) exists, in the table or earlier in the
	// batch, is not inserted again: its result carries the existing row and
	// Duplicate = true. This unique key is what makes a release happen once:
	// the caller creates the job or unit of an instance only when its
	// insert was not a duplicate. One step.state_changed outbox row lists
	// the instances inserted.
	StepInsertMany(ctx context.Context, p *StepInsertManyParams) ([]*StepInsertResult, error)
	// StepList lists every instance of a run, ordered by step name, then
	// index. Ordering by the DAG is the caller's (flow.Graph.Order). An
	// unknown run has none.
	StepList(ctx context.Context, runID uuid.UUID) ([]*flow.StepInstance, error)
	// StepGetByJob reads the step instance a job currently belongs to;
	// ErrNotFound when none does (a plain job, or the job of an instance
	// that was reset by a retry since).
	StepGetByJob(ctx context.Context, jobID uuid.UUID) (*flow.StepInstance, error)
	// StepGetByUnit is StepGetByJob for a human step's unit.
	StepGetByUnit(ctx context.Context, unitID uuid.UUID) (*flow.StepInstance, error)
	// StepTransition makes one state change of a step instance, guarded by
	// state = p.From and generation = p.Generation, and writes its
	// step.state_changed outbox row. See StepTransitionParams for what
	// each change sets.
	StepTransition(ctx context.Context, p *StepTransitionParams) (*flow.StepInstance, error)
	// StepTransitionMany makes many changes of step instances to an ended
	// state (SUCCEEDED, FAILED, SKIPPED, CANCELED), each as StepTransition
	// would (guarded by From and Generation), in one statement, with one
	// step.state_changed outbox row listing them (none when none was
	// made). It returns the instances changed, in no particular order: a
	// change whose guard did not hold is left out, for the caller to
	// notice. A change to another state is an error, nothing changed.
	StepTransitionMany(ctx context.Context, p *StepTransitionManyParams) ([]*flow.StepInstance, error)
	// StepJobEnds lists the RUNNING job step instances of a run whose job
	// has ended (SUCCESS, DEAD or CANCELED), with that end, ordered by step
	// name, then index: what an advancement of the run records. One query
	// however many instances run.
	StepJobEnds(ctx context.Context, runID uuid.UUID) ([]*StepJobEnd, error)
	// RunLoadMany locks the runs ids, in id order (so that two callers
	// locking overlapping sets never deadlock), and reads, for each, its
	// step instances (as StepList) and the ends of its step jobs (as
	// StepJobEnds): what advancing many runs together needs, in three
	// statements however many runs. Results are in id order; unknown ids
	// are left out. Outside InTx the locks end with the call.
	RunLoadMany(ctx context.Context, ids []uuid.UUID) ([]*RunLoad, error)
	// StepUnitEnds is StepJobEnds for human steps: the RUNNING human step
	// instances of a run whose unit has ended (FINALIZED or CANCELED),
	// with the unit's result and confidence, ordered by step name, then
	// index. One query however many instances run.
	StepUnitEnds(ctx context.Context, runID uuid.UUID) ([]*StepUnitEnd, error)
}

// RunLoad is one run as RunLoadMany reads it.
type RunLoad struct {
	Run     *flow.Run
	Steps   []*flow.StepInstance
	JobEnds []*StepJobEnd
}

// FlowStore is the workflows domain: definitions and their versions, runs,
// and the instances of their steps.
type FlowStore interface {
	FlowTx

	// WorkflowPut stores a definition. When p.Hash equals the hash of the
	// workflow's latest version, nothing is written and that version is
	// returned with Created = false; otherwise a new version (latest + 1,
	// 1 for a new workflow) is stored. Puts of one name are serialised, so
	// concurrent puts of the same content make one version and versions
	// have no gaps. Storing again the content of an older version makes a
	// new version: only the latest counts.
	WorkflowPut(ctx context.Context, p *WorkflowPutParams) (v *flow.Version, created bool, err error)
	// WorkflowList lists the latest version of each workflow, by name,
	// from the first name after p.AfterName.
	WorkflowList(ctx context.Context, p *WorkflowListParams) ([]*flow.Version, error)
	// RunList lists runs newest first (id descending), filtered.
	RunList(ctx context.Context, p *RunListParams) ([]*flow.Run, error)

	// StepRunsToAdvance lists up to p.Limit runs (distinct, in no order)
	// that have a RUNNING job step instance whose job has ended, or a
	// RUNNING human step instance whose unit has ended (FINALIZED or
	// CANCELED): the runs an advancement missed (a process died between a
	// job's completion and the advancement it triggers). The workflow
	// sweeper advances them.
	StepRunsToAdvance(ctx context.Context, p *StepRunsToAdvanceParams) ([]uuid.UUID, error)
	// StepSignalsWaiting lists up to p.Limit RUNNING signal step instances
	// whose TimeoutAt (set at release) is at or before p.TimedOutBy,
	// earliest first, with their run's workflow version: the sweeper times
	// them out by their definition. An indexed range query: waits without
	// a timeout, or with a later one, are not read.
	StepSignalsWaiting(ctx context.Context, p *StepSignalsWaitingParams) ([]*SignalWait, error)
}

// StepJobEnd is a RUNNING job step instance whose job has ended.
type StepJobEnd struct {
	RunID      uuid.UUID
	Step       string
	Index      int
	Generation int
	JobID      uuid.UUID
	JobState   job.State       // SUCCESS, DEAD or CANCELED
	Result     json.RawMessage // the job's result; nil for none
	Error      string          // the job's last error
}

// StepUnitEnd is a RUNNING human step instance whose unit has ended.
type StepUnitEnd struct {
	Step       string
	Index      int
	Generation int
	UnitID     uuid.UUID
	UnitState  crowd.UnitState
	Result     json.RawMessage // FINALIZED: the aggregated result
	Confidence *float64        // FINALIZED: its confidence, when the method gives one
}

// StepRunsToAdvanceParams: at most Limit runs (non-positive: no limit).
type StepRunsToAdvanceParams struct {
	// After pages the list: only runs whose id sorts after it (the list is
	// in id order; uuid.Nil: from the start).
	After uuid.UUID
	Limit int
}

// StepSignalsWaitingParams: at most Limit instances whose timeout is at
// or before TimedOutBy (non-positive Limit: no limit).
type StepSignalsWaitingParams struct {
	TimedOutBy time.Time
	Limit      int
}

// SignalWait is a RUNNING signal step instance.
type SignalWait struct {
	RunID      uuid.UUID
	Workflow   string
	Version    int
	Step       string
	Index      int
	Generation int
	StartedAt  time.Time
	TimeoutAt  time.Time
}

// WorkflowPutParams stores a definition.
type WorkflowPutParams struct {
	Name       string
	Definition json.RawMessage // canonical JSON (flow.Canonical)
	Hash       string          // flow.Hash of the definition
	Now        time.Time
}

// WorkflowGetParams reads a version; Version 0 means the latest.
type WorkflowGetParams struct {
	Name    string
	Version int
}

// Validate refuses a name that is not text (checkText).
func (p *WorkflowGetParams) Validate() error {
	pr := problemsOf("get workflow")
	checkText(pr, "name", p.Name)
	return pr.Err()
}

// WorkflowListParams pages through workflows by name.
type WorkflowListParams struct {
	AfterName string // cursor: only names strictly greater ("" = from the first)
	Limit     int    // non-positive: no limit
}

// Validate refuses a cursor that is not text (checkText).
func (p *WorkflowListParams) Validate() error {
	pr := problemsOf("list workflows")
	checkText(pr, "after", p.AfterName)
	return pr.Err()
}

// RunInsertParams describes one run to insert.
type RunInsertParams struct {
	ID       uuid.UUID // UUIDv7, made by the caller
	Workflow string
	Version  int             // must exist
	Input    json.RawMessage // valid JSON; never nil
	// IdempotencyKey is unique per workflow, across its versions; "" for
	// none.
	IdempotencyKey string
}

// RunInsertManyParams: insert these runs at Now.
type RunInsertManyParams struct {
	Runs []*RunInsertParams
	Now  time.Time
}

// RunInsertResult is the outcome for one run.
type RunInsertResult struct {
	Run       *flow.Run
	Duplicate bool // the idempotency key existed; Run is the existing run
}

// RunListParams filters RunList. Empty values filter nothing.
type RunListParams struct {
	Workflow      string
	States        []flow.RunState
	CreatedAfter  time.Time // created_at >= CreatedAfter
	CreatedBefore time.Time // created_at < CreatedBefore
	BeforeID      uuid.UUID // cursor: only ids strictly less (uuid.Nil = from the newest)
	Limit         int       // non-positive: no limit
}

// Validate refuses a workflow name that is not text (checkText).
func (p *RunListParams) Validate() error {
	pr := problemsOf("list runs")
	checkText(pr, "workflow", p.Workflow)
	return pr.Err()
}

// RunTransitionParams asks for one state change of a run.
type RunTransitionParams struct {
	ID       uuid.UUID
	From, To flow.RunState
	Output   json.RawMessage // to SUCCEEDED; nil for none
	Error    string          // to FAILED or CANCELED
	Now      time.Time
}

// Validate checks p by the run state machine before any row is read.
func (p *RunTransitionParams) Validate() error {
	if err := flow.CheckRunTransition(p.From, p.To); err != nil {
		return err
	}
	if p.To != flow.RunSucceeded && p.Output != nil {
		return fmt.Errorf("transition run %s to %s: only SUCCEEDED takes an output", p.ID, p.To)
	}
	return nil
}

// RunCancelRequestParams: the run ID is being canceled, at Now.
type RunCancelRequestParams struct {
	ID  uuid.UUID
	Now time.Time
}

// StepInsertParams describes one step instance to create.
type StepInsertParams struct {
	RunID uuid.UUID
	Step  string
	Index int
	Kind  flow.Kind
	// State is PENDING or RUNNING. RUNNING (released) takes JobID for a
	// job step, UnitID for a human step, neither for a signal step.
	State  flow.StepState
	JobID  uuid.UUID
	UnitID uuid.UUID
	// TimeoutAt, for a signal step released RUNNING with a timeout, is
	// when its wait times out (StepSignalsWaiting); zero for none.
	TimeoutAt time.Time
}

// StepInsertManyParams: create these instances at Now.
type StepInsertManyParams struct {
	Steps []*StepInsertParams
	Now   time.Time
}

// StepInsertResult is the outcome for one instance.
type StepInsertResult struct {
	Step      *flow.StepInstance
	Duplicate bool // (run, step, index) existed; Step is the existing row
}

// StepTransitionParams asks for one state change of a step instance, in
// generation Generation. What it sets, by target state:
//
//   - RUNNING (released): started_at = Now, and JobID or UnitID.
//   - SUCCEEDED, FAILED, SKIPPED, CANCELED: finished_at = Now, Output,
//     Error and Confidence as given (nil and "" for none); the job and
//     unit ids are kept, so StepGetByJob still finds a finished instance.
//   - PENDING (reset by a retry): generation + 1, and every field of the
//     previous generation cleared (job, unit, output, error, confidence,
//     started, finished): the old job or unit no longer finds it.
type StepTransitionParams struct {
	RunID      uuid.UUID
	Step       string
	Index      int
	Generation int
	From, To   flow.StepState
	JobID      uuid.UUID // to RUNNING, job steps
	UnitID     uuid.UUID // to RUNNING, human steps
	TimeoutAt  time.Time // to RUNNING, signal steps with a timeout (see StepInsertParams)
	Output     json.RawMessage
	Error      string
	Confidence *float64
	Now        time.Time
}

// StepTransitionManyParams: these changes, each to an ended state. Now
// of each is ignored: every change is made at Now.
type StepTransitionManyParams struct {
	Transitions []*StepTransitionParams
	Now         time.Time
}

// Validate checks every change; the error names the first wrong one.
func (p *StepTransitionManyParams) Validate() error {
	for _, t := range p.Transitions {
		if err := t.Validate(); err != nil {
			return err
		}
		if !t.To.Done() {
			return fmt.Errorf("transition step %s to %s: StepTransitionMany makes only changes to an ended state", InstanceID(t.RunID, t.Step, t.Index), t.To)
		}
	}
	return nil
}

// Validate checks p by the step state machine before any row is read.
func (p *StepTransitionParams) Validate() error {
	if err := flow.CheckStepTransition(p.From, p.To); err != nil {
		return err
	}
	if p.To != flow.StepRunning && (p.JobID != uuid.Nil || p.UnitID != uuid.Nil) {
		return fmt.Errorf("transition step %s/%s[%d] to %s: a job or unit is set only on release", p.RunID, p.Step, p.Index, p.To)
	}
	if p.Generation < 1 {
		return fmt.Errorf("transition step %s/%s[%d]: generation must be at least 1", p.RunID, p.Step, p.Index)
	}
	return nil
}

// InstanceID names a step instance in errors: "<run>/<step>[<index>]".
func InstanceID(runID uuid.UUID, step string, index int) string {
	return fmt.Sprintf("%s/%s[%d]", runID, step, index)
}

// Validate checks one instance to create.
func (p *StepInsertParams) Validate() error {
	id := InstanceID(p.RunID, p.Step, p.Index)
	switch {
	case p.Step == "" || p.Index < 0:
		return fmt.Errorf("insert step %s: a step name and an index >= 0 are required", id)
	case p.Kind != flow.KindJob && p.Kind != flow.KindSignal && p.Kind != flow.KindHuman:
		return fmt.Errorf("insert step %s: unknown kind %q", id, p.Kind)
	case p.State != flow.StepPending && p.State != flow.StepRunning:
		return fmt.Errorf("insert step %s: state must be PENDING or RUNNING, not %q", id, p.State)
	case p.State == flow.StepPending && (p.JobID != uuid.Nil || p.UnitID != uuid.Nil):
		return fmt.Errorf("insert step %s: a PENDING instance has no job or unit", id)
	}
	return nil
}

// Validate checks one run to insert.
func (p *RunInsertParams) Validate() error {
	switch {
	case p.ID == uuid.Nil:
		return fmt.Errorf("insert run: no id")
	case p.Workflow == "" || p.Version < 1:
		return fmt.Errorf("insert run %s: a workflow and a version >= 1 are required", p.ID)
	case !json.Valid(p.Input):
		return fmt.Errorf("insert run %s: the input is not valid JSON", p.ID)
	}
	return nil
}
