package api

import (
	"errors"
	"fmt"
	"math"
	"net/http"

	"github.com/google/uuid"

	"github.com/docket-run/docket"
)

// crowdFields are the problems of a *docket.CrowdValidationError.
func crowdFields(ve *docket.CrowdValidationError) []FieldError {
	out := make([]FieldError, len(ve.Errors))
	for i, fe := range ve.Errors {
		out[i] = FieldError{Field: cmpOr(fe.Field, "(body)"), Message: fe.Message}
	}
	return out
}

// crowdProblem maps the errors of human work to their problems; nil for
// any other error.
func crowdProblem(err error) *Problem {
	var (
		notOpen    *docket.PoolNotOpenError
		notElig    *docket.NotEligibleError
		assignment *docket.AssignmentError
		judgment   *docket.JudgmentConflictError
		transition *docket.CrowdTransitionError
		takeRate   *docket.TakeRateError
	)
	switch {
	case errors.Is(err, docket.ErrNoUnit):
		return problem(http.StatusNotFound, "no-unit", "No unit available",
			"the pool has no unit you may take now: every unit is taken, final, or judged by you already; try again later or another pool")
	case errors.As(err, &takeRate):
		secs := max(1, int(math.Ceil(takeRate.RetryAfter.Seconds())))
		whom := ""
		if takeRate.ContributorID != uuid.Nil {
			whom = " to one contributor"
		}
		p := tooMany(secs)
		p.Detail = fmt.Sprintf("pool %s hands out at most %g assignments per second%s on this server (its safe rate); retry after %d s",
			takeRate.PoolID, takeRate.PerSecond, whom, secs)
		return p
	case errors.As(err, &notOpen):
		return conflict("pool-not-open", fmt.Sprintf("pool %s is %s: it hands out no assignment", notOpen.PoolID, notOpen.Status))
	case errors.As(err, &notElig):
		return forbidden(fmt.Sprintf("you may not work on pool %s: %s", notElig.PoolID, notElig.Reason))
	case errors.As(err, &assignment):
		switch assignment.Reason {
		case "not_owner":
			return notFound("no assignment " + assignment.AssignmentID.String())
		case "expired":
			return conflict("assignment-expired", fmt.Sprintf(
				"assignment %s expired: its lease ran out before this request came, and its slot went back to the pool; take a new assignment", assignment.AssignmentID))
		case "unit_canceled":
			return conflict("unit-canceled", fmt.Sprintf(
				"assignment %s: its unit was canceled (its run was canceled), so the work is no longer wanted; the judgment was not stored; take a new assignment", assignment.AssignmentID))
		}
		return conflict("assignment-closed", fmt.Sprintf("assignment %s is %s: it takes no more changes", assignment.AssignmentID, assignment.State))
	case errors.As(err, &judgment):
		return conflict("judgment-conflict", fmt.Sprintf(
			"assignment %s already has judgment %s with other data; a judgment cannot be changed", judgment.AssignmentID, judgment.JudgmentID))
	case errors.As(err, &transition):
		return conflict("invalid-transition", fmt.Sprintf("the %s is %s; it cannot move to %s", transition.Of, transition.From, transition.To))
	}
	return nil
}
