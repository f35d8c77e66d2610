package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/jsonappend"
)

func (s *Server) assignmentRoutes() []route {
	return []route{
		{Method: "GET", Path: "/v1/me/pools", Perm: permWork, Query: []string{"limit"}, Handler: endpoint(s, s.myPools)},
		{Method: "POST", Path: "/v1/assignments", Perm: permWork, Handler: endpoint(s, s.takeAssignment)},
		{Method: "POST", Path: "/v1/assignments/{assignmentId}/heartbeat", Perm: permWork, Handler: endpoint(s, s.heartbeatAssignment)},
		{Method: "POST", Path: "/v1/assignments/{assignmentId}/extend", Perm: permWork, Handler: endpoint(s, s.extendAssignment)},
		{Method: "POST", Path: "/v1/assignments/{assignmentId}/release", Perm: permWork, Handler: endpoint(s, s.releaseAssignment)},
		{Method: "POST", Path: "/v1/judgments", Perm: permWork, Handler: endpoint(s, s.submitJudgment)},
	}
}

type myPoolView struct {
	PoolID    uuid.UUID `json:"poolId"`
	Workflow  string    `json:"workflow"`
	Step      string    `json:"step"`
	Task      string    `json:"task"`
	Title     string    `json:"title"`
	Priority  int       `json:"priority"`
	Available int       `json:"available"`
	CreatedAt time.Time `json:"createdAt"`
}

type myPoolsResponse struct {
	Items []*myPoolView `json:"items"`
}

func (s *Server) myPools(ctx context.Context, r *http.Request, _ *Empty) (int, *myPoolsResponse, error) {
	q, errs := query(r)
	limit, err := queryLimit(q.Get("limit"), q.Has("limit"))
	if err != nil {
		errs = append(errs, problemFor(err).Errors...)
	}
	if err := queryErrors(errs); err != nil {
		return 0, nil, err
	}
	me, err := s.me(ctx)
	if err != nil {
		return 0, nil, err
	}
	pools, err := s.client.EligiblePools(ctx, me.ID, limit)
	if err != nil {
		return 0, nil, err
	}
	resp := &myPoolsResponse{Items: make([]*myPoolView, 0, len(pools))}
	for _, e := range pools {
		p := e.Pool
		title := ""
		if ct, err := s.client.CompiledTask(ctx, p.Task, p.TaskVersion); err == nil {
			title = ct.Template.Title
		}
		resp.Items = append(resp.Items, &myPoolView{PoolID: p.ID, Workflow: p.Workflow, Step: p.Step, Task: p.Task,
			Title: title, Priority: p.Priority, Available: e.Available, CreatedAt: p.CreatedAt.UTC()})
	}
	return http.StatusOK, resp, nil
}

type takeRequest struct {
	PoolID string `json:"poolId"`
	poolID uuid.UUID
}

// Validate implements Validator.
func (req *takeRequest) Validate() error {
	id, err := uuid.Parse(req.PoolID)
	if err != nil || len(req.PoolID) != 36 {
		return invalidField("poolId", requiredUUID(req.PoolID, "a pool (GET /v1/me/pools lists them)"))
	}
	req.poolID = id
	return nil
}

// requiredUUID is the problem of an id that is missing or not a UUID.
func requiredUUID(given, of string) string {
	if given == "" {
		return "is required: the UUID of " + of
	}
	return fmt.Sprintf("must be the UUID of %s, not %q", of, given)
}

type takenUnitView struct {
	ID    uuid.UUID       `json:"id"`
	Input json.RawMessage `json:"input"`
}

type takenTaskView struct {
	Name         string               `json:"name"`
	Version      int                  `json:"version"`
	Title        string               `json:"title"`
	Instructions string               `json:"instructions"`
	Display      []docket.TaskDisplay `json:"display"`
	Fields       []docket.TaskField   `json:"fields"`
	Schema       json.RawMessage      `json:"schema"`
}

// taskViewCache holds the task of every take's answer, encoded once per
// task version: a version never changes, and its display, fields and
// schema are most of the answer.
type taskViewCache struct {
	mu sync.Mutex
	m  map[taskViewKey][]byte
}

type taskViewKey struct {
	ct      *docket.CompiledTask
	name    string
	version int
}

// taskViewMax bounds the cache: past it, the cache starts over.
const taskViewMax = 1000

// taskView is the task part of a take's answer, and its JSON.
func (s *Server) taskView(name string, version int, ct *docket.CompiledTask) (takenTaskView, []byte) {
	display := ct.Display
	if display == nil {
		display = []docket.TaskDisplay{}
	}
	v := takenTaskView{Name: name, Version: version, Title: ct.Template.Title,
		Instructions: ct.Template.Instructions, Display: display, Fields: ct.Fields, Schema: ct.Schema}
	key := taskViewKey{ct: ct, name: name, version: version}
	s.taskViews.mu.Lock()
	enc, ok := s.taskViews.m[key]
	s.taskViews.mu.Unlock()
	if ok {
		return v, enc
	}
	enc, err := jsonappend.Marshal(&v) // as writeJSON writes it, without the newline
	if err != nil {
		return v, nil // encoded with the answer, where the error shows
	}
	s.taskViews.mu.Lock()
	if s.taskViews.m == nil || len(s.taskViews.m) >= taskViewMax {
		s.taskViews.m = map[taskViewKey][]byte{}
	}
	s.taskViews.m[key] = enc
	s.taskViews.mu.Unlock()
	return v, enc
}

type takeResponse struct {
	AssignmentID uuid.UUID     `json:"assignmentId"`
	Unit         takenUnitView `json:"unit"`
	Task         takenTaskView `json:"task"`
	ExpiresAt    time.Time     `json:"expiresAt"`

	task []byte // Task as JSON, encoded once per task version (taskViews)
}

// appendJSON implements jsonAppender: the answer as encoding/json writes
// it, byte for byte (TestTakeAnswerEncoding), with the task's JSON made
// once per version; most of the answer is the task, and encoding/json
// would walk its display, fields and schema on every take.
func (t *takeResponse) appendJSON(b []byte) ([]byte, error) {
	if t.task == nil {
		return nil, errNoAppend
	}
	expires, err := t.ExpiresAt.MarshalJSON()
	if err != nil {
		return nil, err
	}
	b = append(b, `{"assignmentId":"`...)
	b = jsonappend.UUID(b, t.AssignmentID)
	b = append(b, `","unit":{"id":"`...)
	b = jsonappend.UUID(b, t.Unit.ID)
	b = append(b, `","input":`...)
	if t.Unit.Input == nil {
		b = append(b, "null"...)
	} else {
		buf := bytes.NewBuffer(b)
		if err := json.Compact(buf, t.Unit.Input); err != nil {
			return nil, errNoAppend // encoding/json says what is wrong
		}
		b = buf.Bytes()
	}
	b = append(b, `},"task":`...)
	b = append(b, t.task...)
	b = append(b, `,"expiresAt":`...)
	b = append(b, expires...)
	return append(b, "}\n"...), nil
}

func (s *Server) takeAssignment(ctx context.Context, r *http.Request, req *takeRequest) (int, *takeResponse, error) {
	me, unknown, err := s.workerIDOr(ctx, true)
	if err != nil {
		return 0, nil, err
	}
	t, err := s.client.AssignmentTake(storeContext(ctx), req.poolID, me)
	if err != nil {
		// A contributor not known yet is read now: banned or gone, that
		// is the answer, as it was before the take.
		err = s.refused(ctx, unknown, err)
	} else {
		s.known(unknown, me)
	}
	if err == nil && ctx.Err() != nil {
		// The contributor went away while the take ran: no one will see
		// this assignment, so its slot is given back rather than held
		// until it expires.
		s.giveBackTaken(ctx, t.Assignment.ID, me)
		return 0, nil, ctx.Err()
	}
	if errors.Is(err, docket.ErrNotFound) {
		if _, err := s.me(ctx); err != nil {
			return 0, nil, err // the key's contributor, not the pool
		}
		return 0, nil, notFound("no pool " + req.poolID.String())
	}
	if err != nil {
		return 0, nil, err
	}
	return http.StatusCreated, s.takeResponseOf(t), nil
}

// storeContext is the context of the store calls of the crowd's hot path
// (take, submit): the request's values without its cancellation. pgx
// watches a cancelable context through every statement (a context.AfterFunc
// registered and removed each time: ~4% of the server's CPU on the crowd
// benchmark), and these transactions are short and whole either way: a
// judgment whose contributor went away is kept (sending the same data
// again answers 200), and a take's assignment is given back
// (giveBackTaken).
func storeContext(ctx context.Context) context.Context {
	return context.WithoutCancel(ctx)
}

// giveBackTaken releases an assignment taken for a contributor whose
// request was cut while it was taken.
func (s *Server) giveBackTaken(ctx context.Context, id, me uuid.UUID) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := s.client.AssignmentRelease(rctx, id, me); err != nil {
		s.cfg.Logger.Warn("give back an assignment taken for a contributor who was gone", "assignment_id", id, "error", err)
	}
}

// takeResponseOf is the answer of a take.
func (s *Server) takeResponseOf(t *docket.TakenAssignment) *takeResponse {
	task, taskJSON := s.taskView(t.TaskName, t.TaskVer, t.Task)
	return &takeResponse{
		AssignmentID: t.Assignment.ID,
		Unit:         takenUnitView{ID: t.Unit.ID, Input: t.Unit.Input},
		Task:         task,
		ExpiresAt:    t.Assignment.ExpiresAt.UTC(),
		task:         taskJSON,
	}
}

type assignmentView struct {
	AssignmentID uuid.UUID  `json:"assignmentId"`
	UnitID       uuid.UUID  `json:"unitId"`
	PoolID       uuid.UUID  `json:"poolId"`
	State        string     `json:"state"`
	StartedAt    time.Time  `json:"startedAt"`
	ExpiresAt    time.Time  `json:"expiresAt"`
	HeartbeatAt  time.Time  `json:"heartbeatAt"`
	FinishedAt   *time.Time `json:"finishedAt"`
}

func assignmentViewOf(a *docket.Assignment) *assignmentView {
	return &assignmentView{AssignmentID: a.ID, UnitID: a.UnitID, PoolID: a.PoolID, State: string(a.State),
		StartedAt: a.StartedAt.UTC(), ExpiresAt: a.ExpiresAt.UTC(), HeartbeatAt: a.HeartbeatAt.UTC(), FinishedAt: timeOrNull(a.FinishedAt)}
}

// onAssignment runs a fenced change of the contributor's assignment;
// work (heartbeat, extend) is refused to a banned contributor.
func (s *Server) onAssignment(ctx context.Context, r *http.Request, work bool, change func(id, me uuid.UUID) (*docket.Assignment, error)) (int, *assignmentView, error) {
	id, err := pathID(r, "assignmentId")
	if err != nil {
		return 0, nil, err
	}
	who := s.me
	if work {
		who = s.worker
	}
	me, err := who(ctx)
	if err != nil {
		return 0, nil, err
	}
	a, err := change(id, me.ID)
	if errors.Is(err, docket.ErrNotFound) {
		return 0, nil, notFound("no assignment " + id.String())
	}
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, assignmentViewOf(a), nil
}

func (s *Server) heartbeatAssignment(ctx context.Context, r *http.Request, _ *Empty) (int, *assignmentView, error) {
	return s.onAssignment(ctx, r, true, func(id, me uuid.UUID) (*docket.Assignment, error) {
		return s.client.AssignmentHeartbeat(ctx, id, me)
	})
}

func (s *Server) releaseAssignment(ctx context.Context, r *http.Request, _ *Empty) (int, *assignmentView, error) {
	return s.onAssignment(ctx, r, false, func(id, me uuid.UUID) (*docket.Assignment, error) {
		return s.client.AssignmentRelease(ctx, id, me)
	})
}

// MaxExtendSeconds is the longest one extension asks for.
const MaxExtendSeconds = 24 * 3600

type extendRequest struct {
	Seconds int `json:"seconds"`
}

// Validate implements Validator.
func (req *extendRequest) Validate() error {
	if req.Seconds < 1 || req.Seconds > MaxExtendSeconds {
		return invalidField("seconds", fmt.Sprintf("must be an integer between 1 and %d", MaxExtendSeconds))
	}
	return nil
}

func (s *Server) extendAssignment(ctx context.Context, r *http.Request, req *extendRequest) (int, *assignmentView, error) {
	return s.onAssignment(ctx, r, true, func(id, me uuid.UUID) (*docket.Assignment, error) {
		return s.client.AssignmentExtend(ctx, id, me, time.Duration(req.Seconds)*time.Second)
	})
}

type judgmentRequest struct {
	AssignmentID string          `json:"assignmentId"`
	Data         json.RawMessage `json:"data"`
	assignmentID uuid.UUID
}

// Validate implements Validator: the shape; the data is validated against
// the pool's task (422).
func (req *judgmentRequest) Validate() error {
	var errs []FieldError
	id, err := uuid.Parse(req.AssignmentID)
	if err != nil || len(req.AssignmentID) != 36 {
		errs = append(errs, FieldError{Field: "assignmentId", Message: requiredUUID(req.AssignmentID, "your assignment")})
	}
	req.assignmentID = id
	if len(req.Data) == 0 || string(req.Data) == "null" {
		errs = append(errs, FieldError{Field: "data", Message: "is required: the answer, an object keyed by field name"})
	}
	if len(errs) > 0 {
		return invalidFields(errs)
	}
	return nil
}

type judgmentResponse struct {
	JudgmentID   uuid.UUID `json:"judgmentId"`
	AssignmentID uuid.UUID `json:"assignmentId"`
	UnitID       uuid.UUID `json:"unitId"`
	// Finalized: this judgment completed the unit, which is FINALIZED.
	Finalized bool `json:"finalized"`
	// Test: how a judgment of a test question scored (nil for a regular
	// unit, or when the pool's testFeedback is "none").
	Test *testResultView `json:"test,omitempty"`
}

// appendJSON implements jsonAppender for the common answer, without a
// test result: as encoding/json writes it, byte for byte
// (TestJudgmentAnswerEncoding).
func (j *judgmentResponse) appendJSON(b []byte) ([]byte, error) {
	if j.Test != nil {
		return nil, errNoAppend
	}
	b = append(b, `{"judgmentId":"`...)
	b = jsonappend.UUID(b, j.JudgmentID)
	b = append(b, `","assignmentId":"`...)
	b = jsonappend.UUID(b, j.AssignmentID)
	b = append(b, `","unitId":"`...)
	b = jsonappend.UUID(b, j.UnitID)
	b = append(b, `","finalized":`...)
	b = strconv.AppendBool(b, j.Finalized)
	return append(b, "}\n"...), nil
}

// testResultView is docket.TestResult in the API (docs/quality.md,
// "Feedback after a test question").
type testResultView struct {
	Correct       bool                    `json:"correct"`
	Fields        []docket.TestFieldScore `json:"fields"`
	Expected      json.RawMessage         `json:"expected,omitempty"`
	Feedback      string                  `json:"feedback,omitempty"`
	Trust         float64                 `json:"trust"`
	TestsCorrect  int                     `json:"testsCorrect"`
	TestsAnswered int                     `json:"testsAnswered"`
}

func testResultViewOf(r *docket.TestResult) *testResultView {
	if r == nil {
		return nil
	}
	fields := r.Fields
	if fields == nil {
		fields = []docket.TestFieldScore{}
	}
	return &testResultView{Correct: r.Correct, Fields: fields, Expected: r.Expected, Feedback: r.Feedback,
		Trust: r.Trust, TestsCorrect: r.TestsCorrect, TestsAnswered: r.TestsAnswered}
}

// submitJudgment: 202 for a new judgment, 200 for the same data again,
// 409 for other data or an assignment no longer held, 422 for data the
// task refuses (the assignment stays active).
func (s *Server) submitJudgment(ctx context.Context, r *http.Request, req *judgmentRequest) (int, *judgmentResponse, error) {
	me, err := s.workerID(ctx)
	if err != nil {
		return 0, nil, err
	}
	sub, err := s.client.JudgmentSubmit(storeContext(ctx), req.assignmentID, me, req.Data)
	var ve *docket.TaskValidationError
	switch {
	case errors.As(err, &ve):
		p := invalidFields(taskFields(ve, "data"))
		p.Status, p.Type, p.Title = http.StatusUnprocessableEntity, problemBase+"invalid-judgment", "Invalid judgment"
		return 0, nil, p
	case errors.Is(err, docket.ErrNotFound):
		return 0, nil, notFound("no assignment " + req.assignmentID.String())
	case err != nil:
		return 0, nil, err
	}
	status := http.StatusAccepted
	if !sub.Created {
		status = http.StatusOK
	}
	return status, &judgmentResponse{JudgmentID: sub.Judgment.ID, AssignmentID: sub.Judgment.AssignmentID,
		UnitID: sub.Judgment.UnitID, Finalized: sub.Finalized != nil, Test: testResultViewOf(sub.Test)}, nil
}
