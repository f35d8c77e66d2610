package web

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/html"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// fanFlow is split → each (one instance per item of the input) → join,
// every step a job in queue "wf".
const fanFlow = `{"name": "fan", "steps": [
 {"name": "split", "job": {"type": "t", "queue": "wf"}},
 {"name": "each", "job": {"type": "t", "queue": "wf"}, "after": ["split"], "forEach": "input.items"},
 {"name": "join", "job": {"type": "t", "queue": "wf"}, "after": ["each"]}]}`

func putWorkflow(t *testing.T, c *docket.Client, src string) *docket.WorkflowVersion {
	t.Helper()
	def, err := docket.DecodeWorkflow([]byte(src))
	require.NoError(t, err)
	v, _, err := c.WorkflowPut(context.Background(), def)
	require.NoError(t, err)
	return v
}

func leaseWF(t *testing.T, c *docket.Client, n int) []*docket.Lease {
	t.Helper()
	ls, err := c.Lease(context.Background(), docket.LeaseParams{Queues: []string{"wf"}, Max: n, Duration: time.Minute, WorkerID: "node-w"})
	require.NoError(t, err)
	require.Len(t, ls, n)
	return ls
}

// dagNodeOf is the <g> of step name in the run page's DAG.
func dagNodeOf(t *testing.T, doc *html.Node, name string) *html.Node {
	t.Helper()
	svg := find(doc, "svg", "dag")
	require.NotNil(t, svg, "the page has the DAG")
	var found *html.Node
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && n.Data == "g" && attr(n, "data-step") == name {
			found = n
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(svg)
	require.NotNil(t, found, "no node %s in the DAG", name)
	return found
}

func runState(t *testing.T, c *docket.Client, id uuid.UUID) docket.RunState {
	t.Helper()
	r, err := c.RunGet(context.Background(), id)
	require.NoError(t, err)
	return r.State
}

func TestRunPages(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		ctx := context.Background()
		b := setup(t, backend)
		putWorkflow(t, b.client, fanFlow)
		started, err := b.client.RunStart(ctx, "fan", map[string]any{"items": []int{1, 2, 3}}, nil)
		require.NoError(t, err)
		id := started.Run.ID
		split := leaseWF(t, b.client, 1)[0]
		require.NoError(t, b.client.LeaseComplete(ctx, split.ID, json.RawMessage(`{"ok":true}`)))

		// The list, filtered and paged.
		putWorkflow(t, b.client, `{"name": "other", "steps": [{"name": "only", "job": {"type": "t", "queue": "other"}}]}`)
		var more []docket.RunStartParams
		for range pageSize {
			more = append(more, docket.RunStartParams{Workflow: "other"})
		}
		_, err = b.client.RunStartMany(ctx, more)
		require.NoError(t, err)
		viewer := b.signIn(t, docket.RoleViewer)
		runIDs := func(r *response) []string {
			var out []string
			tbody := find(find(r.Doc, "table", ""), "tbody", "")
			for tr := tbody.FirstChild; tr != nil; tr = tr.NextSibling {
				if a := find(tr, "a", ""); a != nil && tr.Type == html.ElementNode {
					out = append(out, text(a))
				}
			}
			return out
		}
		r := viewer.get(t, "/runs")
		require.Equal(t, http.StatusOK, r.Status)
		first := runIDs(r)
		require.Len(t, first, pageSize)
		next := find(r.Doc, "a", "next")
		require.NotNil(t, next)
		r = viewer.get(t, attr(next, "href"))
		require.Equal(t, []string{id.String()}, runIDs(r), "the oldest run is alone on the second page")
		require.NotContains(t, first, id.String())
		require.Equal(t, []string{id.String()}, runIDs(viewer.get(t, "/runs?workflow=fan")))
		r = viewer.get(t, "/runs?state=running")
		require.Len(t, runIDs(r), pageSize)
		require.Contains(t, r.Body, `<option value="RUNNING" selected>`, "the form shows the state filtered, so filtering again keeps it")
		require.Empty(t, runIDs(viewer.get(t, "/runs?state=failed")))
		require.Empty(t, runIDs(viewer.get(t, "/runs?workflow=nope")))
		r = viewer.get(t, "/runs?state=DONE&cursor=x")
		require.Equal(t, http.StatusBadRequest, r.Status)
		alert := text(find(r.Doc, "ul", ""))
		require.Contains(t, alert, "state:")
		require.Contains(t, alert, "cursor:")

		// The run page: fields, steps, the DAG with the fan-out as one node.
		r = viewer.get(t, "/runs/"+id.String())
		require.Equal(t, http.StatusOK, r.Status)
		require.Equal(t, "RUNNING", text(find(r.Doc, "span", "run-state")))
		each := dagNodeOf(t, r.Doc, "each")
		require.Contains(t, attr(each, "class"), "ss-running")
		require.Contains(t, text(each), "each ×3")
		require.Contains(t, text(each), "3 running")
		require.Contains(t, attr(dagNodeOf(t, r.Doc, "split"), "class"), "ss-succeeded")
		require.Contains(t, attr(dagNodeOf(t, r.Doc, "join"), "class"), "ss-pending")
		steps := find(r.Doc, "table", "steps")
		require.Contains(t, text(steps), "job "+split.Job.ID.String())
		require.Nil(t, find(r.Doc, "button", "pause"), "a viewer has no buttons")
		require.Equal(t, http.StatusForbidden, viewer.post(t, "/runs/"+id.String()+"/pause", nil).Status, "a viewer cannot act")
		require.Equal(t, docket.RunRunning, runState(t, b.client, id))

		// A producer pauses and resumes.
		producer := b.signIn(t, docket.RoleProducer)
		r = producer.get(t, "/runs/"+id.String())
		require.NotNil(t, find(r.Doc, "button", "pause"))
		require.NotNil(t, find(r.Doc, "button", "cancel"))
		require.Nil(t, find(r.Doc, "button", "retry"))
		require.Equal(t, http.StatusForbidden, producer.post(t, "/runs/"+id.String()+"/pause", url.Values{"csrf": {"forged"}}).Status)
		require.Equal(t, docket.RunRunning, runState(t, b.client, id), "a refused form changes nothing")
		r = producer.post(t, "/runs/"+id.String()+"/pause", nil)
		require.Equal(t, http.StatusSeeOther, r.Status)
		r = producer.get(t, r.Header.Get("Location"))
		require.Equal(t, "PAUSED", text(find(r.Doc, "span", "run-state")))
		require.Contains(t, r.Body, "pause done")
		require.NotNil(t, find(r.Doc, "button", "resume"))
		r = producer.post(t, "/runs/"+id.String()+"/resume", nil)
		require.Equal(t, http.StatusSeeOther, r.Status)
		require.Equal(t, docket.RunRunning, runState(t, b.client, id))

		// One instance fails for good: the run FAILED, the node is red with
		// its counts; cancel is refused with 409, retry runs it again.
		ls := leaseWF(t, b.client, 3)
		_, err = b.client.LeaseFail(ctx, ls[0].ID, "disk <full>", false)
		require.NoError(t, err)
		for _, l := range ls[1:] {
			require.NoError(t, b.client.LeaseComplete(ctx, l.ID, json.RawMessage(`{}`)))
		}
		require.Equal(t, docket.RunFailed, runState(t, b.client, id))
		require.Equal(t, []string{id.String()}, runIDs(producer.get(t, "/runs?state=FAILED&workflow=fan")))
		r = producer.get(t, "/runs/"+id.String())
		each = dagNodeOf(t, r.Doc, "each")
		require.Contains(t, attr(each, "class"), "ss-failed")
		require.Contains(t, text(each), "1 failed · 2 succeeded")
		require.Contains(t, text(find(r.Doc, "table", "steps")), "disk <full>")
		require.NotNil(t, find(r.Doc, "button", "retry"))
		require.Nil(t, find(r.Doc, "button", "cancel"))
		r = producer.post(t, "/runs/"+id.String()+"/cancel", nil)
		require.Equal(t, http.StatusConflict, r.Status)
		require.Contains(t, text(find(r.Doc, "p", "")), "Cannot cancel")
		require.Equal(t, docket.RunFailed, runState(t, b.client, id))
		r = producer.post(t, "/runs/"+id.String()+"/retry", nil)
		require.Equal(t, http.StatusSeeOther, r.Status)
		require.Equal(t, docket.RunRunning, runState(t, b.client, id))
		r = producer.post(t, "/runs/"+id.String()+"/cancel", nil)
		require.Equal(t, http.StatusSeeOther, r.Status)
		require.Equal(t, docket.RunCanceled, runState(t, b.client, id))

		// Unknown and malformed ids.
		require.Equal(t, http.StatusNotFound, producer.get(t, "/runs/"+uuid.New().String()).Status)
		require.Equal(t, http.StatusNotFound, producer.get(t, "/runs/nope").Status)
		require.Equal(t, http.StatusNotFound, producer.post(t, "/runs/"+uuid.New().String()+"/retry", nil).Status)
	})
}

func TestWorkflowPages(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		putWorkflow(t, b.client, fanFlow)
		putWorkflow(t, b.client, strings.Replace(fanFlow, `"type": "t", "queue": "wf"}, "after": ["each"]`, `"type": "t2", "queue": "wf"}, "after": ["each"]`, 1))
		putWorkflow(t, b.client, `{"name": "a-first", "steps": [{"name": "only", "job": {"type": "t"}}]}`)
		viewer := b.signIn(t, docket.RoleViewer)
		r := viewer.get(t, "/workflows")
		require.Equal(t, http.StatusOK, r.Status)
		list := text(find(r.Doc, "table", ""))
		require.Less(t, strings.Index(list, "a-first"), strings.Index(list, "fan"), "by name")

		r = viewer.get(t, "/workflows/fan")
		require.Equal(t, http.StatusOK, r.Status)
		require.Contains(t, text(find(r.Doc, "h1", "")), "version 2 (latest)")
		require.Contains(t, text(find(r.Doc, "pre", "definition")), `"type": "t2"`)
		require.Contains(t, attr(dagNodeOf(t, r.Doc, "each"), "class"), "ss-def")
		require.Contains(t, r.Body, `href="/workflows/fan?version=1"`)
		r = viewer.get(t, "/workflows/fan?version=1")
		require.Equal(t, http.StatusOK, r.Status)
		require.NotContains(t, text(find(r.Doc, "pre", "definition")), `"t2"`)
		require.Equal(t, http.StatusNotFound, viewer.get(t, "/workflows/fan?version=9").Status)
		require.Equal(t, http.StatusBadRequest, viewer.get(t, "/workflows/fan?version=x").Status)
		require.Equal(t, http.StatusNotFound, viewer.get(t, "/workflows/nope").Status)
	})
}

const labelTask = `{"title": "Same product?",
 "fields": [{"name": "same", "kind": "choice", "required": true, "options": [{"value": "yes"}, {"value": "no"}]}],
 "judgmentsPerUnit": {"min": 2}}`

func TestPoolPages(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		ctx := context.Background()
		b := setup(t, backend)
		tmpl, err := docket.ParseTask([]byte(labelTask))
		require.NoError(t, err)
		_, _, err = b.client.TaskPut(ctx, "same", tmpl)
		require.NoError(t, err)
		putWorkflow(t, b.client, `{"name": "review", "steps": [{"name": "label", "human": {"task": "same"}}]}`)
		pool, _, err := b.client.PoolEnsure(ctx, "review", 1, "label", "same")
		require.NoError(t, err)
		_, err = b.client.UnitsAdd(ctx, pool.ID, []json.RawMessage{json.RawMessage(`{"a":1}`), json.RawMessage(`{"a":2}`), json.RawMessage(`{"a":3}`)})
		require.NoError(t, err)

		viewer := b.signIn(t, docket.RoleViewer)
		r := viewer.get(t, "/pools")
		require.Equal(t, http.StatusOK, r.Status)
		row := text(find(find(r.Doc, "table", ""), "tbody", ""))
		require.Contains(t, row, "review v1 / label")
		require.Contains(t, row, "0/3")
		bar := find(r.Doc, "progress", "")
		require.Equal(t, "3", attr(bar, "max"))
		require.Equal(t, "0", attr(bar, "value"))
		require.Equal(t, http.StatusBadRequest, viewer.get(t, "/pools?cursor=zz").Status)

		r = viewer.get(t, "/pools/"+pool.ID.String())
		require.Equal(t, http.StatusOK, r.Status)
		require.Equal(t, "OPEN", text(find(r.Doc, "span", "pool-status")))
		require.Contains(t, text(find(r.Doc, "dd", "pool-counts")), "3 judgable")
		require.Contains(t, text(find(r.Doc, "table", "units")), "0/2")
		require.Nil(t, find(r.Doc, "button", "pause"), "only admin acts on pools")
		producer := b.signIn(t, docket.RoleProducer)
		producer.get(t, "/pools/"+pool.ID.String())
		require.Equal(t, http.StatusForbidden, producer.post(t, "/pools/"+pool.ID.String()+"/pause", nil).Status)

		admin := b.signIn(t, docket.RoleAdmin)
		r = admin.get(t, "/pools/"+pool.ID.String())
		require.NotNil(t, find(r.Doc, "button", "pause"))
		require.NotNil(t, find(r.Doc, "button", "close"))
		require.Equal(t, http.StatusForbidden, admin.post(t, "/pools/"+pool.ID.String()+"/pause", url.Values{"csrf": {""}}).Status)
		r = admin.post(t, "/pools/"+pool.ID.String()+"/pause", nil)
		require.Equal(t, http.StatusSeeOther, r.Status)
		r = admin.get(t, r.Header.Get("Location"))
		require.Equal(t, "PAUSED", text(find(r.Doc, "span", "pool-status")))
		require.Contains(t, r.Body, "pause done")
		require.NotNil(t, find(r.Doc, "button", "resume"))
		require.Equal(t, http.StatusSeeOther, admin.post(t, "/pools/"+pool.ID.String()+"/close", nil).Status)
		r = admin.post(t, "/pools/"+pool.ID.String()+"/resume", nil)
		require.Equal(t, http.StatusConflict, r.Status)
		require.Contains(t, r.Body, "Cannot resume")
		got, err := b.client.PoolGet(ctx, pool.ID)
		require.NoError(t, err)
		// Its units had no judgment and no assignment: the close canceled
		// them, and the pool is COMPLETED at once.
		require.Equal(t, docket.PoolCompleted, got.Status)
		require.Equal(t, 3, got.Counts.Canceled)

		require.Equal(t, http.StatusNotFound, admin.get(t, "/pools/"+uuid.New().String()).Status)
		require.Equal(t, http.StatusNotFound, admin.post(t, "/pools/nope/close", nil).Status)
	})
}
