package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/docket-run/docket"
)

// Problem is an RFC 9457 problem details object. Every error the API
// returns is one, built here and nowhere else.
type Problem struct {
	Type   string       `json:"type"`
	Title  string       `json:"title"`
	Status int          `json:"status"`
	Detail string       `json:"detail,omitempty"`
	Errors []FieldError `json:"errors,omitempty"`
	// RetryAfter, in seconds, is sent as the Retry-After header (429).
	RetryAfter int `json:"-"`
}

// FieldError names one invalid field of a request.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

func (p *Problem) Error() string { return fmt.Sprintf("%d %s: %s", p.Status, p.Title, p.Detail) }

const problemBase = "https://docket.dev/problems/"

// Problem constructors, one per kind the API can answer.
func problem(status int, kind, title, detail string) *Problem {
	return &Problem{Type: problemBase + kind, Title: title, Status: status, Detail: detail}
}

func badRequest(detail string, errs ...FieldError) *Problem {
	p := problem(http.StatusBadRequest, "validation", "Invalid request", detail)
	p.Errors = errs
	return p
}

func invalidField(field, message string) *Problem {
	return badRequest(field+": "+message, FieldError{Field: field, Message: message})
}

// invalidFields is one 400 naming every field of errs.
func invalidFields(errs []FieldError) *Problem {
	parts := make([]string, len(errs))
	for i, e := range errs {
		parts[i] = e.Field + ": " + e.Message
	}
	return badRequest(strings.Join(parts, "; "), errs...)
}

// joinFields is the problem for several errors (errors.Join), each naming
// one field: one 400 naming them all. Any other error stands alone.
func joinFields(errs []error) *Problem {
	var fe []FieldError
	for _, err := range errs {
		p := problemFor(err)
		if p.Status != http.StatusBadRequest || len(p.Errors) == 0 {
			return p
		}
		fe = append(fe, p.Errors...)
	}
	return invalidFields(fe)
}

func notFound(detail string) *Problem {
	return problem(http.StatusNotFound, "not-found", "Not found", detail)
}

func conflict(kind, detail string) *Problem {
	return problem(http.StatusConflict, kind, "Conflict", detail)
}

func unauthorized(detail string) *Problem {
	return problem(http.StatusUnauthorized, "unauthorized", "Unauthorized", detail)
}

func forbidden(detail string) *Problem {
	return problem(http.StatusForbidden, "forbidden", "Forbidden", detail)
}

func tooLarge(limit int64) *Problem {
	return problem(http.StatusRequestEntityTooLarge, "too-large", "Request body too large",
		fmt.Sprintf("the body exceeds the limit of %d bytes", limit))
}

func tooMany(retryAfter int) *Problem {
	p := problem(http.StatusTooManyRequests, "rate-limited", "Too many requests",
		fmt.Sprintf("rate limit exceeded; retry after %d s", retryAfter))
	p.RetryAfter = retryAfter
	return p
}

// problemFor maps an error from the layers below to its problem. Unknown
// errors are 500s whose detail does not leak internals.
func problemFor(err error) *Problem {
	var (
		p       *Problem
		verr    *docket.ValidationError
		invalid *docket.InvalidTransitionError
		maxErr  *http.MaxBytesError
		flowErr *docket.WorkflowValidationError
	)
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return joinFields(j.Unwrap())
	}
	switch {
	case errors.As(err, &p):
		return p
	case errors.As(err, &verr):
		return invalidField(verr.Field, verr.Message)
	case errors.As(err, &flowErr):
		return workflowProblem(validationFields(flowErr))
	case errors.As(err, &maxErr):
		return tooLarge(maxErr.Limit)
	case errors.Is(err, docket.ErrNotFound):
		return notFound("no such job")
	case errors.Is(err, docket.ErrLeaseLost):
		return conflict("lease-lost", "the lease is no longer held: it expired, was rescued, or the job moved on")
	case errors.As(err, &invalid):
		return conflict("invalid-transition", fmt.Sprintf("the job is %s; it cannot move to %s", invalid.From, invalid.To))
	}
	return problem(http.StatusInternalServerError, "internal", "Internal error", "the server failed to handle the request; see its logs")
}

func writeProblem(w http.ResponseWriter, p *Problem) {
	w.Header().Set("Content-Type", "application/problem+json")
	if p.RetryAfter > 0 {
		w.Header().Set("Retry-After", fmt.Sprint(p.RetryAfter))
	}
	w.WriteHeader(p.Status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // a detail quotes input: < and > stay readable
	_ = enc.Encode(p)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // answers are not HTML: "a < b" in an expression stays readable
	_ = enc.Encode(v)
}
