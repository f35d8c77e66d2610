package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket"
)

// Limits of the runs API.
const (
	// RunBatchMax is the most runs one POST /v1/workflows/{name}/runs:batch
	// starts.
	RunBatchMax = 100_000
	// MaxBatchBytesDefault limits the body of a runs batch (Config.MaxBatchBytes).
	MaxBatchBytesDefault = 256 << 20
	// runChunk is how many runs of a batch one transaction starts.
	runChunk = 1000
	// batchProblemsMax bounds the rows a refused batch names.
	batchProblemsMax = 100
)

func (s *Server) runRoutes() []route {
	return []route{
		{Method: "POST", Path: "/v1/workflows/{name}/runs", Perm: permSubmit, Handler: endpoint(s, s.startRun)},
		{Method: "POST", Path: "/v1/workflows/{name}/runs:batch", Perm: permSubmit, Query: []string{"version", "keyColumn"}, Handler: http.HandlerFunc(s.startRunBatch)},
		{Method: "GET", Path: "/v1/runs", Perm: permRead, Query: runListParams, Lists: runListLists, Handler: endpoint(s, s.listRuns)},
		{Method: "GET", Path: "/v1/runs/{runId}", Perm: permRead, Handler: endpoint(s, s.getRun)},
		{Method: "POST", Path: "/v1/runs/{runId}/cancel", Perm: permSubmit, Handler: endpoint(s, s.runOp(s.client.RunCancel))},
		{Method: "POST", Path: "/v1/runs/{runId}/pause", Perm: permSubmit, Handler: endpoint(s, s.runOp(s.client.RunPause))},
		{Method: "POST", Path: "/v1/runs/{runId}/resume", Perm: permSubmit, Handler: endpoint(s, s.runOp(s.client.RunResume))},
		{Method: "POST", Path: "/v1/runs/{runId}/retry", Perm: permSubmit, Handler: endpoint(s, s.retryRun)},
		{Method: "POST", Path: "/v1/runs/{runId}/signals/{step}", Perm: permSubmit, Handler: endpoint(s, s.signalRun)},
		{Method: "GET", Path: "/v1/runs/{runId}/events", Perm: permRead, Query: []string{"types", lastEventIDParam}, Lists: []string{"types"}, Handler: http.HandlerFunc(s.streamRunEvents)},
	}
}

// runView is a run as the API shows it; GET /v1/runs/{runId} adds its
// steps (runDetail).
type runView struct {
	RunID    uuid.UUID       `json:"runId"`
	Workflow string          `json:"workflow"`
	Version  int             `json:"version"`
	Status   docket.RunState `json:"status"`
	Input    json.RawMessage `json:"input"`
	// Output is null until the run SUCCEEDED: the outputs of the steps
	// without dependents, by step name.
	Output          json.RawMessage `json:"output"`
	Error           string          `json:"error,omitempty"`
	CancelRequested bool            `json:"cancelRequested"`
	IdempotencyKey  string          `json:"idempotencyKey,omitempty"`
	CreatedAt       time.Time       `json:"createdAt"`
	UpdatedAt       time.Time       `json:"updatedAt"`
	FinishedAt      *time.Time      `json:"finishedAt"`
}

// runDetail is a run with every step instance.
type runDetail struct {
	runView
	Steps []*stepView `json:"steps"`
}

// stepView is one step instance of a run.
type stepView struct {
	Name       string           `json:"name"`
	Index      int              `json:"index"`
	Kind       string           `json:"kind"`
	Status     docket.StepState `json:"status"`
	Generation int              `json:"generation"`
	JobID      *uuid.UUID       `json:"jobId,omitempty"`
	UnitID     *uuid.UUID       `json:"unitId,omitempty"`
	Output     json.RawMessage  `json:"output"`
	Error      string           `json:"error,omitempty"`
	Confidence *float64         `json:"confidence,omitempty"`
	StartedAt  *time.Time       `json:"startedAt"`
	FinishedAt *time.Time       `json:"finishedAt"`
}

func rawOrNull(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return b
}

func optionalID(id uuid.UUID) *uuid.UUID {
	if id == uuid.Nil {
		return nil
	}
	return &id
}

func runViewOf(r *docket.Run) *runView {
	return &runView{
		RunID: r.ID, Workflow: r.Workflow, Version: r.Version, Status: r.State,
		Input: rawOrNull(r.Input), Output: rawOrNull(r.Output), Error: r.Error,
		CancelRequested: r.CancelRequested, IdempotencyKey: r.IdempotencyKey,
		CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(), FinishedAt: optionalTime(r.FinishedAt),
	}
}

func runDetailOf(r *docket.Run) *runDetail {
	v := &runDetail{runView: *runViewOf(r), Steps: []*stepView{}}
	for _, st := range r.Steps {
		v.Steps = append(v.Steps, &stepView{
			Name: st.Name, Index: st.Index, Kind: st.Kind, Status: st.State, Generation: st.Generation,
			JobID: optionalID(st.JobID), UnitID: optionalID(st.UnitID), Output: rawOrNull(st.Output),
			Error: st.Error, Confidence: st.Confidence,
			StartedAt: optionalTime(st.StartedAt), FinishedAt: optionalTime(st.FinishedAt),
		})
	}
	return v
}

// startRunRequest is the body of POST /v1/workflows/{name}/runs, and one
// run of a batch (JSON or JSON lines). The body may be absent: a run on
// input null.
type startRunRequest struct {
	// Input is any JSON value; absent means null.
	Input          json.RawMessage `json:"input,omitempty"`
	IdempotencyKey string          `json:"idempotencyKey,omitempty"`
	// Version pins the run to a version; absent or 0: the latest.
	Version int `json:"version,omitempty"`

	workflow string
	header   string // the Idempotency-Key header of a single run's start
}

func (*startRunRequest) bodyOptional() {}

func (req *startRunRequest) prepare(_ *Server, r *http.Request) {
	req.workflow = r.PathValue("name")
	req.header = r.Header.Get(idempotencyHeader)
}

// Validate implements Validator with RunStart's checks, and takes the key
// of the Idempotency-Key header: one problem names every bad field.
func (req *startRunRequest) Validate() error {
	return errors.Join(keyFromHeader(&req.IdempotencyKey, req.header), docket.ValidateRunStart(req.params()))
}

func (req *startRunRequest) params() docket.RunStartParams {
	return docket.RunStartParams{
		Workflow: req.workflow, Input: rawOrNull(req.Input),
		Opts: &docket.RunStartOpts{IdempotencyKey: req.IdempotencyKey, Version: req.Version},
	}
}

// startRunResponse is the run started, or — same idempotency key — the run
// that has the key, with existing true. Both are 202.
type startRunResponse struct {
	runView
	Existing bool `json:"existing"`
}

func (s *Server) startRun(ctx context.Context, r *http.Request, req *startRunRequest) (int, *startRunResponse, error) {
	p := req.params()
	res, err := s.client.RunStart(ctx, p.Workflow, p.Input, p.Opts)
	if err != nil {
		return 0, nil, runProblem(err, req.workflow, req.Version)
	}
	return http.StatusAccepted, &startRunResponse{runView: *runViewOf(res.Run), Existing: res.Duplicate}, nil
}

// runProblem maps the errors of the run calls: an unknown workflow or
// version is 404, a state that does not allow the operation 409.
func runProblem(err error, workflow string, version int) error {
	switch {
	case errors.Is(err, docket.ErrWorkflowNotFound) && version > 0:
		return notFound(fmt.Sprintf("workflow %q has no version %d", workflow, version))
	case errors.Is(err, docket.ErrWorkflowNotFound):
		return notFound(fmt.Sprintf("no workflow %q: PUT /v1/workflows/%s first", workflow, workflow))
	case errors.Is(err, docket.ErrRunConflict):
		return conflict("run-conflict", err.Error())
	}
	return err
}

// runID parses the {runId} path value.
func runID(r *http.Request) (uuid.UUID, error) {
	id, err := uuid.Parse(r.PathValue("runId"))
	if err != nil {
		return uuid.Nil, invalidField("runId", "must be a UUID")
	}
	return id, nil
}

func noRun(id uuid.UUID) *Problem { return notFound(fmt.Sprintf("no run %s", id)) }

func (s *Server) getRun(ctx context.Context, r *http.Request, _ *Empty) (int, *runDetail, error) {
	id, err := runID(r)
	if err != nil {
		return 0, nil, err
	}
	run, err := s.client.RunGet(ctx, id)
	if errors.Is(err, docket.ErrNotFound) {
		return 0, nil, noRun(id)
	}
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, runDetailOf(run), nil
}

// runOp serves POST /v1/runs/{runId}/<op>: the run after the operation,
// 200 (also when it had taken effect already), 409 when the run's state
// does not allow it.
func (s *Server) runOp(op func(ctx context.Context, id uuid.UUID) (*docket.Run, error)) func(ctx context.Context, r *http.Request, _ *Empty) (int, *runView, error) {
	return func(ctx context.Context, r *http.Request, _ *Empty) (int, *runView, error) {
		id, err := runID(r)
		if err != nil {
			return 0, nil, err
		}
		run, err := op(ctx, id)
		if errors.Is(err, docket.ErrNotFound) {
			return 0, nil, noRun(id)
		}
		if err != nil {
			return 0, nil, runProblem(err, "", 0)
		}
		return http.StatusOK, runViewOf(run), nil
	}
}

// retryRequest is the body of POST /v1/runs/{runId}/retry; it may be
// absent (no force).
type retryRequest struct {
	// Force cancels the steps that block the retry (RUNNING downstream
	// of a failed one), then retries (docket.RunRetryParams).
	Force bool `json:"force"`
}

func (*retryRequest) bodyOptional() {}

func (s *Server) retryRun(ctx context.Context, r *http.Request, req *retryRequest) (int, *runView, error) {
	return s.runOp(func(ctx context.Context, id uuid.UUID) (*docket.Run, error) {
		return s.client.RunRetryWith(ctx, id, docket.RunRetryParams{Force: req.Force})
	})(ctx, r, nil)
}

// signalRequest is the body of POST /v1/runs/{runId}/signals/{step}; it
// may be absent (output null).
type signalRequest struct {
	Output json.RawMessage `json:"output,omitempty"`
}

func (*signalRequest) bodyOptional() {}

func (s *Server) signalRun(ctx context.Context, r *http.Request, req *signalRequest) (int, *runView, error) {
	id, err := runID(r)
	if err != nil {
		return 0, nil, err
	}
	step := r.PathValue("step")
	run, err := s.client.RunSignal(ctx, id, step, rawOrNull(req.Output))
	switch {
	case errors.Is(err, docket.ErrNotFound):
		return 0, nil, noRun(id)
	case errors.Is(err, docket.ErrStepNotFound):
		return 0, nil, notFound(fmt.Sprintf("run %s has no step %q", id, step))
	}
	if err != nil {
		return 0, nil, runProblem(err, "", 0)
	}
	return http.StatusOK, runViewOf(run), nil
}

type runsResponse struct {
	Items []*runView `json:"items"`
	// NextCursor fetches the next page; null on the last one.
	NextCursor *string `json:"nextCursor"`
}

// runListParams are the query parameters GET /v1/runs takes (its route
// refuses others); runListLists those that take a list.
var (
	runListParams = []string{"workflow", "state", "createdAfter", "createdBefore", "limit", "cursor"}
	runListLists  = []string{"state"}
)

// listRuns pages through runs newest first; the cursor is the last id of
// the previous page (run ids are UUIDv7, as job ids).
func (s *Server) listRuns(ctx context.Context, r *http.Request, _ *Empty) (int, *runsResponse, error) {
	p, err := parseRunListQuery(query(r))
	if err != nil {
		return 0, nil, err
	}
	limit := p.Limit
	p.Limit++ // one more tells whether there is a next page
	runs, err := s.client.RunList(ctx, p)
	if err != nil {
		return 0, nil, err
	}
	resp := &runsResponse{Items: make([]*runView, 0, min(len(runs), limit))}
	if len(runs) > limit {
		runs = runs[:limit]
		next := encodeCursor(runs[limit-1].ID)
		resp.NextCursor = &next
	}
	for _, run := range runs {
		resp.Items = append(resp.Items, runViewOf(run))
	}
	return http.StatusOK, resp, nil
}

// parseRunListQuery reads GET /v1/runs' query; every bad parameter is
// named in one 400, with pending, the errors checkParams left (query).
func parseRunListQuery(q url.Values, pending []FieldError) (docket.RunListParams, error) {
	p := docket.RunListParams{Limit: ListLimitDefault}
	// A comma in another parameter is refused as a second value (the
	// route refuses the parameter given twice), named before what else is
	// wrong with the value.
	var commas []FieldError
	for name, vs := range q {
		if !slices.Contains(runListLists, name) && slices.ContainsFunc(vs, func(v string) bool { return strings.Contains(v, ",") }) {
			commas = append(commas, FieldError{Field: name, Message: oneValue(runListLists)})
		}
	}
	slices.SortFunc(commas, func(a, b FieldError) int { return strings.Compare(a.Field, b.Field) })
	errs := append(pending, commas...)
	var bad []string
	for _, v := range splitList(q["state"]) {
		st := docket.RunState(strings.ToUpper(v))
		if !st.Valid() {
			bad = append(bad, fmt.Sprintf("%q", v))
			continue
		}
		p.States = append(p.States, st)
	}
	if len(bad) > 0 {
		errs = append(errs, FieldError{Field: "state", Message: "unknown run state " + strings.Join(bad, ", ") + " (known: RUNNING, PAUSED, SUCCEEDED, FAILED, CANCELED)"})
	}
	p.Workflow = q.Get("workflow")
	for _, f := range []struct {
		name string
		into *time.Time
	}{{"createdAfter", &p.CreatedAfter}, {"createdBefore", &p.CreatedBefore}} {
		if v := q.Get(f.name); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				errs = append(errs, FieldError{Field: f.name, Message: "must be an RFC 3339 timestamp such as 2030-01-02T15:04:05Z"})
			}
			if t.IsZero() && f.name == "createdBefore" && err == nil {
				// The store reads the zero time as no filter; before year 1
				// is before any run, and a nanosecond later is too.
				t = t.Add(time.Nanosecond)
			}
			*f.into = t
		}
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > ListLimitMax {
			errs = append(errs, FieldError{Field: "limit", Message: fmt.Sprintf("must be an integer between 1 and %d", ListLimitMax)})
		} else {
			p.Limit = n
		}
	}
	if v := q.Get("cursor"); v != "" {
		id, err := decodeCursor(v)
		if err != nil {
			errs = append(errs, problemFor(err).Errors...)
		}
		p.Before = id
	}
	return p, queryErrors(errs)
}

// streamRunEvents serves GET /v1/runs/{runId}/events: the run's
// run.state_changed and step.state_changed events, from the oldest kept
// (or after Last-Event-ID), then new ones as they are published.
func (s *Server) streamRunEvents(w http.ResponseWriter, r *http.Request) {
	q, pending := query(r)
	id, err := runID(r)
	f, ferr := eventFilter(q, runEventTypes)
	// A malformed Last-Event-ID is refused here, with the others, as for
	// a job's stream: unchecked, it failed the stream's read (500).
	if err = errors.Join(queryErrors(pending), err, ferr, checkLastEventID(r, q)); err != nil {
		s.fail(w, r, err)
		return
	}
	if _, err := s.client.RunGet(r.Context(), id); err != nil {
		if errors.Is(err, docket.ErrNotFound) {
			err = noRun(id)
		}
		s.fail(w, r, err)
		return
	}
	f.RunID = id
	s.stream(w, r, f, func(context.Context, *docket.EventHistory) (docket.EventCursor, error) {
		return docket.EventCursor{}, nil
	})
}
