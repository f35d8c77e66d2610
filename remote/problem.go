package remote

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Error is a problem answered by the server: an RFC 9457
// application/problem+json body and the response's status.
type Error struct {
	Type   string       `json:"type"`
	Title  string       `json:"title"`
	Status int          `json:"status"`
	Detail string       `json:"detail,omitempty"`
	Errors []FieldError `json:"errors,omitempty"`
	// RetryAfter is the Retry-After header of the answer (429, 503), if
	// any.
	RetryAfter time.Duration `json:"-"`
}

// FieldError names one invalid field of a request.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// Error reads "<status> <title>: <detail> (field: message; …)", leaving
// out the field errors the detail already says.
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s", e.Status, e.Title)
	if e.Detail != "" {
		b.WriteString(": " + e.Detail)
	}
	var parts []string
	for _, fe := range e.Errors {
		if part := fe.Field + ": " + fe.Message; !strings.Contains(e.Detail, part) {
			parts = append(parts, part)
		}
	}
	if len(parts) > 0 {
		b.WriteString(" (" + strings.Join(parts, "; ") + ")")
	}
	return b.String()
}

// Temporary reports whether sending the same call again later may work:
// 429 and 5xx.
func (e *Error) Temporary() bool {
	return e.Status == http.StatusTooManyRequests || e.Status >= 500
}

// IsLeaseLost reports whether err is the server's 409 for a lease that is
// no longer the caller's (it expired and the job was rescued, or the job
// moved on): drop the job, another attempt owns it.
func IsLeaseLost(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == http.StatusConflict
}

// IsTemporary reports whether err may pass if the call is sent again: a
// temporary *Error, or no answer at all (network).
func IsTemporary(err error) bool {
	var e *Error
	return err != nil && (!errors.As(err, &e) || e.Temporary())
}

// problemOf reads a non-2xx answer. A body that is not a problem (a
// proxy's HTML page, say) becomes one with the status text and a snippet.
func problemOf(res *http.Response, body []byte) *Error {
	e := &Error{}
	if err := json.Unmarshal(body, e); err != nil || e.Title == "" {
		snippet := strings.TrimSpace(string(body))
		if len(snippet) > 200 {
			snippet = snippet[:200] + "…"
		}
		e = &Error{Title: http.StatusText(res.StatusCode), Detail: snippet}
	}
	e.Status = res.StatusCode
	if secs, err := strconv.Atoi(strings.TrimSpace(res.Header.Get("Retry-After"))); err == nil && secs > 0 {
		e.RetryAfter = time.Duration(secs) * time.Second
	}
	return e
}
