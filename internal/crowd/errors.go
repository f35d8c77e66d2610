package crowd

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
)

// ErrNoUnit: the pool has no unit this contributor may take now (all are
// taken, final, or judged by them already).
var ErrNoUnit = errors.New("no unit available")

// FieldError is one problem of a request's parameters: Field names it as
// the API spells it ("poolId", "units[3].input").
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// ValidationError lists every invalid field of a request; nothing was
// read or written.
type ValidationError struct {
	What   string // the request, e.g. "create pool"
	Errors []FieldError
}

func (e *ValidationError) Error() string {
	var b strings.Builder
	b.WriteString(e.What + ": invalid parameters: ")
	for i, fe := range e.Errors {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(fe.Field + ": " + fe.Message)
	}
	return b.String()
}

// MaxProblems caps the problems one ValidationError lists (a batch of
// 100,000 bad units must not make a 100,000-entry error).
const MaxProblems = 100

// Problems collects the field errors of one request.
type Problems struct {
	what    string
	list    []FieldError
	dropped int
}

// NewProblems starts collecting the problems of the request what.
func NewProblems(what string) *Problems { return &Problems{what: what} }

// Add records one problem of field.
func (p *Problems) Add(field, format string, args ...any) {
	if len(p.list) >= MaxProblems {
		p.dropped++
		return
	}
	p.list = append(p.list, FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
}

// Check records a problem of field when bad is true.
func (p *Problems) Check(bad bool, field, format string, args ...any) {
	if bad {
		p.Add(field, format, args...)
	}
}

// Err returns a *ValidationError of the problems, nil when there are none.
func (p *Problems) Err() error {
	if len(p.list) == 0 {
		return nil
	}
	list := p.list
	if p.dropped > 0 {
		list = append(list, FieldError{Field: "", Message: fmt.Sprintf("and %d more problems", p.dropped)})
	}
	return &ValidationError{What: p.what, Errors: list}
}

// Refusal says why a change of an assignment was refused.
type Refusal string

// Refusals.
const (
	// RefusedExpired: the assignment's lease ran out (it may still be
	// ACTIVE until the reaper passes, or EXPIRED already).
	RefusedExpired Refusal = "expired"
	// RefusedNotActive: the assignment was submitted or released.
	RefusedNotActive Refusal = "not_active"
	// RefusedNotOwner: the assignment is another contributor's.
	RefusedNotOwner Refusal = "not_owner"
	// RefusedUnitCanceled: the assignment's unit was CANCELED (its run was
	// canceled, or the unit itself): the work is no longer wanted.
	RefusedUnitCanceled Refusal = "unit_canceled"
)

// AssignmentError is a refused change of an assignment (fencing): the
// caller no longer holds it, or (RefusedUnitCanceled) its work is no
// longer wanted. Nothing was changed.
type AssignmentError struct {
	AssignmentID uuid.UUID
	Reason       Refusal
	State        AssignmentState // the state the assignment is in
}

func (e *AssignmentError) Error() string {
	switch e.Reason {
	case RefusedExpired:
		return fmt.Sprintf("assignment %s expired: its lease ran out before the change came", e.AssignmentID)
	case RefusedNotOwner:
		return fmt.Sprintf("assignment %s belongs to another contributor", e.AssignmentID)
	case RefusedUnitCanceled:
		return fmt.Sprintf("assignment %s: its unit was canceled; the work is no longer wanted", e.AssignmentID)
	}
	return fmt.Sprintf("assignment %s is %s, not ACTIVE", e.AssignmentID, e.State)
}

// JudgmentConflictError: a judgment with other data was already submitted
// through the assignment. Nothing was changed.
type JudgmentConflictError struct {
	AssignmentID uuid.UUID
	JudgmentID   uuid.UUID // the judgment stored first
}

func (e *JudgmentConflictError) Error() string {
	return fmt.Sprintf("assignment %s already has judgment %s with other data", e.AssignmentID, e.JudgmentID)
}

// PoolNotOpenError: no assignment is taken from a pool that is not OPEN.
type PoolNotOpenError struct {
	PoolID uuid.UUID
	Status PoolStatus
}

func (e *PoolNotOpenError) Error() string {
	return fmt.Sprintf("pool %s is %s: it hands out no assignment", e.PoolID, e.Status)
}

// NotEligibleError: the contributor may not work on the pool (banned or
// flagged everywhere, or flagged in that pool).
type NotEligibleError struct {
	ContributorID uuid.UUID
	PoolID        uuid.UUID
	Reason        string
}

func (e *NotEligibleError) Error() string {
	return fmt.Sprintf("contributor %s may not work on pool %s: %s", e.ContributorID, e.PoolID, e.Reason)
}

// TakeRateError: a take came past the pool's safe rate (the task's
// takesPerSecond, or takesPerSecondPerContributor when ContributorID is
// set), counted by the node that served it. Nothing was taken; a take
// after RetryAfter may succeed.
type TakeRateError struct {
	PoolID        uuid.UUID
	ContributorID uuid.UUID // uuid.Nil when the pool's rate refused it
	PerSecond     float64
	RetryAfter    time.Duration
}

func (e *TakeRateError) Error() string {
	who := "the pool's"
	if e.ContributorID != uuid.Nil {
		who = "a contributor's"
	}
	return fmt.Sprintf("pool %s: past %s safe rate of %g takes per second; retry after %s", e.PoolID, who, e.PerSecond, e.RetryAfter)
}
