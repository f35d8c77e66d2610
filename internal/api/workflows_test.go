package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/flow"
	"github.com/docket-run/docket/internal/testdb"
)

// designWorkflow is the definition of DESIGN §5.
const designWorkflow = `{"name": "product-match",
 "steps": [
  {"name": "fetch",   "job":   {"type": "fetch-pair"}},
  {"name": "label",   "after": ["fetch"], "human": {"task": "same-product"}},
  {"name": "review",  "after": ["label"], "if": "steps.label.confidence < 0.8",
                      "human": {"task": "qa-review"}},
  {"name": "approve", "after": ["fetch"], "signal": {"timeout": "24h"}},
  {"name": "thumbs",  "after": ["fetch"], "forEach": "steps.fetch.output.images",
                      "job":   {"type": "thumbnail"}},
  {"name": "publish", "after": ["label", "review", "approve", "thumbs"],
                      "job":   {"type": "publish"}}]}`

// The same content: other key and step order, other white space, a
// default spelled out, a duration spelled otherwise, no name.
const designWorkflowAgain = `{"steps": [
  {"job": {"type": "publish"}, "name": "publish", "after": ["thumbs", "approve", "review", "label"]},
  {"name": "fetch", "job": {"type": "fetch-pair", "queue": "fetch-pair"}, "trigger": "all_success"},
  {"name": "label", "after": ["fetch"], "human": {"task": "same-product"}},
  {"name": "review", "after": ["label"], "if": "  steps.label.confidence < 0.8 ", "human": {"task": "qa-review"}},
  {"name": "approve", "after": ["fetch"], "signal": {"timeout": "1440m"}},
  {"name": "thumbs", "after": ["fetch"], "forEach": "steps.fetch.output.images", "job": {"type": "thumbnail"}}]}`

func putWorkflow(t *testing.T, b *bundle, role docket.Role, name, body string, status int) *workflowView {
	t.Helper()
	r := b.do(t, role, "PUT", "/v1/workflows/"+name, body)
	require.Equal(t, status, r.Status, string(r.Body))
	require.Equal(t, "application/json", r.Header.Get("Content-Type"))
	var v workflowView
	r.JSON(t, &v)
	return &v
}

func TestWorkflowPutGet(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)

		v1 := putWorkflow(t, b, docket.RoleProducer, "product-match", designWorkflow, http.StatusCreated)
		require.Equal(t, "product-match", v1.Name)
		require.Equal(t, 1, v1.Version)
		require.True(t, strings.HasPrefix(v1.Hash, "sha256:"), v1.Hash)
		require.WithinDuration(t, time.Now(), v1.CreatedAt, time.Minute)
		def, err := docket.DecodeWorkflow([]byte(designWorkflow))
		require.NoError(t, err)
		hash, err := docket.WorkflowHash(def)
		require.NoError(t, err)
		require.Equal(t, hash, v1.Hash)
		// The definition comes back in canonical form: steps by name.
		var names []string
		for _, s := range v1.Definition.Steps {
			names = append(names, s.Name)
		}
		require.Equal(t, []string{"approve", "fetch", "label", "publish", "review", "thumbs"}, names)

		// The same content is a no-op: 200 with version 1.
		same := putWorkflow(t, b, docket.RoleAdmin, "product-match", designWorkflowAgain, http.StatusOK)
		require.Equal(t, *v1, *same)

		// Changed content: version 2.
		changed := strings.Replace(designWorkflow, `"24h"`, `"48h"`, 1)
		v2 := putWorkflow(t, b, docket.RoleProducer, "product-match", changed, http.StatusCreated)
		require.Equal(t, 2, v2.Version)
		require.NotEqual(t, v1.Hash, v2.Hash)

		get := func(path string, status int) *workflowView {
			r := b.do(t, docket.RoleViewer, "GET", path, nil)
			require.Equal(t, status, r.Status, string(r.Body))
			var v workflowView
			r.JSON(t, &v)
			return &v
		}
		require.Equal(t, *v2, *get("/v1/workflows/product-match", http.StatusOK))
		require.Equal(t, *v1, *get("/v1/workflows/product-match?version=1", http.StatusOK))
		require.Equal(t, *v2, *get("/v1/workflows/product-match?version=2", http.StatusOK))

		p := b.do(t, docket.RoleViewer, "GET", "/v1/workflows/product-match?version=3", nil).Problem(t, http.StatusNotFound)
		require.Equal(t, `workflow "product-match" has no version 3`, p.Detail)
		p = b.do(t, docket.RoleViewer, "GET", "/v1/workflows/nope", nil).Problem(t, http.StatusNotFound)
		require.Equal(t, `no workflow "nope"`, p.Detail)
		b.do(t, docket.RoleViewer, "GET", "/v1/workflows/bad%20name", nil).Problem(t, http.StatusNotFound)
		for _, q := range []string{"version=0", "version=-1", "version=x", "version=1.0", "version=1&version=2"} {
			p := b.do(t, docket.RoleViewer, "GET", "/v1/workflows/product-match?"+q, nil).Problem(t, http.StatusBadRequest)
			require.Equal(t, "version", p.Errors[0].Field, q)
		}
		p = b.do(t, docket.RoleViewer, "GET", "/v1/workflows/product-match?v=1", nil).Problem(t, http.StatusBadRequest)
		require.Equal(t, "v", p.Errors[0].Field)

		// Roles: admin and producer put; viewer reads; worker neither.
		b.do(t, docket.RoleViewer, "PUT", "/v1/workflows/product-match", designWorkflow).Problem(t, http.StatusForbidden)
		b.do(t, docket.RoleWorker, "PUT", "/v1/workflows/product-match", designWorkflow).Problem(t, http.StatusForbidden)
		b.do(t, docket.RoleWorker, "GET", "/v1/workflows/product-match", nil).Problem(t, http.StatusForbidden)
		b.do(t, docket.RoleWorker, "GET", "/v1/workflows", nil).Problem(t, http.StatusForbidden)
		b.do(t, "", "GET", "/v1/workflows", nil).Problem(t, http.StatusUnauthorized)
		b.do(t, docket.RoleAdmin, "DELETE", "/v1/workflows/product-match", nil).Problem(t, http.StatusMethodNotAllowed)
		b.do(t, docket.RoleAdmin, "POST", "/v1/workflows", designWorkflow).Problem(t, http.StatusMethodNotAllowed)
	})
}

func TestWorkflowList(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		r := b.do(t, docket.RoleViewer, "GET", "/v1/workflows", nil)
		require.Equal(t, http.StatusOK, r.Status)
		require.JSONEq(t, `{"items":[],"nextCursor":null}`, string(r.Body))

		for _, name := range []string{"e", "c", "a", "d", "b"} {
			putWorkflow(t, b, docket.RoleAdmin, name, `{"steps":[{"name":"only","job":{"type":"t"}}]}`, http.StatusCreated)
		}
		putWorkflow(t, b, docket.RoleAdmin, "c", `{"steps":[{"name":"only","job":{"type":"t2"}}]}`, http.StatusCreated)

		var names []string
		var versions []int
		path := "/v1/workflows?limit=2"
		for page := 0; ; page++ {
			require.Less(t, page, 5)
			r := b.do(t, docket.RoleViewer, "GET", path, nil)
			require.Equal(t, http.StatusOK, r.Status, string(r.Body))
			var resp workflowsResponse
			r.JSON(t, &resp)
			require.LessOrEqual(t, len(resp.Items), 2)
			for _, v := range resp.Items {
				names = append(names, v.Name)
				versions = append(versions, v.Version)
				require.NotNil(t, v.Definition)
			}
			if resp.NextCursor == nil {
				break
			}
			path = "/v1/workflows?limit=2&cursor=" + *resp.NextCursor
		}
		require.Equal(t, []string{"a", "b", "c", "d", "e"}, names)
		require.Equal(t, []int{1, 1, 2, 1, 1}, versions, "the latest version of each")

		for _, q := range []string{"limit=0", "limit=501", "limit=x", "cursor=%21", "cursor=" + encodeNameCursor("bad name"), "cursor=YQ=", "status=x", "limit=1&limit=2"} {
			p := b.do(t, docket.RoleViewer, "GET", "/v1/workflows?"+q, nil).Problem(t, http.StatusBadRequest)
			require.Len(t, p.Errors, 1, q)
		}
	})
}

// message returns the message of field in p.
func message(t *testing.T, p *Problem, field string) string {
	t.Helper()
	for _, e := range p.Errors {
		if e.Field == field {
			return e.Message
		}
	}
	t.Fatalf("no error for %s in %+v", field, p.Errors)
	return ""
}

func TestWorkflowPutProblems(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)

		// Every kind of structural problem, and expressions that do not
		// compile, in one body: one 400 names each field.
		body := `{"name": "other",
		 "steps": [
		  {"name": "a", "job": {"type": "t", "priority": "high", "maxAttempts": 2.5}, "jb": 1},
		  {"name": "b", "after": ["a", "ghost"], "job": {"type": "t"}},
		  {"name": "c", "after": ["d"], "job": {"type": "t"}},
		  {"name": "d", "after": ["c"], "job": {"type": "t"}},
		  {"name": "b", "job": {"type": "t"}},
		  {"name": "e", "after": ["a"], "if": "steps.a.output >", "job": {"type": "t"}},
		  {"name": "f", "after": ["a"], "forEach": "3", "job": {"type": "t"}},
		  {"name": "g", "after": "a", "Job": {"type": "t"}},
		  7]}`
		p := b.do(t, docket.RoleProducer, "PUT", "/v1/workflows/mine", body).Problem(t, http.StatusBadRequest)
		require.ElementsMatch(t, []string{
			"steps[0].jb", "steps[0].job.maxAttempts", "steps[0].job.priority", "steps[7].Job", "steps[7].after", "steps[8]",
			"name", "steps[1].after[1]", "steps[4].name", "steps[5].if", "steps[6].forEach", "steps[7]", "steps[3].after[0]",
		}, fields(p), "%+v", p.Errors)
		require.Equal(t, `is "other" but the path names "mine": send the same name, or none`, message(t, p, "name"))
		require.Equal(t, `step "a": must be an integer, not a string`, message(t, p, "steps[0].job.priority"))
		require.Equal(t, `step "a": must be an integer, not 2.5`, message(t, p, "steps[0].job.maxAttempts"))
		require.Contains(t, message(t, p, "steps[0].jb"), `step "a": unknown field "jb" (known: name, job, signal, human, after, if, forEach, input, trigger, onFailure)`)
		require.Equal(t, `step "g": unknown field "Job" (did you mean "job"?)`, message(t, p, "steps[7].Job"))
		require.Equal(t, `step "g": must be an array, not a string`, message(t, p, "steps[7].after"))
		require.Equal(t, `step 8: must be an object, not the number 7`, message(t, p, "steps[8]"))
		require.Equal(t, `step "b": after names unknown step "ghost"`, message(t, p, "steps[1].after[1]"))
		require.Contains(t, message(t, p, "steps[3].after[0]"), `step "d": after[0] makes a cycle: `)
		require.Contains(t, message(t, p, "steps[4].name"), `step "b": duplicate name (also steps[1])`)
		require.Contains(t, message(t, p, "steps[5].if"), `step "e": if: `)
		require.Contains(t, message(t, p, "steps[6].forEach"), `step "f": forEach: must be a list expression, not int`)
		require.Contains(t, p.Detail, `steps[3].after[0]: step "d": after[0] makes a cycle: c → d → c`)

		// With a sound structure the references are checked: a step that
		// does not exist, one that is not an ancestor.
		body = `{"name": "refs", "steps": [
		  {"name": "a", "job": {"type": "t"}},
		  {"name": "b", "after": ["a"], "if": "steps.nope.output == 1", "job": {"type": "t"}},
		  {"name": "c", "after": ["a"], "forEach": "steps.b.output.items", "job": {"type": "t"}}]}`
		p = b.do(t, docket.RoleProducer, "PUT", "/v1/workflows/refs", body).Problem(t, http.StatusBadRequest)
		require.Equal(t, []string{"steps[1].if", "steps[2].forEach"}, fields(p))
		require.Equal(t, `step "b": if: steps.nope is not a step of this workflow`, message(t, p, "steps[1].if"))
		require.Contains(t, message(t, p, "steps[2].forEach"), `step "c": forEach: steps.b is not an ancestor of "c"`)

		// Two faults in one expression: one entry, both messages.
		body = `{"steps": [{"name": "a", "job": {"type": "t"}},
		  {"name": "b", "after": ["a"], "if": "steps.x.y == 1 && steps.z.w == 2", "job": {"type": "t"}}]}`
		p = b.do(t, docket.RoleProducer, "PUT", "/v1/workflows/two", body).Problem(t, http.StatusBadRequest)
		require.Equal(t, []string{"steps[1].if"}, fields(p))
		require.Contains(t, p.Errors[0].Message, "steps.x is not a step")
		require.Contains(t, p.Errors[0].Message, "steps.z is not a step")

		for _, tc := range []struct {
			name, path, body string
			status           int
			fields           []string
		}{
			{"repeated key", "w", `{"name":"w","steps":[{"name":"a","name":"b","job":{"type":"t"}}]}`, 400, []string{"steps[0].name"}},
			{"not an object", "w", `[1]`, 400, []string{"(body)"}},
			{"null", "w", `null`, 400, []string{"(body)"}},
			{"no steps", "w", `{}`, 400, []string{"steps"}},
			{"bad path name", "a%20b", `{"steps":[{"name":"a","job":{"type":"t"}}]}`, 400, []string{"name"}},
			{"bad name in both", "-x", `{"name":"-x","steps":[{"name":"a","job":{"type":"t"}}]}`, 400, []string{"name"}},
			// A body wrong as a whole names (body) too (it named nothing).
			{"malformed", "w", `{"name":`, 400, []string{"(body)"}},
			{"trailing data", "w", `{"steps":[]} {}`, 400, []string{"(body)"}},
			{"empty", "w", ``, 400, []string{"(body)"}},
			{"wrong name type", "w", `{"name":1,"steps":[{"name":"a","job":{"type":"t"}}]}`, 400, []string{"name"}},
			{"step name reserved", "w", `{"steps":[{"name":"in","job":{"type":"t"}}]}`, 400, []string{"steps[0].name"}},
			{"two kinds", "w", `{"steps":[{"name":"a","job":{"type":"t"},"signal":{}}]}`, 400, []string{"steps[0]"}},
			{"overrides not an object", "w", `{"steps":[{"name":"a","human":{"task":"t","overrides":[1]}}]}`, 400, []string{"steps[0].human.overrides"}},
			{"huge integer", "w", `{"steps":[{"name":"a","job":{"type":"t","priority":1e400}}]}`, 400, []string{"steps[0].job.priority"}},
		} {
			r := b.do(t, docket.RoleProducer, "PUT", "/v1/workflows/"+tc.path, tc.body)
			p := r.Problem(t, tc.status)
			require.Equal(t, tc.fields, fields(p), "%s: %+v", tc.name, p)
		}
		b.do(t, docket.RoleProducer, "PUT", "/v1/workflows/w", designWorkflow, "Content-Type", "text/plain").Problem(t, http.StatusUnsupportedMediaType)
		p = b.do(t, docket.RoleProducer, "PUT", "/v1/workflows/w?force=1", `{"steps":[{"name":"a","job":{"type":"t"}}]}`).Problem(t, http.StatusBadRequest)
		require.Equal(t, []string{"force"}, fields(p))

		// Nothing was stored by any of them.
		r := b.do(t, docket.RoleViewer, "GET", "/v1/workflows", nil)
		require.Equal(t, http.StatusOK, r.Status)
		require.JSONEq(t, `{"items":[],"nextCursor":null}`, string(r.Body))
	})
}

// However many problems a body has, the answer lists at most
// flow.MaxProblems fields and says how many more there were.
func TestWorkflowPutManyProblems(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Backends()[0])
	var steps []string
	for i := range 300 {
		steps = append(steps, fmt.Sprintf(`{"name":"s%d","job":{"type":"t"},"x":1}`, i))
	}
	p := b.do(t, docket.RoleAdmin, "PUT", "/v1/workflows/many", `{"steps":[`+strings.Join(steps, ",")+`]}`).Problem(t, http.StatusBadRequest)
	require.Len(t, p.Errors, flow.MaxProblems+1)
	require.Equal(t, "steps[0].x", p.Errors[0].Field)
	require.Equal(t, FieldError{Field: "(body)", Message: "and 200 more fields with problems"}, p.Errors[flow.MaxProblems])
}

// A definition over the size limit of definitions is refused even when the
// server takes larger bodies.
func TestWorkflowPutTooLarge(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Backends()[0], func(c *Config) { c.MaxBodyBytes = 4 << 20 })
	var sb strings.Builder
	sb.WriteString(`{"steps":[`)
	for i := 0; sb.Len() < 1<<20+100; i++ {
		if i > 0 {
			sb.WriteString(",")
		}
		fmt.Fprintf(&sb, `{"name":"s%d","job":{"type":"%s"}}`, i, strings.Repeat("t", 100))
	}
	sb.WriteString("]}")
	b.do(t, docket.RoleAdmin, "PUT", "/v1/workflows/big", sb.String()).Problem(t, http.StatusRequestEntityTooLarge)
}

// Concurrent puts of the same new content make one version: one 201, the
// others 200 with that version.
func TestWorkflowPutConcurrent(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		const n = 8
		statuses := make(chan int, n)
		versions := make(chan int, n)
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := b.do(t, docket.RoleProducer, "PUT", "/v1/workflows/product-match", designWorkflow)
				var v workflowView
				_ = json.Unmarshal(r.Body, &v)
				statuses <- r.Status
				versions <- v.Version
			}()
		}
		wg.Wait()
		close(statuses)
		close(versions)
		count := map[int]int{}
		for s := range statuses {
			count[s]++
		}
		require.Equal(t, map[int]int{http.StatusCreated: 1, http.StatusOK: n - 1}, count)
		for v := range versions {
			require.Equal(t, 1, v)
		}
	})
}
