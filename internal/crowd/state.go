// Package crowd holds the value types of human work — task versions, pools,
// units, contributors, assignments, judgments — with their state machines
// and the errors callers branch on. It is a leaf: the store converts its
// rows into these types, the services and the API read them.
package crowd

import (
	"fmt"
	"slices"
	"time"
)

// PoolStatus is the status of a pool, the units of one human step.
type PoolStatus string

// The closed set of pool statuses.
const (
	PoolOpen      PoolStatus = "OPEN"      // assignments are handed out
	PoolPaused    PoolStatus = "PAUSED"    // no new assignment; running ones go on
	PoolClosed    PoolStatus = "CLOSED"    // no new unit; the last ones are finished
	PoolCompleted PoolStatus = "COMPLETED" // closed and every unit is final (CLOSED again when one is reopened)
)

// PoolStatuses lists every pool status.
var PoolStatuses = []PoolStatus{PoolOpen, PoolPaused, PoolClosed, PoolCompleted}

// Valid reports whether s is a known pool status.
func (s PoolStatus) Valid() bool { return slices.Contains(PoolStatuses, s) }

// poolMachine: the statuses a pool may move to from each status.
//
//	OPEN → PAUSED, PAUSED → OPEN   pause, resume
//	OPEN, PAUSED → CLOSED          close: no unit is added any more
//	CLOSED → COMPLETED             every regular unit is FINALIZED or
//	                               CANCELED (the store checks the counters)
//	COMPLETED → CLOSED             one of its units was reopened (a review's
//	                               reject, quality control): the close ends
//	                               it again, then the pool COMPLETES again
var poolMachine = machine[PoolStatus]{of: "pool", next: map[PoolStatus][]PoolStatus{
	PoolOpen:      {PoolPaused, PoolClosed},
	PoolPaused:    {PoolOpen, PoolClosed},
	PoolClosed:    {PoolCompleted},
	PoolCompleted: {PoolClosed},
}}

// CanPoolTransition reports whether the pool machine allows from → to.
func CanPoolTransition(from, to PoolStatus) bool { return poolMachine.can(from, to) }

// CheckPoolTransition returns an *InvalidTransitionError when from → to is
// not in the pool state machine, and nil otherwise.
func CheckPoolTransition(from, to PoolStatus) error { return poolMachine.check(from, to) }

// UnitState is the state of a unit.
type UnitState string

// The closed set of unit states.
const (
	UnitNew       UnitState = "NEW"       // created, not yet offered
	UnitJudgable  UnitState = "JUDGABLE"  // offered while slots are left
	UnitPaused    UnitState = "PAUSED"    // withheld; its assignments go on
	UnitFinalized UnitState = "FINALIZED" // aggregated: result and confidence
	UnitCanceled  UnitState = "CANCELED"  // withdrawn (its run was canceled)
)

// UnitStates lists every unit state.
var UnitStates = []UnitState{UnitNew, UnitJudgable, UnitPaused, UnitFinalized, UnitCanceled}

// Valid reports whether s is a known unit state.
func (s UnitState) Valid() bool { return slices.Contains(UnitStates, s) }

// Final reports whether a unit in state s is done with (FINALIZED may still
// be reopened by quality control).
func (s UnitState) Final() bool { return s == UnitFinalized || s == UnitCanceled }

// unitMachine: the states a unit may move to from each state.
//
//	NEW → JUDGABLE          offered to contributors
//	JUDGABLE → PAUSED       withheld; PAUSED → JUDGABLE offered again
//	JUDGABLE → FINALIZED    aggregated (UnitFinalize)
//	FINALIZED → JUDGABLE    reopened: tainted judgments left it short of
//	                        clean ones, or a review rejected its result
//	NEW, JUDGABLE, PAUSED → CANCELED   withdrawn
//
// Golden units hold a known answer and stay JUDGABLE: they are never
// finalized.
var unitMachine = machine[UnitState]{of: "unit", next: map[UnitState][]UnitState{
	UnitNew:       {UnitJudgable, UnitCanceled},
	UnitJudgable:  {UnitPaused, UnitFinalized, UnitCanceled},
	UnitPaused:    {UnitJudgable, UnitCanceled},
	UnitFinalized: {UnitJudgable},
	UnitCanceled:  {},
}}

// CanUnitTransition reports whether the unit machine allows from → to.
func CanUnitTransition(from, to UnitState) bool { return unitMachine.can(from, to) }

// CheckUnitTransition returns an *InvalidTransitionError when from → to is
// not in the unit state machine, and nil otherwise.
func CheckUnitTransition(from, to UnitState) error { return unitMachine.check(from, to) }

// AssignmentState is the state of an assignment, the lease of one slot of
// a unit to one contributor.
type AssignmentState string

// The closed set of assignment states.
const (
	AssignmentActive    AssignmentState = "ACTIVE"    // held until expires_at
	AssignmentSubmitted AssignmentState = "SUBMITTED" // its judgment is stored
	AssignmentExpired   AssignmentState = "EXPIRED"   // abandoned: the reaper freed the slot
	AssignmentReleased  AssignmentState = "RELEASED"  // given back: the slot was freed at once
)

// AssignmentStates lists every assignment state.
var AssignmentStates = []AssignmentState{AssignmentActive, AssignmentSubmitted, AssignmentExpired, AssignmentReleased}

// assignmentMachine: an ACTIVE assignment ends in one of the others; none
// comes back.
var assignmentMachine = machine[AssignmentState]{of: "assignment", next: map[AssignmentState][]AssignmentState{
	AssignmentActive:    {AssignmentSubmitted, AssignmentExpired, AssignmentReleased},
	AssignmentSubmitted: {},
	AssignmentExpired:   {},
	AssignmentReleased:  {},
}}

// CanAssignmentTransition reports whether the assignment machine allows
// from → to.
func CanAssignmentTransition(from, to AssignmentState) bool { return assignmentMachine.can(from, to) }

// ContributorState is the state of a contributor across every pool (a flag
// in one pool is kept per pool, see PoolContributor).
type ContributorState string

// The closed set of contributor states.
const (
	ContributorActive ContributorState = "active"
	// ContributorFlagged is refused as a contributor's state, set or
	// filtered by (FlaggedIsNoState): quality control flags a contributor
	// in one pool (PoolContributor.Flagged). A row an older docket let be
	// set to it still reads as flagged (such a contributor gets no work)
	// and may be set to active or banned.
	ContributorFlagged ContributorState = "flagged"
	ContributorBanned  ContributorState = "banned"
)

// FlaggedIsNoState says why ContributorFlagged is refused where a
// contributor's state is set or filtered by.
const FlaggedIsNoState = `"flagged" is no contributor's state: quality control flags a contributor in one pool ` +
	`(PoolContributor, GET /v1/pools/{poolId}/contributors/{contributorId}, event contributor.flagged); use active or banned`

// ContributorStates lists every contributor state.
var ContributorStates = []ContributorState{ContributorActive, ContributorFlagged, ContributorBanned}

// Valid reports whether s is a known contributor state.
func (s ContributorState) Valid() bool { return slices.Contains(ContributorStates, s) }

// Strategy is how AssignmentTake picks a unit among the available ones.
type Strategy string

// The strategies.
const (
	// StrategyOrdered takes the oldest available unit: fair, but every
	// taker of a hot pool contends for the same first rows.
	StrategyOrdered Strategy = "ordered"
	// StrategyRandom starts at a random point of the units' random keys
	// (wrapping around), spreading takers over the pool.
	StrategyRandom Strategy = "random"
	// StrategyCandidates takes the first available unit of a list the
	// caller keeps (a per-node cache refilled by one query); the database
	// stays the arbiter, and candidates taken meanwhile are skipped.
	StrategyCandidates Strategy = "candidates"
)

// Strategies lists every strategy.
var Strategies = []Strategy{StrategyOrdered, StrategyRandom, StrategyCandidates}

// Valid reports whether s is a known strategy.
func (s Strategy) Valid() bool { return slices.Contains(Strategies, s) }

// machine is a state machine: next[from] lists every state allowed after
// from; nothing outside the table is ever allowed.
type machine[S ~string] struct {
	of   string
	next map[S][]S
}

func (m machine[S]) can(from, to S) bool { return slices.Contains(m.next[from], to) }

func (m machine[S]) check(from, to S) error {
	if !m.can(from, to) {
		return &InvalidTransitionError{Of: m.of, From: string(from), To: string(to)}
	}
	return nil
}

// InvalidTransitionError is a refused change of a pool's, a unit's or an
// assignment's state: the state machine has no such change, or the row was
// not in the expected state. Nothing was changed.
type InvalidTransitionError struct {
	Of       string // "pool", "unit" or "assignment"
	ID       string // empty when the check happened before any lookup
	From, To string
	Reason   string // why a change the machine allows was refused; may be empty
}

func (e *InvalidTransitionError) Error() string {
	msg := fmt.Sprintf("invalid %s transition %s -> %s", e.Of, e.From, e.To)
	if e.ID != "" {
		msg = fmt.Sprintf("invalid transition of %s %s: %s -> %s", e.Of, e.ID, e.From, e.To)
	}
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	return msg
}

// AssignmentMaxHold is the longest an assignment is held, from its start,
// extensions included (the longest assignmentSeconds of a task): past it
// an extension stops at the cap, so no one keeps a slot forever and the
// unit (and the run waiting on it) moves on.
const AssignmentMaxHold = 24 * time.Hour
