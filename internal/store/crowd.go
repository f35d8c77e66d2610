package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/flow"
)

// CrowdTx is the part of CrowdStore that runs in a caller's transaction
// (Tx) as well as on its own: what releasing a human step (its units), the
// intake of a judgment and the finalization of a unit need, so that "a
// judgment is stored and its unit's counter moves" and "a unit is
// finalized and its step completes" are each one transaction.
//
// Every params type has a Validate that names each invalid field
// (*crowd.ValidationError) before anything is read. Refused state changes
// are *crowd.InvalidTransitionError; a missing row is ErrNotFound.
type CrowdTx interface {
	// TaskGet reads one version of a task template, the latest when
	// p.Version is 0; ErrNotFound when there is none.
	TaskGet(ctx context.Context, p *TaskGetParams) (*crowd.TaskVersion, error)

	// PoolCreate creates the pool of one step of one workflow version,
	// OPEN, or returns the one that exists with created = false (one pool
	// per workflow version and step, whatever the other fields say). The
	// workflow version and the task version must exist. A new pool writes
	// a pool.updated outbox row.
	PoolCreate(ctx context.Context, p *PoolCreateParams) (pool *crowd.Pool, created bool, err error)
	// PoolGet reads one pool with its counters; ErrNotFound when there is
	// none.
	PoolGet(ctx context.Context, id uuid.UUID) (*crowd.Pool, error)
	// PoolTransition changes a pool's status, guarded by status = p.From,
	// and writes a pool.updated outbox row. CLOSED → COMPLETED is refused
	// (*crowd.InvalidTransitionError with a Reason) while a regular unit is
	// NEW, JUDGABLE or PAUSED.
	PoolTransition(ctx context.Context, p *PoolTransitionParams) (*crowd.Pool, error)

	// UnitInsertMany inserts units into one pool in one transaction (COPY
	// on PostgreSQL for large batches), NEW or JUDGABLE, and counts them
	// on the pool. Units are not idempotent by themselves: releasing a
	// step happens once (StepInsertMany), and it creates the unit. The
	// result is in the order of p.Units.
	UnitInsertMany(ctx context.Context, p *UnitInsertManyParams) ([]*crowd.Unit, error)
	// UnitGet reads one unit; ErrNotFound when there is none.
	UnitGet(ctx context.Context, id uuid.UUID) (*crowd.Unit, error)
	// UnitTransition makes one state change of a unit by the unit state
	// machine, guarded by state = p.From, and moves the pool's counters.
	// FINALIZED is reached through UnitFinalize only; FINALIZED →
	// JUDGABLE (reopen) clears the result, and moves a COMPLETED pool
	// back to CLOSED (pool.updated), so that the close ends the unit
	// again (a reopened unit of a completed pool waited for ever: no
	// take, no end); a CLOSED pool is kept from completing until the
	// transaction ends. A reopen refused (the unit is not FINALIZED, or
	// is golden) changes nothing, its pool included, even in a
	// transaction that goes on. Locks: the unit, then its pool.
	UnitTransition(ctx context.Context, p *UnitTransitionParams) (*crowd.Unit, error)
	// UnitCancelMany withdraws many units at once (the units of a
	// canceled run's human fan-out) in one statement however many (on
	// PostgreSQL, one more for the few that change under it): each NEW,
	// JUDGABLE or PAUSED unit becomes CANCELED as UnitTransition moves
	// it (its assignments left as they are, no outbox row), and the
	// counters of each pool move once for all its regular units; a
	// FINALIZED or CANCELED unit, and an id with no unit, are left as
	// they are, without error. The result is aligned with p.IDs (an id
	// given twice gets the same result twice). Nothing is written for an
	// empty p.IDs.
	UnitCancelMany(ctx context.Context, p *UnitCancelManyParams) ([]UnitCancelManyResult, error)
	// UnitFinalize moves a regular JUDGABLE unit to FINALIZED with its
	// result and confidence, moves the pool's counters and writes a
	// unit.finalized outbox row.
	UnitFinalize(ctx context.Context, p *UnitFinalizeParams) (*crowd.Unit, error)
	// UnitRetarget sets the judgments per unit (the target the take
	// respects: slots_taken < judgments_per_unit) of a regular NEW,
	// JUDGABLE or PAUSED unit: dynamic overlap raises it by one to ask
	// for one more judgment. A golden or final unit is refused
	// (*crowd.InvalidTransitionError with a Reason); ErrNotFound when
	// there is no such unit. It writes no event.
	UnitRetarget(ctx context.Context, p *UnitRetargetParams) (*crowd.Unit, error)

	// ContributorGet reads one contributor; ErrNotFound when there is none.
	ContributorGet(ctx context.Context, id uuid.UUID) (*crowd.Contributor, error)
	// AssignmentGet reads one assignment; ErrNotFound when there is none.
	AssignmentGet(ctx context.Context, id uuid.UUID) (*crowd.Assignment, error)

	// JudgmentInsert stores a judgment through an assignment: the
	// assignment must be ACTIVE, p.ContributorID's and not expired at
	// p.Now (*crowd.AssignmentError otherwise); it becomes SUBMITTED, the
	// unit's judgment_count and the pool's counters move, and a
	// judgment.received outbox row is written. It is idempotent per
	// assignment: the same data again returns the stored judgment with
	// created = false and writes nothing; other data is a
	// *crowd.JudgmentConflictError. With a new judgment comes the unit as
	// the insert left it (its state, counts and run), so the caller
	// decides about finalization without reading it again.
	JudgmentInsert(ctx context.Context, p *JudgmentInsertParams) (*JudgmentInserted, error)
	// JudgmentList lists the judgments of a unit or of a pool, newest
	// first (id descending).
	JudgmentList(ctx context.Context, p *JudgmentListParams) ([]*crowd.Judgment, error)
}

// CrowdStore is the human work domain: task templates, pools of units,
// contributors, assignments (leases of unit slots) and judgments.
type CrowdStore interface {
	CrowdTx
	QualityStore
	QualityListStore
	PoolModelStore

	// TaskPut stores a task template: when p.Hash equals the hash of the
	// latest version nothing is written and that version is returned with
	// created = false; otherwise a new version (latest + 1) is stored.
	// Puts of one name are serialised, so versions have no gaps.
	TaskPut(ctx context.Context, p *TaskPutParams) (v *crowd.TaskVersion, created bool, err error)
	// TaskList lists the latest version of each task, by name.
	TaskList(ctx context.Context, p *TaskListParams) ([]*crowd.TaskVersion, error)

	// PoolList lists pools newest first (id descending), filtered.
	PoolList(ctx context.Context, p *PoolListParams) ([]*crowd.Pool, error)
	// PoolCompleteMany moves up to p.Max CLOSED pools whose regular units
	// are all final (FINALIZED or CANCELED) to COMPLETED, with a
	// pool.updated outbox row each, in one short transaction (pools
	// locked by another caller are skipped), and returns their ids, oldest
	// first. p.PoolID, when set, looks at that pool only.
	PoolCompleteMany(ctx context.Context, p *PoolCompleteManyParams) ([]uuid.UUID, error)
	// UnitListClosing lists, by id, up to p.Limit units that closing
	// their pool ends now: regular NEW, JUDGABLE or PAUSED units of CLOSED
	// pools (of p.PoolID only, when set) that no ACTIVE assignment holds,
	// with ids after p.After. One query; the caller ends each in a
	// transaction of its own (UnitLockClosing checks again under the
	// lock).
	UnitListClosing(ctx context.Context, p *UnitListClosingParams) ([]*UnitClosingRef, error)
	// UnitList lists the units of a pool newest first (id descending),
	// filtered.
	UnitList(ctx context.Context, p *UnitListParams) ([]*crowd.Unit, error)
	// JudgmentInTx is InTx for a judgment: the transaction first locks
	// p.ContributorID's quality state in p.PoolID (QualityStateLock,
	// creating it), then the run (p.RunID, or the run of unit
	// p.RunOfUnit when the caller does not know it; none when the unit has
	// none or the run is gone), then inserts the judgment (JudgmentInsert,
	// recording the locked state's trust: p.Insert.Trust is not used) —
	// the lock order of docs/quality.md — and runs fn with the locked
	// state and what the insert did (and, when it brought its unit to its
	// target, maybe the unit's judgments: JudgmentBegun.UnitJudgments). An
	// error of those statements rolls back and is returned before fn runs.
	// On PostgreSQL they go in the round trip that begins the transaction
	// (JudgmentBegin says what they do, one by one).
	JudgmentInTx(ctx context.Context, p *JudgmentInTxParams, fn func(ctx context.Context, tx Tx, begun *JudgmentBegun) error) error
	// UnitListAvailable lists up to p.Limit ids of regular units a take
	// could pick now (JUDGABLE with a free slot), from a random point of
	// their random keys, wrapping around: the one query that refills a
	// node's candidate cache (StrategyCandidates).
	UnitListAvailable(ctx context.Context, p *UnitListAvailableParams) ([]uuid.UUID, error)
	// PoolListEligible is "finding work": the OPEN pools p.ContributorID
	// may work on — every skill a pool requires among theirs, a channel in
	// common (or none required), the contributor active and not flagged
	// in the pool — that hold a regular unit a take could hand them now
	// (JUDGABLE, a free slot, never assigned to them), sorted by priority
	// (0 first), then age (oldest first), at most p.Limit, with their
	// counters. One query; on PostgreSQL the GIN indexes of the open pools'
	// skills and channels serve it. An unknown or inactive contributor
	// gets none.
	PoolListEligible(ctx context.Context, p *PoolListEligibleParams) ([]*crowd.Pool, error)

	// ContributorCreate records a contributor, active; an external id
	// that exists already is ErrDuplicate.
	ContributorCreate(ctx context.Context, p *ContributorCreateParams) (*crowd.Contributor, error)
	// ContributorGetByExternalID finds a contributor by the requester's
	// id; ErrNotFound when there is none.
	ContributorGetByExternalID(ctx context.Context, externalID string) (*crowd.Contributor, error)
	// ContributorUpdate changes the fields p sets; ErrNotFound when there
	// is no such contributor.
	ContributorUpdate(ctx context.Context, p *ContributorUpdateParams) (*crowd.Contributor, error)
	// ContributorList lists contributors newest first (id descending).
	ContributorList(ctx context.Context, p *ContributorListParams) ([]*crowd.Contributor, error)
	// ContributorStates reads the states of the contributors ids, in one
	// query: a contributor that does not exist is absent from the map.
	ContributorStates(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID]crowd.ContributorState, error)
	// PoolContributorGet reads what a pool knows of a contributor; a
	// contributor the pool has not met gets a zero row (not flagged, no
	// trust), not an error.
	PoolContributorGet(ctx context.Context, poolID, contributorID uuid.UUID) (*crowd.PoolContributor, error)
	// PoolContributorPut records trust and the flag of a contributor in a
	// pool (quality control).
	PoolContributorPut(ctx context.Context, p *PoolContributorPutParams) (*crowd.PoolContributor, error)

	// AssignmentTake leases one slot of an available unit of the pool to
	// the contributor, in one statement on PostgreSQL (find, lock SKIP
	// LOCKED, slots_taken + 1, insert the assignment) and one write
	// transaction on SQLite. A unit is available when it is JUDGABLE, has
	// a free slot (golden units always have one) and was never assigned
	// to this contributor; the database refuses a second assignment of
	// one unit to one contributor (UNIQUE), even after the first expired.
	// p.Golden takes golden units instead of regular ones.
	// crowd.ErrNoUnit when there is none; *crowd.PoolNotOpenError when the
	// pool is not OPEN; *crowd.NotEligibleError when the contributor is
	// not active, lacks a skill the pool requires or shares none of its
	// channels (crowd.SkillsMatch), or is flagged in the pool; ErrNotFound
	// when the pool or the contributor does not exist.
	AssignmentTake(ctx context.Context, p *AssignmentTakeParams) (*crowd.Taken, error)
	// AssignmentHeartbeat records that the contributor still works on the
	// assignment. Fenced: *crowd.AssignmentError when it is not ACTIVE,
	// not theirs, or expired at p.Now.
	AssignmentHeartbeat(ctx context.Context, p *AssignmentHeartbeatParams) (*crowd.Assignment, error)
	// AssignmentExtend moves the expiry to at least p.Now + p.Duration
	// (never earlier), fenced as AssignmentHeartbeat.
	AssignmentExtend(ctx context.Context, p *AssignmentExtendParams) (*crowd.Assignment, error)
	// AssignmentRelease gives the assignment back: RELEASED, its slot free
	// at once. Fenced as AssignmentHeartbeat, but an expired ACTIVE
	// assignment may still be released.
	AssignmentRelease(ctx context.Context, p *AssignmentReleaseParams) (*crowd.Assignment, error)
	// AssignmentExpire moves up to p.Max ACTIVE assignments whose lease
	// ran out before p.Now to EXPIRED, freeing their slots, in one short
	// transaction, and writes one assignment.expired outbox row. It waits
	// for no lock: an assignment, its unit or every counter row of its
	// pool held by another transaction leaves it for the next call (so
	// the reaper is in no deadlock). It returns how many; the reaper calls
	// it again until a batch expires none.
	AssignmentExpire(ctx context.Context, p *AssignmentExpireParams) (int, error)
}

// problemsOf starts a *crowd.Problems for the request what.
func problemsOf(what string) *crowd.Problems { return crowd.NewProblems(what) }

// ---- Tasks ----

// TaskPutParams stores a task template.
type TaskPutParams struct {
	Name       string
	Definition json.RawMessage // valid JSON
	Hash       string          // content hash of the definition
	Now        time.Time
}

// Validate names every invalid field.
func (p *TaskPutParams) Validate() error {
	pr := problemsOf("put task")
	pr.Check(p.Name == "", "name", "is required")
	pr.Check(!json.Valid(p.Definition), "definition", "must be valid JSON")
	pr.Check(p.Hash == "", "hash", "is required")
	pr.Check(p.Now.IsZero(), "now", "is required")
	return pr.Err()
}

// TaskGetParams reads a version; Version 0 means the latest.
type TaskGetParams struct {
	Name    string
	Version int
}

// Validate names every invalid field.
func (p *TaskGetParams) Validate() error {
	pr := problemsOf("get task")
	pr.Check(p.Name == "", "name", "is required")
	checkText(pr, "name", p.Name)
	pr.Check(p.Version < 0, "version", "must be 0 (the latest) or more")
	return pr.Err()
}

// TaskListParams pages through tasks by name.
type TaskListParams struct {
	AfterName string // cursor: only names strictly greater
	Limit     int    // non-positive: no limit
}

// Validate refuses a cursor that is not text (checkText).
func (p *TaskListParams) Validate() error {
	pr := problemsOf("list tasks")
	checkText(pr, "after", p.AfterName)
	return pr.Err()
}

// ---- Pools ----

// PoolCreateParams creates the pool of one step of one workflow version.
type PoolCreateParams struct {
	ID                uuid.UUID // UUIDv7, made by the caller
	Workflow          string
	WorkflowVersion   int
	Step              string
	Task              string
	TaskVersion       int
	Priority          int
	Skills            []string
	Channels          []string
	JudgmentsPerUnit  int
	AssignmentSeconds int
	Settings          json.RawMessage // nil for {}
	Now               time.Time
}

// Validate names every invalid field.
func (p *PoolCreateParams) Validate() error {
	pr := problemsOf("create pool")
	pr.Check(p.ID == uuid.Nil, "poolId", "is required")
	pr.Check(p.Workflow == "", "workflow", "is required")
	pr.Check(p.WorkflowVersion < 1, "workflowVersion", "must be at least 1")
	pr.Check(p.Step == "", "step", "is required")
	pr.Check(p.Task == "", "task", "is required")
	pr.Check(p.TaskVersion < 1, "taskVersion", "must be at least 1")
	checkNames(pr, "skills", p.Skills)
	checkNames(pr, "channels", p.Channels)
	pr.Check(p.JudgmentsPerUnit < 1, "judgmentsPerUnit", "must be at least 1")
	pr.Check(p.AssignmentSeconds < 1, "assignmentSeconds", "must be at least 1")
	if p.Settings != nil {
		checkJSON(pr, "settings", p.Settings)
	}
	pr.Check(p.Now.IsZero(), "now", "is required")
	return pr.Err()
}

// checkJSON records a value that is not valid JSON, or that the databases
// cannot store alike (JSONUnstorable: a NUL character or an unpaired
// UTF-16 surrogate escape in a string, bytes that are not UTF-8, nesting
// over 1,000): both backends refuse them.
func checkJSON(pr *crowd.Problems, field string, b json.RawMessage) {
	if !json.Valid(b) {
		pr.Add(field, "must be valid JSON")
	} else if msg := JSONUnstorable(b); msg != "" {
		pr.Add(field, "%s", msg)
	}
}

// checkNames records a skill or channel of a list that breaks the rule
// templates follow (flow.CheckToken): a contributor's "en " or "fr/CA"
// was stored and matched no pool.
func checkNames(pr *crowd.Problems, field string, names []string) {
	for i, n := range names {
		f := fmt.Sprintf("%s[%d]", field, i)
		if n == "" {
			pr.Add(f, "must not be empty")
			continue
		}
		if msg := flow.CheckToken(n); msg != "" {
			pr.Add(f, "%s", msg)
		}
	}
}

// PoolListParams filters PoolList. Empty values filter nothing.
type PoolListParams struct {
	Workflow string
	Step     string
	Statuses []crowd.PoolStatus
	BeforeID uuid.UUID // cursor: only ids strictly less
	Limit    int       // non-positive: no limit
}

// Validate names every invalid field.
func (p *PoolListParams) Validate() error {
	pr := problemsOf("list pools")
	checkText(pr, "workflow", p.Workflow)
	checkText(pr, "step", p.Step)
	for i, s := range p.Statuses {
		pr.Check(!s.Valid(), fmt.Sprintf("status[%d]", i), "%q is not a pool status", s)
	}
	return pr.Err()
}

// PoolCompleteManyParams asks for the CLOSED pools with no open unit to
// be COMPLETED.
type PoolCompleteManyParams struct {
	PoolID uuid.UUID // uuid.Nil: any pool, skipping those another caller holds; else this one, waiting for it
	Max    int       // at least 1
	Now    time.Time
}

// Validate names every invalid field.
func (p *PoolCompleteManyParams) Validate() error {
	pr := problemsOf("complete pools")
	pr.Check(p.Max < 1, "max", "must be at least 1")
	pr.Check(p.Now.IsZero(), "now", "is required")
	return pr.Err()
}

// UnitListClosingParams pages through the units a closed pool ends
// (Store.UnitListClosing).
type UnitListClosingParams struct {
	PoolID uuid.UUID // uuid.Nil: every CLOSED pool
	After  uuid.UUID // cursor: only ids strictly greater; uuid.Nil: from the start
	Limit  int       // at least 1
}

// Validate names every invalid field.
func (p *UnitListClosingParams) Validate() error {
	pr := problemsOf("list units of closed pools")
	pr.Check(p.Limit < 1, "limit", "must be at least 1")
	return pr.Err()
}

// UnitClosingRef is a unit UnitListClosing found: enough to lock its run
// and read its pool before its transaction.
type UnitClosingRef struct {
	ID     uuid.UUID
	PoolID uuid.UUID
	RunID  uuid.UUID // uuid.Nil for a unit of no run
}

// UnitClosing is what UnitLockClosing read of a unit under its lock.
type UnitClosing struct {
	Unit       *crowd.Unit
	PoolStatus crowd.PoolStatus
	// Live: an assignment of the unit is ACTIVE (its judgment may still
	// come; the unit waits for it to be submitted, released or expired).
	Live bool
}

// PoolTransitionParams asks for one status change.
type PoolTransitionParams struct {
	ID       uuid.UUID
	From, To crowd.PoolStatus
	Now      time.Time
}

// Validate names every invalid field, then checks the pool state machine.
func (p *PoolTransitionParams) Validate() error {
	pr := problemsOf("transition pool")
	pr.Check(p.ID == uuid.Nil, "poolId", "is required")
	pr.Check(!p.From.Valid(), "from", "%q is not a pool status", p.From)
	pr.Check(!p.To.Valid(), "to", "%q is not a pool status", p.To)
	pr.Check(p.Now.IsZero(), "now", "is required")
	if err := pr.Err(); err != nil {
		return err
	}
	if err := crowd.CheckPoolTransition(p.From, p.To); err != nil {
		err.(*crowd.InvalidTransitionError).ID = p.ID.String()
		return err
	}
	return nil
}

// ---- Units ----

// UnitInsertParams describes one unit.
type UnitInsertParams struct {
	ID           uuid.UUID // UUIDv7, made by the caller
	RunID        uuid.UUID // uuid.Nil for a golden unit added by hand
	StepIndex    int
	ParentUnitID uuid.UUID       // uuid.Nil for none
	Input        json.RawMessage // valid JSON
	Golden       bool
	Answer       json.RawMessage // golden units only, required there
	// Feedback explains a golden unit's answer (plain text; golden units
	// only; "" for none).
	Feedback string
	// JudgmentsPerUnit is the unit's target; 0 takes the pool's.
	JudgmentsPerUnit int
}

// UnitInsertManyParams inserts units into one pool, in State (NEW or
// JUDGABLE; golden units are always JUDGABLE).
type UnitInsertManyParams struct {
	PoolID uuid.UUID
	State  crowd.UnitState
	Units  []*UnitInsertParams
	Now    time.Time
}

// Validate names every invalid field, units by index.
func (p *UnitInsertManyParams) Validate() error {
	pr := problemsOf("insert units")
	pr.Check(p.PoolID == uuid.Nil, "poolId", "is required")
	pr.Check(p.State != crowd.UnitNew && p.State != crowd.UnitJudgable, "state", "must be NEW or JUDGABLE, not %q", p.State)
	pr.Check(len(p.Units) == 0, "units", "must list at least one unit")
	pr.Check(p.Now.IsZero(), "now", "is required")
	for i, u := range p.Units {
		f := fmt.Sprintf("units[%d]", i)
		if u == nil {
			pr.Add(f, "is null")
			continue
		}
		pr.Check(u.ID == uuid.Nil, f+".unitId", "is required")
		pr.Check(u.StepIndex < 0, f+".stepIndex", "must not be negative")
		checkJSON(pr, f+".input", u.Input)
		switch {
		case u.Golden && u.Answer == nil:
			pr.Add(f+".answer", "a golden unit needs an answer")
		case u.Golden:
			checkJSON(pr, f+".answer", u.Answer)
		case u.Answer != nil:
			pr.Add(f+".answer", "only golden units have an answer")
		}
		pr.Check(u.Feedback != "" && !u.Golden, f+".feedback", "only golden units have feedback")
		pr.Check(strings.ContainsRune(u.Feedback, 0), f+".feedback", "must not contain the NUL character")
		pr.Check(u.JudgmentsPerUnit < 0, f+".judgmentsPerUnit", "must not be negative")
	}
	return pr.Err()
}

// UnitListParams filters UnitList.
type UnitListParams struct {
	PoolID   uuid.UUID // required
	States   []crowd.UnitState
	Golden   *bool     // nil: both
	RunID    uuid.UUID // uuid.Nil: any
	BeforeID uuid.UUID // cursor: only ids strictly less
	Limit    int       // non-positive: no limit
}

// Validate names every invalid field.
func (p *UnitListParams) Validate() error {
	pr := problemsOf("list units")
	pr.Check(p.PoolID == uuid.Nil, "poolId", "is required")
	for i, s := range p.States {
		pr.Check(!s.Valid(), fmt.Sprintf("state[%d]", i), "%q is not a unit state", s)
	}
	return pr.Err()
}

// UnitStateLiterals are states as SQL string literals, sorted and without
// repeats, for UnitList's statement, which writes its (validated) states
// into the text: in any order or repeated, a list is one of a few dozen
// texts, not one per spelling of a request (each text takes a place in
// the driver's statement cache).
func UnitStateLiterals(states []crowd.UnitState) []string {
	st := make([]string, len(states))
	for i, s := range states {
		st[i] = "'" + string(s) + "'"
	}
	slices.Sort(st)
	return slices.Compact(st)
}

// UnitListAvailableParams lists units a take could pick.
type UnitListAvailableParams struct {
	PoolID    uuid.UUID
	Limit     int   // at least 1
	RandomKey int64 // where to start; 0 lets the store draw one
}

// Validate names every invalid field.
func (p *UnitListAvailableParams) Validate() error {
	pr := problemsOf("list available units")
	pr.Check(p.PoolID == uuid.Nil, "poolId", "is required")
	pr.Check(p.Limit < 1, "limit", "must be at least 1")
	return pr.Err()
}

// PoolListEligibleLimitMax is the most pools PoolListEligible lists.
const PoolListEligibleLimitMax = 1000

// PoolListEligibleParams asks for the pools a contributor may work on.
type PoolListEligibleParams struct {
	ContributorID uuid.UUID
	Limit         int // 1 to PoolListEligibleLimitMax
}

// Validate names every invalid field.
func (p *PoolListEligibleParams) Validate() error {
	pr := problemsOf("list eligible pools")
	pr.Check(p.ContributorID == uuid.Nil, "contributorId", "is required")
	pr.Check(p.Limit < 1 || p.Limit > PoolListEligibleLimitMax, "limit", "must be 1 to %d", PoolListEligibleLimitMax)
	return pr.Err()
}

// UnitTransitionParams asks for one state change of a unit.
type UnitTransitionParams struct {
	ID       uuid.UUID
	From, To crowd.UnitState
	Now      time.Time
}

// Validate names every invalid field, then checks the unit state machine
// (FINALIZED is UnitFinalize's).
func (p *UnitTransitionParams) Validate() error {
	pr := problemsOf("transition unit")
	pr.Check(p.ID == uuid.Nil, "unitId", "is required")
	pr.Check(!p.From.Valid(), "from", "%q is not a unit state", p.From)
	pr.Check(!p.To.Valid(), "to", "%q is not a unit state", p.To)
	pr.Check(p.To == crowd.UnitFinalized, "to", "a unit is finalized with its result (UnitFinalize)")
	pr.Check(p.Now.IsZero(), "now", "is required")
	if err := pr.Err(); err != nil {
		return err
	}
	if err := crowd.CheckUnitTransition(p.From, p.To); err != nil {
		err.(*crowd.InvalidTransitionError).ID = p.ID.String()
		return err
	}
	return nil
}

// UnitCancelManyParams withdraws many units.
type UnitCancelManyParams struct {
	IDs []uuid.UUID
	Now time.Time
}

// Validate names every invalid field.
func (p *UnitCancelManyParams) Validate() error {
	pr := problemsOf("cancel units")
	pr.Check(p.Now.IsZero(), "now", "is required")
	return pr.Err()
}

// UnitCancelManyResult is what UnitCancelMany did to one unit.
type UnitCancelManyResult struct {
	// State is the unit's state after the call: CANCELED (by this call
	// or before it) or FINALIZED; "" when there is no such unit.
	State crowd.UnitState
	// Canceled: this call moved the unit from NEW, JUDGABLE or PAUSED
	// to CANCELED.
	Canceled bool
}

// UnitFinalizeParams finalizes a JUDGABLE unit.
type UnitFinalizeParams struct {
	ID         uuid.UUID
	Result     json.RawMessage // valid JSON
	Confidence *float64        // in [0, 1]; nil when the method gives none
	// LowConfidence and Judgments go into unit.finalized only (see
	// crowd.UnitFinalizedData): the unit reached its maximum of judgments
	// under the target confidence; whether each judgment agreed.
	LowConfidence bool
	Judgments     []crowd.JudgmentAgreement
	Now           time.Time
}

// Validate names every invalid field.
func (p *UnitFinalizeParams) Validate() error {
	pr := problemsOf("finalize unit")
	pr.Check(p.ID == uuid.Nil, "unitId", "is required")
	checkJSON(pr, "result", p.Result)
	pr.Check(p.Confidence != nil && !(*p.Confidence >= 0 && *p.Confidence <= 1), "confidence", "must be between 0 and 1")
	for i, j := range p.Judgments {
		pr.Check(j.JudgmentID == uuid.Nil, fmt.Sprintf("judgments[%d].judgmentId", i), "is required")
		pr.Check(j.ContributorID == uuid.Nil, fmt.Sprintf("judgments[%d].contributorId", i), "is required")
	}
	pr.Check(p.Now.IsZero(), "now", "is required")
	return pr.Err()
}

// FinalizedJudgments is p.Judgments as unit.finalized carries them: a
// list, empty rather than null.
func (p *UnitFinalizeParams) FinalizedJudgments() []crowd.JudgmentAgreement {
	if p.Judgments == nil {
		return []crowd.JudgmentAgreement{}
	}
	return p.Judgments
}

// RetargetRefused is the error of a retarget of a unit in state that
// is not open or is golden; both backends explain their refusals with it.
func RetargetRefused(id uuid.UUID, state crowd.UnitState, golden bool) error {
	ite := &crowd.InvalidTransitionError{Of: "unit", ID: id.String(), From: string(state), To: string(state),
		Reason: "only a NEW, JUDGABLE or PAUSED unit gets a new target"}
	if golden {
		ite.Reason = "a golden unit has no target"
	}
	return ite
}

// UnitRetargetParams sets how many judgments an open unit gets.
type UnitRetargetParams struct {
	ID uuid.UUID
	// JudgmentsPerUnit is the unit's new target, at least 1.
	JudgmentsPerUnit int
	Now              time.Time
}

// Validate names every invalid field.
func (p *UnitRetargetParams) Validate() error {
	pr := problemsOf("retarget unit")
	pr.Check(p.ID == uuid.Nil, "unitId", "is required")
	pr.Check(p.JudgmentsPerUnit < 1, "judgmentsPerUnit", "must be at least 1")
	pr.Check(p.Now.IsZero(), "now", "is required")
	return pr.Err()
}

// ---- Contributors ----

// ContributorCreateParams records a contributor.
type ContributorCreateParams struct {
	ID         uuid.UUID // UUIDv7, made by the caller
	ExternalID string
	Name       string
	Skills     []string
	Channels   []string
	Now        time.Time
}

// Validate names every invalid field.
func (p *ContributorCreateParams) Validate() error {
	pr := problemsOf("create contributor")
	pr.Check(p.ID == uuid.Nil, "contributorId", "is required")
	pr.Check(p.ExternalID == "", "externalId", "is required")
	checkText(pr, "externalId", p.ExternalID)
	checkText(pr, "name", p.Name)
	checkNames(pr, "skills", p.Skills)
	checkNames(pr, "channels", p.Channels)
	pr.Check(p.Now.IsZero(), "now", "is required")
	return pr.Err()
}

// ContributorUpdateParams changes the fields that are not nil.
type ContributorUpdateParams struct {
	ID       uuid.UUID
	Name     *string
	Skills   *[]string
	Channels *[]string
	State    *crowd.ContributorState
	Now      time.Time
}

// Validate names every invalid field.
func (p *ContributorUpdateParams) Validate() error {
	pr := problemsOf("update contributor")
	pr.Check(p.ID == uuid.Nil, "contributorId", "is required")
	if p.Name != nil {
		checkText(pr, "name", *p.Name)
	}
	if p.Skills != nil {
		checkNames(pr, "skills", *p.Skills)
	}
	if p.Channels != nil {
		checkNames(pr, "channels", *p.Channels)
	}
	if p.State != nil {
		pr.Check(*p.State == crowd.ContributorFlagged, "state", "%s", crowd.FlaggedIsNoState)
		pr.Check(!p.State.Valid(), "state", "must be active or banned, not %q", *p.State)
	}
	pr.Check(p.Now.IsZero(), "now", "is required")
	return pr.Err()
}

// ContributorListParams pages through contributors.
type ContributorListParams struct {
	States   []crowd.ContributorState
	BeforeID uuid.UUID // cursor: only ids strictly less
	Limit    int       // non-positive: no limit
}

// Validate names every invalid field.
func (p *ContributorListParams) Validate() error {
	pr := problemsOf("list contributors")
	for i, s := range p.States {
		pr.Check(s == crowd.ContributorFlagged, fmt.Sprintf("state[%d]", i), "%s", crowd.FlaggedIsNoState)
		pr.Check(!s.Valid(), fmt.Sprintf("state[%d]", i), "%q is not a contributor state (active or banned)", s)
	}
	return pr.Err()
}

// PoolContributorPutParams records what a pool knows of a contributor.
type PoolContributorPutParams struct {
	PoolID        uuid.UUID
	ContributorID uuid.UUID
	Trust         *float64 // in [0, 1]; nil for none
	TestsAnswered int
	TestsCorrect  int
	Flagged       bool
	FlagReason    string
	Now           time.Time
}

// Validate names every invalid field.
func (p *PoolContributorPutParams) Validate() error {
	pr := problemsOf("put pool contributor")
	pr.Check(p.PoolID == uuid.Nil, "poolId", "is required")
	pr.Check(p.ContributorID == uuid.Nil, "contributorId", "is required")
	pr.Check(p.Trust != nil && !(*p.Trust >= 0 && *p.Trust <= 1), "trust", "must be between 0 and 1")
	pr.Check(p.TestsAnswered < 0, "testsAnswered", "must not be negative")
	pr.Check(p.TestsCorrect < 0 || p.TestsCorrect > p.TestsAnswered, "testsCorrect", "must be between 0 and testsAnswered")
	pr.Check(p.Now.IsZero(), "now", "is required")
	return pr.Err()
}

// ---- Assignments ----

// AssignmentTakeParams leases one unit slot of a pool to a contributor.
type AssignmentTakeParams struct {
	ID            uuid.UUID // of the assignment; UUIDv7, made by the caller
	PoolID        uuid.UUID
	ContributorID uuid.UUID
	Duration      time.Duration // the lease, at least a second
	Strategy      crowd.Strategy
	// Candidates are the unit ids StrategyCandidates tries, in order.
	Candidates []uuid.UUID
	// RandomKey is where StrategyRandom starts (0 lets the store draw
	// one); tests pass it to be reproducible.
	RandomKey int64
	Golden    bool // take a golden unit (a test question) instead
	Now       time.Time
}

// Validate names every invalid field.
func (p *AssignmentTakeParams) Validate() error {
	pr := problemsOf("take assignment")
	pr.Check(p.ID == uuid.Nil, "assignmentId", "is required")
	pr.Check(p.PoolID == uuid.Nil, "poolId", "is required")
	pr.Check(p.ContributorID == uuid.Nil, "contributorId", "is required")
	pr.Check(p.Duration < time.Second, "duration", "must be at least a second")
	pr.Check(!p.Strategy.Valid(), "strategy", "must be ordered, random or candidates, not %q", p.Strategy)
	pr.Check(p.Strategy == crowd.StrategyCandidates && len(p.Candidates) == 0, "candidates", "the candidates strategy needs unit ids")
	pr.Check(p.Strategy != crowd.StrategyCandidates && len(p.Candidates) > 0, "candidates", "only the candidates strategy takes unit ids")
	pr.Check(p.Now.IsZero(), "now", "is required")
	return pr.Err()
}

// AssignmentHeartbeatParams: the contributor still works on it.
type AssignmentHeartbeatParams struct {
	ID            uuid.UUID
	ContributorID uuid.UUID // fencing: must hold the assignment
	Now           time.Time
}

// Validate names every invalid field.
func (p *AssignmentHeartbeatParams) Validate() error {
	return checkAssignmentRef("heartbeat assignment", p.ID, p.ContributorID, p.Now, nil)
}

// AssignmentExtendParams moves an assignment's expiry to at least
// Now + Duration, but never past its start + crowd.AssignmentMaxHold.
type AssignmentExtendParams struct {
	ID            uuid.UUID
	ContributorID uuid.UUID
	Duration      time.Duration // at least a second
	Now           time.Time
}

// Validate names every invalid field.
func (p *AssignmentExtendParams) Validate() error {
	return checkAssignmentRef("extend assignment", p.ID, p.ContributorID, p.Now, func(pr *crowd.Problems) {
		pr.Check(p.Duration < time.Second, "duration", "must be at least a second")
	})
}

// AssignmentReleaseParams gives an assignment back.
type AssignmentReleaseParams struct {
	ID            uuid.UUID
	ContributorID uuid.UUID
	Now           time.Time
}

// Validate names every invalid field.
func (p *AssignmentReleaseParams) Validate() error {
	return checkAssignmentRef("release assignment", p.ID, p.ContributorID, p.Now, nil)
}

func checkAssignmentRef(what string, id, contributor uuid.UUID, now time.Time, more func(*crowd.Problems)) error {
	pr := problemsOf(what)
	pr.Check(id == uuid.Nil, "assignmentId", "is required")
	pr.Check(contributor == uuid.Nil, "contributorId", "is required")
	if more != nil {
		more(pr)
	}
	pr.Check(now.IsZero(), "now", "is required")
	return pr.Err()
}

// AssignmentExpireParams expires up to Max lapsed assignments.
type AssignmentExpireParams struct {
	Now time.Time
	Max int // at least 1
}

// Validate names every invalid field.
func (p *AssignmentExpireParams) Validate() error {
	pr := problemsOf("expire assignments")
	pr.Check(p.Now.IsZero(), "now", "is required")
	pr.Check(p.Max < 1, "max", "must be at least 1")
	return pr.Err()
}

// ---- Judgments ----

// JudgmentInsertParams stores one judgment through its assignment.
type JudgmentInsertParams struct {
	ID            uuid.UUID // UUIDv7, made by the caller; unused when idempotent
	AssignmentID  uuid.UUID
	ContributorID uuid.UUID // fencing: must hold the assignment
	Data          json.RawMessage
	// Trust is the contributor's trust in the pool to record with the
	// judgment; nil: the store reads it from what the pool knows of the
	// contributor (PoolContributorGet), in the same statement (none when
	// the pool has no trust for them).
	Trust *float64
	Now   time.Time
}

// JudgmentInserted is what JudgmentInsert did.
type JudgmentInserted struct {
	Judgment *crowd.Judgment
	// Created is false when the same data was stored before through the
	// assignment: Judgment is that one and nothing was written.
	Created bool
	// Unit is the judged unit right after the insert (nil when not
	// Created).
	Unit *JudgedUnit
}

// JudgedUnit is what a judgment's insert tells of its unit: enough to
// decide whether the judgment finalizes it.
type JudgedUnit struct {
	ID               uuid.UUID
	RunID            uuid.UUID // uuid.Nil for a unit of no run
	State            crowd.UnitState
	Golden           bool
	JudgmentCount    int // with this judgment
	JudgmentsPerUnit int
}

// Validate names every invalid field.
func (p *JudgmentInsertParams) Validate() error {
	pr := problemsOf("insert judgment")
	pr.Check(p.ID == uuid.Nil, "judgmentId", "is required")
	pr.Check(p.AssignmentID == uuid.Nil, "assignmentId", "is required")
	pr.Check(p.ContributorID == uuid.Nil, "contributorId", "is required")
	checkJSON(pr, "data", p.Data)
	pr.Check(p.Trust != nil && !(*p.Trust >= 0 && *p.Trust <= 1), "trust", "must be between 0 and 1")
	pr.Check(p.Now.IsZero(), "now", "is required")
	return pr.Err()
}

// JudgmentInTxParams are the first statements of a judgment's
// transaction (Store.JudgmentInTx).
type JudgmentInTxParams struct {
	PoolID uuid.UUID // the judgment's pool: whose quality state to lock
	// RunID is the run to lock after the quality state; RunOfUnit, when
	// the caller does not know the run, is the unit whose run to lock.
	// Neither: no run is locked.
	RunID, RunOfUnit uuid.UUID
	// UnitID is the assignment's unit when the caller knows it. On
	// PostgreSQL it lets concurrent judgments of the pool share one
	// transaction (a batch orders its judgments by unit); uuid.Nil: the
	// judgment has a transaction of its own.
	UnitID uuid.UUID
	Insert JudgmentInsertParams
}

// Validate names every invalid field.
func (p *JudgmentInTxParams) Validate() error {
	pr := problemsOf("judgment transaction")
	pr.Check(p.PoolID == uuid.Nil, "poolId", "is required")
	pr.Check(p.RunID != uuid.Nil && p.RunOfUnit != uuid.Nil, "runOfUnit", "is for when runId is unknown")
	if err := pr.Err(); err != nil {
		return err
	}
	return p.Insert.Validate()
}

// JudgmentBegun is what the first statements of a judgment's transaction
// did.
type JudgmentBegun struct {
	State    *QualityState // the contributor's, locked
	Inserted *JudgmentInserted
	// UnitJudgments, when the judgment brought its unit to its target
	// (Inserted.Unit.TargetReached), may be the unit's judgments as
	// JudgmentList{UnitID} returns them in the transaction when fn starts
	// (newest first, this one among them), read with the first statements
	// so that fn, which finalizes the unit, need not read them again. Nil
	// when not read: fn reads them itself. A fn that changes the unit's
	// judgments before it uses them reads them again.
	UnitJudgments []*crowd.Judgment
}

// TargetReached reports whether the judgment that left its unit at u
// brought it to its target: a regular JUDGABLE unit whose judgment count
// reached its judgments per unit, which the judgment's transaction then
// decides (finalizes it, or gives it one more slot).
func (u *JudgedUnit) TargetReached() bool {
	return u != nil && !u.Golden && u.State == crowd.UnitJudgable && u.JudgmentCount >= u.JudgmentsPerUnit
}

// JudgmentInTxSerial is Store.JudgmentInTx with its first statements one
// by one (JudgmentBegin) in a transaction of s: SQLite's way, and
// PostgreSQL's when its pipeline found no quality state to lock.
func JudgmentInTxSerial(ctx context.Context, s Transactor, p *JudgmentInTxParams, fn func(ctx context.Context, tx Tx, begun *JudgmentBegun) error) error {
	return s.InTx(ctx, func(ctx context.Context, tx Tx) error {
		begun, err := JudgmentBegin(ctx, tx, p)
		if err != nil {
			return err
		}
		return fn(ctx, tx, begun)
	})
}

// JudgmentBegin runs the first statements of a judgment's transaction
// one by one on tx (see Store.JudgmentInTx): the quality state locked,
// then the run, then the judgment inserted with the state's trust, and,
// when it brought its unit to its target, the unit's judgments read.
func JudgmentBegin(ctx context.Context, tx Tx, p *JudgmentInTxParams) (*JudgmentBegun, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	st, err := tx.QualityStateLock(ctx, &QualityStateLockParams{PoolID: p.PoolID, ContributorID: p.Insert.ContributorID, Now: p.Insert.Now})
	if err != nil {
		return nil, err
	}
	run := p.RunID
	if p.RunOfUnit != uuid.Nil {
		unit, err := tx.UnitGet(ctx, p.RunOfUnit)
		if err != nil {
			return nil, err
		}
		run = unit.RunID
	}
	if run != uuid.Nil {
		if _, err := tx.RunLock(ctx, run); err != nil && !errors.Is(err, ErrNotFound) {
			return nil, err // a pruned run: nothing to advance
		}
	}
	ins := p.Insert
	ins.Trust = st.Trust.Snapshot()
	inserted, err := tx.JudgmentInsert(ctx, &ins)
	if err != nil {
		return nil, err
	}
	begun := &JudgmentBegun{State: st, Inserted: inserted}
	if inserted.Created && inserted.Unit.TargetReached() {
		if begun.UnitJudgments, err = tx.JudgmentList(ctx, &JudgmentListParams{UnitID: inserted.Unit.ID}); err != nil {
			return nil, err
		}
	}
	return begun, nil
}

// JudgmentListParams lists the judgments of one unit or one pool.
type JudgmentListParams struct {
	UnitID uuid.UUID // one of UnitID and PoolID
	PoolID uuid.UUID
	// ContributorID, with PoolID, lists that contributor's judgments in
	// the pool only (their recent answers, for the pattern checks).
	ContributorID uuid.UUID
	BeforeID      uuid.UUID // cursor: only ids strictly less
	Limit         int       // non-positive: no limit
}

// Validate names every invalid field.
func (p *JudgmentListParams) Validate() error {
	pr := problemsOf("list judgments")
	pr.Check(p.ContributorID != uuid.Nil && p.PoolID == uuid.Nil, "contributorId", "filters the judgments of a pool only")
	switch {
	case p.UnitID == uuid.Nil && p.PoolID == uuid.Nil:
		pr.Add("unitId", "give a unit or a pool")
		pr.Add("poolId", "give a unit or a pool")
	case p.UnitID != uuid.Nil && p.PoolID != uuid.Nil:
		pr.Add("poolId", "give a unit or a pool, not both")
	}
	return pr.Err()
}

// RefuseAssignment is why a fenced change of a cannot be made by
// contributor at now (a *crowd.AssignmentError), nil when it can. With
// expiredToo an ACTIVE assignment whose lease ran out before now is
// refused too. Both backends explain their refusals with it.
func RefuseAssignment(a *crowd.Assignment, contributor uuid.UUID, now time.Time, expiredToo bool) error {
	e := &crowd.AssignmentError{AssignmentID: a.ID, State: a.State}
	switch {
	case a.ContributorID != contributor:
		e.Reason = crowd.RefusedNotOwner
	case a.State == crowd.AssignmentExpired || a.State == crowd.AssignmentActive && expiredToo && a.ExpiresAt.Before(now):
		e.Reason = crowd.RefusedExpired
	case a.State != crowd.AssignmentActive:
		e.Reason = crowd.RefusedNotActive
	default:
		return nil
	}
	return e
}

// SameJSON reports whether a and b are the same JSON value (key order,
// spacing and number spelling aside): what makes a repeated judgment the
// same one.
func SameJSON(a, b json.RawMessage) bool {
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}
