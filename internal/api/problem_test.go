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

// TestBatchPartialContention: a runs batch whose later chunk the
// database aborted (a deadlock) says that the earlier runs were started
// and which to send again, and not the single request's "nothing was
// written, the same request again should succeed", which would start
// the runs without a key twice.
func TestBatchPartialContention(t *testing.T) {
	t.Parallel()
	runs := make([]batchRun, 2500)
	p := batchPartial(fmt.Errorf("start runs: %w", docket.ErrContention), 1000, runs)
	require.Equal(t, http.StatusServiceUnavailable, p.Status)
	require.Equal(t, problemBase+"contention", p.Type)
	require.Equal(t, 1, p.RetryAfter)
	require.Contains(t, p.Detail, "runs 0 to 999 were started; runs from 1000 on were not")
	require.NotContains(t, p.Detail, "nothing was written")
	require.NotContains(t, p.Detail, "the same request again")
	require.Contains(t, p.Detail, "send runs from 1000 on again after Retry-After")
	require.Contains(t, p.Detail, "would start runs 0 to 999 again", "runs without keys")

	for i := range runs {
		runs[i].key = fmt.Sprint("k", i)
	}
	p = batchPartial(fmt.Errorf("start runs: %w", docket.ErrContention), 1000, runs)
	require.Equal(t, 1, p.RetryAfter)
	require.Contains(t, p.Detail, "runs 0 to 999 were started; runs from 1000 on were not")
	require.Contains(t, p.Detail, "or the whole batch", "every run has a key: resending it all is safe")
	require.NotContains(t, p.Detail, "nothing was written")

	// A full database: its 507, the same advice without Retry-After.
	for i := range runs {
		runs[i].key = ""
	}
	p = batchPartial(fmt.Errorf("start runs: %w", diskFull{}), 1000, runs)
	require.Equal(t, http.StatusInsufficientStorage, p.Status)
	require.Equal(t, problemBase+"storage-full", p.Type)
	require.Contains(t, p.Detail, "runs 0 to 999 were started; runs from 1000 on were not: the database has no room left for them")
	require.NotContains(t, p.Detail, "nothing was written")
	require.NotContains(t, p.Detail, "the same request again")
	require.Contains(t, p.Detail, "send runs from 1000 on again once space is freed")
	require.Contains(t, p.Detail, "would start runs 0 to 999 again", "runs without keys")

	// Another error keeps its own detail after what was started.
	p = batchPartial(notFound(`workflow "w" has no version 3`), 1000, runs)
	require.Equal(t, http.StatusNotFound, p.Status)
	require.Equal(t, `runs 0 to 999 were started; runs from 1000 on were not: workflow "w" has no version 3`, p.Detail)
}

// diskFull is an error as pgx reports PostgreSQL's disk_full.
type diskFull struct{}

func (diskFull) Error() string {
	return "ERROR: could not extend file: No space left on device (SQLSTATE 53100)"
}
func (diskFull) SQLState() string { return "53100" }
