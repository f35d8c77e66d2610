package web

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/task"
	"github.com/docket-run/docket/internal/testdb"
)

func TestJobsList(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		for i := range pageSize + 5 {
			insert(t, b.client, "email", "mail", fmt.Sprintf(`{"n":%d}`, i))
		}
		gone := dead(t, b.client, "images")
		resize := insert(t, b.client, "resize", "images", `{}`)
		br := b.signIn(t, docket.RoleViewer)

		ids := func(r *response) []string {
			var out []string
			tbody := find(find(r.Doc, "table", ""), "tbody", "")
			for tr := tbody.FirstChild; tr != nil; tr = tr.NextSibling {
				if a := find(tr, "a", ""); a != nil && tr.Type == 3 {
					out = append(out, text(a))
				}
			}
			return out
		}
		// Unfiltered: the newest page, then the next through the cursor.
		r := br.get(t, "/jobs")
		require.Equal(t, http.StatusOK, r.Status)
		first := ids(r)
		require.Len(t, first, pageSize)
		require.Equal(t, resize.ID.String(), first[0], "newest first")
		next := find(r.Doc, "a", "next")
		require.NotNil(t, next)
		r = br.get(t, attr(next, "href"))
		second := ids(r)
		require.Len(t, second, 7)
		require.Nil(t, find(r.Doc, "a", "next"), "the last page has no next")
		for _, id := range second {
			require.NotContains(t, first, id)
		}
		// Filters: state, type, queue — each server-side.
		require.Equal(t, []string{gone.ID.String()}, ids(br.get(t, "/jobs?state=DEAD")))
		require.Equal(t, []string{gone.ID.String()}, ids(br.get(t, "/jobs?state=dead&queue=images")))
		require.Equal(t, []string{resize.ID.String()}, ids(br.get(t, "/jobs?type=resize")))
		require.Equal(t, []string{resize.ID.String(), gone.ID.String()}, ids(br.get(t, "/jobs?queue=images")))
		r = br.get(t, "/jobs?state=DEAD&queue=images")
		require.Contains(t, r.Body, `<option value="DEAD" selected>`, "the filter shows what is filtered")
		// A state typed in lower case filters, and the form shows it, so
		// filtering again (by type, say) keeps it.
		require.Contains(t, br.get(t, "/jobs?state=dead").Body, `<option value="DEAD" selected>`)
		require.Equal(t, "images", formValue(r.Doc, "queue"))
		// Search by id opens the job; a bad id or state names its field.
		r = br.get(t, "/jobs?id="+resize.ID.String())
		require.Equal(t, http.StatusSeeOther, r.Status)
		require.Equal(t, "/jobs/"+resize.ID.String(), r.Header.Get("Location"))
		r = br.get(t, "/jobs?id=nope&state=DONE&cursor=abc")
		require.Equal(t, http.StatusBadRequest, r.Status)
		alert := text(find(r.Doc, "ul", ""))
		for _, field := range []string{"id:", "state:", "cursor:"} {
			require.Contains(t, alert, field)
		}
	})
}

func TestJobDetailAndActions(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		gone := dead(t, b.client, "images")
		admin := b.signIn(t, docket.RoleAdmin)
		r := admin.get(t, "/jobs/"+gone.ID.String())
		require.Equal(t, http.StatusOK, r.Status)
		require.Equal(t, "DEAD", text(find(r.Doc, "span", "job-state")))
		timeline := text(find(r.Doc, "ol", "attempts"))
		for _, want := range []string{"Attempt 1", "node-a", "disk full", "error"} {
			require.Contains(t, timeline, want)
		}
		require.Contains(t, text(find(r.Doc, "pre", "payload")), `"n": 1`)
		require.Nil(t, find(r.Doc, "button", "cancel"), "a DEAD job cannot be canceled")
		require.NotNil(t, find(r.Doc, "button", "retry"))

		// Retry as a producer: back in its queue, said on the page.
		producer := b.signIn(t, docket.RoleProducer)
		producer.get(t, "/jobs/"+gone.ID.String())
		r = producer.post(t, "/jobs/"+gone.ID.String()+"/retry", nil)
		require.Equal(t, http.StatusSeeOther, r.Status)
		r = producer.get(t, r.Header.Get("Location"))
		require.Equal(t, "QUEUED", text(find(r.Doc, "span", "job-state")))
		require.Contains(t, r.Body, "retry done")
		// Then cancel it.
		r = producer.post(t, "/jobs/"+gone.ID.String()+"/cancel", nil)
		require.Equal(t, http.StatusSeeOther, r.Status)
		got, err := b.client.Get(context.Background(), gone.ID)
		require.NoError(t, err)
		require.Equal(t, docket.JobStateCanceled, got.State)

		// A job that succeeded cannot be retried: 409 on the page.
		ok := insert(t, b.client, "email", "mail", `{}`)
		leases, err := b.client.Lease(context.Background(), docket.LeaseParams{Queues: []string{"mail"}, Max: 1, Duration: time.Minute, WorkerID: "node-b"})
		require.NoError(t, err)
		require.NoError(t, b.client.LeaseComplete(context.Background(), leases[0].ID, json.RawMessage(`{"sent":true}`)))
		r = admin.get(t, "/jobs/"+ok.ID.String())
		require.Contains(t, text(find(r.Doc, "pre", "result")), `"sent": true`)
		require.Nil(t, find(r.Doc, "button", "retry"))
		r = admin.post(t, "/jobs/"+ok.ID.String()+"/retry", nil)
		require.Equal(t, http.StatusConflict, r.Status)
		require.Contains(t, r.Body, "Cannot retry")

		// Unknown and malformed ids.
		require.Equal(t, http.StatusNotFound, admin.get(t, "/jobs/"+uuid.New().String()).Status)
		require.Equal(t, http.StatusNotFound, admin.get(t, "/jobs/nope").Status)
		require.Equal(t, http.StatusNotFound, admin.post(t, "/jobs/"+uuid.New().String()+"/cancel", nil).Status)
	})
}

func TestOverview(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		insert(t, b.client, "email", "mail", `{}`)
		insert(t, b.client, "email", "mail", `{}`)
		dead(t, b.client, "images")
		dead(t, b.client, "images")
		dead(t, b.client, "images")
		// The overview reads Config.Overview only, at most once a second
		// whatever the views: count its calls.
		var calls atomic.Int32
		h, err := New(Config{Client: b.client, Auth: b.client,
			Overview: func(ctx context.Context, p *docket.OverviewParams) (*docket.JobOverview, error) {
				calls.Add(1)
				require.Equal(t, overviewCap, p.Cap)
				return b.client.Overview(ctx, p)
			}})
		require.NoError(t, err)
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		b.server = srv
		t0 := time.Now() // before the first read
		br := b.signIn(t, docket.RoleViewer)
		require.Equal(t, int32(1), calls.Load())
		r := br.get(t, "/")
		if time.Since(t0) < overviewCacheFor/2 { // not on a machine too busy to tell
			require.Equal(t, int32(1), calls.Load(), "within the second: the same read")
		}
		require.Equal(t, "3", text(find(r.Doc, "a", "dead-count")))
		require.Equal(t, "0", text(find(r.Doc, "span", "completed")))
		require.Equal(t, "3", text(find(r.Doc, "dd", "failed")), "the three DEAD jobs failed within the hour")
		require.Contains(t, text(find(r.Doc, "dd", "wait")), "median")
		depths := text(find(r.Doc, "table", "depths"))
		require.Contains(t, depths, "mail")
		require.NotContains(t, depths, "images", "no waiting or running job in images")
		body := r.Body
		require.Regexp(t, `<rect class="st-queued" x="160" y="\d+" width="\d+" height="18"><title>QUEUED: 2</title>`, body)
		require.Regexp(t, `<rect class="st-dead" x="\d+" y="\d+" width="\d+" height="\d+"><title>\d\d:\d\d: 3 failed</title>`, body)
		live := find(r.Doc, "div", "overview-live")
		require.Equal(t, "/overview/panel", attr(live, "data-live-fragment"))
		require.Equal(t, "/overview/events", attr(live, "data-live-stream"))
		require.NotNil(t, find(live, "section", "overview-panel"))
		// The panel alone, as htmx fetches it, a second later: a new read.
		time.Sleep(overviewCacheFor)
		t0 = time.Now() // before the second read
		r = br.get(t, "/overview/panel")
		require.Equal(t, http.StatusOK, r.Status)
		require.True(t, strings.HasPrefix(strings.TrimSpace(r.Body), `<section id="overview-panel"`), r.Body)
		n := calls.Load()
		require.GreaterOrEqual(t, n, int32(2), "a second later: a new read")
		br.get(t, "/queues")
		if time.Since(t0) < overviewCacheFor/2 {
			require.Equal(t, n, calls.Load(), "the queues page shares the read")
		}

		// A failing count is shown, not a 500.
		h2, err := New(Config{Client: b.client, Overview: func(context.Context, *docket.OverviewParams) (*docket.JobOverview, error) {
			return nil, errors.New("database busy")
		}})
		require.NoError(t, err)
		rec := httptest.NewRecorder()
		ss := h2.sessions.create(&docket.APIKey{Name: "v", Role: docket.RoleViewer}, "x")
		req := httptest.NewRequest("GET", "/", nil)
		req.AddCookie(&http.Cookie{Name: sessionCookie, Value: h2.sessions.cookieValue(ss.id)})
		h2.ServeHTTP(rec, req)
		require.Equal(t, http.StatusOK, rec.Code)
		require.Contains(t, rec.Body.String(), "database busy")
	})
}

// TestOverviewReadOutlivesItsRequest: the overview's read serves every
// view for a second, so the request that happens to make it must not
// decide its fate: a view whose browser went away meanwhile (a tab
// closed, a live fragment's fetch aborted) leaves a read the next view
// can use, not its own "context canceled" for everyone to show.
func TestOverviewReadOutlivesItsRequest(t *testing.T) {
	t.Parallel()
	h, err := New(Config{Client: nil, Auth: noAuth{}, Overview: func(ctx context.Context, _ *docket.OverviewParams) (*docket.JobOverview, error) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return &docket.JobOverview{Queues: []*docket.QueueDepth{{Name: "mail", Queued: 2}}}, nil
	}})
	require.NoError(t, err)
	ss := h.sessions.create(&docket.APIKey{Name: "v", Role: docket.RoleViewer}, "x")
	get := func(ctx context.Context, path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		req := httptest.NewRequestWithContext(ctx, "GET", path, nil)
		req.AddCookie(&http.Cookie{Name: sessionCookie, Value: h.sessions.cookieValue(ss.id)})
		h.ServeHTTP(rec, req)
		return rec
	}
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	get(gone, "/queues")
	rec := get(context.Background(), "/queues")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Contains(t, rec.Body.String(), `data-queue="mail"`)
	rec = get(context.Background(), "/overview/panel")
	require.Equal(t, http.StatusOK, rec.Code)
	require.NotContains(t, rec.Body.String(), "canceled")
}

func TestChartScales(t *testing.T) {
	t.Parallel()
	c := drawBars([]queueRow{
		{Name: "big", Total: 1000, Counts: map[docket.JobState]int{docket.JobStateQueued: 999, docket.JobStateRetry: 1}},
		{Name: "small", Total: 500, Counts: map[docket.JobState]int{docket.JobStateRunning: 500}},
	}, depthStates)
	span := chartWidth - chartLabelW - chartTotalW
	require.Len(t, c.Bars, 2)
	big := c.Bars[0].Segments
	require.Equal(t, docket.JobStateQueued, big[0].State)
	require.Equal(t, docket.JobStateRetry, big[1].State)
	require.Equal(t, 1, big[1].W, "a small count keeps one unit")
	require.LessOrEqual(t, big[0].W+big[1].W, span+1)
	require.Equal(t, span/2, c.Bars[1].Segments[0].W, "half the largest queue is half as wide")
	require.Empty(t, drawBars(nil, depthStates).Bars)
	require.Len(t, c.Legend, 3, "the states asked for only")
}

// TestTemplatesRender renders every page and partial with representative
// data (a job with payload, result, progress and failed attempts; queues
// in every state; every error) and checks the HTML is well formed.
// renderCase is one rendering of TestTemplatesRender: a page's template
// with its view, and what the output must contain.
type renderCase struct {
	page, tmpl string
	v          *view
	want       []string
}

func TestTemplatesRender(t *testing.T) {
	t.Parallel()
	h, err := New(Config{Client: nil, Auth: noAuth{}, Overview: func(context.Context, *docket.OverviewParams) (*docket.JobOverview, error) { return nil, nil }})
	require.NoError(t, err)
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	id := uuid.Must(uuid.NewV7())
	row := &docket.JobRow{ID: id, Type: "resize", Queue: "images", Priority: 2, Payload: json.RawMessage(`{"path":"<a>.png"}`),
		Result: json.RawMessage(`{"ok":true}`), State: docket.JobStateRunning, Attempt: 2, MaxAttempts: 3, Progress: 42.5,
		ProgressMsg: "half way", CreatedAt: now, RunAt: now, IdempotencyKey: "k-1", LastError: "boom\n  at line 3"}
	attempts := []*docket.JobAttempt{
		{JobID: id, Attempt: 1, Node: "node-a", StartedAt: now, FinishedAt: now.Add(time.Second), Outcome: "error", Error: "boom <script>"},
		{JobID: id, Attempt: 2, Node: "node-b", StartedAt: now.Add(2 * time.Second), Outcome: "running"},
	}
	// A read with a capped queue, cut RUNNING and RETRY reads, and a cut
	// finished window, as JobOverview returns them.
	jo := &docket.JobOverview{
		Queues:     []*docket.QueueDepth{{Name: "images", Paused: true, Queued: overviewCap + 1, Running: 7, Retry: 3}, {Name: "q<&>"}},
		RunningCut: true, RetryCut: false, Dead: overviewCap + 1,
		Finished:    []*docket.FinishedMinute{{At: now.Add(-20 * time.Minute), Succeeded: 40, Dead: 2}, {At: now.Add(-time.Minute), Succeeded: 3}},
		FinishedCut: true, FinishedFrom: now.Add(-30 * time.Minute),
		Waits: []time.Duration{time.Second, 3 * time.Millisecond},
	}
	ov := &overviewData{Queues: queueRows(jo), Dead: formatCount(jo.Dead, overviewCap, false), At: now, Refresh: 5, Cap: "10,000",
		Completed: 43, Failed: 2, PerSecond: "0.02", Waits: 2, WaitP50: "3ms", WaitP95: "3ms", WaitMax: "1s"}
	ov.Chart = drawBars(ov.Queues, depthStates)
	ov.Minutes = drawMinutes(jo, now)
	def, err := docket.DecodeWorkflow([]byte(`{"name": "fan", "steps": [{"name": "split", "job": {"type": "t"}},
		{"name": "each", "job": {"type": "t"}, "after": ["split"], "forEach": "steps.split.output.items"},
		{"name": "label", "human": {"task": "same"}, "after": ["split"]},
		{"name": "join", "job": {"type": "t"}, "after": ["each", "label"]}]}`))
	require.NoError(t, err)
	wv := &docket.WorkflowVersion{Name: "fan", Version: 2, Hash: "sha256:ab", Definition: def, CreatedAt: now}
	run := &docket.Run{ID: id, Workflow: "fan", Version: 2, State: docket.RunFailed, Input: json.RawMessage(`{"n":1}`),
		Error: "step each failed", CreatedAt: now, UpdatedAt: now, FinishedAt: now, IdempotencyKey: "k",
		Steps: []*docket.RunStep{
			{Name: "split", Kind: "job", State: docket.StepSucceeded, JobID: id, StartedAt: now, FinishedAt: now},
			{Name: "each", Index: 0, Kind: "job", State: docket.StepSucceeded, JobID: id},
			{Name: "each", Index: 1, Kind: "job", State: docket.StepFailed, JobID: id, Error: "disk <full>"},
			{Name: "each", Index: 2, Kind: "job", State: docket.StepRunning, JobID: id},
			{Name: "label", Kind: "human", State: docket.StepRunning, UnitID: id},
			{Name: "join", Kind: "job", State: docket.StepPending},
		}}
	pool := &docket.Pool{ID: id, Workflow: "fan", WorkflowVersion: 2, Step: "label", Task: "same", TaskVersion: 1, Status: docket.PoolOpen,
		Skills: []string{"urgent"}, JudgmentsPerUnit: 3, AssignmentSeconds: 60, CreatedAt: now,
		Counts: docket.PoolCounts{New: 1, Judgable: 2, Finalized: 4, Canceled: 1, Judgments: 9, ActiveAssignments: 2}}
	units := []*docket.Unit{{ID: id, PoolID: id, RunID: id, State: docket.UnitJudgable, JudgmentCount: 2, JudgmentsPerUnit: 3, CreatedAt: now}}
	admin := &user{Name: "root", Role: docket.RoleAdmin, CSRF: "tok", Operate: true, ActJobs: true, Work: true}
	contributor := &user{Name: "ada", Role: RoleContributor, CSRF: "t", Work: true}
	viewer := &user{Name: "v", Role: docket.RoleViewer, CSRF: "tok", Operate: true}
	cases := []renderCase{
		{"signin", "layout", &view{Title: "Sign in", Data: signinData{CSRF: "c", Next: "/jobs", Error: "That key is unknown"}}, []string{"That key is unknown", `name="csrf" value="c"`}},
		{"error", "layout", &view{Title: "Not Found", Data: errorData{Status: 404, Message: "No job"}}, []string{"No job", "Sign in"}},
		{"error", "layout", &view{Title: "Forbidden", User: viewer, Data: errorData{Status: 403, Message: "role"}}, []string{"Sign out"}},
		{"overview", "layout", &view{Title: "Overview", User: admin, Data: ov}, []string{"paused", "q&lt;&amp;&gt;", "<svg", ">10,000&#43;</a>", ">7&#43;</a>", ">3</a>", `id="dead-count" href="/dead">10,000&#43;<`, "11:29: before the jobs read",
			"40 completed", "2 failed", `class="unknown"`, "Hatched minutes", "median 3ms, p95 3ms, max 1s"}},
		{"overview", "layout", &view{Title: "Overview", User: viewer, Data: &overviewData{Error: "busy", Chart: drawBars(nil, depthStates), Refresh: 5}}, []string{"busy", "No waiting or running jobs"}},
		{"overview", "panel", &view{User: admin, Data: ov}, []string{"overview-panel"}},
		{"overview", "panel", &view{User: admin, Data: &overviewData{Chart: drawBars(nil, depthStates), Refresh: 5, Bus: "bus down: <nats>"}}, []string{`id="bus-health" class="error">bus down: &lt;nats&gt;<`, "refresh every 5 s"}},
		{"overview", "panel", &view{User: admin, Data: &overviewData{Chart: drawBars(nil, depthStates), Refresh: 5, Bus: "up"}}, []string{`id="bus-health" class="ok">up<`}},
		{"jobs", "layout", &view{Title: "Jobs", User: viewer, Data: &jobsData{States: docket.JobStates(), State: "RUNNING", Jobs: []*docket.JobRow{row}, Next: "/jobs?cursor=x&state=RUNNING"}}, []string{id.String(), "Next page", "selected"}},
		{"jobs", "layout", &view{Title: "Jobs", User: viewer, Data: &jobsData{States: docket.JobStates(), Errors: []string{"id: bad"}}}, []string{"id: bad", "No jobs match"}},
		{"jobs", "layout", &view{Title: "Jobs", User: admin, Data: &jobsData{States: docket.JobStates(), State: "DEAD", Args: "args.a:<b>", Search: true, Within: 10000, Jobs: []*docket.JobRow{row}}},
			[]string{`form="bulk-selected"`, `id="retry-filter"`, `value="args.a:&lt;b&gt;"`, "newest 10000", `name="csrf" value="tok"`}},
		{"bulk", "layout", &view{Title: "Confirm", User: admin, Data: &bulkData{Action: "retry", Scope: "filter", State: "DEAD", Args: "args.x:<y>", Count: 3, More: true, Sample: []*docket.JobRow{row}, Back: "/jobs?state=DEAD"}},
			[]string{`id="bulk-count">3<`, "Type <strong>3</strong>", "args.x:&lt;y&gt;", "newest 3", id.String(), `name="csrf" value="tok"`, `name="expect" value="3"`}},
		{"bulk", "layout", &view{Title: "Confirm", User: admin, Data: &bulkData{Action: "cancel", Scope: "selected", IDs: []string{id.String()}, Count: 1, Errors: []string{"confirm: type 1"}, Back: "/jobs"}},
			[]string{"Cancel jobs", `name="id" value="` + id.String(), "confirm: type 1", " selected."}},
		{"bulk", "layout", &view{Title: "Bulk", User: admin, Data: &bulkData{Action: "retry", Scope: "filter", Back: "/jobs", Result: &bulkResult{Done: 2, Refused: 1, Notes: []string{"x: <refused>"}}}},
			[]string{"2 changed", "1 refused", "x: &lt;refused&gt;"}},
		{"bulk", "layout", &view{Title: "Bulk", User: admin, Data: &bulkData{Action: "retry", Scope: "filter", Back: "/jobs"}}, []string{"No job matches"}},
		{"job", "layout", &view{Title: "Job", User: admin, Data: &jobData{Job: row, Attempts: attempts, Full: true, CanCancel: true, Message: "cancel done"}}, []string{"&lt;a&gt;.png", "boom &lt;script&gt;", "node-b", "half way", `id="cancel"`, "cancel done"}},
		{"job", "layout", &view{Title: "Job", User: viewer, Data: &jobData{Job: &docket.JobRow{ID: id, State: docket.JobStateDead}}}, []string{"admin keys only", "No result yet"}},
		{"job", "layout", &view{Title: "Job", User: admin, Data: &jobData{Job: &docket.JobRow{ID: id, State: docket.JobStateDead}, Full: true, CanRetry: true}}, []string{"No attempt yet", `id="retry"`}},
		{"runs", "layout", &view{Title: "Runs", User: viewer, Data: &runsData{States: runStates, State: "FAILED", Workflow: "w<x>", Runs: []*docket.Run{run}, Next: "/runs?cursor=x"}}, []string{id.String(), "Next page", "selected", "w&lt;x&gt;"}},
		{"runs", "layout", &view{Title: "Runs", User: viewer, Data: &runsData{States: runStates, Errors: []string{"state: bad"}}}, []string{"state: bad", "No runs match"}},
		{"run", "layout", &view{Title: "Run", User: admin, Data: &runData{Run: run, Steps: run.Steps, Hidden: 7, DAG: layoutDAG(runSteps(def, run)), CanRetry: true, CanCancel: true, CanPause: true, CanResume: true, Message: "Cannot pause: conflict"}},
			[]string{"<svg", "ss-failed", "×3", "job " + id.String(), "unit " + id.String(), "disk &lt;full&gt;", `id="retry"`, `id="pause"`, `id="resume"`, `id="cancel"`, "Cannot pause", `&#34;n&#34;: 1`, "7 more step instances"}},
		{"run", "layout", &view{Title: "Run", User: viewer, Data: &runData{Run: &docket.Run{ID: id, State: docket.RunRunning}}}, []string{"could not be read", "No steps", `data-live-stream="/runs/` + id.String() + `/events"`}},
		{"run", "live", &view{User: admin, Data: &runData{Run: run, Steps: run.Steps, DAG: layoutDAG(runSteps(def, run)), CanRetry: true}}, []string{"<svg", "ss-failed", `id="retry"`, `name="csrf" value="tok"`}},
		{"workflows", "layout", &view{Title: "Workflows", User: viewer, Data: &workflowsData{Workflows: []*docket.WorkflowVersion{wv}, Next: "/workflows?after=x"}}, []string{"/workflows/fan", "Next page"}},
		{"workflows", "layout", &view{Title: "Workflows", User: viewer, Data: &workflowsData{}}, []string{"No workflow is stored"}},
		{"workflow", "layout", &view{Title: "Workflow", User: viewer, Data: &workflowData{Version: wv, Latest: 3, Versions: []int{3, 2, 1}, Definition: "{\"name\": \"fan\"}", DAG: layoutDAG(definitionSteps(def))}}, []string{"<svg", "ss-def", "?version=3", "<strong>2</strong>", "&#34;name&#34;"}},
		{"pools", "layout", &view{Title: "Pools", User: viewer, Data: &poolsData{Pools: []poolRow{poolRowOf(pool)}, Next: "/pools?cursor=x", Errors: []string{"cursor: bad"}}}, []string{"<progress", `value="5"`, "cursor: bad", "Next page"}},
		{"pools", "layout", &view{Title: "Pools", User: viewer, Data: &poolsData{}}, []string{"No pools yet"}},
		{"pool", "layout", &view{Title: "Pool", User: admin, Data: &poolData{Pool: poolRowOf(pool), Units: units, CanPause: true, CanResume: true, CanClose: true, Message: "pause done"}},
			[]string{"<progress", `id="pause"`, `id="resume"`, `id="close"`, "pause done", "2/3", "/runs/" + id.String(), "urgent"}},
		{"pool", "layout", &view{Title: "Pool", User: viewer, Data: &poolData{Pool: poolRowOf(&docket.Pool{ID: id, Status: docket.PoolClosed})}}, []string{"No units yet", `max="1"`}},
		{"pool", "layout", &view{Title: "Pool", User: viewer, Data: &poolData{Pool: poolRowOf(pool), Units: units, Stats: sampleStats(t, pool, now)}},
			[]string{`id="hours-chart"`, `class="unknown"`, `id="confidence-chart"`, "0.9–1.0", "67% (2 of 3)", "export-csv", "/units/" + id.String()}},
		{"pool", "layout", &view{Title: "Pool", User: viewer, Data: &poolData{Pool: poolRowOf(pool), StatsError: "sample judgments: timeout"}}, []string{"could not be read: sample judgments: timeout"}},
		{"unit", "layout", &view{Title: "Unit", User: viewer, Data: sampleUnit(t, pool, now)},
			[]string{"&lt;b&gt;.png", "golden", "Known answer", `id="answer-feedback">Why, as contributors read it after answering: Same &lt;maker&gt;<`, "No result yet", "Only the newest 100", "same ✓", "same ✗", "tainted", "0.50", "Ada", "/runs/" + id.String()}},
		{"unit", "layout", &view{Title: "Unit", User: viewer, Data: &unitData{Unit: &docket.Unit{ID: id, PoolID: id, State: docket.UnitFinalized, Result: json.RawMessage(`{"same":"yes"}`)}}},
			[]string{"No judgments yet", "the aggregation gives none", id.String()}},
		{"dead", "layout", &view{Title: "Dead letters", User: admin, Data: &deadData{Queue: "images", Filtered: true, Jobs: []*docket.JobRow{row}, Next: "/dead?cursor=x",
			Events:      []*docket.DeadLetter{{Consumer: "mailer/v2", EventID: "ev 1", EventType: "job.dead", Deliveries: 5, LastError: "smtp <down>", UpdatedAt: now, RetryRequestedAt: now}},
			EventsShown: true, Message: "Retried 2 DEAD jobs", Errors: []string{"confirm: type retry"}}},
			[]string{`name="id" value="` + id.String() + `"`, `id="retry-all"`, "of queue <strong>images</strong>", `value="mailer%2Fv2/ev%201"`, "smtp &lt;down&gt;",
				"retry requested", "Retried 2", "confirm: type retry", "Next page"}},
		{"dead", "layout", &view{Title: "Dead letters", User: viewer, Data: &deadData{Jobs: []*docket.JobRow{row}}}, []string{id.String()}},
		{"dead", "layout", &view{Title: "Dead letters", User: admin, Data: &deadData{EventsShown: true, DeliveriesShown: true, DeliveriesMore: true,
			Deliveries: []deadDelivery{{Webhook: &docket.Webhook{ID: id, URL: "http://127.0.0.1/<h>"}, WebhookDelivery: &docket.WebhookDelivery{ID: id, EventID: "3-1", EventType: "job.state_changed", Attempts: 15, LastStatusCode: 502, LastError: "bad <gateway>", FinishedAt: now}}}}},
			[]string{`name="delivery" value="` + id.String() + "/" + id.String() + `"`, "http://127.0.0.1/&lt;h&gt;", "502", "bad &lt;gateway&gt;", `id="deliveries-more"`, `id="retry-deliveries-ticked"`}},
		{"dead", "layout", &view{Title: "Dead letters", User: admin, Data: &deadData{EventsShown: true, DeliveriesShown: true}}, []string{"No DEAD deliveries."}},
		{"dead", "layout", &view{Title: "Dead letters", User: &user{Name: "p", Role: docket.RoleProducer, CSRF: "t", Operate: true, ActJobs: true}, Data: &deadData{EventsShown: true}},
			[]string{"No DEAD jobs.", "Filter by a queue or a type", "No dead letters."}},
		{"queues", "layout", &view{Title: "Queues", User: admin, Data: &queuesData{CanPause: true, Message: "Queue mail paused", Errors: []string{"queue: bad"}, Cap: "10,000",
			Queues: queueRows(jo)}},
			[]string{">10,000&#43;</a>", ">7&#43;</a>", `action="/queues/resume"`, `action="/queues/pause"`, "q&lt;&amp;&gt;", "Queue mail paused", "queue: bad", `id="pause-other"`}},
		{"queues", "layout", &view{Title: "Queues", User: viewer, Data: &queuesData{}}, []string{"No queues yet"}},
		{"work", "layout", &view{Title: "Work", User: contributor, Data: &workData{Pools: []workPool{{Pool: pool, Title: "Same <product>?", Available: 7}}, Message: workMessages["saved"]}},
			[]string{"Same &lt;product&gt;?", "/work/pools/" + id.String() + "/take", "Start working", "no unit left"}},
		{"work", "layout", &view{Title: "Work", User: contributor, Data: &workData{}}, []string{"No work for you"}},
		{"work", "layout", &view{Title: "Work", User: admin, Data: &workData{NoContributor: true}}, []string{"bound to no contributor"}},
		{"assignment", "layout", &view{Title: "Label", User: contributor, Data: workView(t, true, "https://img.example/p.png")},
			[]string{`id="countdown"`, `data-expires="2026-11-25T12:05:00Z"`, "5:00", "&lt;b&gt;caption", `src="https://img.example/p.png"`,
				`href="https://example.com/x"`, "<pre>", "the unit has no unit.missing", "not a URL but an object",
				`data-key="1"`, `data-key="b"`, `type="checkbox"`, `value="blurry" data-key="b" checked`, "<textarea", `type="number"`, `step="1"`, `max="10"`,
				`class="bbox-overlay"`, `value="[{&#34;label&#34;:&#34;logo&#34;`, "count: must be a number", `class="field-error"`, "the whole answer",
				"Saved.", `/skip" id="skip-form"`, `<script src="/static/work.js" defer></script>`}},
		{"assignment", "layout", &view{Title: "Label", User: contributor, Data: workView(t, false, "/p.png")},
			[]string{"This assignment is SUBMITTED", `id="next"`, `src="/p.png"`}},
		{"assignment", "layout", &view{Title: "Label", User: contributor, Data: workView(t, true, "javascript:alert(1)")},
			[]string{"No image: only http", "only http and https URLs are shown"}},
	}
	cases = append(cases, qualityRenderCases(t, pool, now)...)
	rendered := map[string]bool{}
	for _, tc := range cases {
		rec := httptest.NewRecorder()
		h.render(rec, http.StatusOK, tc.page, tc.tmpl, tc.v)
		require.Equal(t, http.StatusOK, rec.Code, "%s/%s: %s", tc.page, tc.tmpl, rec.Body.String())
		body := rec.Body.String()
		wellFormed(t, body)
		for _, w := range tc.want {
			require.Contains(t, body, w, "%s/%s", tc.page, tc.tmpl)
		}
		require.NotContains(t, body, "style=", "no inline style: the CSP forbids it")
		require.NotRegexp(t, `<script>|<script [^>]*>[^<]`, body, "no inline script")
		rendered[tc.page+"/"+tc.tmpl] = true
	}
	// Every template of every page file was rendered.
	define := regexp.MustCompile(`{{define "([a-z]+)"}}`)
	for _, name := range pageNames {
		src, err := fs.ReadFile(templateFS, "templates/"+name+".html")
		require.NoError(t, err)
		for _, m := range define.FindAllStringSubmatch(string(src), -1) {
			tmpl := m[1]
			if tmpl == "content" {
				tmpl = "layout"
			}
			require.True(t, rendered[name+"/"+tmpl], "template %s of %s.html is rendered by no test case", m[1], name)
		}
	}
	entries, err := fs.ReadDir(templateFS, "templates")
	require.NoError(t, err)
	require.Len(t, entries, len(pageNames)+1, "a template file is not in pageNames")
}

// workView is a work page's data for workTask with every kind of display
// block (a missing value, a bad URL), answers entered and problems;
// active false: a SUBMITTED assignment.
func workView(t *testing.T, active bool, photo string) *assignmentData {
	tmpl, err := docket.ParseTask([]byte(workTask))
	require.NoError(t, err)
	ct, err := task.Compile(tmpl)
	require.NoError(t, err)
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	id := uuid.Must(uuid.NewV7())
	a := &docket.Assignment{ID: id, UnitID: id, PoolID: id, State: docket.AssignmentActive, StartedAt: now, ExpiresAt: now.Add(5 * time.Minute)}
	if !active {
		a.State = docket.AssignmentSubmitted
	}
	input := decodeInput(json.RawMessage(`{"caption": "<b>caption", "photo": "` + photo + `", "source": "https://example.com/x", "meta": {"a": [1, 2]}}`))
	display := append(ct.Display, docket.TaskDisplay{Kind: "text", From: "unit.meta"}, docket.TaskDisplay{Kind: "image", From: "unit.missing"},
		docket.TaskDisplay{Kind: "link", From: "unit.meta"})
	form := url.Values{"f.tags": {"blurry"}, "f.count": {"x"}, "f.boxes": {`[{"label":"logo","x":0.1,"y":0.1,"w":0.2,"h":0.2}]`}}
	_, formProblems := judgmentFromForm(ct.Fields, form)
	return &assignmentData{Assignment: a, Pool: &docket.Pool{ID: id}, Title: ct.Template.Title, Instructions: ct.Template.Instructions,
		Display: workDisplays(display, input), Fields: workFields(ct.Fields, input, form, formProblems), Active: active, Now: now, HeartbeatEvery: 30,
		Problems: []string{"count: must be a number", "the whole answer"}, Message: assignmentMessages["saved"]}
}

// noAuth refuses every key: the render test needs no database.
type noAuth struct{}

func (noAuth) AuthenticateAPIKey(context.Context, string) (*docket.APIKey, error) {
	return nil, docket.ErrNotFound
}

// TestVendoredAssets: the vendored files are those static/VENDOR names,
// with its sums, and the layout loads them.
func TestVendoredAssets(t *testing.T) {
	t.Parallel()
	f, err := os.Open(filepath.Join("static", "VENDOR"))
	require.NoError(t, err)
	defer f.Close()
	seen := 0
	sc := bufio.NewScanner(f)
	layout, err := fs.ReadFile(templateFS, "templates/layout.html")
	require.NoError(t, err)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		require.Len(t, fields, 4, line)
		data, err := fs.ReadFile(staticFS, "static/"+fields[0])
		require.NoError(t, err)
		sum := sha256.Sum256(data)
		require.Equal(t, fields[3], hex.EncodeToString(sum[:]), "%s differs from the %s %s that VENDOR records: run scripts/vendor-htmx.sh", fields[0], fields[1], fields[2])
		require.Contains(t, string(layout), `src="/static/`+fields[0]+`"`)
		seen++
	}
	require.Equal(t, 2, seen, "htmx and its SSE extension")
}

func TestFormatCount(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		n, limit int
		cut      bool
		want     string
	}{
		{0, 10_000, false, "0"},
		{999, 10_000, false, "999"},
		{1_234, 10_000, false, "1,234"},
		{10_000, 10_000, false, "10,000"},
		{10_001, 10_000, false, "10,000+"},
		{10_001, 10_000, true, "10,000+"},
		{12, 10_000, true, "12+"},
		{1_234_567, 2_000_000, false, "1,234,567"},
	} {
		require.Equal(t, tc.want, formatCount(tc.n, tc.limit, tc.cut), "%+v", tc)
	}
}
