package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

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
	// RetryAfter, in seconds, is sent as the Retry-After header (429,
	// and the 503s of contention and of an unreachable database).
	RetryAfter int `json:"-"`
}

// RetryAfterSeconds is RetryAfter: the dashboard's sign-in tells a
// limited address to wait by it (web.Config.SignIn).
func (p *Problem) RetryAfterSeconds() int { return p.RetryAfter }

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

// joinFields is the problem for the leaves of a tree of joined errors
// (errors.Join, at any depth, under any wrapping): when each names fields,
// one 400 naming them all, each field once; otherwise the first leaf that
// names none stands alone.
func joinFields(leaves []error) *Problem {
	var fe []FieldError
	for _, err := range leaves {
		p := problemOf(err)
		if p.Status != http.StatusBadRequest || len(p.Errors) == 0 {
			return p
		}
		fe = addFields(fe, p.Errors...)
	}
	return invalidFields(fe)
}

// errorLeaves appends the leaves of err's tree to out: err itself when no
// join lies below it, else the leaves of every joined error. An error
// problemOf knows by its type is a leaf whatever it wraps, and a wrapper
// over a single leaf stays whole, so that its text is kept.
func errorLeaves(err error, out []error) []error {
	switch err.(type) {
	case *Problem, *docket.ValidationError, *docket.InvalidTransitionError, *http.MaxBytesError:
		return append(out, err)
	}
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if e != nil {
				out = errorLeaves(e, out)
			}
		}
		return out
	case interface{ Unwrap() error }:
		inner := u.Unwrap()
		if inner == nil {
			break
		}
		below := errorLeaves(inner, nil)
		if len(below) > 1 {
			return append(out, below...)
		}
	}
	return append(out, err)
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

// forbiddenField is a 403 naming the request field that asks for what
// the key may not have.
func forbiddenField(field, message string) *Problem {
	p := forbidden(field + ": " + message)
	p.Errors = []FieldError{{Field: field, Message: message}}
	return p
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

// unavailableRetryAfter is the Retry-After, in seconds, of
// problems/database-unavailable: long enough for a restart or a failover
// not to be met by a storm of retries, short enough not to keep a client
// waiting once the database is back.
const unavailableRetryAfter = 5

// databaseUnavailable is the problem of a call that failed because the
// database could not be reached or the connection to it was lost
// (docket.IsUnavailable): not the request's fault, and worth sending
// again.
func databaseUnavailable() *Problem {
	p := problem(http.StatusServiceUnavailable, "database-unavailable", "Database unavailable",
		fmt.Sprintf("the server cannot reach its database (it is down or restarting, or the connection to it was lost); send the request again after %d s. "+
			"A write whose connection was lost while it committed may have been written: send it again with the same idempotency key, or read first", unavailableRetryAfter))
	p.RetryAfter = unavailableRetryAfter
	return p
}

// problemFor maps an error from the layers below to its problem. Unknown
// errors are 500s whose detail does not leak internals. Joined errors,
// also wrapped or joined again, are walked whole: every field any of them
// names is in the answer.
func problemFor(err error) *Problem {
	if leaves := errorLeaves(err, nil); len(leaves) > 1 {
		return joinFields(leaves)
	}
	return problemOf(err)
}

// problemOf maps one error, which is no join of several, to its problem.
func problemOf(err error) *Problem {
	var (
		p       *Problem
		verr    *docket.ValidationError
		invalid *docket.InvalidTransitionError
		maxErr  *http.MaxBytesError
		flowErr *docket.WorkflowValidationError
		taskErr *docket.TaskValidationError
		crowdVE *docket.CrowdValidationError
	)
	switch {
	case errors.As(err, &p):
		return p
	case errors.As(err, &verr):
		return invalidField(verr.Field, verr.Message)
	case errors.As(err, &flowErr):
		return workflowProblem(validationFields(flowErr))
	case errors.As(err, &taskErr):
		return invalidFields(taskFields(taskErr, ""))
	case errors.As(err, &crowdVE):
		return invalidFields(crowdFields(crowdVE))
	case errors.As(err, &maxErr):
		return tooLarge(maxErr.Limit)
	case errors.Is(err, docket.ErrNotFound):
		return notFound("no such job")
	case errors.Is(err, docket.ErrContention):
		p := problem(http.StatusServiceUnavailable, "contention", "Try again",
			"the database aborted this request's transaction to resolve a conflict with another one; nothing was written, the same request again should succeed")
		p.RetryAfter = 1
		return p
	case docket.IsUnavailable(err):
		return databaseUnavailable()
	case docket.IsStorageFull(err):
		return problem(http.StatusInsufficientStorage, "storage-full", "Insufficient storage",
			"the database has no room left for this write; nothing was written. Send the same request again once space is freed")
	case errors.Is(err, docket.ErrRunConflict):
		// Client.Retry of a step's job (runProblem maps the run calls').
		return conflict("run-conflict", err.Error())
	case errors.Is(err, docket.ErrLeaseWithoutToken):
		return conflict("lease-lost", "the lease id has no token: an older docket gave it, before lease ids became <job id>.<attempt>.<token>, and this server refuses it as a lease no longer held; drop the job, which runs again once its lease expires")
	case errors.Is(err, docket.ErrLeaseLost):
		return conflict("lease-lost", "the lease is no longer held: it expired, was rescued, or the job moved on")
	case crowdProblem(err) != nil:
		return crowdProblem(err)
	case errors.As(err, &invalid) && invalid.Reason == docket.ReasonCancelRequested:
		return conflict("cancel-requested", fmt.Sprintf("the job is %s and %s", invalid.From, invalid.Reason))
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
	if a, ok := v.(jsonAppender); ok {
		buf := answerBuffers.Get().(*[]byte)
		b, err := a.appendJSON((*buf)[:0])
		if err == nil {
			w.WriteHeader(status)
			_, _ = w.Write(b)
		}
		if b != nil && cap(b) <= answerBufferMax {
			*buf = b[:0] // grown, and kept
		}
		answerBuffers.Put(buf)
		if err == nil {
			return
		}
	}
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // answers are not HTML: "a < b" in an expression stays readable
	_ = enc.Encode(v)
}

// jsonAppender is implemented by the answers of the hot paths that write
// their JSON themselves, exactly as encoding/json would (with HTML
// characters unescaped, and a newline); errNoAppend, or any error, sends
// the answer through encoding/json instead.
type jsonAppender interface {
	appendJSON(b []byte) ([]byte, error)
}

var errNoAppend = errors.New("api: encode this answer with encoding/json")

// answerBuffers are the buffers of jsonAppender answers.
var answerBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

// answerBufferMax is the largest buffer kept for the next answer.
const answerBufferMax = 64 << 10
