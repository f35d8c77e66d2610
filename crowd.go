package docket

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/flow"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/task"
)

// Human work: task templates, pools of units, contributors, assignments
// (leases of unit slots) and judgments. docs/human-work.md is the
// reference. The value types are those of the internal crowd and task
// packages, re-exported so that the store, the API and Go programs share
// them.
type (
	// TaskTemplate is a task template as PUT /v1/tasks/{name} takes it.
	TaskTemplate = task.Template
	// TaskField is one answer field of a template.
	TaskField = task.Field
	// TaskDisplay is one display block of a template.
	TaskDisplay = task.Display
	// TaskValidationError lists every problem of a template, a judgment
	// or a golden answer, each with its JSON path.
	TaskValidationError = task.ValidationError
	// CompiledTask is a validated template with its defaults, its JSON
	// Schema and the validators of judgments.
	CompiledTask = task.Compiled
	// Pool is the units of one human step of one workflow version.
	Pool = crowd.Pool
	// PoolStatus is OPEN, PAUSED, CLOSED or COMPLETED.
	PoolStatus = crowd.PoolStatus
	// PoolCounts are a pool's exact counters.
	PoolCounts = crowd.PoolCounts
	// Unit is one item of work of a pool.
	Unit = crowd.Unit
	// UnitState is the state of a unit.
	UnitState = crowd.UnitState
	// Contributor is a person (or a simulated one) who does human work.
	Contributor = crowd.Contributor
	// ContributorState is active, flagged or banned.
	ContributorState = crowd.ContributorState
	// Assignment is the lease of one slot of a unit to one contributor.
	Assignment = crowd.Assignment
	// AssignmentState is ACTIVE, SUBMITTED, EXPIRED or RELEASED.
	AssignmentState = crowd.AssignmentState
	// Judgment is one contributor's answer for one unit.
	Judgment = crowd.Judgment
	// CrowdValidationError lists every invalid parameter of a crowd call.
	CrowdValidationError = crowd.ValidationError
	// AssignmentError is a refused change of an assignment: the caller no
	// longer holds it (expired, submitted, released or another's).
	AssignmentError = crowd.AssignmentError
	// JudgmentConflictError: the assignment has a judgment with other data.
	JudgmentConflictError = crowd.JudgmentConflictError
	// PoolNotOpenError: the pool hands out no assignment (paused, closed).
	PoolNotOpenError = crowd.PoolNotOpenError
	// NotEligibleError: the contributor may not work on the pool.
	NotEligibleError = crowd.NotEligibleError
	// CrowdTransitionError is a refused state change of a pool or a unit.
	CrowdTransitionError = crowd.InvalidTransitionError
)

// Why an AssignmentError refused a change (its Reason).
const (
	// RefusedExpired: the assignment's lease ran out.
	RefusedExpired = crowd.RefusedExpired
	// RefusedNotActive: the assignment was submitted or released.
	RefusedNotActive = crowd.RefusedNotActive
	// RefusedNotOwner: the assignment is another contributor's.
	RefusedNotOwner = crowd.RefusedNotOwner
	// RefusedUnitCanceled: a judgment came through an assignment whose
	// unit was CANCELED; it is not stored.
	RefusedUnitCanceled = crowd.RefusedUnitCanceled
)

// Pool statuses, unit states, contributor and assignment states.
const (
	PoolOpen      = crowd.PoolOpen
	PoolPaused    = crowd.PoolPaused
	PoolClosed    = crowd.PoolClosed
	PoolCompleted = crowd.PoolCompleted

	UnitNew       = crowd.UnitNew
	UnitJudgable  = crowd.UnitJudgable
	UnitPaused    = crowd.UnitPaused
	UnitFinalized = crowd.UnitFinalized
	UnitCanceled  = crowd.UnitCanceled

	ContributorActive  = crowd.ContributorActive
	ContributorFlagged = crowd.ContributorFlagged
	ContributorBanned  = crowd.ContributorBanned

	AssignmentActive    = crowd.AssignmentActive
	AssignmentSubmitted = crowd.AssignmentSubmitted
	AssignmentExpired   = crowd.AssignmentExpired
	AssignmentReleased  = crowd.AssignmentReleased
)

// ErrNoUnit: the pool has no unit this contributor may take now.
var ErrNoUnit = crowd.ErrNoUnit

// ParseTask decodes and validates a template from its JSON form; the error
// is a *TaskValidationError naming every bad field.
func ParseTask(data []byte) (*TaskTemplate, error) { return task.Parse(data) }

// TaskVersion is one stored version of a task template.
type TaskVersion struct {
	Name    string
	Version int
	// Hash is the content hash of the template ("sha256:…").
	Hash string
	// Template is the template in canonical form (defaults filled in).
	Template  *TaskTemplate
	CreatedAt time.Time
}

// ---- Tasks ----

// TaskPut stores t as the latest version of the task name: created is
// false (and nothing is written) when its content is the latest
// version's. An invalid template is a *TaskValidationError.
func (c *Client) TaskPut(ctx context.Context, name string, t *TaskTemplate) (v *TaskVersion, created bool, err error) {
	if msg := checkTaskName(name); msg != "" {
		return nil, false, &TaskValidationError{Subject: "task template", Errors: []task.FieldError{{Field: "name", Message: msg}}}
	}
	compiled, err := task.Compile(t)
	if err := checkTaskQuality(t, err); err != nil {
		return nil, false, err
	}
	canon, err := task.Canonical(t)
	if err != nil {
		return nil, false, fmt.Errorf("put task %q: %w", name, err)
	}
	stored, created, err := c.store.TaskPut(ctx, &store.TaskPutParams{Name: name, Definition: canon, Hash: compiled.Hash, Now: c.cfg.Now()})
	if err != nil {
		return nil, false, err
	}
	v, err = taskVersionOf(stored)
	return v, created, err
}

// checkTaskName says what is wrong with a task name, "" when nothing: the
// rule of a workflow's human step naming it (flow.CheckWorkflowName), so
// that every task stored can be named by a step.
func checkTaskName(name string) string { return flow.CheckWorkflowName(name) }

// TaskGet reads version of the task name; 0 reads the latest. ErrNotFound
// when there is none.
func (c *Client) TaskGet(ctx context.Context, name string, version int) (*TaskVersion, error) {
	stored, err := c.store.TaskGet(ctx, &store.TaskGetParams{Name: name, Version: max(version, 0)})
	if err != nil {
		return nil, err
	}
	return taskVersionOf(stored)
}

// TaskListParams pages through TaskList.
type TaskListParams struct {
	After string // cursor: names strictly after it
	Limit int    // default 100, at most 1000
}

// TaskList lists the latest version of each task, by name.
func (c *Client) TaskList(ctx context.Context, p TaskListParams) ([]*TaskVersion, error) {
	rows, err := c.store.TaskList(ctx, &store.TaskListParams{AfterName: p.After, Limit: listLimit(p.Limit)})
	if err != nil {
		return nil, err
	}
	out := make([]*TaskVersion, len(rows))
	for i, row := range rows {
		if out[i], err = taskVersionOf(row); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func listLimit(n int) int {
	if n <= 0 {
		return 100
	}
	return min(n, 1000)
}

func taskVersionOf(v *crowd.TaskVersion) (*TaskVersion, error) {
	t, err := task.Decode(v.Definition)
	if err != nil {
		return nil, fmt.Errorf("task %q version %d: the stored template does not decode: %w", v.Name, v.Version, err)
	}
	return &TaskVersion{Name: v.Name, Version: v.Version, Hash: v.Hash, Template: task.Normalize(t), CreatedAt: v.CreatedAt}, nil
}

// compiledTasks caches compiled templates by name and version (a version
// never changes).
type compiledTasks struct {
	mu sync.Mutex
	m  map[taskVersionKey]*task.Compiled
}

// taskVersionKey names a task version (a map key built without
// formatting: the judgment and the take look one up every time).
type taskVersionKey struct {
	name    string
	version int
}

// CompiledTask returns the compiled version of the task name.
func (c *Client) CompiledTask(ctx context.Context, name string, version int) (*CompiledTask, error) {
	key := taskVersionKey{name: name, version: version}
	c.tasks.mu.Lock()
	ct, ok := c.tasks.m[key]
	c.tasks.mu.Unlock()
	if ok {
		return ct, nil
	}
	v, err := c.TaskGet(ctx, name, version)
	if err != nil {
		return nil, err
	}
	if ct, err = task.CompileStored(v.Template); err != nil {
		return nil, fmt.Errorf("task %q version %d: %w", name, version, err)
	}
	c.tasks.mu.Lock()
	c.tasks.m = bounded(c.tasks.m)
	c.tasks.m[key] = ct
	c.tasks.mu.Unlock()
	return ct, nil
}

// ---- Contributors ----

// ContributorCreateParams describes a new contributor.
type ContributorCreateParams struct {
	ExternalID string // the requester's id of the person; unique
	Name       string
	Skills     []string
	Channels   []string
}

// ContributorCreate records a contributor, active. An external id that
// exists is ErrDuplicate.
func (c *Client) ContributorCreate(ctx context.Context, p ContributorCreateParams) (*Contributor, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return nil, err
	}
	return c.store.ContributorCreate(ctx, &store.ContributorCreateParams{
		ID: id, ExternalID: p.ExternalID, Name: p.Name, Skills: p.Skills, Channels: p.Channels, Now: c.cfg.Now(),
	})
}

// ContributorGet reads a contributor; ErrNotFound when there is none.
func (c *Client) ContributorGet(ctx context.Context, id uuid.UUID) (*Contributor, error) {
	return c.store.ContributorGet(ctx, id)
}

// ContributorUpdateParams changes the fields that are not nil.
type ContributorUpdateParams struct {
	Name     *string
	Skills   *[]string
	Channels *[]string
	State    *ContributorState
}

// ContributorUpdate changes a contributor; ErrNotFound when there is none.
func (c *Client) ContributorUpdate(ctx context.Context, id uuid.UUID, p ContributorUpdateParams) (*Contributor, error) {
	return c.store.ContributorUpdate(ctx, &store.ContributorUpdateParams{
		ID: id, Name: p.Name, Skills: p.Skills, Channels: p.Channels, State: p.State, Now: c.cfg.Now(),
	})
}

// ContributorListParams pages through ContributorList, newest first.
type ContributorListParams struct {
	States []ContributorState
	Before uuid.UUID // cursor: ids strictly less
	Limit  int       // default 100, at most 1000
}

// ContributorList lists contributors newest first.
func (c *Client) ContributorList(ctx context.Context, p ContributorListParams) ([]*Contributor, error) {
	return c.store.ContributorList(ctx, &store.ContributorListParams{States: p.States, BeforeID: p.Before, Limit: listLimit(p.Limit)})
}

// ContributorStates reads the states of the contributors ids in one
// query; one that does not exist is absent from the map. It is how a
// server refreshes what it remembers of many contributors at once.
func (c *Client) ContributorStates(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID]ContributorState, error) {
	return c.store.ContributorStates(ctx, ids)
}

// ---- Pools and units ----

// PoolEnsure returns the pool of step of the workflow version, creating it
// OPEN (created = true) from the latest version of the task named task:
// its priority, skills, channels, judgments per unit (the template's min)
// and assignment duration. Idempotent: one pool per workflow version and
// step. The workflow runtime calls it when a run first reaches a human
// step.
func (c *Client) PoolEnsure(ctx context.Context, workflow string, version int, step, taskName string) (p *Pool, created bool, err error) {
	tv, err := c.TaskGet(ctx, taskName, 0)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil, false, &CrowdValidationError{What: "ensure pool", Errors: []crowd.FieldError{{Field: "task", Message: fmt.Sprintf("no task %q", taskName)}}}
		}
		return nil, false, err
	}
	t := tv.Template
	id, err := uuid.NewV7()
	if err != nil {
		return nil, false, err
	}
	prio := task.PriorityDefault
	if t.Priority != nil {
		prio = *t.Priority
	}
	return c.store.PoolCreate(ctx, &store.PoolCreateParams{
		ID: id, Workflow: workflow, WorkflowVersion: version, Step: step, Task: tv.Name, TaskVersion: tv.Version,
		Priority: prio, Skills: t.Skills, Channels: t.Channels, JudgmentsPerUnit: max(t.JudgmentsPerUnit.Min, 1),
		AssignmentSeconds: max(t.AssignmentSeconds, 1), Settings: t.Quality, Now: c.cfg.Now(),
	})
}

// PoolGet reads a pool with its counters; ErrNotFound when there is none.
func (c *Client) PoolGet(ctx context.Context, id uuid.UUID) (*Pool, error) {
	return c.store.PoolGet(ctx, id)
}

// PoolListParams filters PoolList; empty values filter nothing.
type PoolListParams struct {
	Workflow string
	Step     string
	Statuses []PoolStatus
	Before   uuid.UUID // cursor: ids strictly less
	Limit    int       // default 100, at most 1000
}

// PoolList lists pools newest first.
func (c *Client) PoolList(ctx context.Context, p PoolListParams) ([]*Pool, error) {
	return c.store.PoolList(ctx, &store.PoolListParams{Workflow: p.Workflow, Step: p.Step, Statuses: p.Statuses, BeforeID: p.Before, Limit: listLimit(p.Limit)})
}

// PoolPause, PoolResume and PoolClose change a pool's status: OPEN →
// PAUSED, PAUSED → OPEN, OPEN or PAUSED → CLOSED. A pool in another status
// is a *CrowdTransitionError.
func (c *Client) PoolPause(ctx context.Context, id uuid.UUID) (*Pool, error) {
	return c.poolMove(ctx, id, PoolPaused, PoolOpen)
}

// PoolResume moves a PAUSED pool back to OPEN.
func (c *Client) PoolResume(ctx context.Context, id uuid.UUID) (*Pool, error) {
	return c.poolMove(ctx, id, PoolOpen, PoolPaused)
}

// PoolClose closes an OPEN or PAUSED pool: no unit is added and no
// assignment handed out any more. Its open regular units end
// (crowd_close.go): at once those no live assignment holds (up to
// PoolCloseEndMax; any more from the pool-completer's next round), the
// others once their assignments ended, within the pool-completer's
// interval (PoolsComplete) — FINALIZED with the judgments they have
// when those reach the pool's judgments per unit, CANCELED otherwise
// (their human steps fail). A pool with no open unit
// left is COMPLETED at once; any other is COMPLETED when its last unit
// is final (PoolsComplete). Closing a CLOSED pool again ends what it can
// end now.
func (c *Client) PoolClose(ctx context.Context, id uuid.UUID) (*Pool, error) {
	p, err := c.poolMove(ctx, id, PoolClosed, PoolOpen, PoolPaused)
	if err != nil || p.Status != PoolClosed {
		return p, err
	}
	if p.Counts.Open() > 0 {
		if _, err := c.poolEndUnits(ctx, id, PoolCloseEndMax); err != nil {
			return nil, fmt.Errorf("close pool %s: %w", id, err)
		}
	}
	if _, err := c.store.PoolCompleteMany(ctx, &store.PoolCompleteManyParams{PoolID: id, Max: 1, Now: c.cfg.Now()}); err != nil {
		return nil, err
	}
	// Read it again: completed here, or by the leader's pool-completer
	// meanwhile.
	return c.store.PoolGet(ctx, id)
}

func (c *Client) poolMove(ctx context.Context, id uuid.UUID, to PoolStatus, from ...PoolStatus) (*Pool, error) {
	p, err := c.store.PoolGet(ctx, id)
	if err != nil {
		return nil, err
	}
	if p.Status == to {
		return p, nil // pausing a paused pool is done already
	}
	ok := false
	for _, f := range from {
		ok = ok || f == p.Status
	}
	if !ok {
		return nil, &CrowdTransitionError{Of: "pool", ID: id.String(), From: string(p.Status), To: string(to)}
	}
	moved, err := c.store.PoolTransition(ctx, &store.PoolTransitionParams{ID: id, From: p.Status, To: to, Now: c.cfg.Now()})
	var ite *crowd.InvalidTransitionError
	if errors.As(err, &ite) {
		// Another call (another node) moved it since the read: done
		// already when it is where this one would move it (or, closed,
		// completed since).
		cur, gerr := c.store.PoolGet(ctx, id)
		if gerr == nil && (cur.Status == to || to == PoolClosed && cur.Status == PoolCompleted) {
			return cur, nil
		}
	}
	return moved, err
}

// UnitsAdd adds regular units with these inputs (JSON objects) to a pool,
// JUDGABLE, and returns them in order. The workflow runtime adds units
// through its own transaction; this is for tests, tools and imports.
func (c *Client) UnitsAdd(ctx context.Context, poolID uuid.UUID, inputs []json.RawMessage) ([]*Unit, error) {
	units := make([]*store.UnitInsertParams, len(inputs))
	for i, in := range inputs {
		id, err := uuid.NewV7()
		if err != nil {
			return nil, err
		}
		units[i] = &store.UnitInsertParams{ID: id, Input: in}
	}
	return c.store.UnitInsertMany(ctx, &store.UnitInsertManyParams{PoolID: poolID, State: UnitJudgable, Units: units, Now: c.cfg.Now()})
}

// GoldenUnit is a unit with a known answer (a test question).
type GoldenUnit struct {
	Input  json.RawMessage
	Answer json.RawMessage // shaped like a judgment of the pool's task
	// Feedback explains the answer to a contributor who answered the test
	// question (plain text, at most GoldenFeedbackMaxLength characters;
	// optional), when the pool's testFeedback is "answer".
	Feedback string
}

// GoldenAdd adds golden units to a pool. Every answer is validated against
// the pool's task (TaskValidationError-style problems, named
// units[i].answer.<field>, in one *CrowdValidationError, with every
// explanation too long or not text, named units[i].feedback); nothing is
// added when one is invalid.
func (c *Client) GoldenAdd(ctx context.Context, poolID uuid.UUID, golden []GoldenUnit) ([]*Unit, error) {
	units, err := c.goldenUnits(ctx, poolID, golden)
	if err != nil {
		return nil, err
	}
	out, err := c.store.UnitInsertMany(ctx, &store.UnitInsertManyParams{PoolID: poolID, State: UnitJudgable, Units: units, Now: c.cfg.Now()})
	if err == nil && len(out) > 0 {
		c.golden.set(poolID, true) // test questions from the next take on
	}
	return out, err
}

// GoldenCheck validates golden units as GoldenAdd does — every answer
// against the pool's task, every explanation — and adds none: nil when
// GoldenAdd would find nothing wrong with them (the store may still
// refuse an input), a *CrowdValidationError naming each problem when it
// would. It lets a caller that found other problems with a request name
// these too.
func (c *Client) GoldenCheck(ctx context.Context, poolID uuid.UUID, golden []GoldenUnit) error {
	_, err := c.goldenUnits(ctx, poolID, golden)
	return err
}

// goldenUnits validates golden units for poolID and makes their inserts.
func (c *Client) goldenUnits(ctx context.Context, poolID uuid.UUID, golden []GoldenUnit) ([]*store.UnitInsertParams, error) {
	pool, err := c.store.PoolGet(ctx, poolID)
	if err != nil {
		return nil, err
	}
	ct, err := c.CompiledTask(ctx, pool.Task, pool.TaskVersion)
	if err != nil {
		return nil, err
	}
	pr := crowd.NewProblems("add golden units")
	units := make([]*store.UnitInsertParams, len(golden))
	for i, g := range golden {
		f := fmt.Sprintf("units[%d]", i)
		if _, err := ct.ParseAnswer(g.Answer); err != nil {
			var ve *task.ValidationError
			if !errors.As(err, &ve) {
				return nil, err
			}
			for _, fe := range ve.Errors {
				field := f + ".answer"
				if fe.Field != "" {
					field += "." + fe.Field
				}
				pr.Add(field, "%s", fe.Message)
			}
		}
		if msg := GoldenFeedbackProblem(g.Feedback); msg != "" {
			pr.Add(f+".feedback", "%s", msg)
		}
		id, err := uuid.NewV7()
		if err != nil {
			return nil, err
		}
		units[i] = &store.UnitInsertParams{ID: id, Input: g.Input, Golden: true, Answer: g.Answer, Feedback: g.Feedback}
	}
	if err := pr.Err(); err != nil {
		return nil, err
	}
	return units, nil
}

// UnitGet reads a unit; ErrNotFound when there is none.
func (c *Client) UnitGet(ctx context.Context, id uuid.UUID) (*Unit, error) {
	u, err := c.store.UnitGet(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := c.markLowConfidence(ctx, u.PoolID, u); err != nil {
		return nil, err
	}
	return u, nil
}

// markLowConfidence sets Unit.LowConfidence on units of one pool: a
// FINALIZED unit whose confidence is under the target confidence of the
// pool's task (0, no target: never).
func (c *Client) markLowConfidence(ctx context.Context, poolID uuid.UUID, units ...*Unit) error {
	target := -1.0 // not read yet
	for _, u := range units {
		if u.State != UnitFinalized || u.Confidence == nil {
			continue
		}
		if target < 0 {
			pool, err := c.poolSettings(ctx, poolID)
			if err != nil {
				return err
			}
			ct, err := c.CompiledTask(ctx, pool.Task, pool.TaskVersion)
			if err != nil {
				return err
			}
			target = ct.Template.JudgmentsPerUnit.TargetConfidence
		}
		u.LowConfidence = *u.Confidence < target
	}
	return nil
}

// UnitListParams filters UnitList.
type UnitListParams struct {
	States []UnitState
	Golden *bool     // nil: both
	RunID  uuid.UUID // uuid.Nil: any
	Before uuid.UUID // cursor: ids strictly less
	Limit  int       // default 100, at most 1000; -1: no limit (exports)
}

// UnitList lists the units of a pool newest first.
func (c *Client) UnitList(ctx context.Context, poolID uuid.UUID, p UnitListParams) ([]*Unit, error) {
	limit := listLimit(p.Limit)
	if p.Limit < 0 {
		limit = 0
	}
	units, err := c.store.UnitList(ctx, &store.UnitListParams{PoolID: poolID, States: p.States, Golden: p.Golden, RunID: p.RunID, BeforeID: p.Before, Limit: limit})
	if err != nil {
		return nil, err
	}
	if err := c.markLowConfidence(ctx, poolID, units...); err != nil {
		return nil, err
	}
	return units, nil
}

// JudgmentList lists the judgments of a unit, newest first.
func (c *Client) JudgmentList(ctx context.Context, unitID uuid.UUID) ([]*Judgment, error) {
	return c.store.JudgmentList(ctx, &store.JudgmentListParams{UnitID: unitID})
}
