package api

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
)

// problemFor walks joined errors at any depth, under any wrapping, and
// names every field once; an error naming no field stands alone.
func TestProblemForWalksJoins(t *testing.T) {
	t.Parallel()
	verr := func(f string) error { return &docket.ValidationError{Field: f, Message: "is wrong"} }
	names := func(p *Problem) []string {
		var out []string
		for _, e := range p.Errors {
			out = append(out, e.Field)
		}
		return out
	}

	nested := fmt.Errorf("validate: %w", errors.Join(
		verr("a"),
		errors.Join(invalidField("b", "bad"), fmt.Errorf("wrapped: %w", verr("c"))),
		invalidFields([]FieldError{{Field: "d", Message: "x"}, {Field: "e", Message: "y"}}),
	))
	p := problemFor(nested)
	require.Equal(t, http.StatusBadRequest, p.Status)
	require.Equal(t, []string{"a", "b", "c", "d", "e"}, names(p))

	p = problemFor(errors.Join(invalidFields([]FieldError{{Field: "x", Message: "1"}, {Field: "y", Message: "2"}}), verr("x")))
	require.Equal(t, []string{"x", "y"}, names(p), "each field once, named by the first error about it")
	require.Equal(t, "1", p.Errors[0].Message)

	p = problemFor(fmt.Errorf("lease: %w", errors.Join(verr("a"), fmt.Errorf("finish: %w", docket.ErrLeaseLost))))
	require.Equal(t, http.StatusConflict, p.Status, "an error naming no field stands alone")

	p = problemFor(fmt.Errorf("one: %w", verr("only")))
	require.Equal(t, []string{"only"}, names(p))
}

// A transaction the database aborted to break a deadlock is a 503 with
// Retry-After: nothing was written and the same request should succeed.
func TestProblemForContention(t *testing.T) {
	t.Parallel()
	p := problemFor(fmt.Errorf("judge: %w", docket.ErrContention))
	require.Equal(t, http.StatusServiceUnavailable, p.Status)
	require.Equal(t, problemBase+"contention", p.Type)
	require.Equal(t, 1, p.RetryAfter)
}
