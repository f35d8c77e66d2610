package api

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// fields are the names of a problem's field errors, in order.
func fields(p *Problem) []string {
	var out []string
	for _, e := range p.Errors {
		out = append(out, e.Field)
	}
	return out
}

// What a new user hit, one case each: the answer names what is wrong.
func TestNewUserFindings(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		admin := docket.RoleAdmin

		t.Run("ListFilters", func(t *testing.T) {
			// List filters take several values, comma-separated or
			// repeated; single-valued parameters refuse a second value.
			require.Equal(t, http.StatusOK, b.do(t, admin, "GET", "/v1/jobs?status=QUEUED,RUNNING&status=RETRY&queue=a&queue=b", nil).Status)
			for _, q := range []string{"priority=0,1", "priority=0&priority=1", "limit=5&limit=6", "limit=5,6", "cursor=a&cursor=b"} {
				name, _, _ := strings.Cut(q, "=")
				p := b.do(t, admin, "GET", "/v1/jobs?"+q, nil).Problem(t, http.StatusBadRequest)
				require.Equal(t, []string{name}, fields(p), q)
				require.Contains(t, p.Detail, "one value", q)
			}
		})

		t.Run("UnknownEventType", func(t *testing.T) {
			p := b.do(t, admin, "GET", "/v1/events?types=job.state_changed,job.stat_changed", nil).Problem(t, http.StatusBadRequest)
			require.Equal(t, []string{"types"}, fields(p))
			require.Contains(t, p.Detail, `"job.stat_changed"`)
			require.Contains(t, p.Detail, "job.progress", "the known types are listed")
		})

		t.Run("IntegerMessage", func(t *testing.T) {
			p := b.do(t, admin, "POST", "/v1/jobs", `{"jobType":"t","priority":1.5}`).Problem(t, http.StatusBadRequest)
			require.Equal(t, []FieldError{{Field: "priority", Message: "must be an integer, not 1.5"}}, p.Errors)
		})

		t.Run("EveryInvalidField", func(t *testing.T) {
			p := b.do(t, admin, "POST", "/v1/jobs", `{"jobType":"t","priority":"high","maxAttempts":"3","nope":1}`).Problem(t, http.StatusBadRequest)
			require.ElementsMatch(t, []string{"priority", "maxAttempts", "nope"}, fields(p))
			p = b.do(t, admin, "POST", "/v1/jobs", `{"jobType":"","priority":99,"maxAttempts":0,"timeoutSeconds":-1}`).Problem(t, http.StatusBadRequest)
			require.ElementsMatch(t, []string{"jobType", "priority", "maxAttempts", "timeoutSeconds"}, fields(p))
			// A type error and a rule broken by another field.
			p = b.do(t, admin, "POST", "/v1/jobs", `{"jobType":"t","priority":"x","maxAttempts":0}`).Problem(t, http.StatusBadRequest)
			require.ElementsMatch(t, []string{"priority", "maxAttempts"}, fields(p))
			p = b.do(t, admin, "POST", "/v1/leases", `{"queues":[]}`).Problem(t, http.StatusBadRequest)
			require.ElementsMatch(t, []string{"queues", "workerId", "leaseSeconds"}, fields(p))
		})

		t.Run("DuplicateKeys", func(t *testing.T) {
			// A key the API's own object repeats is refused, named; a key
			// repeated inside the payload is the user's JSON, kept as sent.
			p := b.do(t, admin, "POST", "/v1/jobs", `{"jobType":"a","payload":{"x":1,"x":2},"jobType":"b"}`).Problem(t, http.StatusBadRequest)
			require.Equal(t, []string{"jobType"}, fields(p))
			require.Contains(t, p.Detail, "more than once")
			r := b.do(t, admin, "POST", "/v1/jobs", `{"jobType":"dup","payload":{"x":1,"x":2,"y":{"z":1,"z":2}}}`)
			require.Equal(t, http.StatusAccepted, r.Status, string(r.Body))
			// In a batch, each item is the API's object: its repeated key
			// fails that item only.
			r = b.do(t, admin, "POST", "/v1/jobs:batch", `{"jobs":[{"jobType":"dup","payload":{"x":1,"x":2}},{"jobType":"a","jobType":"b"}]}`)
			require.Equal(t, http.StatusAccepted, r.Status, string(r.Body))
			var resp struct{ Items []struct{ Error *Problem } }
			r.JSON(t, &resp)
			require.Len(t, resp.Items, 2)
			require.Nil(t, resp.Items[0].Error)
			require.NotNil(t, resp.Items[1].Error)
			require.Equal(t, []FieldError{{Field: "jobType", Message: "appears more than once"}}, resp.Items[1].Error.Errors)
		})

		t.Run("AllowHeader", func(t *testing.T) {
			r := b.do(t, admin, "DELETE", "/v1/jobs", nil)
			r.Problem(t, http.StatusMethodNotAllowed)
			require.Equal(t, "GET, HEAD, POST", r.Header.Get("Allow"))
		})

		t.Run("NoHTMLEscapes", func(t *testing.T) {
			r := b.do(t, admin, "POST", "/v1/jobs", `{"jobType":"t","<b>":1}`)
			r.Problem(t, http.StatusBadRequest)
			require.Contains(t, string(r.Body), `<b>: is not a known field`)
		})
	})
}
