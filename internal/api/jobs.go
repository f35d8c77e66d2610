package api

import (
	"bytes"
	"context"
	"encoding/base64"
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

// Limits of the jobs API.
const (
	// ListLimitDefault and ListLimitMax are the page sizes of GET
	// /v1/jobs: without ?limit, and the largest ?limit.
	ListLimitDefault  = 50
	ListLimitMax      = 500
	batchMax          = 1000
	timeoutSecondsMax = 7 * 24 * 3600
)

func (s *Server) jobRoutes() []route {
	return []route{
		{Method: "POST", Path: "/v1/jobs", Perm: permSubmit, Handler: endpoint(s, s.submitJob)},
		{Method: "POST", Path: "/v1/jobs:batch", Perm: permSubmit, Handler: endpoint(s, s.submitBatch)},
		{Method: "GET", Path: "/v1/jobs", Perm: permRead, Query: listParams, Lists: listLists, Handler: endpoint(s, s.listJobs)},
		{Method: "GET", Path: "/v1/jobs/summary", Perm: permRead, Handler: endpoint(s, s.jobSummary)},
		{Method: "GET", Path: "/v1/jobs/{jobId}", Perm: permRead, Query: []string{"include"}, Lists: []string{"include"}, Handler: endpoint(s, s.getJob)},
		{Method: "POST", Path: "/v1/jobs/{jobId}/cancel", Perm: permSubmit, Handler: endpoint(s, s.cancelJob)},
		{Method: "POST", Path: "/v1/jobs/{jobId}/retry", Perm: permSubmit, Handler: endpoint(s, s.retryJob)},
		{Method: "GET", Path: "/v1/jobs/{jobId}/attempts", Perm: permAdmin, Handler: endpoint(s, s.listAttempts)},
	}
}

// submitRequest is one job to insert: the body of POST /v1/jobs and each
// item of a batch.
type submitRequest struct {
	JobType string `json:"jobType"`
	// Payload is any JSON value; absent or null means {}.
	Payload        json.RawMessage `json:"payload,omitempty"`
	IdempotencyKey string          `json:"idempotencyKey,omitempty"`
	Queue          string          `json:"queue,omitempty"`
	Priority       *int            `json:"priority,omitempty"`
	RunAt          *string         `json:"runAt,omitempty"` // RFC 3339
	MaxAttempts    *int            `json:"maxAttempts,omitempty"`
	TimeoutSeconds *int            `json:"timeoutSeconds,omitempty"`

	runAt  time.Time // RunAt parsed by Validate
	header string    // the Idempotency-Key header of POST /v1/jobs
}

// prepare keeps the Idempotency-Key header, which Validate checks with
// the body (one problem names every bad field, the header's too).
func (req *submitRequest) prepare(_ *Server, r *http.Request) {
	req.header = r.Header.Get(idempotencyHeader)
}

// idempotencyHeader is the alternative to the body's idempotencyKey.
const idempotencyHeader = "Idempotency-Key"

// keyFromHeader sets *key to header, the Idempotency-Key header, when it
// is given; an error when the body's key (*key) is another.
func keyFromHeader(key *string, header string) error {
	switch {
	case header == "":
	case *key != "" && *key != header:
		return invalidField("idempotencyKey", "differs from the "+idempotencyHeader+" header; send one or the other")
	default:
		*key = header
	}
	return nil
}

// Validate implements Validator with the checks of the HTTP contract, then
// every check Insert makes.
func (req *submitRequest) Validate() error {
	var errs []error
	if err := keyFromHeader(&req.IdempotencyKey, req.header); err != nil {
		errs = append(errs, err)
	}
	if req.RunAt != nil {
		t, err := time.Parse(time.RFC3339Nano, *req.RunAt)
		if err != nil {
			errs = append(errs, invalidField("runAt", "must be an RFC 3339 timestamp such as 2030-01-02T15:04:05Z"))
		}
		req.runAt = t
	}
	if req.MaxAttempts != nil && (*req.MaxAttempts < 1 || *req.MaxAttempts > 1000) {
		errs = append(errs, invalidField("maxAttempts", "must be between 1 and 1000"))
	}
	if req.TimeoutSeconds != nil && (*req.TimeoutSeconds < 0 || *req.TimeoutSeconds > timeoutSecondsMax) {
		errs = append(errs, invalidField("timeoutSeconds", fmt.Sprintf("must be between 0 (the worker's default) and %d", timeoutSecondsMax)))
	}
	// Insert's own checks of the other fields (maxAttempts and timeout
	// are checked above, with the API's names and bounds).
	args, opts := req.insert()
	opts.MaxAttempts, opts.Timeout = 0, 0
	if err := docket.ValidateInsert(args, opts); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// insert is the request as arguments of Client.Insert.
func (req *submitRequest) insert() (docket.RawArgs, *docket.InsertOpts) {
	payload := req.Payload
	if bytes.Equal(payload, []byte("null")) {
		payload = nil // RawArgs encodes an empty payload as {}
	}
	opts := &docket.InsertOpts{
		Queue: req.Queue, Priority: req.Priority, RunAt: req.runAt, IdempotencyKey: req.IdempotencyKey,
	}
	if req.MaxAttempts != nil {
		opts.MaxAttempts = *req.MaxAttempts
	}
	if req.TimeoutSeconds != nil {
		opts.Timeout = time.Duration(*req.TimeoutSeconds) * time.Second
	}
	return docket.RawArgs{Type: req.JobType, Payload: payload}, opts
}

// submitResponse is the answer to a submission; a repeated submission with
// the same idempotency key gets the same answer (with the current status).
type submitResponse struct {
	JobID     uuid.UUID       `json:"jobId"`
	JobType   string          `json:"jobType"`
	Status    docket.JobState `json:"status"`
	CreatedAt time.Time       `json:"createdAt"`
	UpdatedAt time.Time       `json:"updatedAt"`
}

func submitResponseOf(row *docket.JobRow) *submitResponse {
	return &submitResponse{
		JobID: row.ID, JobType: row.Type, Status: row.State,
		CreatedAt: row.CreatedAt.UTC(), UpdatedAt: row.UpdatedAt.UTC(),
	}
}

// submitJob inserts one job; Validate took the key of the Idempotency-Key
// header.
func (s *Server) submitJob(ctx context.Context, _ *http.Request, req *submitRequest) (int, *submitResponse, error) {
	args, opts := req.insert()
	res, err := s.client.Insert(ctx, args, opts)
	if err != nil {
		return 0, nil, err
	}
	if res.Duplicate {
		if err := idempotencyConflict(res.Job, args, opts); err != nil {
			return 0, nil, err
		}
	} else {
		s.metrics.Inserted(res.Job.Queue, 1)
	}
	return http.StatusAccepted, submitResponseOf(res.Job), nil
}

// idempotencyConflict is the 422 for a key reused with a different request,
// and nil when the request is the same as the one that made existing.
func idempotencyConflict(existing *docket.JobRow, args docket.RawArgs, opts *docket.InsertOpts) error {
	field, err := docket.InsertConflict(existing, args, opts)
	if err != nil || field == "" {
		return err
	}
	if field == "timeout" {
		field = "timeoutSeconds"
	}
	p := problem(http.StatusUnprocessableEntity, "idempotency-conflict", "Idempotency key reused",
		fmt.Sprintf("idempotency key %q belongs to job %s, which was submitted with a different %s", opts.IdempotencyKey, existing.ID, field))
	p.Errors = []FieldError{{Field: field, Message: "differs from the job that holds this idempotency key"}}
	return p
}

// batchRequest is the body of POST /v1/jobs:batch. Items are decoded one by
// one so that each is judged on its own.
type batchRequest struct {
	Jobs []json.RawMessage `json:"jobs"`

	header bool // an Idempotency-Key header was sent
}

func (req *batchRequest) prepare(_ *Server, r *http.Request) {
	req.header = r.Header.Get(idempotencyHeader) != ""
}

// Validate implements Validator.
func (req *batchRequest) Validate() error {
	var errs []error
	switch {
	case len(req.Jobs) == 0:
		errs = append(errs, invalidField("jobs", "needs at least one job"))
	case len(req.Jobs) > batchMax:
		errs = append(errs, invalidField("jobs", fmt.Sprintf("has %d jobs; at most %d are allowed", len(req.Jobs), batchMax)))
	}
	if req.header {
		errs = append(errs, invalidField(idempotencyHeader, "is not supported on a batch; set idempotencyKey on each job"))
	}
	return errors.Join(errs...)
}

type batchResponse struct {
	Items []*batchItem `json:"items"`
}

// batchItem is the outcome of one job of a batch: what POST /v1/jobs would
// have answered for it, or the problem that kept it out.
type batchItem struct {
	Index           int      `json:"index"`
	*submitResponse          // absent when Error is set
	Error           *Problem `json:"error,omitempty"`
}

// submitBatch inserts the valid jobs of a batch in one transaction and
// reports the invalid ones; if the insert fails, none is written.
func (s *Server) submitBatch(ctx context.Context, r *http.Request, req *batchRequest) (int, *batchResponse, error) {
	resp := &batchResponse{Items: make([]*batchItem, len(req.Jobs))}
	var (
		params  []docket.InsertParams
		indexes []int
	)
	for i, raw := range req.Jobs {
		resp.Items[i] = &batchItem{Index: i}
		item, err := decodeBatchItem(raw)
		if err != nil {
			resp.Items[i].Error = problemFor(err)
			continue
		}
		args, opts := item.insert()
		params = append(params, docket.InsertParams{Args: args, Opts: opts})
		indexes = append(indexes, i)
	}
	if len(params) > 0 {
		res, err := s.client.InsertMany(ctx, params)
		if err != nil {
			return 0, nil, err
		}
		for k, ins := range res {
			item := resp.Items[indexes[k]]
			if !ins.Duplicate {
				s.metrics.Inserted(ins.Job.Queue, 1)
			}
			if ins.Duplicate {
				args := params[k].Args.(docket.RawArgs)
				if err := idempotencyConflict(ins.Job, args, params[k].Opts); err != nil {
					item.Error = problemFor(err)
					continue
				}
			}
			item.submitResponse = submitResponseOf(ins.Job)
		}
	}
	return http.StatusAccepted, resp, nil
}

// decodeBatchItem decodes and validates one job of a batch as strictly as
// the body of POST /v1/jobs.
func decodeBatchItem(raw json.RawMessage) (*submitRequest, error) {
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
		// Named as the body of POST /v1/jobs is: the item is one's body.
		var v any
		dec := json.NewDecoder(bytes.NewReader(t))
		dec.UseNumber()
		kind := "nothing"
		if dec.Decode(&v) == nil {
			kind = jsonKindOf(v)
		}
		return nil, invalidField("(body)", "each job must be a JSON object, not "+kind)
	}
	item := new(submitRequest)
	if err := decodeJSON(raw, item); err != nil {
		return nil, err
	}
	return item, nil
}

// jobView is a job as the API shows it. Payload, attempt counters, worker
// ids, lease data and errors appear only for admin keys that ask for them
// (?include=payload,attempts).
type jobView struct {
	JobID           uuid.UUID       `json:"jobId"`
	JobType         string          `json:"jobType"`
	Queue           string          `json:"queue"`
	Status          docket.JobState `json:"status"`
	Priority        int             `json:"priority"`
	Progress        float64         `json:"progress"`
	ProgressMessage string          `json:"progressMessage,omitempty"`
	CancelRequested bool            `json:"cancelRequested"`
	CreatedAt       time.Time       `json:"createdAt"`
	UpdatedAt       time.Time       `json:"updatedAt"`
	ScheduledAt     time.Time       `json:"scheduledAt"`
	FinishedAt      *time.Time      `json:"finishedAt"` // null until SUCCESS, DEAD or CANCELED
	Result          json.RawMessage `json:"result"`     // null until a handler returns one

	Payload       json.RawMessage `json:"payload,omitempty"` // include=payload
	*JobExecution                 // include=attempts
}

// JobExecution is how a job has been run (admin only, ?include=attempts).
// It is exported so that clients decoding a jobView can fill it.
type JobExecution struct {
	Attempt        int            `json:"attempt"`
	MaxAttempts    int            `json:"maxAttempts"`
	LastError      string         `json:"lastError,omitempty"`
	LeaseOwner     string         `json:"leaseOwner,omitempty"`
	LeaseExpiresAt *time.Time     `json:"leaseExpiresAt,omitempty"`
	Attempts       []*attemptView `json:"attempts"`
}

func jobViewOf(row *docket.JobRow) *jobView {
	return &jobView{
		JobID: row.ID, JobType: row.Type, Queue: row.Queue, Status: row.State,
		Priority: row.Priority, Progress: row.Progress, ProgressMessage: row.ProgressMsg,
		CancelRequested: row.CancelRequested,
		CreatedAt:       row.CreatedAt.UTC(), UpdatedAt: row.UpdatedAt.UTC(), ScheduledAt: row.RunAt.UTC(),
		FinishedAt: optionalTime(row.FinishedAt), Result: row.Result,
	}
}

func optionalTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// Values of ?include= on GET /v1/jobs/{jobId}.
const (
	includePayload  = "payload"
	includeAttempts = "attempts"
)

func (s *Server) getJob(ctx context.Context, r *http.Request, _ *Empty) (int, *jobView, error) {
	q, pending := query(r)
	id, err := jobID(r)
	include, ierr := parseInclude(q)
	if err := errors.Join(queryErrors(pending), err, ierr); err != nil {
		return 0, nil, err
	}
	if len(include) > 0 {
		if key := principal(ctx); key == nil || key.Role != docket.RoleAdmin {
			return 0, nil, forbidden("only admin keys may include " + strings.Join(include, " and "))
		}
	}
	row, err := s.client.Get(ctx, id)
	if err != nil {
		return 0, nil, err
	}
	view := jobViewOf(row)
	if slices.Contains(include, includePayload) {
		view.Payload = row.Payload
	}
	if slices.Contains(include, includeAttempts) {
		attempts, err := s.client.Attempts(ctx, id)
		if err != nil {
			return 0, nil, err
		}
		view.JobExecution = &JobExecution{
			Attempt: row.Attempt, MaxAttempts: row.MaxAttempts, LastError: row.LastError,
			LeaseOwner: row.LeaseOwner, LeaseExpiresAt: optionalTime(row.LeaseExpiresAt),
			Attempts: attemptViews(attempts),
		}
	}
	return http.StatusOK, view, nil
}

// parseInclude reads ?include=a,b (or repeated include=).
func parseInclude(q url.Values) ([]string, error) {
	var out []string
	for _, v := range q["include"] {
		for part := range strings.SplitSeq(v, ",") {
			part = strings.TrimSpace(part)
			switch part {
			case "":
			case includePayload, includeAttempts:
				if !slices.Contains(out, part) {
					out = append(out, part)
				}
			default:
				return nil, invalidField("include", fmt.Sprintf("unknown value %q; allowed: %s, %s", part, includePayload, includeAttempts))
			}
		}
	}
	return out, nil
}

// jobID parses the {jobId} path value.
func jobID(r *http.Request) (uuid.UUID, error) {
	id, err := uuid.Parse(r.PathValue("jobId"))
	if err != nil {
		return uuid.Nil, invalidField("jobId", "must be a UUID")
	}
	return id, nil
}

func (s *Server) cancelJob(ctx context.Context, r *http.Request, _ *Empty) (int, *jobView, error) {
	id, err := jobID(r)
	if err != nil {
		return 0, nil, err
	}
	row, err := s.client.Cancel(ctx, id)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, jobViewOf(row), nil
}

func (s *Server) retryJob(ctx context.Context, r *http.Request, _ *Empty) (int, *jobView, error) {
	id, err := jobID(r)
	if err != nil {
		return 0, nil, err
	}
	row, err := s.client.Retry(ctx, id)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, jobViewOf(row), nil
}

// attemptView is one execution of a job.
type attemptView struct {
	Attempt    int        `json:"attempt"`
	Node       string     `json:"node"`
	StartedAt  time.Time  `json:"startedAt"`
	FinishedAt *time.Time `json:"finishedAt"` // null while running
	Outcome    string     `json:"outcome"`
	Error      string     `json:"error,omitempty"`
	DurationMs *int64     `json:"durationMs"` // null while running
}

func attemptViews(attempts []*docket.JobAttempt) []*attemptView {
	out := make([]*attemptView, len(attempts))
	for i, a := range attempts {
		v := &attemptView{
			Attempt: a.Attempt, Node: a.Node, StartedAt: a.StartedAt.UTC(),
			FinishedAt: optionalTime(a.FinishedAt), Outcome: string(a.Outcome), Error: a.Error,
		}
		if !a.FinishedAt.IsZero() {
			ms := a.Duration().Milliseconds()
			v.DurationMs = &ms
		}
		out[i] = v
	}
	return out
}

type attemptsResponse struct {
	Items []*attemptView `json:"items"`
}

func (s *Server) listAttempts(ctx context.Context, r *http.Request, _ *Empty) (int, *attemptsResponse, error) {
	id, err := jobID(r)
	if err != nil {
		return 0, nil, err
	}
	attempts, err := s.client.Attempts(ctx, id)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, &attemptsResponse{Items: attemptViews(attempts)}, nil
}

type listResponse struct {
	Items []*jobView `json:"items"`
	// NextCursor fetches the next page; null on the last one.
	NextCursor *string `json:"nextCursor"`
}

// listParams are the query parameters GET /v1/jobs takes (its route
// refuses others); listLists those that take a list.
var (
	listParams = []string{"status", "jobType", "queue", "priority", "limit", "cursor", "search"}
	listLists  = []string{"status", "jobType", "queue"}
)

// listJobs pages through jobs newest first. The cursor is the last id of
// the previous page: ids are UUIDv7, so a job inserted meanwhile sorts
// before the first page and never shifts the pages that follow.
func (s *Server) listJobs(ctx context.Context, r *http.Request, _ *Empty) (int, *listResponse, error) {
	q, pending := query(r)
	if err := searchAllowed(principal(ctx), q["search"]); err != nil {
		return 0, nil, err
	}
	p, err := parseListQuery(q, pending)
	if err != nil {
		return 0, nil, err
	}
	limit := p.Limit
	p.Limit++ // one more tells whether there is a next page
	rows, err := s.client.List(ctx, p)
	if err != nil {
		return 0, nil, err
	}
	resp := &listResponse{Items: make([]*jobView, 0, min(len(rows), limit))}
	if len(rows) > limit {
		rows = rows[:limit]
		next := encodeCursor(rows[limit-1].ID)
		resp.NextCursor = &next
	}
	for _, row := range rows {
		resp.Items = append(resp.Items, jobViewOf(row))
	}
	return http.StatusOK, resp, nil
}

// searchAllowed refuses a search by payload value (a non-empty search)
// to a key that may not read payloads (docket.Role.ReadsPayloads): its
// matches would confirm a guessed payload value. It is checked before the
// search is parsed, so a malformed one is refused the same.
func searchAllowed(key *docket.APIKey, search []string) error {
	if !slices.ContainsFunc(search, func(v string) bool { return v != "" }) || (key != nil && key.Role.ReadsPayloads()) {
		return nil
	}
	role := "none"
	if key != nil {
		role = string(key.Role)
	}
	return forbiddenField("search", "searches job payloads, which only admin keys may read; role "+role+" may not")
}

// parseListQuery reads GET /v1/jobs' query; every bad parameter is named
// in one 400, with pending, the errors checkParams left (query).
func parseListQuery(q url.Values, pending []FieldError) (docket.ListParams, error) {
	p := docket.ListParams{Limit: ListLimitDefault}
	errs := pending
	bad := func(field, message string) { errs = append(errs, FieldError{Field: field, Message: message}) }
	// status, jobType and queue take lists; a comma in priority, limit or
	// cursor is refused as a second value (the route refuses a parameter
	// given twice); a search's value may hold commas.
	for _, name := range []string{"cursor", "limit", "priority"} {
		if slices.ContainsFunc(q[name], func(v string) bool { return strings.Contains(v, ",") }) {
			bad(name, oneValue(listLists))
		}
	}
	for _, v := range splitList(q["status"]) {
		st := docket.JobState(strings.ToUpper(v))
		if !st.Valid() {
			bad("status", fmt.Sprintf("unknown status %q", v))
			continue
		}
		p.States = append(p.States, st)
	}
	p.Types = splitList(q["jobType"])
	p.Queues = splitList(q["queue"])
	if v := q.Get("priority"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < docket.PriorityMin || n > docket.PriorityMax {
			bad("priority", fmt.Sprintf("must be an integer between %d and %d", docket.PriorityMin, docket.PriorityMax))
		} else {
			p.Priority = &n
		}
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > ListLimitMax {
			bad("limit", fmt.Sprintf("must be an integer between 1 and %d", ListLimitMax))
		} else {
			p.Limit = n
		}
	}
	if v := q.Get("cursor"); v != "" {
		id, err := decodeCursor(v)
		if err != nil {
			bad("cursor", "is not a cursor this server returned")
		} else {
			p.Before = id
		}
	}
	if v := q.Get("search"); v != "" {
		m, err := docket.ParseArgsSearch(v)
		if err != nil {
			bad("search", err.Error())
		} else {
			p.Args = m
		}
	}
	return p, queryErrors(errs)
}

// splitList flattens repeated and comma-separated values.
func splitList(values []string) []string {
	var out []string
	for _, v := range values {
		for part := range strings.SplitSeq(v, ",") {
			if part = strings.TrimSpace(part); part != "" {
				out = append(out, part)
			}
		}
	}
	return out
}

// Cursors are opaque to clients: the base64url of the last job id.
func encodeCursor(id uuid.UUID) string { return base64.RawURLEncoding.EncodeToString(id[:]) }

func decodeCursor(s string) (uuid.UUID, error) {
	// Strict: one spelling per cursor (trailing bits must be zero).
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil || len(b) != 16 {
		return uuid.Nil, invalidField("cursor", "is not a cursor this server returned")
	}
	id := uuid.UUID(b)
	// Canonical only: the decoder skips CR and LF, so also require that the
	// id encodes back to exactly this cursor.
	if id == uuid.Nil || encodeCursor(id) != s {
		return uuid.Nil, invalidField("cursor", "is not a cursor this server returned")
	}
	return id, nil
}

// stateCounts is a count for every job state, zeros included.
type stateCounts map[docket.JobState]int

func newStateCounts() stateCounts {
	states := docket.JobStates()
	c := make(stateCounts, len(states))
	for _, st := range states {
		c[st] = 0
	}
	return c
}

type summaryResponse struct {
	ByStatus stateCounts            `json:"byStatus"`
	ByQueue  map[string]stateCounts `json:"byQueue"`
}

func (s *Server) jobSummary(ctx context.Context, r *http.Request, _ *Empty) (int, *summaryResponse, error) {
	counts, err := s.client.CountByQueue(ctx)
	if err != nil {
		return 0, nil, err
	}
	resp := &summaryResponse{ByStatus: newStateCounts(), ByQueue: map[string]stateCounts{}}
	for _, c := range counts {
		resp.ByStatus[c.State] += c.Count
		q, ok := resp.ByQueue[c.Queue]
		if !ok {
			q = newStateCounts()
			resp.ByQueue[c.Queue] = q
		}
		q[c.State] += c.Count
	}
	return http.StatusOK, resp, nil
}
